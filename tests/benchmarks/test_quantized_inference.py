"""benchmarks/quantized_inference.py's ResNet-8, quantized: its llvm build runs the direct
int8 conv2d (templates/conv2d_int8.py) on AVX-512 VNNI, the implicit GEMM with another ISA
forced, and equals the interpreter bit for bit either way."""
from __future__ import annotations

import numpy as np
import pytest

from benchmarks.quantization import resnet8
from benchmarks.workloads.common import specialize
from relaydsl import relay, relay_model
from relaydsl.backend.llvm.templates import contraction
from tests.backend.llvm.test_igemm import HOST_RUNS


@pytest.mark.parametrize("isa", ["host", "avxvnni", "generic"])
def test_realized_program_is_bit_exact_with_the_interpreter(isa, monkeypatch):
    """benchmarks/quantization.py's ResNet-8 quantized (8/32, every layer): the llvm build
    (direct int8 conv2d on this CPU, the implicit GEMM with a forced ISA) equals the
    interpreter's result bit for bit."""
    if isa != "host":
        if not HOST_RUNS[isa]:
            pytest.skip(f"this CPU lacks {isa}")
        monkeypatch.setenv("RELAYDSL_INT_ISA", isa)
    direct: list[object] = []  # the direct convolutions chosen (this network's kernels are new)
    chosen = contraction.int_conv
    monkeypatch.setattr(contraction, "int_conv", lambda *a: direct.append(chosen(*a)) or direct[-1])
    rng = np.random.default_rng(1)
    model = relay.create_model(specialize(resnet8, relay_model), seed=0)
    batches = [rng.standard_normal((2, 1, 28, 28)).astype(np.float32) for _ in range(2)]
    cfg = relay.QConfig(calibrate_mode="percentile", skip_conv_layers=(),
                        skip_dense_layer=False)
    qf = relay.quantize(model, dataset=batches, config=cfg)
    x = rng.standard_normal((2, 1, 28, 28)).astype(np.float32)
    got = relay.build(qf, target="llvm")(x)
    want = relay.build(qf, target="interp")(x)
    np.testing.assert_array_equal(got, want)
    assert np.abs(got - model(x)).max() < 0.1 * np.abs(model(x)).max()  # still the network
    direct_here = isa == "host" and HOST_RUNS["avx512vnni"]
    assert len([d for d in direct if d is not None]) == (9 if direct_here else 0)
