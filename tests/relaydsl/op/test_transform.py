"""Shape transformations and constructors against JAX, their checks, and symbolic dims."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from relaydsl.errors import IRError, RelayTypeError
from relaydsl.ir import Call, Op, TensorType, TupleType, Var
from relaydsl.ir.attrs import Attrs
from relaydsl.ir.expr import Constant
from relaydsl.ir.types import Any, Kind, TypeVar
from relaydsl.op import lookup, ops
from relaydsl.typing.relations import check_relation
from tests.relaydsl.op.harness import OpCase, check_case
from tests.relaydsl.op.test_tensor import bools, f32, f64, i32

lax = jax.lax


def stacked(axis):
    """stack as a concatenation of inputs each given a new size-1 axis."""
    return lambda data: lax.concatenate(
        [lax.expand_dims(t, (axis % (t.ndim + 1),)) for t in data], axis % (data[0].ndim + 1))


def taken(axis, mode):
    """take as an index with clamped or wrapped indices."""

    def run(x, i):
        n = x.size if axis is None else x.shape[axis]
        i = jnp.clip(i, 0, n - 1) if mode == "clip" else jnp.mod(i, n)
        if axis is None:
            return x.reshape(-1)[i]
        a = axis % x.ndim
        return jnp.moveaxis(jnp.moveaxis(x, a, 0)[i], range(i.ndim), range(a, a + i.ndim))

    return run


def filled(value):
    return lambda shape, dtype: (lambda: lax.full(shape, value, jnp.dtype(dtype)))


def adjoint_of(forward):
    """The adjoint of a linear map of x, as a truth for the ops that undo one (vjp at `like`)."""

    def truth(g, *args):
        *rest, like = args
        return jax.vjp(lambda x: forward(x, *rest), like)[1](g)[0]

    return truth


OUT_OF_RANGE = np.array([[5, -1], [0, -7]], np.int32)


def tiled(reps):
    """tile as a broadcast of x against a new size-r axis before each axis, then a reshape."""

    def run(x):
        n = max(x.ndim, len(reps))
        dims = (1,) * (n - x.ndim) + x.shape
        r = (1,) * (n - len(reps)) + tuple(reps)
        spread = jnp.broadcast_to(x.reshape([v for d in dims for v in (1, d)]),
                                  [v for pair in zip(r, dims) for v in pair])
        return spread.reshape([a * b for a, b in zip(r, dims)])

    return run


def gathered(batch_dims):
    """gather_nd as a loop over the batch and index positions, reading with dynamic_index."""

    def run(x, indices):
        b, m = batch_dims, indices.shape[0]
        index_shape = indices.shape[1:]
        rows = []
        for at in np.ndindex(*index_shape):
            pos = [jnp.clip(jnp.where(i < 0, i + n, i), 0, n - 1)
                   for i, n in zip(indices[(slice(None), *at)], x.shape[b:b + m])]
            rows.append(x[(*at[:b], *pos)])
        return jnp.stack(rows).reshape(index_shape + x.shape[b + m:])

    return run


def top_k(k, axis=-1, ret_type="both", is_ascend=False, dtype=jnp.int32):
    """topk as lax.top_k (equal values by index) on the axis moved last; ascending on -x."""

    def run(x):
        moved = jnp.moveaxis(x, axis, -1)
        values, indices = lax.top_k(-moved if is_ascend else moved, k or moved.shape[-1])
        values = -values if is_ascend else values
        both = (jnp.moveaxis(values, -1, axis), jnp.moveaxis(indices, -1, axis).astype(dtype))
        return {"both": both, "values": both[0], "indices": both[1]}[ret_type]

    return run


TOPK_TIES = np.array([[3, 5, 5, 1, 5], [0, -1, 2, 2, -1]], np.int32)


def one_hot_truth(depth, axis, dtype):
    """one_hot as lax.eq of broadcast iotas, with jnp.where choosing on/off."""

    def run(indices, on, off):
        shape = list(indices.shape)
        ax = axis % (len(shape) + 1)
        out_shape = [*shape[:ax], depth, *shape[ax:]]
        spread = jnp.expand_dims(indices, ax)
        hit = lax.broadcasted_iota(indices.dtype, out_shape, ax) == spread
        return jnp.where(hit, on.astype(dtype), off.astype(dtype))

    return run


CASES = [
    OpCase("reshape", [f32(2, 3, 4)], lambda x: lax.reshape(x, (6, 4)), {"newshape": (6, 4)}),
    OpCase("reshape", [f64(2, 3, 4)], lambda x: lax.reshape(x, (12, 2)), {"newshape": (-1, 2)}),
    OpCase("reshape", [i32(6)], lambda x: lax.reshape(x, (2, 1, 3)), {"newshape": [2, -1, 3]}),
    OpCase("reshape", [i32()], lambda x: lax.reshape(x, (1, 1)), {"newshape": (1, -1)}),
    OpCase("reshape", [bools(2, 2)], lambda x: lax.reshape(x, (4,)), {"newshape": (4,)}),
    OpCase("transpose", [f32(2, 3, 4)], lambda x: lax.transpose(x, (2, 1, 0))),
    OpCase("transpose", [f64(2, 3, 4)], lambda x: lax.transpose(x, (1, 0, 2)),
           {"axes": (1, 0, 2)}),
    OpCase("transpose", [i32(2, 3, 4)], lambda x: lax.transpose(x, (2, 0, 1)),
           {"axes": (-1, 0, 1)}),
    OpCase("transpose", [f32(5)], lambda x: x, {"axes": 0}),
    OpCase("expand_dims", [f32(2, 3)], lambda x: x[:, None, :], {"axis": 1}),
    OpCase("expand_dims", [i32(2, 3)], lambda x: x[:, :, None, None],
           {"axis": -1, "num_newaxis": 2}),
    OpCase("expand_dims", [f64()], lambda x: x[None], {"axis": 0}),
    OpCase("expand_dims", [f32(2)], lambda x: x, {"axis": 0, "num_newaxis": 0}),
    OpCase("squeeze", [f32(1, 3, 1)], lambda x: lax.reshape(x, (3,))),
    OpCase("squeeze", [f64(1, 3, 1)], lambda x: x[0], {"axis": 0}),
    OpCase("squeeze", [i32(1, 3, 1)], lambda x: x[0, :, 0], {"axis": (-1, 0)}),
    OpCase("concatenate", [(f32(2, 3), f32(1, 3))], lambda d: lax.concatenate(d, 0)),
    OpCase("concatenate", [(i32(2, 1), i32(2, 2), i32(2, 3))], lambda d: lax.concatenate(d, 1),
           {"axis": -1}),
    OpCase("concatenate", [(f64(4),)], lambda d: d[0], {"axis": 0}),
    OpCase("split", [f32(6, 4)], lambda x: (x[0:2], x[2:4], x[4:6]),
           {"indices_or_sections": 3}),
    OpCase("split", [i32(2, 5)], lambda x: (x[:, :1], x[:, 1:3], x[:, 3:]),
           {"indices_or_sections": (1, 3), "axis": 1}),
    OpCase("split", [f64(6)], lambda x: (x[:4], x[4:7], x[7:]),
           {"indices_or_sections": (-2, 7), "axis": -1}, name="negative and past-the-end"),
    OpCase("split", [f32(5)], lambda x: (x[:3], x[3:1], x[1:]),
           {"indices_or_sections": (3, 1)}, name="decreasing cuts"),
    OpCase("stack", [(f32(2, 3), f32(2, 3), f32(2, 3))], stacked(0)),
    OpCase("stack", [(i32(2, 3), i32(2, 3))], stacked(-1), {"axis": -1}),
    OpCase("stack", [(f64(2), f64(2))], stacked(1), {"axis": 1}),
    OpCase("stack", [(f32(), f32(), f32())], stacked(0), name="scalars"),
    OpCase("take", [f64(4, 3), OUT_OF_RANGE], taken(1, "clip"), {"axis": 1},
           name="clip out of range"),
    OpCase("take", [i32(4, 3), OUT_OF_RANGE.astype(np.int64)], taken(-1, "wrap"),
           {"axis": -1, "mode": "wrap"}, name="wrap"),
    OpCase("take", [f32(2, 3), OUT_OF_RANGE], taken(None, "clip"), name="flattened"),
    OpCase("strided_slice", [f32(4, 5)], lambda x: x[1:3], {"begin": (1,), "end": (3,)}),
    OpCase("strided_slice", [f64(4, 5)], lambda x: x[0:4:2, 4:0:-1],
           {"begin": (0, 4), "end": (4, 0), "strides": (2, -1)}),
    OpCase("strided_slice", [i32(4, 5)], lambda x: x[:, -3:100],
           {"begin": (-3,), "end": (100,), "axes": (1,)}, name="negative begin, clamped end"),
    OpCase("strided_slice", [f32(6)], lambda x: x[3:-100:-1],
           {"begin": (3,), "end": (-100,), "strides": -1}, name="reverse to the start"),
    OpCase("strided_slice", [f32(3, 4)], lambda x: x[:, 3:1],
           {"begin": (3,), "end": (1,), "axes": -1}, name="empty"),
    OpCase("broadcast_to", [f32(3, 1)], lambda x: lax.broadcast_in_dim(x, (2, 3, 4), (1, 2)),
           {"shape": (2, 3, 4)}),
    OpCase("broadcast_to", [f64()], lambda x: lax.broadcast_in_dim(x, (2,), ()), {"shape": (2,)}),
    OpCase("broadcast_to", [i32(4)], lambda x: lax.broadcast_in_dim(x, (3, 4), (1,)),
           {"shape": (3, 4)}),
    OpCase("reshape_like", [f32(2, 3, 4), f32(4, 6)], lambda x, like: lax.reshape(x, (4, 6))),
    OpCase("reshape_like", [i32(6), f64(2, 1, 3)], lambda x, like: lax.reshape(x, (2, 1, 3))),
    OpCase("take_grad", [f64(4, 2, 2), OUT_OF_RANGE, f64(4, 3)], adjoint_of(taken(1, "clip")),
           {"axis": 1}, name="clip"),
    OpCase("take_grad", [f64(4, 2, 2), OUT_OF_RANGE, f64(4, 3)], adjoint_of(taken(-1, "wrap")),
           {"axis": -1, "mode": "wrap"}, name="wrap"),
    OpCase("take_grad", [f32(3), np.array([1, 1, 4], np.int32), f32(2, 3)],
           adjoint_of(taken(None, "clip")), name="flattened, repeated indices"),
    OpCase("strided_slice_grad", [f32(2, 5), f32(4, 5)], adjoint_of(lambda x: x[1:3]),
           {"begin": (1,), "end": (3,)}),
    OpCase("strided_slice_grad", [f64(2, 4), f64(4, 5)], adjoint_of(lambda x: x[0:4:2, 4:0:-1]),
           {"begin": (0, 4), "end": (4, 0), "strides": (2, -1)}),
    OpCase("zeros", [], filled(0)((2, 3), "float32"), {"shape": (2, 3)}),
    OpCase("zeros", [], filled(0)((), "int32"), {"shape": (), "dtype": "int32"}),
    OpCase("ones", [], filled(1)((4,), "float64"), {"shape": (4,), "dtype": "float64"}),
    OpCase("ones", [], filled(True)((2, 1), "bool"), {"shape": (2, 1), "dtype": "bool"}),
    OpCase("full", [np.array(2.5, np.float32)], lambda v: lax.full((2, 3), v), {"shape": (2, 3)}),
    OpCase("full", [np.array(-2.7)], lambda v: lax.full((3,), lax.convert_element_type(
        v, jnp.int32)), {"shape": (3,), "dtype": "int32"}, name="float64 to int32"),
    OpCase("full", [np.array(True)], lambda v: lax.full((2, 2), v), {"shape": (2, 2)}),
    OpCase("shape_of", [f32(2, 3)], lambda x: jnp.array([2, 3], jnp.int32)),
    OpCase("shape_of", [f32()], lambda x: jnp.zeros((0,), jnp.int32)),
    OpCase("ndarray_size", [f32(2, 3)], lambda x: jnp.array(6, jnp.int32)),
    OpCase("ndarray_size", [bools(4, 0, 2)], lambda x: jnp.array(0, jnp.int64),
           {"dtype": "int64"}),
    OpCase("ndarray_size", [i32()], lambda x: jnp.array(1.0, jnp.float32), {"dtype": "float32"}),
    OpCase("tile", [f32(2, 3)], tiled((2, 3)), {"reps": (2, 3)}),
    OpCase("tile", [i32(2, 3)], tiled((2,)), {"reps": (2,)}, name="fewer reps than axes"),
    OpCase("tile", [f64(3)], tiled((2, 1, 2)), {"reps": (2, 1, 2)}, name="more reps than axes"),
    OpCase("tile", [bools(1, 2)], tiled((3, 0)), {"reps": (3, 0)}, name="zero reps"),
    OpCase("tile", [f32()], tiled((4,)), {"reps": (4,)}, name="scalar"),
    OpCase("gather_nd", [f32(2, 3, 4), np.array([[1, 0, -1], [2, 9, 0]], np.int32)],
           gathered(0), name="negative and past-the-end indices"),
    OpCase("gather_nd", [i32(3, 4), np.array([[[2, 0], [1, 1]], [[3, 0], [0, -4]]], np.int64)],
           gathered(0), name="every axis: elements"),
    OpCase("gather_nd", [f64(2, 3, 4), np.array([[[2, 0], [1, 1]]], np.uint8)], gathered(1),
           {"batch_dims": 1}, name="batch_dims 1"),
    OpCase("gather_nd", [f32(2, 3, 4), np.array([[0, 2], [1, 3]], np.int32)], gathered(1),
           {"batch_dims": 1}, name="batch_dims 1, to elements"),
    OpCase("topk", [f32(3, 6)], top_k(2), {"k": 2}),
    OpCase("topk", [f64(4, 3, 2)], top_k(3, axis=1, ret_type="values"),
           {"k": 3, "axis": 1, "ret_type": "values"}),
    OpCase("topk", [f32(5, 2)], top_k(0, axis=0, is_ascend=True),
           {"k": 0, "axis": 0, "is_ascend": True}, name="k 0: the whole axis, ascending"),
    OpCase("topk", [TOPK_TIES], top_k(3, dtype=jnp.int64),
           {"k": 3, "dtype": "int64"}, name="ties by index"),
    OpCase("topk", [TOPK_TIES], top_k(4, ret_type="indices", is_ascend=True),
           {"k": 4, "ret_type": "indices", "is_ascend": True}, name="ties by index, ascending"),
    OpCase("topk", [np.array([1.0, np.nan, -np.inf, np.inf, np.nan], np.float32)],
           lambda x: (jnp.array([np.nan, np.nan, np.inf], jnp.float32),
                      jnp.array([1, 4, 3], jnp.int32)), {"k": 3}, name="NaN above inf"),
    OpCase("topk", [np.array([1.0, np.nan, -np.inf, np.inf, np.nan])],
           lambda x: (jnp.array([-np.inf, 1.0, np.inf, np.nan]), jnp.array([2, 0, 3, 1],
                      jnp.int32)), {"k": 4, "is_ascend": True}, name="NaN last, ascending"),
    OpCase("one_hot", [np.array([0, 2, 1, 3], np.int32), np.array(1.0, np.float32),
                       np.array(0.0, np.float32)], one_hot_truth(4, -1, jnp.float32),
           {"depth": 4}),
    OpCase("one_hot", [np.array([[0, 5], [-1, 2]], np.int64), np.array(7, np.int32),
                       np.array(-1, np.int32)], one_hot_truth(3, 0, jnp.int32),
           {"depth": 3, "axis": 0, "dtype": "int32"}, name="out of range, axis 0"),
    OpCase("one_hot", [np.array([[1, 0, 2]], np.uint8), np.array(2.5), np.array(0.5)],
           one_hot_truth(3, 1, jnp.float32), {"depth": 3, "axis": 1},
           name="uint8 indices, float64 values to float32, middle axis"),
    OpCase("zeros_like", [f32(2, 3)], lambda x: lax.full(x.shape, 0, x.dtype)),
    OpCase("zeros_like", [i32(4)], lambda x: lax.full(x.shape, 0, x.dtype)),
    OpCase("ones_like", [f64(2, 3)], lambda x: lax.full(x.shape, 1, x.dtype)),
    OpCase("ones_like", [bools(3)], lambda x: lax.full(x.shape, True, x.dtype)),
    # layout_transform: the blocked layouts as reshape + transpose, written out per case
    OpCase("layout_transform", [f32(2, 16, 3, 5)],
           lambda x: x.reshape(2, 2, 8, 3, 5).transpose(0, 1, 3, 4, 2),
           {"src_layout": "NCHW", "dst_layout": "NCHW8c"}, name="NCHW to NCHW8c"),
    OpCase("layout_transform", [f32(2, 2, 3, 5, 8)],
           lambda x: x.transpose(0, 1, 4, 2, 3).reshape(2, 16, 3, 5),
           {"src_layout": "NCHW8c", "dst_layout": "NCHW"}, name="NCHW8c to NCHW"),
    OpCase("layout_transform", [f32(2, 2, 3, 5, 8)],
           lambda x: x.reshape(2, 2, 3, 5, 2, 4).transpose(0, 1, 4, 2, 3, 5).reshape(2, 4, 3, 5, 4),
           {"src_layout": "NCHW8c", "dst_layout": "NCHW4c"}, name="NCHW8c to NCHW4c"),
    OpCase("layout_transform", [f64(8, 12, 3, 3)],
           lambda w: w.reshape(2, 4, 3, 4, 3, 3).transpose(0, 2, 4, 5, 3, 1),
           {"src_layout": "OIHW", "dst_layout": "OIHW4i4o"}, name="OIHW to OIHW4i4o"),
    OpCase("layout_transform", [i32(2, 3, 4, 5)], lambda x: x.transpose(0, 2, 3, 1),
           {"src_layout": "NCHW", "dst_layout": "NHWC"}, name="NCHW to NHWC"),
    OpCase("layout_transform", [f32(1, 4, 2, 3, 2)],
           lambda x: x.transpose(0, 2, 3, 1, 4).reshape(1, 2, 3, 8),
           {"src_layout": "NCHW2c", "dst_layout": "NHWC"}, name="NCHW2c to NHWC"),
    OpCase("layout_transform", [f32(16, 3)], lambda x: x.reshape(4, 4, 3).transpose(0, 2, 1),
           {"src_layout": "CW", "dst_layout": "CW4c"}, name="CW to CW4c"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_op_matches_jax(case):
    check_case(case)


def T(shape, dtype="float32"):
    return TensorType(shape, dtype)


def rel(op, *arg_types, **attrs):
    call = Call(Op.get(op), [Var(f"x{i}", t) for i, t in enumerate(arg_types)], attrs)
    return check_relation(lookup(op).type_relation, arg_types, call.attrs)


@pytest.mark.parametrize("op, arg_types, attrs, message", [
    ("reshape", [T((2, 3))], {"newshape": (4, 2)},
     r"reshape: attribute 'newshape' = \(4, 2\) does not fit the 6 elements of the input "
     r"Tensor\[\(2, 3\), float32\]"),
    ("reshape", [T((2, 3))], {"newshape": (4, -1)}, r"reshape: .*does not fit the 6 elements"),
    ("reshape", [T((2, 0))], {"newshape": (0, -1)}, r"reshape: .*does not fit the 0 elements"),
    ("transpose", [T((2, 3))], {"axes": (0,)},
     r"transpose: attribute 'axes' = \(0,\) is not a permutation of the axes of the input "
     r"Tensor\[\(2, 3\), float32\]"),
    ("transpose", [T((2, 3))], {"axes": (1, -1)}, r"transpose: attribute 'axes' .* repeats"),
    ("transpose", [T((2, 3))], {"axes": (0, 2)}, r"transpose: attribute 'axes' = 2 is out of"),
    ("expand_dims", [T((2, 3))], {"axis": 3},
     r"expand_dims: attribute 'axis' = 3 is out of range for the input Tensor\[\(2, 3\), "
     r"float32\] \(expected -3 <= axis < 3\)"),
    ("squeeze", [T((1, 3))], {"axis": 1},
     r"squeeze: attribute 'axis' = 1 names axis 1 of the input Tensor\[\(1, 3\), float32\], "
     r"which is not of size 1"),
    ("concatenate", [TupleType([T((2, 3)), T((2,))])], {}, r"concatenate: .*same rank"),
    ("concatenate", [TupleType([T((2, 3)), T((2, 4))])], {}, r"concatenate: dim 1 differs"),
    ("concatenate", [TupleType([T((2,)), T((2,), "int32")])], {}, r"concatenate: .*dtype"),
    ("concatenate", [TupleType([])], {}, r"concatenate: the input must hold at least one"),
    ("concatenate", [T((2,))], {}, r"concatenate: the input must be a tuple of tensors"),
    ("concatenate", [TupleType([T((2,))])], {"axis": 1}, r"concatenate: attribute 'axis' = 1"),
    ("split", [T((6, 2))], {"indices_or_sections": 4},
     r"split: attribute 'indices_or_sections' = 4 does not divide axis 0 of the input"),
    ("split", [T((6, 2))], {"indices_or_sections": 2, "axis": 2}, r"split: attribute 'axis' = 2"),
    ("stack", [TupleType([T((2, 3)), T((3, 2))])], {}, r"stack: dim 0 differs"),
    ("stack", [TupleType([T((2,))])], {"axis": 2}, r"stack: attribute 'axis' = 2 is out of"),
    ("take", [T((3,)), T((2,))], {}, r"take: the indices must have an integer dtype"),
    ("take", [T((3,)), T((2,), "int32")], {"axis": 1}, r"take: attribute 'axis' = 1"),
    ("strided_slice", [T((3,))], {"begin": (0, 0), "end": (1,)},
     r"strided_slice: attributes 'begin' = \(0, 0\), 'end' = \(1,\) and 'strides' = None "
     r"must have the same length"),
    ("strided_slice", [T((3,))], {"begin": (0, 0), "end": (1, 1)},
     r"strided_slice: attribute 'begin' = \(0, 0\) has more entries than the input"),
    ("strided_slice", [T((3, 2))], {"begin": (0,), "end": (1,), "axes": (2,)},
     r"strided_slice: attribute 'axes' = 2 is out of range"),
    ("strided_slice", [T((3, 2))], {"begin": (0,), "end": (1,), "axes": (0, 1)},
     r"strided_slice: attribute 'axes' = \(0, 1\) must have one axis per entry"),
    ("broadcast_to", [T((3,))], {"shape": (2, 4)},
     r"broadcast_to: the input Tensor\[\(3,\), float32\] cannot be broadcast to attribute "
     r"'shape' = \(2, 4\)"),
    ("broadcast_to", [T((1, 3))], {"shape": (3,)}, r"broadcast_to: .*cannot be broadcast"),
    ("full", [T((2,))], {"shape": (2,)}, r"full: the fill value must be a scalar tensor"),
    ("topk", [T((2, 3))], {"k": 4}, r"topk: attribute 'k' = 4 is more than axis 1 of the "
                                    r"input Tensor\[\(2, 3\), float32\] holds"),
    ("topk", [T((2, 3))], {"axis": 2}, r"topk: attribute 'axis' = 2 is out of range"),
    ("topk", [T((2, 3), "bool")], {}, r"topk: the input must have a numeric"),
    ("gather_nd", [T((2, 3)), T((2, 2))], {}, r"gather_nd: the indices must have an integer"),
    ("gather_nd", [T((2, 3)), T((3, 2), "int32")], {},
     r"gather_nd: the indices Tensor\[\(3, 2\), int32\] index 3 axes after batch_dims = 0, too "
     r"many for the data Tensor\[\(2, 3\), float32\]"),
    ("gather_nd", [T((2, 3)), T((1, 3), "int32")], {"batch_dims": 1},
     r"gather_nd: batch axis 0 of the data and the indices differ"),
    ("one_hot", [T((2,)), T(()), T(())], {"depth": 3},
     r"one_hot: the indices must have an integer dtype"),
    ("one_hot", [T((2,), "int32"), T((1,)), T(())], {"depth": 3},
     r"one_hot: on_value must be a scalar, got Tensor\[\(1,\), float32\]"),
    ("one_hot", [T((2,), "int32"), T(()), T(())], {"depth": 3, "axis": 2},
     r"one_hot: attribute 'axis' = 2 is out of range for the 2-D result"),
    ("layout_transform", [T((2, 12, 3, 3))], {"src_layout": "NCHW", "dst_layout": "NCHW8c"},
     r"layout_transform from NCHW to NCHW8c: axis C of the input Tensor\[\(2, 12, 3, 3\), "
     r"float32\] \(12\) is not a multiple of the block 8c"),
    ("layout_transform", [T((2, 12, 3))], {"src_layout": "NCHW", "dst_layout": "NHWC"},
     r"layout_transform from NCHW to NHWC: the input .* does not have rank 4"),
    ("layout_transform", [T((2, 12, 3, 3))], {"src_layout": "NCHW", "dst_layout": "NCDW"},
     r"layout_transform from NCHW to NCDW: the layouts do not have the same primal axes"),
    ("layout_transform", [T((2, 1, 3, 3, 4))], {"src_layout": "NCHW8c", "dst_layout": "NCHW"},
     r"axis 4 of the input .* is the block 8c, not of size 8"),
])
def test_type_errors(op, arg_types, attrs, message):
    with pytest.raises(RelayTypeError, match=message):
        rel(op, *arg_types, **attrs)


@pytest.mark.parametrize("op, arg_types, attrs, message", [
    ("reshape", [T((6,))], {"newshape": "x"}, r"reshape: attribute 'newshape' must be a tuple"),
    ("reshape", [T((6,))], {"newshape": (-1, -1)}, r"reshape: attribute 'newshape': .*one -1"),
    ("transpose", [T((6,))], {"axes": "x"}, r"transpose: attribute 'axes' must be None"),
    ("expand_dims", [T((6,))], {"axis": 0, "num_newaxis": -1}, r"'num_newaxis': must be >= 0"),
    ("squeeze", [T((6,))], {"axis": 0.5}, r"squeeze: attribute 'axis' must be"),
    ("split", [T((6,))], {"indices_or_sections": 0}, r"split: .*sections must be >= 1"),
    ("split", [T((6,))], {}, r"split: attribute 'indices_or_sections' is required"),
    ("take", [T((6,)), T((1,), "int32")], {"mode": "fill"}, r"take: .*'clip' or 'wrap'"),
    ("strided_slice", [T((6,))], {"begin": (0,), "end": (1,), "strides": (0,)},
     r"a stride cannot be 0"),
    ("broadcast_to", [T((6,))], {"shape": (-1, 6)}, r"broadcast_to: .*dims must be >= 0"),
    ("zeros", [], {"shape": (2,), "dtype": "complex64"}, r"zeros: attribute 'dtype' must be"),
    ("full", [T(())], {"shape": (2,), "dtype": 3}, r"full: attribute 'dtype' must be None or"),
    ("concatenate", [T((2,))], {"axis": "x"}, r"concatenate: attribute 'axis' must be an int"),
    ("tile", [T((6,))], {"reps": (2, -1)}, r"tile: attribute 'reps': must be >= 0"),
    ("topk", [T((6,))], {"ret_type": "value"}, r"topk: attribute 'ret_type': must be one of"),
    ("topk", [T((6,))], {"dtype": "float32"}, r"topk: attribute 'dtype': must be int32 or int64"),
    ("one_hot", [T((2,), "int32"), T(()), T(())], {"depth": -1},
     r"one_hot: attribute 'depth': must be >= 0"),
    ("one_hot", [T((2,), "int32"), T(()), T(())], {}, r"one_hot: attribute 'depth' is required"),
    ("layout_transform", [T((6,))], {"src_layout": "NCC", "dst_layout": "N"},
     r"layout_transform: attribute 'src_layout': an axis appears twice in 'NCC'"),
    ("layout_transform", [T((6,))], {"src_layout": "N4c", "dst_layout": "N"},
     r"layout_transform: attribute 'src_layout': a block axis of 'N4c' has no primal axis"),
    ("layout_transform", [T((6,))], {"src_layout": "Nc", "dst_layout": "N"},
     r"layout_transform: attribute 'src_layout': block axis c needs a factor"),
    ("layout_transform", [T((6,))], {"src_layout": "N", "dst_layout": "N-"},
     r"layout_transform: attribute 'dst_layout': 'N-' is not a layout"),
])
def test_bad_attributes(op, arg_types, attrs, message):
    with pytest.raises(IRError, match=message):
        Call(Op.get(op), [Var(f"x{i}", t) for i, t in enumerate(arg_types)], attrs)


def test_symbolic_dims():
    n, m = TypeVar("n", Kind.Shape), TypeVar("m", Kind.Shape)
    assert rel("reshape", T((n, 3)), newshape=(-1,)) == T((Any,))
    assert rel("reshape", T((n, 3)), newshape=(3, 2)) == T((3, 2))  # unchecked, not failed
    assert rel("transpose", T((n, m, 2))) == T((2, m, n))
    assert rel("expand_dims", T((n, m)), axis=-1) == T((n, m, 1))
    assert rel("squeeze", T((n, 1, m))) == T((n, m))  # symbolic dims are kept by axis=None
    assert rel("squeeze", T((Any, 3)), axis=0) == T((3,))
    assert rel("tile", T((n, 3)), reps=(1, 2)) == T((n, 6))
    assert rel("tile", T((n, 3)), reps=(2, 2, 1)) == T((2, Any, 3))
    assert rel("one_hot", T((n,), "int32"), T(()), T(()), depth=4, axis=0) == T((4, n))
    assert rel("ndarray_size", T((n, m))) == T((), "int32")
    assert rel("topk", T((n, 5)), k=2) == TupleType([T((n, 2)), T((n, 2), "int32")])
    assert rel("topk", T((3, n)), k=0, ret_type="values") == T((3, n))
    assert ops.topk.traits.result_arity(Attrs({"ret_type": "both"})) == 2
    assert ops.topk.traits.result_arity(Attrs({"ret_type": "indices"})) == 0  # one tensor
    assert rel("gather_nd", T((n, 3, m)), T((2, 5), "int32")) == T((5, m))
    with pytest.raises(RelayTypeError, match=r"gather_nd: .* must have a static first axis"):
        rel("gather_nd", T((2, 3)), T((n, 5), "int32"))
    assert rel("concatenate", TupleType([T((n, 3)), T((n, 4))]), axis=1) == T((n, 7))
    assert rel("concatenate", TupleType([T((n, 3)), T((2, 3))])) == T((Any, 3))
    assert rel("stack", TupleType([T((n, m)), T((n, Any))]), axis=1) == T((n, 2, m))
    assert rel("split", T((n, 4)), indices_or_sections=2) == TupleType([T((Any, 4))] * 2)
    assert rel("split", T((4, n)), indices_or_sections=(1,)) == TupleType([T((1, n)), T((3, n))])
    assert rel("take", T((n, m)), T((2, Any), "int32"), axis=1) == T((n, 2, Any))
    assert rel("strided_slice", T((n, 5)), begin=(1, 1), end=(3, 3)) == T((Any, 2))
    assert rel("broadcast_to", T((n, 1)), shape=(4, 3)) == T((4, 3))
    assert rel("zeros_like", T((n, m), "int32")) == T((n, m), "int32")
    assert rel("full", T((), "float64"), shape=(2,)) == T((2,), "float64")


def test_symbolic_dims_that_must_agree():
    n, m = TypeVar("n", Kind.Shape), TypeVar("m", Kind.Shape)
    with pytest.raises(RelayTypeError, match="concatenate: dim 0 differs"):
        rel("concatenate", TupleType([T((n, 3)), T((m, 3))]), axis=1)
    with pytest.raises(RelayTypeError, match="squeeze: attribute 'axis' = 0 names axis 0"):
        rel("squeeze", T((n, 3)), axis=0)  # a rigid symbolic dim cannot be assumed to be 1


def test_traits():
    """What other stages ask of these ops instead of their names."""
    arity = ops.split.traits.result_arity
    assert arity(Attrs({"indices_or_sections": 3})) == 3
    assert arity(Attrs({"indices_or_sections": (1, 4)})) == 3
    assert arity(Attrs({})) is None
    assert ops.transpose.traits.transpose and not ops.reshape.traits.transpose
    assert ops.reshape.traits.result_arity is None  # one tensor

    size = ops.ndarray_size.traits.fold_from_types
    x = Var("x", T((2, 3)))
    folded = size(ops.ndarray_size(x, dtype="int64"), [x.type_annotation])
    assert isinstance(folded, Constant) and folded.data.dtype == np.int64 and folded.data == 6
    n = Var("n", T((TypeVar("n", Kind.Shape), 3)))
    assert size(ops.ndarray_size(n), [n.type_annotation]) is None

    fold = ops.shape_of.traits.fold_from_types
    folded = fold(ops.shape_of(x), [x.type_annotation])
    assert isinstance(folded, Constant) and folded.data.dtype == np.int32
    assert folded.data.tolist() == [2, 3]
    symbolic = Var("x", T((TypeVar("n", Kind.Shape), 3)))
    assert fold(ops.shape_of(symbolic), [symbolic.type_annotation]) is None
