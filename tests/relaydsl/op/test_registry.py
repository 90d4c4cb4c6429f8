"""Every registered op has every field this stage requires and is checked against JAX."""
import dataclasses
import importlib

import numpy as np
import pytest

from relaydsl.ir import Constant, Function, TensorType, Var, const
from relaydsl.op import OpDef, OpPattern, all_ops, lookup, ops, register
from relaydsl.typing import infer_type

FAMILY_TESTS = ["test_tensor", "test_reduce", "test_transform", "test_nn", "test_quantize",
                "test_collective"]


def covered_ops() -> set[str]:
    ops: set[str] = set()
    for name in FAMILY_TESTS:
        module = importlib.import_module(f"tests.relaydsl.op.{name}")
        ops.update(case.op for case in module.CASES)
    return ops


@pytest.mark.parametrize("name", sorted(all_ops()))
def test_op_definition_is_complete(name):
    d = all_ops()[name]
    assert d.name == name and d.op is not None and d.op.name == name
    assert callable(d.type_relation), f"{name}: no type relation"
    assert callable(d.numpy_ref), f"{name}: no NumPy reference"
    assert callable(d.jax_lower), f"{name}: no JAX lowering"
    assert isinstance(d.pattern, OpPattern), f"{name}: no fusion pattern kind"
    assert callable(d.compute), f"{name}: no compute rule"
    assert d.doc.strip(), f"{name}: no doc"
    assert len({a.name for a in d.attrs}) == len(d.attrs), f"{name}: duplicate attribute names"


def test_every_op_is_checked_against_jax():
    missing = sorted(set(all_ops()) - covered_ops())
    assert not missing, f"ops without a JAX test case: {missing}"


def test_the_required_op_set_is_registered():
    required = [
        "negative", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "abs", "sign",
        "floor", "ceil", "round", "clip", "cast", "add", "subtract", "multiply", "divide", "power",
        "maximum", "minimum", "equal", "not_equal", "less", "less_equal", "greater",
        "greater_equal", "logical_and", "logical_or", "logical_not", "where", "sum", "mean", "max",
        "min", "prod", "argmax", "argmin", "reshape", "transpose", "expand_dims", "squeeze",
        "concatenate", "split", "stack", "take", "strided_slice", "broadcast_to", "zeros", "ones",
        "full", "zeros_like", "ones_like", "matmul", "dense", "batch_matmul", "conv2d",
        "max_pool2d", "avg_pool2d", "global_avg_pool2d", "softmax", "log_softmax", "batch_norm",
        "layer_norm", "dropout", "pad", "flatten", "bias_add", "softmax_cross_entropy",
    ]
    missing = sorted(set(required) - set(all_ops()))
    assert not missing, f"required ops not registered: {missing}"


# The families written as one block per op (issue 10): every facet in the family's own file.
ONE_BLOCK_FAMILIES = {
    "relaydsl.op.tensor": [
        "negative", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu", "abs", "sign",
        "floor", "ceil", "round", "clip", "cast", "cast_like", "add", "subtract", "multiply",
        "divide", "power", "maximum", "minimum", "equal", "not_equal", "less", "less_equal",
        "greater", "greater_equal", "logical_and", "logical_or", "logical_not", "where",
        "trunc", "sin", "cos", "tan", "atan", "erf", "floor_divide", "floor_mod", "left_shift",
        "right_shift",
    ],
    "relaydsl.op.collective": ["psum"],
    "relaydsl.op.reduce": [
        "sum", "mean", "max", "min", "prod", "argmax", "argmin", "collapse_sum_like", "all",
        "any", "variance",
    ],
}


@pytest.mark.parametrize("family", sorted(ONE_BLOCK_FAMILIES))
def test_each_op_of_a_family_is_one_block_with_every_facet(family):
    module = importlib.import_module(family)
    defined = {v.name: v for v in vars(module).values() if isinstance(v, OpDef)}
    assert sorted(defined) == sorted(ONE_BLOCK_FAMILIES[family]), f"{family}: its module-level ops"
    for name, d in defined.items():
        assert all_ops()[name] is d, f"{name}: not the registered definition"
        for facet in ("type_relation", "numpy_ref", "jax_lower", "compute"):
            assert callable(getattr(d, facet)), f"{name}: no {facet}"
        assert isinstance(d.pattern, OpPattern) and d.doc.strip(), f"{name}: pattern or doc"
        if d.differentiable:
            assert d.gradient.__module__ == family, f"{name}: gradient rule not in {family}"
            doc = (d.gradient.__doc__ or "").strip()
            assert doc and "\n" not in doc, f"{name}: the rule's one-line math"
        else:
            assert d.gradient is None, f"{name}: not differentiable but has a gradient rule"


def test_cast_like_of_a_constant_folds_from_the_types():
    x = Var("x", TensorType((2, 3), "float16"))
    infer_type(Function([x], x))
    fold = ops.cast_like.traits.fold_from_types
    folded = fold(ops.cast_like(const(1.5, "float64"), x),
                  [TensorType((), "float64"), x.checked_type])
    assert isinstance(folded, Constant) and folded.data.dtype == np.float16 and folded.data == 1.5
    assert fold(ops.cast_like(x, x), [x.checked_type] * 2) is None  # the data is not a constant


def _incomplete(**facets):
    base = lookup("exp")
    fields = dict(name="exp_copy", inputs=base.inputs, type_relation=base.type_relation,
                  pattern=base.pattern, numpy_ref=base.numpy_ref, jax_lower=base.jax_lower,
                  compute=base.compute, gradient=base.gradient)
    fields.update(facets)
    return OpDef(**fields)


@pytest.mark.parametrize("facets, missing", [
    ({"compute": None}, "compute"),
    ({"jax_lower": None}, "jax_lower"),
    ({"gradient": None}, "gradient"),
    ({"differentiable": False}, "differentiable=True"),
])
def test_an_incomplete_op_is_not_registered(facets, missing):
    with pytest.raises(ValueError, match=f"op exp_copy is incomplete: {missing}"):
        register(_incomplete(**facets))
    assert "exp_copy" not in all_ops()


def test_an_op_is_defined_once_and_frozen():
    with pytest.raises(ValueError, match="op exp is registered twice"):
        register(_incomplete(name="exp"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        lookup("exp").numpy_ref = None
