"""Backends that run Relay programs (DESIGN.md §5).

- ``backend.interpreter``: the reference evaluator of the whole language over NumPy, the
  executable spec the other backends are tested against.
- ``backend.llvm``: kernels lowered from the ops' ``te`` compute rules and JIT-compiled.
- ``backend.accel``: the simulated DNN accelerator.
"""
