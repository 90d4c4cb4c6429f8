"""External kernels: calls of primitive functions whose body is a Python callable.

A program's caller may take some primitive functions away from the compiler: a hook asked
once per primitive function of static types (``NativeProgram(externals=...)``) answers
with an ``ExternalKernel`` -- a Python callable given the call's input arrays and output
arrays to write -- or None to leave it a compiled kernel. Native code calls such a site
as it calls a kernel, through a table of its inputs' and outputs' data (outputs allocated
as a kernel's, in the arena, a frame or the arrays Python returns), but the table goes to
one Python function of the program (``i64 external(site, table)``, in the link table)
that views the buffers as NumPy arrays and runs the callable::

    %table = [inputs..., outputs...]            ; data pointers, on the stack
    %status = call i64 %external(i64 <site>, ptr %table)
    %failed = icmp ne i64 %status, 0            ; -> Error.EXTERNAL, DETAIL the site

What the callable raises is kept and raised again when the run has stopped, as for
kernels made at run time (sites.py) and collectives' exchanges. The accel target's host
is the user: its primitive functions with accelerator rules are external kernels that run
the simulator (backend/accel/hybrid.py), the rest compiled kernels, the control native.

The inputs are read-only views of memory the run owns: valid during the call only.

>>> import numpy as np
>>> from relaydsl.ir.types import TensorType
>>> def double(inputs, outputs):
...     np.multiply(inputs[0], 2, out=outputs[0])
>>> k = ExternalKernel(double, [TensorType((3,))], [TensorType((3,))])
>>> x, y = np.arange(3, dtype=np.float32), np.empty(3, np.float32)
>>> table = np.array([x.ctypes.data, y.ctypes.data], np.int64)
>>> k.run(table.ctypes.data); y
array([0., 2., 4.], dtype=float32)
"""
from __future__ import annotations

import ctypes
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np
from llvmlite import ir

from relaydsl.backend.llvm.native.abi import I64, PTR, Error, array_at
from relaydsl.ir.expr import Function
from relaydsl.ir.types import TensorType

if TYPE_CHECKING:
    from relaydsl.backend.llvm.native.functions import FunctionCompiler

Body = Callable[[list[np.ndarray], list[np.ndarray]], None]
"""An external kernel's body: ``body(inputs, outputs)`` writes every output array."""

Externals = Callable[[Function], "ExternalKernel | None"]
"""The hook a program asks about each primitive function of static types."""

_VIEWS = 1 << 10  # the views an external kernel keeps (a few hundred bytes a buffer)


class ExternalKernel:
    """`body` as the kernel of a primitive function taking tensors of `input_types` (tuples
    flattened, as kernels take them) and giving `output_types`."""

    def __init__(self, body: Body, input_types: Sequence[TensorType],
                 output_types: Sequence[TensorType]):
        self.body = body
        self.input_types, self.output_types = list(input_types), list(output_types)
        self._layouts = [(tuple(int(d) for d in t.concrete_shape()), np.dtype(t.dtype))
                         for t in [*self.input_types, *self.output_types]]
        self._table = ctypes.c_int64 * len(self._layouts)
        # the arrays viewing the buffers, by their addresses: a run's arena is laid out
        # alike from call to call, so a call finds the views made at an earlier one (a
        # view costs ~1.5 us to make, a kernel's buffers found ~0.2 us)
        self._views: dict[tuple[int, ...], list[np.ndarray]] = {}

    def run(self, table: int) -> None:
        """The body on the buffers whose addresses are at `table` (inputs, then outputs)."""
        pointers = tuple(self._table.from_address(table))
        arrays = self._views.get(pointers)
        if arrays is None:
            arrays = [array_at(p, dtype, shape)
                      for (shape, dtype), p in zip(self._layouts, pointers)]
            for a in arrays[:len(self.input_types)]:
                a.flags.writeable = False
            if len(self._views) >= _VIEWS:
                self._views.clear()
            self._views[pointers] = arrays
        inputs = len(self.input_types)
        self.body(arrays[:inputs], arrays[inputs:])


def external_call(fc: FunctionCompiler, site: int, inputs: list[ir.Value],
                  outputs: list[ir.Value]) -> None:
    """Native code's call of external kernel `site` on `inputs`, writing `outputs` (see
    the module docstring); the run stops with Error.EXTERNAL when its body raised."""
    b = fc.b
    pointers = [*map(fc.data, inputs), *map(fc.data, outputs)]
    table = fc.kernel_table(len(pointers))
    for i, p in enumerate(pointers):
        b.store(p, b.gep(table, [I64(0), I64(i)]))
    external = b.bitcast(fc.linked(fc.low.external),
                         ir.FunctionType(I64, [I64, PTR]).as_pointer())
    status = b.call(external, [I64(site), b.bitcast(table, PTR)])
    with b.if_then(b.icmp_signed("!=", status, I64(0)), likely=False):
        fc.fail(Error.EXTERNAL, site)
