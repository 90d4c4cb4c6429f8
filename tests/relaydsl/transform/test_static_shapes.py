"""static_shapes: Any annotations dropped where the values' shapes are static (issue 14)."""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from relaydsl import Float, Int, Tensor, relay
from relaydsl.ir.parser import parse
from relaydsl.transform.static_shapes import static_shapes
from relaydsl.typing import infer_types

HIDDEN = '''#[version = "0.0.5"]
def @main(%p0: Tensor[(3, 2), float32]) {
  let %c = greater(%p0, 0f);
  let %w: Tensor[(?, 2), float32] = where(%c, %p0, negative(%p0));
  let %f = fn (%v: Tensor[(2, ?), float32]) -> Tensor[(2, ?), float32] { tanh(%v) };
  %f(transpose(%w))
}
'''


def test_hidden_dimensions_come_back_from_the_values():
    mod = infer_types(parse(HIDDEN))
    assert str(mod["main"].checked_type.ret_type) == "Tensor[(2, ?), float32]"
    out = static_shapes(mod)
    assert str(out["main"].checked_type.ret_type) == "Tensor[(2, 3), float32]"
    assert mod["main"].params[0].type_annotation == out["main"].params[0].type_annotation
    assert static_shapes(out) is out  # nothing left to drop


def test_a_program_without_any_is_left_alone():
    mod = infer_types(parse(HIDDEN.replace("(?, 2)", "(3, 2)").replace("(2, ?)", "(2, 3)")))
    assert static_shapes(mod) is mod


@relay
def hidden(x: Tensor[Float, (3, 2)]) -> Tensor[Float, (2, relay.Any)]:
    w: Tensor[Float, (relay.Any, 2)] = relay.where(x > 0.0, x, -x)
    return relay.transpose(w)


@relay
def grow(x: Tensor[Float, (1, 3)], n: Int) -> Tensor[Float, (relay.Any, 3)]:
    acc: Tensor[Float, (relay.Any, 3)] = x  # a loop carries it at a growing size
    for _ in range(n):
        acc = relay.concatenate((acc, x), axis=0)
    return acc


def test_llvm_compiles_statically_what_an_annotation_only_hid_and_keeps_what_needs_it():
    x = np.array([[1.0, -2.0], [-3.0, 4.0], [5.0, -6.0]], np.float32)
    exe = relay.build(hidden, target="llvm")
    assert exe.program.path == "native" and not exe.program.native.boxed  # static shapes
    np.testing.assert_allclose(exe(x), jnp.transpose(jnp.abs(x)), rtol=1e-6)
    exe = relay.build(grow, target="llvm")
    # the size is known only at run time: native code, its kernels compiled per shape
    assert exe.program.path == "native" and exe.program.native.boxed
    row = x[:1, :1].repeat(3, axis=1)
    np.testing.assert_allclose(exe(row, np.int32(4)), np.tile(row, (5, 1)), rtol=1e-6)
