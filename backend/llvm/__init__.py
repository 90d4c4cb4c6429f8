"""The llvm backend: primitive functions lowered to te, scheduled, emitted as LLVM IR, JIT-compiled.

lower.py -> schedule.py (+ templates/, the GEMM and conv2d kernels) -> codegen.py (+
intrinsics.py, intervals.py) -> jit.py, driven by kernel.py; runtime.py (runtime.ll) runs
parallel stages; executor.py runs whole programs: as native code (native/), or on the
interpreter with compiled kernels.
"""
