"""Build a Relay program with the Python IR API, type-check it, print it, and run it.

The program is the while loop of Figure 2 of the Relay paper (2019): a
tail-recursive global function over three int32 tensors, plus a small
shape-polymorphic layer used at two batch sizes.

    python examples/quickstart.py
"""
import numpy as np

from relaydsl.backend.interpreter import evaluate
from relaydsl.ir import (
    Call,
    Function,
    GlobalVar,
    If,
    IRModule,
    Kind,
    Op,
    TensorType,
    Tuple,
    TypeVar,
    Var,
    const,
)
from relaydsl.typing import infer_types


def op(name, *args, **attrs):
    return Call(Op.get(name), args, attrs)


def while_loop_module() -> IRModule:
    """Figure 2: while (i+j < 10) != (j*k < 100) == (k >= i+j): (i, j, k) = (i+j, j+k, k+1)."""
    mod = IRModule()
    loop = GlobalVar("while_loop")
    i32 = TensorType((1,), "int32")
    i, j, k = Var("lvar0", i32), Var("lvar1", i32), Var("lvar2", i32)
    def int32(value: int):
        return const(np.array([value], np.int32))

    cond = op("min", op("equal",
                        op("not_equal", op("less", op("add", i, j), int32(10)),
                           op("less", op("multiply", j, k), int32(100))),
                        op("greater_equal", k, op("add", i, j))))
    step = Call(loop, [op("add", i, j), op("add", j, k), op("add", k, int32(1))])
    mod.add(loop, Function([i, j, k], If(cond, step, Tuple([i, j, k]))))
    one = const(np.array([1], np.int32))
    mod["main"] = Function([], Call(loop, [one, one, const(np.array([5], np.int32))]))
    return mod


def dense_layer_module() -> IRModule:
    """A layer generic in its batch size n: tanh(x @ w.T + b)."""
    mod = IRModule()
    n = TypeVar("n", Kind.Shape)
    x = Var("x", TensorType((n, 4)))
    w, b = Var("w", TensorType((3, 4))), Var("b", TensorType((3,)))
    mod["layer"] = Function([x, w, b], op("tanh", op("add", op("dense", x, w), b)))
    return mod


if __name__ == "__main__":
    mod = infer_types(while_loop_module())
    print(mod.astext(), "\n")
    print("main() = while_loop(1, 1, 5) =", [int(v[0]) for v in evaluate(mod)])
    start = [np.array([1], np.int32)] * 3
    print("while_loop(1, 1, 1) =", [int(v[0]) for v in evaluate(mod, *start, entry="while_loop")])

    layer = infer_types(dense_layer_module())
    print("\n" + layer.astext())
    print("inferred type of @layer:", layer["layer"].checked_type)
    rng = np.random.default_rng(0)
    w, b = rng.standard_normal((3, 4), np.float32), rng.standard_normal(3, np.float32)
    for batch in (2, 5):
        out = evaluate(layer, rng.standard_normal((batch, 4), np.float32), w, b, entry="layer")
        print(f"layer at batch {batch}: output shape {out.shape}")
