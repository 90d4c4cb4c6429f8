"""Small programs for the quantization tests, built as IR with constant weights."""
from __future__ import annotations

import numpy as np

from relaydsl.backend.target import get_target
from relaydsl.ir import Constant, Function, IRModule, TensorType, Var
from relaydsl.op import ops
from relaydsl.typing import infer_types

rng = np.random.default_rng(0)


def weights(*shape: int, scale: float = 0.5) -> Constant:
    return Constant((rng.standard_normal(shape) * scale).astype(np.float32))


def module(body_of, *shapes: tuple[int, ...]) -> IRModule:
    """A typed module whose main is ``fn(x0, x1, ...) { body_of(x0, x1, ...) }``."""
    xs = [Var(f"x{i}", TensorType(s, "float32")) for i, s in enumerate(shapes)]
    return infer_types(IRModule.from_expr(Function(xs, body_of(*xs))))


def mlp_and_weights(n: int = 4, k: int = 8, hidden: int = 16, out: int = 3
                    ) -> tuple[IRModule, np.ndarray, np.ndarray, np.ndarray]:
    """dense -> bias_add -> relu -> dense, constant weights; and the weights w1, b1, w2."""
    w1, b1, w2 = weights(hidden, k), weights(hidden, scale=0.1), weights(out, hidden)
    mod = module(lambda x: ops.dense(ops.relu(ops.bias_add(ops.dense(x, w1), b1, axis=1)), w2),
                 (n, k))
    return mod, w1.data, b1.data, w2.data


def mlp() -> IRModule:
    return mlp_and_weights()[0]


def convnet(n: int = 2) -> IRModule:
    """conv2d -> add bias -> relu -> conv2d -> relu -> reshape -> dense, constant weights."""
    c1, b1, c2 = weights(4, 2, 3, 3), weights(4, 1, 1, scale=0.1), weights(6, 4, 3, 3)
    w = weights(5, 6 * 4 * 4)

    def body(x):
        h = ops.relu(ops.add(ops.conv2d(x, c1), b1))
        h = ops.relu(ops.conv2d(h, c2, padding=1))
        return ops.dense(ops.reshape(h, newshape=(n, -1)), w)

    return module(body, (n, 2, 6, 6))


def runner(target: str = "interp"):
    """The `run` calibrate takes: a module's entry compiled for `target`."""
    def run(mod: IRModule, entry: str):
        return get_target(target).build(mod, entry, {})
    return run


def data(*shape: int, n: int = 4, scale: float = 1.0) -> list[tuple[np.ndarray]]:
    return [((rng.standard_normal(shape) * scale).astype(np.float32),) for _ in range(n)]



def pooled(pool, features: int, n: int = 2) -> IRModule:
    """conv2d -> relu -> `pool` -> flatten -> dense, constant weights; `pool` maps the
    (n, 4, 6, 6) feature map to `features` values per example."""
    c1, b1, w = weights(4, 2, 3, 3), weights(4, 1, 1, scale=0.1), weights(3, features)

    def body(x):
        h = pool(ops.relu(ops.add(ops.conv2d(x, c1, padding=1), b1)))
        return ops.dense(ops.flatten(h), w)

    return module(body, (n, 2, 6, 6))


def past_a_let() -> tuple[IRModule, np.ndarray, np.ndarray]:
    """dense, MAX_DEPTH + 10 relus, a let, dense (inputs 4x8): deeper than graph normal form
    inlines, so one let survives preparation, as in ResNet-101; and the weights w1, w2."""
    from relaydsl.ir import Let
    from relaydsl.transform.graph_normal_form import MAX_DEPTH

    w1, w2 = weights(6, 8), weights(3, 6)

    def body(x):
        h = ops.dense(x, w1)
        for _ in range(MAX_DEPTH + 10):
            h = ops.relu(h)
        v = Var("h", TensorType((4, 6), "float32"))  # as inlining a call binds its parameter
        return Let(v, h, ops.dense(v, w2))

    return module(body, (4, 8)), w1.data, w2.data
