"""Gradient rules: the adjoints of every differentiable op, written as Relay (DESIGN.md §3).

A rule is ``rule(call, g) -> [one expression per input]``: given a call of the op and an
expression ``g`` for the adjoint of the call's output (tuple-typed for split and
batch_norm), it returns the adjoint of each input, of exactly that input's type.
transform/gradient.py calls the rules; each is registered here on its op's definition
(``lookup(name).gradient``) when the op families load. As in TVM's ``_tensor_grad.py``:

* broadcasting is undone in one place, ``collapse_sum_like(d, x)``;
* an input that gets no gradient (take's indices, where's condition, the shape source of
  a ``*_like`` op, an integer or bool tensor) gets ``zeros_like(x)``;
* a rule may use ``call`` itself (the op's output, recomputed) and reuse the call's
  arguments: the transform binds them to variables.

Rules read the types of the call's arguments -- ``checked_type``, or a Var's annotation --
to normalise axes and size reshapes, never the type of ``g``. Sizes a rule bakes into
attributes must be static: concatenate's axis, the weight and the non-batch dims of conv2d
and the pools, dense's weight for data of rank > 2 (and a strided conv2d's data adjoint
has an ``Any`` batch dim: spreading g reshapes it). Everything else works on symbolic dims
too (``reshape_like``, ``collapse_sum_like``, counts from ``shape_of``).

The adjoint ops the rules build on -- collapse_sum_like, reshape_like, take_grad,
strided_slice_grad, max_pool2d_grad -- have rules too, so gradients of gradients work.

Each rule's docstring states its math in one line; ``g`` is the output adjoint and
``sum_b(d, x)`` means ``collapse_sum_like(d, x)``.

The rules live by op family, mirroring relaydsl/op: common.py (the helpers and ``_rule``,
which registers a rule), tensor.py, reduce.py and transform.py (the nn ops define their
rules in relaydsl/op/nn/). Importing this
package registers them all.
"""
from relaydsl.op.gradients import reduce, tensor, transform  # noqa: F401  (register the rules)
from relaydsl.op.gradients.common import Rule

__all__ = ["Rule"]
