"""Every differentiable op's gradient rule, run by the interpreter, against JAX's vjp.

For each case the rule is applied to ``op(x0, x1, ...)`` with typed variables and an output
adjoint ``g``; the adjoints must type-check to exactly the inputs' types, and evaluate to
``jax.vjp`` of the op's JAX lowering -- and, where a case gives one, of an independent JAX
formulation of the op (the truths of the family tests). Inputs that are not floating point
(indices, conditions, integer tensors) must get zeros.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from relaydsl import Float, Tensor, relay
from relaydsl.backend.interpreter import Interpreter
from relaydsl.ir import Call, Expr, Let, Op, TensorType, Tuple, TupleType, Var
from relaydsl.ir.types import Kind, TypeVar
from relaydsl.op import all_ops, lookup
from relaydsl.op.grad_util import input_adjoints
from relaydsl.typing import infer_type
from tests.relaydsl.op.harness import assert_same, type_of
from tests.relaydsl.op.test_nn import (
    avg_pool1d_truth, avg_pool3d_truth, avg_pool_truth, batch_norm_truth, bias_add_truth,
    conv1d_truth, conv_nchwc_truth, conv_transpose_truth, conv_truth, cross_entropy_truth,
    global_max_truth, layer_norm_truth, leaky_relu_truth, max_pool1d_truth, max_pool3d_truth,
    max_pool_truth, one_hot, prelu_truth, upsampling_truth,
)

rng = np.random.default_rng(1)
F32 = {"rtol": 1e-4, "atol": 1e-5}


def f64(*shape):
    return rng.standard_normal(shape)


def f32(*shape):
    return f64(*shape).astype(np.float32)


def pos(*shape):
    """Positive float64 values, away from 0."""
    return rng.uniform(0.5, 2.0, shape)


def i32(*shape):
    return rng.integers(-5, 6, shape).astype(np.int32)


def bools(*shape):
    return rng.random(shape) < 0.5


@dataclass
class GradCase:
    op: str
    inputs: Sequence[Any]  # an ndarray per input; a tuple of ndarrays for a tuple-typed input
    attrs: dict[str, Any] = field(default_factory=dict)
    truth: Callable[..., Any] | None = None  # an independent JAX formulation of the op
    name: str = ""
    rtol: float = 1e-6
    atol: float = 1e-8

    @property
    def id(self) -> str:
        return f"{self.op}[{self.name or ','.join(_shape_str(x) for x in self.inputs)}]"


def _shape_str(x: Any) -> str:
    if isinstance(x, tuple):
        return "(" + ",".join(_shape_str(i) for i in x) + ")"
    return f"{x.dtype}{list(x.shape)}"


def _leaves(x: Any) -> list:
    return [leaf for i in x for leaf in _leaves(i)] if isinstance(x, tuple) else [x]


def _is_float(x: Any) -> bool:
    return all(np.issubdtype(leaf.dtype, np.floating) for leaf in _leaves(x))


def _random(t: Any) -> Any:
    """A random value of type t (a tuple for a tuple type)."""
    if isinstance(t, TupleType):
        return tuple(_random(f) for f in t.fields)
    value = rng.standard_normal(t.shape) * 3
    return value.astype(t.dtype)


def _zeros_like(x: Any) -> Any:
    return tuple(_zeros_like(i) for i in x) if isinstance(x, tuple) else np.zeros_like(x)


def jax_vjp(f: Callable[..., Any], inputs: Sequence[Any], g: Any, jit: bool = True) -> list[Any]:
    """The adjoint of each input of f at `inputs` given g: JAX's vjp for the float inputs
    (all zeros when f's output is not float; a tuple output's integer fields, topk's indices,
    carry none), zeros for the others. Jitted unless told not to: one compilation is faster
    than dispatching each op eagerly."""
    wrt = [i for i, x in enumerate(inputs) if _is_float(x)]
    fields = None  # all of f's output, or the float fields of a tuple
    if isinstance(g, tuple) and not _is_float(g):
        fields = [i for i, leaf in enumerate(g) if _is_float(leaf)]
        g = tuple(g[i] for i in fields)

    def of_float_inputs(*xs: Any) -> Any:
        args = [jax.tree_util.tree_map(jnp.asarray, x) for x in inputs]
        for i, x in zip(wrt, xs):
            args[i] = x
        out = f(*args)
        return out if fields is None else tuple(out[i] for i in fields)

    def pull(primals: list[Any], g: Any) -> Any:
        return jax.vjp(of_float_inputs, *primals)[1](g)

    grads = dict.fromkeys(range(len(inputs)))
    if _is_float(g):
        grads.update(zip(wrt, (jax.jit(pull) if jit else pull)([inputs[i] for i in wrt], g)))
    return [_zeros_like(x) if grads[i] is None else grads[i] for i, x in enumerate(inputs)]


def rule_adjoints(op: str, params: list[Var], attrs: dict[str, Any]) -> tuple[Call, Var, Expr]:
    """The rule applied to op(params) and an untyped g bound to a typed Var, as the AD transform
    binds it (so rules cannot rely on g's type): (the call, the typed Var, the adjoints)."""
    call = Call(Op.get(op), params, attrs)
    g, bound = Var("g", infer_type(call).checked_type), Var("g_bound")
    adjoints = input_adjoints(call, bound)
    assert len(adjoints) == len(params), f"{op}: {len(adjoints)} adjoints for {len(params)} inputs"
    result = infer_type(Let(bound, g, Tuple(adjoints)))
    for i, (adjoint, p) in enumerate(zip(adjoints, params)):
        assert adjoint.checked_type == p.type_annotation, (
            f"{op}: the adjoint of input {i} has type {adjoint.checked_type}, "
            f"the input {p.type_annotation}")
    return call, g, result


# lax.reduce_window with an array init value (the pools) is differentiable only outside jit.
EAGER = {"max_pool2d", "avg_pool2d", "max_pool2d_grad", "max_pool1d", "avg_pool1d",
         "global_max_pool2d", "max_pool3d", "avg_pool3d"}


def check_gradient(case: GradCase) -> None:
    params = [Var(f"x{i}", type_of(x)) for i, x in enumerate(case.inputs)]
    call, g, adjoints = rule_adjoints(case.op, params, case.attrs)
    g_value = _random(g.type_annotation)
    env = {**dict(zip(params, case.inputs)), g: g_value}
    actual = Interpreter().eval(adjoints, env)
    lowering = lookup(case.op).jax_lower
    jit = case.op not in EAGER
    expected = jax_vjp(lambda *xs: lowering(*xs, **call.attrs), case.inputs, g_value, jit)
    assert_same(actual, tuple(expected), case.rtol, case.atol, f"{case.id} vs vjp(jax_lower)")
    if case.truth is not None:
        truth = jax_vjp(case.truth, case.inputs, g_value, jit)
        assert_same(actual, tuple(truth), case.rtol, case.atol, f"{case.id} vs vjp(truth)")


def _psum_of_one(x):
    """JAX's psum over a named axis of one rank (vmap of a batch of one)."""
    return jax.vmap(lambda v: jax.lax.psum(v, "ranks"), axis_name="ranks")(x[None])[0]


# ---- the cases ----------------------------------------------------------------------------------

UNARY = {"negative": f64, "exp": f64, "log": pos, "sqrt": pos, "rsqrt": pos, "tanh": f64,
         "sigmoid": f64, "relu": f64, "abs": f64, "sin": f64, "cos": f64,
         "tan": lambda *s: rng.uniform(-1.4, 1.4, s), "atan": f64, "erf": f64}
BROADCASTS = [((3, 4), (3, 4)), ((3, 1), (4,)), ((), (2, 3)), ((2, 3), ()), ((2, 1, 4), (3, 1))]
REDUCE_ATTRS = [{}, {"axis": 1}, {"axis": -1, "keepdims": True}, {"axis": (0, 2)},
                {"keepdims": True}]
TIES = np.array([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, 2.0, 2.0], [0.0, 0.0, 5.0, 1.0]])
INDICES = np.array([[5, -1], [0, -7]], np.int32)

CASES = [
    # ---- elementwise
    *[GradCase(op, [make(3, 4)]) for op, make in UNARY.items()],
    *[GradCase(op, [f32(5)], **F32) for op in ("exp", "tanh", "sigmoid", "sin", "erf")],
    GradCase("erf", [f64(3, 4)], truth=lambda x: jax.scipy.special.erf(x)),
    GradCase("atan", [f64(6)], truth=lambda x: jnp.arctan2(x, jnp.ones_like(x))),
    GradCase("clip", [f64(3, 4)], {"a_min": -0.5, "a_max": 0.7},
             lambda x: jnp.minimum(jnp.maximum(x, -0.5), 0.7)),
    GradCase("simulated_quantize", [f32(3, 4) * 3, np.float32(1 / 32)], {"nbit": 7},
             name="straight-through"),
    GradCase("simulated_quantize", [f32(2, 3, 4) * 3, np.float32([0.1, 0.02, 0.05])],
             {"nbit": 5}, name="per channel"),
    GradCase("cast", [f32(2, 3)], {"dtype": "float64"}, name="float32 to float64"),
    GradCase("cast", [f64(2, 3)], {"dtype": "float32"}, name="float64 to float32"),
    GradCase("cast", [f64(2, 3)], {"dtype": "int32"}, name="to int32: zero"),
    GradCase("cast", [i32(2, 3)], {"dtype": "float64"}, name="from int32: zero"),
    GradCase("psum", [f64(3, 4)], truth=lambda x: _psum_of_one(x)),
    GradCase("cast_like", [f64(3), f32(2)]),
    GradCase("cast_like", [f64(3), i32(2)], name="to int32: zero"),
    GradCase("cast_like", [i32(3), f64(2)], name="from int32: zero"),
    GradCase("cast_like", [bools(3), f64(2)], name="from bool: zero"),
    # ---- broadcasting binary ops
    *[GradCase(op, [f64(*a), f64(*b)]) for op in ("add", "subtract", "multiply", "maximum",
                                                  "minimum") for a, b in BROADCASTS],
    *[GradCase("divide", [f64(*a), pos(*b)]) for a, b in BROADCASTS],
    *[GradCase("power", [pos(*a), f64(*b)]) for a, b in BROADCASTS],
    *[GradCase("floor_mod", [f64(*a), pos(*b)], truth=lambda x, y: jnp.mod(x, y))
      for a, b in BROADCASTS],
    GradCase("floor_mod", [i32(3, 4), np.full(4, 3, np.int32)], name="int32: zero"),
    GradCase("power", [np.array([0.0, 2.0, 0.0]), np.array([2.0, 0.0, 0.5])], name="zeros"),
    GradCase("maximum", [TIES, TIES[:, 1:2]], name="ties share g"),
    GradCase("minimum", [TIES, TIES[1]], name="ties share g"),
    GradCase("multiply", [f32(3, 1), f32(4)], **F32),
    GradCase("add", [i32(3, 1), i32(4)], name="int32: zero"),
    GradCase("where", [bools(3, 4), f64(3, 1), f64(4)]),
    GradCase("where", [bools(4), f64(), f64(2, 4)], name="scalar x"),
    # ---- reductions
    *[GradCase(op, [f64(2, 3, 4)], attrs) for op in ("sum", "mean", "max", "min", "prod")
      for attrs in REDUCE_ATTRS],
    *[GradCase("variance", [f64(2, 3, 4)], attrs) for attrs in REDUCE_ATTRS],
    GradCase("variance", [f64(3, 5)], {"axis": 1, "unbiased": True},
             lambda x: jnp.var(x, axis=1, ddof=1), "unbiased"),
    GradCase("variance", [f32(4, 5)], {"axis": 0, "keepdims": True}, name="float32", **F32),
    GradCase("sum", [f64(3)], {"axis": ()}, name="no axes"),
    GradCase("mean", [f32(4, 5)], {"axis": 0}, **F32),
    GradCase("max", [TIES], {"axis": 1}, name="ties share g"),
    GradCase("min", [TIES], {"keepdims": True}, name="ties share g"),
    GradCase("prod", [np.array([[0.0, 2.0, 3.0], [0.0, 0.0, 4.0], [1.5, 2.0, -1.0]])],
             {"axis": 1}, name="one and two zeros"),
    GradCase("sum", [i32(3, 4)], {"axis": 0}, name="int32: zero"),
    GradCase("max", [bools(3, 4)], name="bool: zero"),
    GradCase("collapse_sum_like", [f64(2, 3, 4), f64(3, 1)]),
    GradCase("collapse_sum_like", [f64(2, 3), f64()], name="to a scalar"),
    # ---- shape transformations
    GradCase("reshape", [f64(2, 3, 4)], {"newshape": (6, -1)}),
    GradCase("reshape_like", [f64(2, 3, 4), f64(4, 6)]),
    GradCase("squeeze", [f64(2, 1, 3, 1)]),
    GradCase("squeeze", [f64(2, 1, 3, 1)], {"axis": (-1,)}),
    GradCase("flatten", [f64(2, 3, 4)]),
    GradCase("transpose", [f64(2, 3, 4)]),
    GradCase("layout_transform", [f64(2, 8, 3, 2)], {"src_layout": "NCHW", "dst_layout": "NCHW4c"}),
    GradCase("layout_transform", [f64(2, 3, 4, 2, 2)],
             {"src_layout": "NCHW2c", "dst_layout": "NHWC"}),
    GradCase("transpose", [f64(2, 3, 4)], {"axes": (1, 0, 2)}),
    GradCase("transpose", [f64(2, 3, 4)], {"axes": (-1, 0, 1)}),
    GradCase("expand_dims", [f64(2, 3)], {"axis": 1}),
    GradCase("expand_dims", [f64(2, 3)], {"axis": -1, "num_newaxis": 2}),
    GradCase("expand_dims", [f64(2)], {"axis": 0, "num_newaxis": 0}),
    GradCase("concatenate", [(f64(2, 3), f64(2, 1), f64(2, 2))], {"axis": 1}),
    GradCase("concatenate", [(f64(2, 3), f64(1, 3))], {"axis": -2}),
    GradCase("concatenate", [(f64(4),)], name="one tensor"),
    GradCase("split", [f64(6, 2)], {"indices_or_sections": 3}),
    GradCase("split", [f64(2, 5)], {"indices_or_sections": (1, 3), "axis": -1}),
    GradCase("split", [f64(6)], {"indices_or_sections": (-2, 7)}, name="negative, past the end"),
    GradCase("split", [f64(5)], {"indices_or_sections": (3, 1)}, name="overlapping pieces"),
    GradCase("stack", [(f64(2, 3), f64(2, 3), f64(2, 3))]),
    GradCase("stack", [(f64(2), f64(2))], {"axis": -1}),
    GradCase("take", [f64(4, 3), INDICES], {"axis": 1}),
    GradCase("take", [f64(4, 3), INDICES], {"axis": -1, "mode": "wrap"}),
    GradCase("take", [f64(2, 3), np.array([1, 1, 4, 1], np.int32)], name="flat, repeated"),
    GradCase("take_grad", [f64(4, 2, 2), INDICES, f64(4, 3)], {"axis": 1}),
    GradCase("strided_slice", [f64(4, 5)], {"begin": (1,), "end": (3,)}),
    GradCase("strided_slice", [f64(4, 5)], {"begin": (0, 4), "end": (4, 0), "strides": (2, -1)}),
    GradCase("strided_slice", [f64(6)], {"begin": (3,), "end": (-100,), "strides": -1}),
    GradCase("strided_slice_grad", [f64(2, 4), f64(4, 5)],
             {"begin": (0, 4), "end": (4, 0), "strides": (2, -1)}),
    GradCase("broadcast_to", [f64(3, 1)], {"shape": (2, 3, 4)}),
    GradCase("broadcast_to", [f64()], {"shape": (2,)}),
    GradCase("full", [np.array(2.5)], {"shape": (2, 3)}),
    GradCase("full", [np.array(2.5)], {"shape": (2, 3), "dtype": "float32"}),
    GradCase("full", [np.array(2.5)], {"shape": (2,), "dtype": "int32"}, name="to int32: zero"),
    GradCase("tile", [f64(2, 3)], {"reps": (2, 3)}),
    GradCase("tile", [f64(3)], {"reps": (2, 1, 2)}, name="more reps than axes"),
    GradCase("tile", [f64(2, 1, 3)], {"reps": (2,)}, lambda x: jnp.tile(x, (2,)),
             "fewer reps than axes"),
    GradCase("gather_nd", [f64(2, 3, 4), np.array([[1, 0, -1, 1], [2, 9, 0, 2]], np.int32)],
             name="repeated, negative and past-the-end indices"),
    GradCase("gather_nd", [f64(3, 4), np.array([[[2, 0], [1, 1]], [[3, 0], [0, -4]]], np.int64)],
             name="every axis: elements"),
    GradCase("gather_nd", [f64(2, 3, 4), np.array([[[2, 0], [1, 1]]], np.uint8)],
             {"batch_dims": 1}, name="batch_dims 1"),
    GradCase("topk", [f64(3, 5)], {"k": 2}),
    GradCase("topk", [f64(4, 3, 2)], {"k": 3, "axis": 1, "ret_type": "values",
                                      "is_ascend": True}),
    GradCase("topk", [np.array([[1.0, 2.0, 2.0, 0.5], [3.0, 3.0, 3.0, 3.0]])],
             {"k": 3, "ret_type": "values"},
             lambda x: jax.lax.top_k(x, 3)[0], "ties by index"),
    GradCase("topk", [f64(3, 4)], {"k": 0, "ret_type": "indices"}, name="indices: zero"),
    GradCase("one_hot", [np.array([[0, 3], [-1, 1]], np.int32), f64(), f64()],
             {"depth": 3, "axis": 1, "dtype": "float64"}),
    GradCase("one_hot", [np.array([2, 0, 1], np.int64), f64(), f32()], {"depth": 4},
             name="float64 and float32 values to float32", **F32),
    GradCase("one_hot", [np.array([2, 0], np.int32), f64(), i32()], {"depth": 3},
             name="int32 off_value: zero"),
    GradCase("pad", [f64(2, 3)], {"pad_width": (1, 2, 0, 3)}),
    GradCase("pad", [f64(1, 2, 3)], {"pad_width": (0, 0, 1, 1, 2, 0), "pad_value": -1.5}),
    GradCase("dilate", [f64(2, 3, 4)], {"strides": (1, 2, 3)}),
    GradCase("dilate", [f64(3, 2)], {"strides": (2, 1), "dilation_value": 5.0}),
    # ---- products
    GradCase("matmul", [f64(3, 4), f64(4, 5)]),
    GradCase("matmul", [f64(4), f64(4, 5)]),
    GradCase("matmul", [f64(3, 4), f64(4)]),
    GradCase("matmul", [f64(4), f64(4)]),
    GradCase("matmul", [f64(2, 1, 3, 4), f64(5, 4, 2)], name="batch broadcast"),
    GradCase("matmul", [f64(4), f64(2, 4, 3)], name="vector @ batch"),
    GradCase("matmul", [f32(3, 4), f32(4, 5)], **F32),
    GradCase("dense", [f64(4, 6), f64(3, 6)]),
    GradCase("dense", [f64(2, 5, 6), f64(3, 6)]),
    GradCase("dense", [f64(6), f64(3, 6)]),
    GradCase("dense", [f32(4, 6), f32(3, 6)], {"out_dtype": "float64"},
             name="float32 summed in float64", **F32),
    GradCase("dense", [i32(4, 6), i32(3, 6)], {"out_dtype": "float64"}, name="int32: zero"),
    GradCase("matmul", [i32(3, 4), i32(4, 5)], name="int32: zero"),
    *[GradCase("batch_matmul", [f64(2, *x), f64(2, *y)], {"transpose_a": ta, "transpose_b": tb})
      for ta, x in ((False, (3, 4)), (True, (4, 3)))
      for tb, y in ((False, (4, 5)), (True, (5, 4)))],
    GradCase("batch_matmul", [f64(1, 3, 4), f64(3, 4, 2)], name="batch 1 broadcasts"),
    GradCase("batch_matmul", [f64(3, 4, 3), f64(1, 2, 4)], {"transpose_a": True,
             "transpose_b": True}, name="transposed, batch 1 broadcasts"),
    # ---- convolution and pooling
    GradCase("conv2d", [f64(2, 3, 7, 7), f64(4, 3, 3, 3)], truth=conv_truth()),
    GradCase("conv2d_nchwc", [f64(2, 2, 5, 5, 2), f64(3, 2, 3, 3, 2, 2)],
             truth=conv_nchwc_truth()),
    GradCase("conv2d_nchwc", [f64(1, 1, 6, 7, 4), f64(1, 1, 3, 2, 4, 4)],
             {"strides": 2, "padding": (1, 0, 0, 1)},
             truth=conv_nchwc_truth((2, 2), ((1, 0), (0, 1))),
             name="strides 2, padding"),
    GradCase("conv2d", [f64(2, 3, 8, 8), f64(4, 3, 3, 3)], {"strides": 2, "padding": 1},
             name="stride 2, padding 1"),
    GradCase("conv2d", [f64(1, 2, 6, 7), f64(3, 2, 3, 3)], {"padding": (1, 2)},
             name="padding (h, w)"),
    GradCase("conv2d", [f64(1, 2, 6, 7), f64(3, 2, 3, 2)], {"padding": (0, 1, 2, 1)},
             name="padding (top, left, bottom, right)"),
    GradCase("conv2d", [f64(2, 2, 9, 9), f64(3, 2, 3, 3)], {"dilation": 2}, name="dilation 2"),
    GradCase("conv2d", [f64(2, 4, 6, 6), f64(6, 2, 3, 3)], {"groups": 2}, name="groups 2"),
    GradCase("conv2d", [f64(1, 4, 5, 5), f64(4, 1, 3, 3)], {"groups": 4, "padding": 1},
             name="depthwise"),
    GradCase("conv2d", [f64(1, 3, 5, 5), f64(6, 1, 3, 3)], {"groups": 3},
             name="depthwise, multiplier 2"),
    GradCase("conv2d", [f64(2, 4, 9, 8), f64(6, 2, 3, 2)],
             {"strides": (2, 1), "dilation": (1, 2), "padding": (1, 0, 2, 1), "groups": 2},
             conv_truth((2, 1), ((1, 2), (0, 1)), (1, 2), 2), "everything at once"),
    GradCase("conv2d", [f64(1, 2, 8, 7), f64(2, 2, 3, 3)], {"strides": 3},
             name="stride 3 leaves rows unused"),
    GradCase("conv2d", [f64(1, 2, 4, 4), f64(3, 2, 1, 1)], {"padding": 2},
             name="padding wider than the kernel"),
    GradCase("conv2d", [f64(1, 5, 5), f64(3, 1, 3, 3)], {"strides": 2},
             lambda x, w: conv_truth((2, 2))(x[None], w)[0], "single-CHW-example"),
    GradCase("conv2d", [f32(2, 3, 6, 6), f32(4, 3, 3, 3)], {"strides": 2, "padding": 1},
             name="float32", **F32),
    GradCase("conv2d", [f32(1, 2, 5, 5), f32(3, 2, 3, 3)], {"out_dtype": "float64"},
             name="float32 summed in float64", **F32),
    GradCase("conv2d", [i32(1, 2, 5, 5), i32(3, 2, 3, 3)], name="int32: zero"),
    GradCase("max_pool2d", [f64(2, 3, 6, 6)], {"pool_size": 2, "strides": 2},
             max_pool_truth((2, 2), (2, 2), ((0, 0), (0, 0)))),
    GradCase("max_pool2d", [f64(2, 3, 6, 6)], {"pool_size": 3, "padding": 1},
             max_pool_truth((3, 3), (1, 1), ((1, 1), (1, 1))), "3x3, padding 1"),
    GradCase("max_pool2d", [f64(1, 2, 7, 7)], {"pool_size": 2, "strides": 2, "ceil_mode": True},
             max_pool_truth((2, 2), (2, 2), ((0, 1), (0, 1))), "ceil_mode"),
    GradCase("max_pool2d", [f64(3, 6, 6)], {"pool_size": 2, "strides": 2},
             name="single-CHW-example"),
    GradCase("max_pool2d_grad", [f64(2, 3, 3, 3), f64(2, 3, 6, 6)], {"pool_size": 2, "strides": 2}),
    GradCase("max_pool2d_grad", [f64(1, 2, 4, 4), f64(1, 2, 7, 7)],
             {"pool_size": 3, "strides": 2, "padding": 1, "ceil_mode": True},
             name="padding, ceil_mode"),
    GradCase("max_pool2d_grad", [f64(1, 4, 4), np.round(f64(1, 5, 5))],
             {"pool_size": 2, "strides": 1}, name="single-CHW-example, ties"),
    GradCase("avg_pool2d", [f64(2, 3, 6, 6)], {"pool_size": 2, "strides": 2},
             avg_pool_truth((2, 2), (2, 2), ((0, 0), (0, 0)))),
    GradCase("avg_pool2d", [f64(1, 2, 5, 6)], {"pool_size": 3, "padding": 1},
             avg_pool_truth((3, 3), (1, 1), ((1, 1), (1, 1))), "padding not counted"),
    GradCase("avg_pool2d", [f64(1, 2, 5, 6)],
             {"pool_size": 3, "padding": 1, "count_include_pad": True},
             avg_pool_truth((3, 3), (1, 1), ((1, 1), (1, 1)), ((1, 1), (1, 1))),
             "padding counted"),
    GradCase("avg_pool2d", [f64(1, 2, 6, 6)],
             {"pool_size": 3, "strides": 2, "padding": 1, "ceil_mode": True},
             avg_pool_truth((3, 3), (2, 2), ((1, 2), (1, 2))), "ceil_mode"),
    GradCase("avg_pool2d", [f64(2, 1, 7, 5)],
             {"pool_size": (2, 3), "strides": (2, 1), "padding": (0, 1, 1, 1),
              "ceil_mode": True, "count_include_pad": True}, name="everything at once"),
    GradCase("avg_pool2d", [f64(3, 6, 6)], {"pool_size": 3}, name="single-CHW-example"),
    GradCase("global_avg_pool2d", [f64(2, 3, 4, 5)]),
    GradCase("global_max_pool2d", [f64(2, 3, 4, 5)], truth=global_max_truth),
    GradCase("max_pool1d", [f64(2, 3, 8)], {"pool_size": 2, "strides": 2},
             max_pool1d_truth(2, 2, (0, 0))),
    GradCase("max_pool1d", [f64(1, 2, 7)],
             {"pool_size": 3, "strides": 2, "padding": 1, "ceil_mode": True},
             max_pool1d_truth(3, 2, (1, 2)), "padding, ceil_mode"),
    GradCase("avg_pool1d", [f64(2, 3, 8)], {"pool_size": 2, "strides": 2},
             avg_pool1d_truth(2, 2, (0, 0))),
    GradCase("avg_pool1d", [f64(1, 2, 7)],
             {"pool_size": 3, "strides": 2, "padding": (1, 0), "count_include_pad": True},
             avg_pool1d_truth(3, 2, (1, 0), counted=(1, 0)), "padding counted"),
    GradCase("conv1d", [f64(2, 3, 9), f64(4, 3, 3)], truth=conv1d_truth()),
    GradCase("conv1d", [f64(2, 4, 11), f64(6, 2, 3)],
             {"strides": 2, "padding": (1, 2), "dilation": 2, "groups": 2},
             conv1d_truth(2, (1, 2), 2, 2), "everything at once"),
    GradCase("conv1d", [f32(2, 3, 8), f32(4, 3, 3)], {"strides": 2, "padding": 1},
             name="float32", **F32),
    # ---- normalisation, dropout, losses
    *[GradCase(op, [f64(2, 3, 4)], {"axis": axis}, lambda x, f=f, axis=axis: f(x, axis=axis))
      for op, f in (("softmax", jax.nn.softmax), ("log_softmax", jax.nn.log_softmax))
      for axis in (-1, 0, 1)],
    GradCase("softmax", [f32(3, 5)], **F32),
    GradCase("leaky_relu", [f64(3, 4)], truth=leaky_relu_truth(0.25)),
    GradCase("leaky_relu", [f64(2, 5)], {"alpha": 0.1}, leaky_relu_truth(0.1)),
    GradCase("prelu", [f64(2, 3, 4, 4), f64(3)], truth=prelu_truth()),
    GradCase("prelu", [f64(5, 3), f64(3)], {"axis": -1}, prelu_truth(-1)),
    GradCase("batch_norm", [f64(2, 3, 4, 4), f64(3), f64(3), f64(3), pos(3)],
             truth=batch_norm_truth(), name="inference"),
    GradCase("batch_norm", [f64(4, 3, 2, 2), f64(3), f64(3), f64(3), pos(3)],
             {"training": True}, batch_norm_truth(training=True), "training"),
    GradCase("batch_norm", [f64(5, 3), f64(3), f64(3), f64(3), pos(3)],
             {"training": True, "momentum": 0.3, "epsilon": 1e-3},
             batch_norm_truth(training=True, momentum=0.3, eps=1e-3), "training 2-D"),
    *[GradCase("batch_norm", [f64(2, 4, 4, 3), f64(3), f64(3), f64(3), pos(3)],
               {"axis": -1, "center": False, "scale": False, "training": training},
               batch_norm_truth(axis=-1, center=False, scale=False, training=training),
               f"NHWC, no center/scale, training={training}") for training in (False, True)],
    GradCase("batch_norm", [f32(4, 3, 2, 2), f32(3), f32(3), f32(3), pos(3).astype(np.float32)],
             {"training": True}, name="training float32", **F32),
    GradCase("layer_norm", [f64(4, 6), f64(6), f64(6)], truth=layer_norm_truth()),
    GradCase("layer_norm", [f64(2, 3, 4), f64(3), f64(3)], {"axis": 1},
             layer_norm_truth(axis=1)),
    GradCase("layer_norm", [f64(2, 5), f64(5), f64(5)],
             {"center": False, "scale": False, "epsilon": 1e-3},
             layer_norm_truth(eps=1e-3, center=False, scale=False), "no center/scale"),
    GradCase("layer_norm", [f64(5), f64(5), f64(5)], truth=layer_norm_truth(), name="1-D"),
    GradCase("dropout", [f64(3, 4), np.array([1, 2], np.int64)], name="inference"),
    GradCase("dropout", [f64(2, 3, 7), np.array([7, 3], np.int32)],
             {"training": True, "rate": 0.2}),
    # ---- 3-D pools, transposed convolution, upsampling
    GradCase("max_pool3d", [f64(2, 2, 4, 6, 6)], {"pool_size": 2, "strides": 2},
             max_pool3d_truth((2, 2, 2), (2, 2, 2), ((0, 0),) * 3)),
    GradCase("max_pool3d", [f64(1, 2, 5, 6, 7)],
             {"pool_size": (2, 3, 2), "strides": (1, 2, 2), "padding": (1, 1, 0, 0, 1, 1),
              "ceil_mode": True},
             max_pool3d_truth((2, 3, 2), (1, 2, 2), ((1, 0), (1, 2), (0, 1))),
             "padding, ceil_mode"),
    GradCase("avg_pool3d", [f64(2, 2, 4, 6, 6)], {"pool_size": 2, "strides": 2},
             avg_pool3d_truth((2, 2, 2), (2, 2, 2), ((0, 0),) * 3)),
    GradCase("avg_pool3d", [f64(1, 2, 5, 5, 6)],
             {"pool_size": (3, 3, 2), "strides": (1, 2, 2), "padding": 1},
             avg_pool3d_truth((3, 3, 2), (1, 2, 2), ((1, 1),) * 3), "padding not counted"),
    GradCase("avg_pool3d", [f64(1, 2, 5, 5, 6)],
             {"pool_size": (3, 3, 2), "strides": (1, 2, 2), "padding": 1,
              "count_include_pad": True}, name="padding counted"),
    GradCase("conv2d_transpose", [f64(2, 4, 5, 6), f64(4, 3, 3, 3)],
             truth=conv_transpose_truth()),
    GradCase("conv2d_transpose", [f64(1, 3, 4, 5), f64(3, 2, 3, 2)],
             {"strides": (2, 3), "padding": (1, 2, 0, 1), "output_padding": (1, 2)},
             conv_transpose_truth((2, 3), ((1, 0), (2, 1)), (1, 2)),
             "strides, padding, output_padding"),
    GradCase("conv2d_transpose", [f64(2, 4, 4, 4), f64(4, 3, 2, 3)],
             {"strides": 2, "padding": 1, "output_padding": (1, 0), "dilation": (2, 1),
              "groups": 2}, conv_transpose_truth((2, 2), ((1, 1), (1, 1)), (1, 0), (2, 1), 2),
             "dilation, groups 2"),
    GradCase("conv2d_transpose", [f32(1, 2, 4, 4), f32(2, 3, 3, 3)], {"strides": 2},
             name="float32", **F32),
    GradCase("upsampling", [f64(2, 3, 4, 5)], {"scale_h": 2.0, "scale_w": 3.0},
             upsampling_truth(2, 3), "nearest"),
    GradCase("upsampling", [f64(1, 2, 3, 5)],
             {"scale_h": 2.0, "scale_w": 1.5, "align_corners": True},
             upsampling_truth(2, 1.5, align_corners=True), "nearest, align_corners"),
    GradCase("upsampling", [f64(2, 3, 4, 5)],
             {"scale_h": 2.0, "scale_w": 3.0, "method": "bilinear"},
             upsampling_truth(2, 3, "bilinear"), "bilinear"),
    GradCase("upsampling", [f64(1, 2, 4, 3)],
             {"scale_h": 2.5, "scale_w": 1.5, "method": "bilinear", "align_corners": True},
             upsampling_truth(2.5, 1.5, "bilinear", True), "bilinear, align_corners"),
    GradCase("bias_add", [f64(2, 3, 4, 4), f64(3)], truth=bias_add_truth(1)),
    GradCase("bias_add", [f64(5, 3), f64(3)], {"axis": -1}, bias_add_truth(-1)),
    GradCase("softmax_cross_entropy", [f64(4, 10), one_hot(4, 10, np.float64)],
             truth=cross_entropy_truth),
    GradCase("softmax_cross_entropy", [f64(10), one_hot(1, 10, np.float64)[0]],
             truth=cross_entropy_truth, name="1-D logits"),
    GradCase("softmax_cross_entropy", [f64(2, 3, 5), pos(2, 3, 5)], truth=cross_entropy_truth,
             name="labels not summing to 1"),
    GradCase("softmax_cross_entropy", [f32(4, 10), one_hot(4, 10)], name="float32", **F32),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_rule_matches_jax(case):
    check_gradient(case)


def test_power_at_zero_is_zero():
    """d x**0 / dx = 0 at x = 0 too (JAX's float rule gives 0 * 0**-1 = nan)."""
    x, y = (Var(v, TensorType((), "float64")) for v in "xy")
    _, g, adjoints = rule_adjoints("power", [x, y], {})
    zero = np.array(0.0)
    dx, dy = Interpreter().eval(adjoints, {x: zero, y: zero, g: np.array(1.0)})
    assert dx == 0 and dy == 0


# ---- the registry -------------------------------------------------------------------------------

DIFFERENTIABLE = sorted(name for name, d in all_ops().items() if d.differentiable)


@pytest.mark.parametrize("name", DIFFERENTIABLE)
def test_differentiable_op_has_a_tested_rule(name):
    rule = all_ops()[name].gradient
    assert callable(rule), f"{name} is differentiable but has no gradient rule"
    doc = (rule.__doc__ or "").strip()
    assert doc and "\n" not in doc, f"{name}: the rule must state its math in a one-line docstring"
    assert any(case.op == name for case in CASES), f"{name}: no gradient test case"


def test_non_differentiable_ops_have_no_rule():
    with_rules = [n for n, d in all_ops().items() if not d.differentiable and d.gradient]
    assert not with_rules, f"non-differentiable ops with a gradient rule: {with_rules}"
    expected = [
        "equal", "not_equal", "less", "less_equal", "greater", "greater_equal", "logical_and",
        "logical_or", "logical_not", "argmax", "argmin", "sign", "floor", "ceil", "round",
        "shape_of", "zeros", "ones", "zeros_like", "ones_like", "trunc", "floor_divide",
        "left_shift", "right_shift", "all", "any", "ndarray_size",
    ]
    assert all(not all_ops()[n].differentiable for n in expected)


# ---- symbolic dims ------------------------------------------------------------------------------

n = TypeVar("n", Kind.Shape)


@pytest.mark.parametrize("op, types, attrs", [
    ("add", [(n, 3), (3,)], {}),
    ("multiply", [(n, 1), (n, 4)], {}),
    ("sum", [(n, 3)], {"axis": 1}),
    ("mean", [(n, 3)], {}),
    ("max", [(n, 3)], {"axis": 0}),
    ("reshape", [(n, 6)], {"newshape": (-1, 3)}),
    ("squeeze", [(n, 1, 3)], {"axis": (1,)}),
    ("flatten", [(n, 2, 3)], {}),
    ("transpose", [(n, 3)], {}),
    ("softmax", [(n, 3)], {}),
    ("softmax_cross_entropy", [(n, 5), (n, 5)], {}),
    ("batch_norm", [(n, 3), (3,), (3,), (3,), (3,)], {"training": True}),
    ("dense", [(n, 4), (2, 4)], {}),
    ("conv2d", [(n, 2, 5, 5), (3, 2, 3, 3)], {"padding": 1}),
])
def test_rules_keep_symbolic_dims(op, types, attrs):
    """Rules on shape-polymorphic inputs type-check to the inputs' types and run at any size."""
    params = [Var(f"x{i}", TensorType(shape, "float64")) for i, shape in enumerate(types)]
    call, g, adjoints = rule_adjoints(op, params, attrs)
    concrete = [f64(*(4 if d is n else d for d in shape)) for shape in types]
    lowering = lookup(op).jax_lower
    out = lowering(*concrete, **call.attrs)
    g_value = jax.tree_util.tree_map(lambda o: f64(*o.shape), out)
    actual = Interpreter().eval(adjoints, {**dict(zip(params, concrete)), g: g_value})
    expected = jax_vjp(lambda *xs: lowering(*xs, **call.attrs), concrete, g_value)
    assert_same(actual, tuple(expected), 1e-6, 1e-8, f"{op} on symbolic dims")


# ---- through the AD transform and llvm ----------------------------------------------------------

def test_new_nn_ops_train_through_relay_grad_on_llvm():
    """The 1-D ops' rules (the 2-D rules on let-bound tall inputs) and the activations', in a
    whole program differentiated by relay.grad and compiled for llvm, against jax.grad."""
    @relay
    def f(x: Tensor[Float, (2, 3, 12)], w: Tensor[Float, (4, 3, 3)],
          a: Tensor[Float, 4]) -> Float:
        h = relay.prelu(relay.conv1d(x, w, padding=1), a)
        h = relay.avg_pool1d(relay.max_pool1d(h, pool_size=2, strides=2), pool_size=2)
        return relay.sum(relay.leaky_relu(h, alpha=0.1))

    def truth(x, w, a):
        h = jax.lax.conv_general_dilated(x, w, (1,), ((1, 1),), precision="highest",
                                         dimension_numbers=("NCH", "OIH", "NCH"))
        h = jnp.where(h >= 0, h, a[None, :, None] * h)
        h = jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, (1, 1, 2), (1, 1, 2), "VALID")
        h = jax.lax.reduce_window(h, 0.0, jax.lax.add, (1, 1, 2), (1, 1, 1), "VALID") / 2
        return jnp.sum(jax.nn.leaky_relu(h, 0.1))

    inputs = [f32(2, 3, 12), f32(4, 3, 3), f32(4)]
    value, grads = relay.grad(f)(*inputs)
    expected, expected_grads = jax.value_and_grad(truth, argnums=(0, 1, 2))(*inputs)
    np.testing.assert_allclose(value, expected, rtol=1e-4)
    for g, e in zip(grads, expected_grads):
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target", ["interp", "llvm"])
def test_pool3d_conv_transpose_upsampling_through_relay_grad(target, monkeypatch):
    """max_pool3d, avg_pool3d, conv2d_transpose and upsampling in one program: its value on
    the target (build) and its gradient (relay.grad, whose rules run as Relay on the target)
    against JAX."""
    monkeypatch.setenv("RELAYDSL_TARGET", target)  # relay.grad runs on the default target

    @relay
    def f(v: Tensor[Float, (1, 2, 4, 6, 6)], x: Tensor[Float, (2, 4, 3, 3)],
          w: Tensor[Float, (4, 3, 3, 3)]) -> Float:
        p = relay.avg_pool3d(relay.max_pool3d(v, pool_size=2, strides=(1, 2, 2), padding=1),
                             pool_size=(2, 2, 2), strides=2, count_include_pad=True)
        y = relay.conv2d_transpose(x, w, strides=2, padding=1, output_padding=1)
        u = relay.upsampling(y, scale_h=2.0, scale_w=1.5, method="bilinear")
        n = relay.upsampling(y, scale_h=1.0, scale_w=2.0, align_corners=True)
        return relay.sum(p * p) + relay.sum(relay.tanh(u)) + relay.sum(n * n)

    def truth(v, x, w):
        p = max_pool3d_truth((2, 2, 2), (1, 2, 2), ((1, 1),) * 3)(v)
        p = avg_pool3d_truth((2, 2, 2), (2, 2, 2), ((0, 0),) * 3)(p)
        y = conv_transpose_truth((2, 2), ((1, 1), (1, 1)), (1, 1))(x, w)
        u = upsampling_truth(2.0, 1.5, "bilinear")(y)
        n = upsampling_truth(1.0, 2.0, align_corners=True)(y)
        return jnp.sum(p * p) + jnp.sum(jnp.tanh(u)) + jnp.sum(n * n)

    inputs = [f32(1, 2, 4, 6, 6), f32(2, 4, 3, 3), f32(4, 3, 3, 3)]
    np.testing.assert_allclose(relay.build(f, target=target)(*inputs), truth(*inputs),
                               rtol=1e-4)
    value, grads = relay.grad(f)(*inputs)
    expected, expected_grads = jax.value_and_grad(truth, argnums=(0, 1, 2))(*inputs)
    np.testing.assert_allclose(value, expected, rtol=1e-4)
    for g, e in zip(grads, expected_grads):
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-4)
