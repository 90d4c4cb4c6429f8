"""The llvm backend: primitive functions lowered to te, scheduled, emitted as LLVM IR, JIT-compiled.

lower.py -> schedule.py -> codegen.py (+ intrinsics.py) -> jit.py, driven by kernel.py;
runtime.py runs parallel stages; executor.py runs whole programs on the kernels.
"""
