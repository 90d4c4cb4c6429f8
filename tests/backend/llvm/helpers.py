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
