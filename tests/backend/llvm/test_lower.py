"""Lowering primitive functions to te: params, constants, shared nodes, tuples, lets."""
from __future__ import annotations

import numpy as np
import pytest

from relaydsl.backend.llvm.lower import lower, stable_digest
from relaydsl.errors import IRError
from relaydsl.ir import Let, Tuple, TupleGetItem, Var
from relaydsl.ir.expr import const
from relaydsl.te import FloatImm, TensorRead, evaluate, post_order
from tests.backend.llvm.helpers import call, primitive

F = "float32"


def test_scalar_constants_become_immediates_and_arrays_become_buffers():
    fn = primitive([((3,), F)], lambda x: call("add", call("multiply", x, const(0.5)),
                                               const(np.arange(3, dtype=F))))
    low = lower(fn)
    assert len(low.params) == 1 and len(low.constants) == 1
    (c, data), = low.constants
    np.testing.assert_array_equal(data, np.arange(3, dtype=F))
    reads = {n.tensor.name for t in low.origin for n in post_order(t.body)
             if isinstance(n, TensorRead)}
    assert c.name in reads
    imm = [n.tensor for t in low.origin for n in post_order(t.body)
           if isinstance(n, TensorRead) and n.tensor.name == "T_const"]
    assert imm and isinstance(imm[0].body, FloatImm) and imm[0].body.value == 0.5
    from relaydsl.backend.llvm.schedule import schedule

    assert [s.tensor.name for s in schedule(low, "t").stages] == ["T_add"]  # 0.5 inlined


def test_shared_node_is_lowered_once_and_outputs_are_distinct():
    fn = primitive([((3,), F)], lambda x: (lambda e: Tuple([e, call("add", e, e), e]))(
        call("exp", x)))
    low = lower(fn)
    assert low.returns_tuple and len(low.outputs) == 3
    assert len(set(low.outputs)) == 3  # the repeated field is copied
    exps = [t for t, o in low.origin.items() if o.op.name == "exp"]
    assert len(exps) == 1
    x = np.array([0.0, 1.0, 2.0], F)
    out = [evaluate(t, {low.params[0]: x}) for t in low.outputs]
    np.testing.assert_allclose(out[1], 2 * np.exp(x), rtol=1e-6)


def test_lets_projections_and_identity():
    v = Var("v")
    fn = primitive([((2,), F)], lambda x: Let(v, Tuple([x, call("negative", x)]),
                                              TupleGetItem(v, 0)))
    low = lower(fn)
    assert not low.returns_tuple
    (out,) = low.outputs
    assert out.body is not None  # a copy of the parameter, never the parameter itself


def test_helper_tensors_of_a_rule_are_tagged_with_their_op():
    low = lower(primitive([((2, 5), F)], lambda x: call("softmax", x)))
    names = {t.name: (o.op.name, o.is_result) for t, o in low.origin.items()}
    assert names["T_softmax"] == ("softmax", True)
    assert names["T_softmax_max"] == ("softmax", False)


def test_digest_is_structural_and_sensitive_to_attributes_and_constants():
    a = primitive([((4, 3), F)], lambda x: call("sum", x, axis=0))
    b = primitive([((4, 3), F)], lambda x: call("sum", x, axis=0))
    c = primitive([((4, 3), F)], lambda x: call("sum", x, axis=1))
    d = primitive([((4, 3), F)], lambda x: call("add", x, const(np.ones(3, F))))
    e = primitive([((4, 3), F)], lambda x: call("add", x, const(np.zeros(3, F))))
    assert stable_digest(a) == stable_digest(b)
    assert len({stable_digest(f) for f in (a, c, d, e)}) == 4


def test_non_primitive_nodes_are_rejected():
    from relaydsl.ir import Function, TensorType
    from relaydsl.typing import infer_type

    x = Var("x", TensorType((2,), F))
    inner = Function([x], x)
    y = Var("y", TensorType((2,), F))
    fn = infer_type(Function([y], Tuple([y, inner]), attrs={"Primitive": 1}))
    with pytest.raises(IRError, match="may not contain Function"):
        lower(fn)
