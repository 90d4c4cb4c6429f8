"""Building primitive functions by hand for the llvm backend's tests; running a script that
is sent Ctrl-C."""
from __future__ import annotations

import pathlib
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Callable

import numpy as np

from relaydsl.ir import Function, TensorType, Var
from relaydsl.ir.expr import Expr, op_call
from relaydsl.typing import infer_type


def primitive(types: list[tuple[tuple[int, ...], str]], body: Callable[..., Expr]) -> Function:
    """``fn(p0, p1, ...) { body(p0, p1, ...) }`` with Primitive=1, typed."""
    params = [Var(f"p{i}", TensorType(shape, dtype)) for i, (shape, dtype) in enumerate(types)]
    fn = infer_type(Function(params, body(*params), attrs={"Primitive": 1}))
    assert isinstance(fn, Function)
    return fn


def call(name: str, *args: Expr, **attrs: Any) -> Expr:
    return op_call(name, *args, **attrs)


def randn(*shape: int, dtype: str = "float32", seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed + len(shape)).standard_normal(shape).astype(dtype)


ROOT = pathlib.Path(__file__).resolve().parents[3]


def run_with_sigints(script: str, folder: pathlib.Path, timeout: float = 60
                     ) -> tuple[list[str], str, int]:
    """Runs `script` (from a file in `folder`: decorated functions need their source); sends
    a SIGINT ~1 s after each line it prints that starts "ready"."""
    path = folder / "script.py"
    # Python's own SIGINT handler, as an interactive user has it: a shell running the suite
    # in the background (``pytest &``) starts it, and so this child, with SIGINT ignored.
    path.write_text("import signal\nsignal.signal(signal.SIGINT, signal.default_int_handler)\n"
                    + script)
    proc = subprocess.Popen([sys.executable, str(path)], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    timer = threading.Timer(timeout, proc.kill)  # a hang fails the test, not the suite
    timer.start()
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line.strip())
            if line.startswith("ready"):
                time.sleep(1.0)
                proc.send_signal(signal.SIGINT)
        stderr = proc.stderr.read()
        proc.wait()
    finally:
        timer.cancel()
    return lines, stderr, proc.returncode


def residual_chain(blocks: int, negations: int = 0, channels: int = 4, size: int = 8
                   ) -> tuple[Any, np.ndarray, np.ndarray]:
    """A typed module whose main runs `blocks` residual blocks
    ``h = tanh(conv2d(h, w1) + conv2d(h, w2) + x)``, each followed by `negations` (even)
    negations to make it deeper (they fuse into the block's kernel), then a round trip
    through float64, which no accelerator computes in. Each h feeds two convolutions: one
    node shared by two primitive functions, in graph form. The weights keep the map a
    contraction, so float32 stays close to JAX however deep. Also the input and the result
    JAX computes (the float64 round trip is exact)."""
    import jax
    import jax.numpy as jnp

    from relaydsl.ir import Constant, IRModule
    from relaydsl.op import ops
    from relaydsl.typing import infer_types

    assert negations % 2 == 0
    rng = np.random.default_rng(blocks)
    shape = (1, channels, size, size)
    w1, w2 = ((rng.standard_normal((channels, channels, 3, 3)) * 0.1).astype(np.float32)
              for _ in range(2))
    x = Var("x", TensorType(shape, "float32"))
    h: Expr = x
    for _ in range(blocks):
        h = ops.tanh(ops.add(ops.add(ops.conv2d(h, Constant(w1), padding=1),
                                     ops.conv2d(h, Constant(w2), padding=1)), x))
        for _ in range(negations):
            h = ops.negative(h)
    body = ops.cast(ops.cast(h, dtype="float64"), dtype="float32")
    mod = infer_types(IRModule.from_expr(Function([x], body)))

    def conv(a, w):
        return jax.lax.conv_general_dilated(a, w, (1, 1), ((1, 1), (1, 1)))

    xv = randn(*shape, seed=blocks)
    want = jnp.asarray(xv)
    for _ in range(blocks):
        want = jnp.tanh(conv(want, w1) + conv(want, w2) + xv)
    return mod, xv, np.asarray(want)
