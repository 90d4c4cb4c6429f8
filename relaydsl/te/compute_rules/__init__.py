"""Compute rules of the ops, in te: one module per op family.

A compute rule is ``rule(attrs, inputs, out_type) -> te.Tensor`` (TVM's
FTVMCompute): given the call's attributes (defaults filled in), one te tensor
per argument (a tuple-typed argument, as concatenate's and stack's,
contributes its fields, flattened, as in TVM) and the inferred, static output
type, it returns the tensor the op computes. An op whose result is a tuple
(split; batch_norm's ``(out, moving_mean, moving_var)``) gets a ``TupleType``
as ``out_type`` and returns a Python tuple of te tensors, one per field, in
order. Every rule is wrapped by ``checked``, which fails when a result's shape
or dtype differs from the type's (each field's, for a tuple).

Every op in the registry has a rule: importing ``relaydsl.op`` imports this
package, which fills ``OpDef.compute`` (tests/relaydsl/op/test_registry.py
fails for an op without one). The llvm backend lowers ``OpDef.compute``; tests
evaluate the rules with ``te.evaluate`` against each op's NumPy reference.

* elementwise.py: the elementwise and broadcasting ops of relaydsl/op/tensor.py
* reduce.py: sum, mean, max, min, prod, argmax, argmin, collapse_sum_like
* transform.py: reshape, transpose, concatenate, stack, split, take, strided_slice,
  their adjoints take_grad and strided_slice_grad, shape_of, and the constructors
  zeros, ones, full, ...
* the nn ops (relaydsl/op/nn/) define their rules with the rest of each op

>>> import numpy as np
>>> from relaydsl import te
>>> from relaydsl.ir.attrs import Attrs
>>> from relaydsl.ir.types import TensorType
>>> from relaydsl.op import lookup
>>> x = te.placeholder((2, 3), "float32", "x")
>>> y = te.placeholder((3,), "float32", "y")
>>> out = lookup("add").compute(Attrs(), [x, y], TensorType((2, 3), "float32"))
>>> str(out.body)
'(x[i0, i1] + y[i1])'
>>> te.evaluate(out, {x: np.ones((2, 3), "float32"), y: np.arange(3, dtype="float32")})
array([[1., 2., 3.],
       [1., 2., 3.]], dtype=float32)

A tuple result, one tensor per field:

>>> from relaydsl.ir.types import TupleType
>>> split = lookup("split")
>>> z = te.placeholder((4,), "float32", "z")
>>> attrs = split.check_call((z,), Attrs({"indices_or_sections": 2}))
>>> first, second = split.compute(attrs, [z], TupleType((TensorType((2,), "float32"),) * 2))
>>> te.evaluate(second, {z: np.arange(4, dtype="float32")})
array([2., 3.], dtype=float32)
"""
from __future__ import annotations

from relaydsl.errors import IRError
from relaydsl.op._legacy import attach  # relaydsl.op imports this package in turn
from relaydsl.op.registry import lookup
from relaydsl.te.compute_rules import reduce, transform
from relaydsl.te.compute_rules.elementwise import (
    SCALAR_RULES, ComputeRule, Scalar, broadcast_read, checked, elementwise,
)

# op name -> rule, for the ops that are not elementwise
RULES: dict[str, ComputeRule] = {**reduce.RULES, **transform.RULES}

__all__ = ["RULES", "SCALAR_RULES", "ComputeRule", "Scalar", "broadcast_read", "checked",
           "elementwise"]


def _install() -> None:
    rules = {**{name: elementwise(name, s) for name, s in SCALAR_RULES.items()},
             **{name: checked(name, rule) for name, rule in RULES.items()}}
    for name, rule in rules.items():
        attach(name, "compute", rule)


_install()
