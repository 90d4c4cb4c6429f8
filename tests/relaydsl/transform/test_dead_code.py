"""Dead-code elimination: unused pure lets go, effects stay, values are unchanged."""
import jax
import jax.numpy as jnp
import numpy as np

from relaydsl.backend.interpreter import evaluate
from relaydsl.ir.expr import Let
from relaydsl.ir.parser import parse
from relaydsl.transform.dead_code import eliminate_dead_code
from relaydsl.transform.gradient import lower_grads
from relaydsl.typing import infer_types


def let_names(fn):
    names, node = [], fn.body
    while isinstance(node, Let):
        names.append(node.var.name_hint)
        node = node.body
    return names


def test_unused_pure_lets_go_and_effects_stay():
    mod = infer_types(parse('''
    def @main(%x: Tensor[(3), float32]) {
      let %r = ref(%x);
      let %dead = exp(%x);
      let %write = ref_write(%r, tanh(%x));
      let %also_dead = (%dead, %x);
      let %y = add(ref_read(%r), %x);
      %y
    }'''))
    out = eliminate_dead_code(mod)
    assert let_names(out["main"]) == ["r", "write", "y"]
    x = np.array([0.5, -1.0, 2.0], np.float32)
    np.testing.assert_allclose(evaluate(out, x), evaluate(mod, x), rtol=1e-6)
    np.testing.assert_allclose(evaluate(out, x), np.tanh(x) + x, rtol=1e-6)


def test_dead_code_sends_no_nan_into_gradients():
    mod = infer_types(parse('''
    def @f(%x: Tensor[(3), float32]) {
      let %zero = subtract(%x, %x);
      let %dead = sqrt(abs(%zero));
      sum(tanh(%x))
    }
    def @main(%x: Tensor[(3), float32]) { grad(@f)(%x) }'''))
    x = np.array([0.5, -1.0, 2.0], np.float32)
    expected = jax.grad(lambda v: jnp.sum(jnp.tanh(v)))(x)
    for first_order in (False, True):
        _, (dx,) = evaluate(lower_grads(mod, first_order=first_order), x)
        np.testing.assert_allclose(dx, expected, rtol=1e-5)


def test_a_dead_let_that_types_a_parameter_stays():
    # the parameter's only type is the let's annotation (a model's weight in a loss that
    # ignores the layer's output): dropping the let left "cannot infer a complete type"
    mod = infer_types(parse('''
    def @main(%x: Tensor[(3), float32], %w) {
      let %unused: Tensor[(3), float32] = %w;
      tanh(%x)
    }'''))
    out = eliminate_dead_code(mod)
    assert let_names(out["main"]) == ["unused"]
    x = np.array([0.5, -1.0, 2.0], np.float32)
    np.testing.assert_allclose(evaluate(out, x, x), jnp.tanh(x), rtol=1e-6)
