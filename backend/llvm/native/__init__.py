"""Whole programs as native code: closures, data types, references and recursion.

``NativeProgram`` (program.py) is the program as Python calls it. Its parts:

* abi.py -- the run's state and error codes, what native code and Python agree on;
* lowering.py -- the program's LLVM module: a function per Relay function, the arena;
* functions.py -- one Relay function as one LLVM function;
* loops.py -- a loop's memory, released as the loop goes;
* sites.py -- kernel calls of shapes known only at run time, kernels made per shape;
* externals.py -- kernel calls whose body is a Python callable (the accel target's host);
* accumulations.py -- adding into a reference's total in place;
* values.py -- Python values to native objects and back.
"""
from relaydsl.backend.llvm.native.externals import ExternalKernel
from relaydsl.backend.llvm.native.functions import Unsupported
from relaydsl.backend.llvm.native.program import NativeProgram

__all__ = ["ExternalKernel", "NativeProgram", "Unsupported"]
