"""Shape transformations and tensor constructors, with NumPy semantics: one block per op.

* shape.py: reshape (and its adjoint reshape_like), transpose, expand_dims, squeeze,
  broadcast_to, tile;
* index.py: take, strided_slice, gather_nd and the adjoints take_grad, strided_slice_grad;
* join.py: concatenate, stack (one tuple-typed input) and split (a tuple result);
* create.py: zeros, ones, full, zeros_like, ones_like, one_hot, shape_of, ndarray_size;
* sort.py: topk;
* layout.py: layout_transform (NCHW <-> NCHW8c and the like).

Dims that pass through stay symbolic; a dim computed from a symbolic one (a concatenated
axis, reshape's -1, a sliced axis) is ``Any``.

>>> from relaydsl.ir import TensorType, Var
>>> from relaydsl.op.transform import reshape, split
>>> x = Var("x", TensorType((2, 3)))
>>> reshape(x, (3, 2)).attrs.newshape
(3, 2)
>>> split.traits.result_arity(split(x, (1,), axis=1).attrs)
2
"""
# The files in dependency order: a later one's gradient rules use the earlier ones' ops.
from relaydsl.op.transform.shape import (
    broadcast_to, expand_dims, reshape, reshape_like, squeeze, tile, transpose,
)
from relaydsl.op.transform.index import (
    gather_nd, strided_slice, strided_slice_grad, take, take_grad,
)
from relaydsl.op.transform.join import concatenate, split, stack
from relaydsl.op.transform.create import (
    full, ndarray_size, one_hot, ones, ones_like, shape_of, zeros, zeros_like,
)
from relaydsl.op.transform.sort import topk
from relaydsl.op.transform.layout import layout_transform

__all__ = [
    "broadcast_to", "concatenate", "expand_dims", "full", "gather_nd", "layout_transform",
    "ndarray_size", "one_hot", "ones", "ones_like", "reshape", "reshape_like", "shape_of",
    "split", "squeeze", "stack",
    "strided_slice", "strided_slice_grad", "take", "take_grad", "tile", "topk", "transpose",
    "zeros", "zeros_like",
]
