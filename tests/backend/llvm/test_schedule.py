"""Schedule decisions: inlining, materialisation, loop order, parallelism."""
from __future__ import annotations

from relaydsl.backend.llvm.lower import lower
from relaydsl.backend.llvm.schedule import schedule
from relaydsl.ir import Tuple
from relaydsl.ir.expr import const
from tests.backend.llvm.helpers import call, primitive

F = "float32"


def _stages(fn):
    return schedule(lower(fn), "t").stages


def test_elementwise_chain_is_one_stage():
    (s,) = _stages(primitive([((4, 8), F), ((8,), F)], lambda x, b: call("relu", call(
        "multiply", call("tanh", call("add", x, b)), const(0.5)))))
    assert [r.name for r in s.reads] == ["p0", "p1"]
    assert s.outer == 1 and not s.row_reduce


def test_expensive_shared_stage_is_materialised_cheap_one_inlined():
    exp_shared = _stages(primitive([((16,), F)], lambda x: (lambda e: call("add", e, call(
        "multiply", e, e)))(call("exp", x))))
    assert [s.tensor.name for s in exp_shared] == ["T_exp", "T_add"]
    neg_shared = _stages(primitive([((16,), F)], lambda x: (lambda e: call("add", e, call(
        "multiply", e, e)))(call("negative", x))))
    assert [s.tensor.name for s in neg_shared] == ["T_add"]


def test_expensive_broadcast_producer_is_materialised():
    stages = _stages(primitive([((64, 1), F), ((64, 100), F)],
                               lambda a, b: call("add", call("tanh", a), b)))
    assert [s.tensor.name for s in stages] == ["T_tanh", "T_add"]


def test_reductions_and_outputs_are_materialised_and_loop_orders_chosen():
    stages = _stages(primitive([((64, 300), F)], lambda x: Tuple([
        call("sum", call("exp", x), axis=1), call("sum", x, axis=0), call("exp", x)])))
    by_name = {s.tensor.name: s for s in stages}
    assert len(stages) == 3
    last_axis, first_axis = stages[0], stages[1]
    assert not last_axis.row_reduce  # contiguous along the reduction: reduce innermost
    assert first_axis.row_reduce  # sum over rows: accumulate whole rows
    assert "T_exp" in by_name


def test_matmul_accumulates_rows_dense_reduces_innermost():
    mm = _stages(primitive([((20, 30), F), ((30, 40), F)], lambda a, b: call("matmul", a, b)))
    assert mm[-1].row_reduce or mm[-1].template is not None


def test_large_elementwise_stage_is_parallel_small_one_is_not():
    (big,) = _stages(primitive([((1 << 20,), F)], lambda x: call("tanh", x)))
    (small,) = _stages(primitive([((100,), F)], lambda x: call("tanh", x)))
    assert big.extent == 1 << 20 and not small.parallel
    from relaydsl.settings import num_threads

    assert big.parallel == (num_threads() > 1)


def test_a_one_row_dense_is_generic_code_and_a_batch_is_the_gemm():
    import numpy as np

    from relaydsl.backend.llvm.kernel import compile_primitive

    row = primitive([((1, 128), F), ((512, 128), F)], lambda x, w: call("dense", x, w))
    batch = primitive([((8, 128), F), ((512, 128), F)], lambda x, w: call("dense", x, w))
    (s_row,), (s_batch,) = _stages(row), _stages(batch)
    assert s_row.template is None and s_batch.template is not None
    rng = np.random.default_rng(0)
    w = rng.standard_normal((512, 128)).astype(np.float32)
    for fn, rows in ((row, 1), (batch, 8)):
        x = rng.standard_normal((rows, 128)).astype(np.float32)
        np.testing.assert_allclose(compile_primitive(fn)(x, w), x @ w.T, rtol=1e-4, atol=1e-4)


def test_a_pointwise_stage_after_a_template_is_its_epilogue():
    conv = ((8, 4, 6, 6), F), ((5, 4, 3, 3), F), ((1, 5, 1, 1), F)
    template, epilogue = _stages(primitive(list(conv), lambda x, w, b: call(
        "relu", call("add", call("conv2d", x, w, padding=1), b))))
    assert template.template is not None and epilogue.epilogue
    # a reduction over the conv's result, or a read elsewhere than its own element: no
    _, summed = _stages(primitive(list(conv[:2]), lambda x, w: call(
        "sum", call("conv2d", x, w, padding=1), axis=1, keepdims=True)))
    _, flipped = _stages(primitive(list(conv[:2]), lambda x, w: call(
        "transpose", call("conv2d", x, w, padding=1), axes=(0, 1, 3, 2))))
    assert not summed.epilogue and not flipped.epilogue
