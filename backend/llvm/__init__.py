"""The llvm backend: primitive functions lowered to te, scheduled, emitted as LLVM IR, JIT-compiled.

lower.py -> schedule.py (+ templates/, the GEMM and conv2d kernels) -> codegen.py (+
intrinsics.py, intervals.py) -> jit.py, driven by kernel.py; runtime.py (runtime.ll) runs
parallel stages and plans; executor.py runs whole programs: as a Plan (plan.py), or on
the interpreter with compiled kernels.
"""
