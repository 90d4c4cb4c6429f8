"""Compute rules of the ops, in te: one module per op family.

A compute rule is ``rule(attrs, inputs, out_type) -> te.Tensor`` (TVM's
FTVMCompute): given the call's attributes (defaults filled in), one te tensor
per argument (a tuple-typed argument, as concatenate's, contributes its
fields, flattened, as in TVM) and the inferred, static output ``TensorType``,
it returns the tensor the op computes. Importing this package fills
``OpDef.compute`` for the ops below; no stage imports it yet (the llvm backend
will). Ops with tuple results (split, batch_norm) have no rule.

* elementwise.py: the elementwise and broadcasting ops of relaydsl/op/tensor.py
* reduce.py: sum, mean, max, min, prod, argmax, argmin
* transform.py: reshape, transpose, ..., take, and the constructors zeros, ones, full, ...
* nn.py: matmul, dense, batch_matmul, conv2d, pools, softmax, pad, flatten, ...

>>> import numpy as np
>>> from relaydsl import te
>>> from relaydsl.ir.attrs import Attrs
>>> from relaydsl.ir.types import TensorType
>>> from relaydsl.op import lookup
>>> import relaydsl.te.compute_rules
>>> x = te.placeholder((2, 3), "float32", "x")
>>> y = te.placeholder((3,), "float32", "y")
>>> out = lookup("add").compute(Attrs(), [x, y], TensorType((2, 3), "float32"))
>>> str(out.body)
'(x[i0, i1] + y[i1])'
>>> te.evaluate(out, {x: np.ones((2, 3), "float32"), y: np.arange(3, dtype="float32")})
array([[1., 2., 3.],
       [1., 2., 3.]], dtype=float32)
"""
from __future__ import annotations

from relaydsl.errors import IRError
from relaydsl.op.registry import lookup
from relaydsl.te.compute_rules import nn, reduce, transform
from relaydsl.te.compute_rules.elementwise import (
    SCALAR_RULES, ComputeRule, Scalar, broadcast_read, checked, elementwise,
)

# op name -> rule, for the ops that are not elementwise
RULES: dict[str, ComputeRule] = {**reduce.RULES, **transform.RULES, **nn.RULES}

__all__ = ["RULES", "SCALAR_RULES", "ComputeRule", "Scalar", "broadcast_read", "checked",
           "elementwise"]


def _install() -> None:
    rules = {**{name: elementwise(name, s) for name, s in SCALAR_RULES.items()},
             **{name: checked(name, rule) for name, rule in RULES.items()}}
    for name, rule in rules.items():
        opdef = lookup(name)
        if opdef.compute is not None:
            raise IRError(f"op {name} already has a compute rule")
        opdef.compute = rule


_install()
