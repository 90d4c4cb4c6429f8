"""Output-stationary groups (input-channel blocks): a layer whose input and weight both
do not fit on chip reads each once, and computes JAX's values."""
import numpy as np
import pytest

from relaydsl import Float, Tensor, relay
from relaydsl.backend.accel.config import KIB, AcceleratorConfig
from relaydsl.backend.accel.schedule import OUTPUT_STATIONARY
from tests.backend.accel.test_streaming import _args, _build, _jax

RTOL, ATOL = 1e-4, 1e-4


@relay
def squeeze(x: Tensor[Float, (1, 128, 8, 8)], w: Tensor[Float, (32, 128, 3, 3)]
            ) -> Tensor[Float, (1, 32, 8, 8)]:
    return relay.conv2d(x, w, padding=1)


@relay
def pooled(x: Tensor[Float, (1, 256, 8, 8)], w: Tensor[Float, (64, 256, 1, 1)]
           ) -> Tensor[Float, (1, 64, 8, 8)]:
    pool = relay.avg_pool2d(x, pool_size=(3, 3), strides=(1, 1), padding=(1, 1))
    return relay.conv2d(relay.relu(pool), w)


@relay
def classifier(x: Tensor[Float, (8, 8192)], w: Tensor[Float, (16, 8192)]
               ) -> Tensor[Float, (8, 16)]:
    return relay.dense(x, w)


# each input and weight (32 to 512 KiB) is more than the 48 KiB on chip leave for it
CONFIG = AcceleratorConfig.deep_fusion(onchip_bytes=48 * KIB)


@pytest.mark.parametrize("fn", [squeeze, pooled, classifier], ids=lambda f: f.__name__)
def test_an_input_and_a_weight_too_big_are_each_read_once(fn):
    args = _args(fn)
    exe = _build(fn, args, CONFIG, "fusion+reuse")
    report = exe.report
    assert [g.loop_order for g in report.groups] == [OUTPUT_STATIONARY]
    # each input and weight read once, the result written once: the compulsory traffic
    assert report.dram_bytes == report.compulsory_bytes == \
        sum(a.nbytes for a in args) + 4 * int(np.prod(fn.checked_type.ret_type.shape))
    np.testing.assert_allclose(exe(args[0]), _jax(fn, args), rtol=RTOL, atol=ATOL)
    # the simulator counts what the schedule planned
    assert exe.report.dram_bytes == report.dram_bytes
    assert exe.report.seconds == pytest.approx(report.seconds)


def test_the_baseline_does_not_use_it():
    args = _args(squeeze)
    none = _build(squeeze, args, CONFIG, "none").report
    assert OUTPUT_STATIONARY not in [g.loop_order for g in none.groups]
    assert none.dram_bytes > _build(squeeze, args, CONFIG, "fusion").report.dram_bytes
