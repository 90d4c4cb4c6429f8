"""Dead-code elimination: unused pure lets go, effects stay, values are unchanged; with
inline_once, pure lets used once are inlined (never into a function), values compared with
NumPy and JAX on both targets."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from relaydsl.backend.interpreter import evaluate, to_value
from relaydsl.backend.target import get_target
from relaydsl.ir.expr import Let
from relaydsl.ir.module import IRModule
from relaydsl.ir.parser import parse
from relaydsl.ir.structural import structural_equal
from relaydsl.testing.oracle import assert_matches_jax
from relaydsl.testing.random_programs import random_programs
from relaydsl.transform.dead_code import eliminate_dead_code
from relaydsl.typing import infer_types
from tests.relaydsl.transform.module_helpers import grads_lowered


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
        _, (dx,) = evaluate(grads_lowered(mod, first_order), x)
        np.testing.assert_allclose(dx, expected, rtol=1e-5)


def test_an_annotated_dead_let_sends_no_nan_into_gradients_either():
    # found by random programs: the annotation kept the dead sqrt(abs(0)), whose adjoint
    # 0 * inf = nan reached %x, where jax.grad gives the adjoint of min's path alone
    mod = infer_types(parse('''
    def @f(%x: Tensor[(1), float64], %y: Tensor[(1), float64]) {
      let %zero: Tensor[(1), float64] = subtract(%y, %y);
      let %dead: Tensor[(1), float64] = sqrt(abs(%zero));
      add(sum(min(%zero, axis=[0], keepdims=True)), sum(%x))
    }
    def @main(%x: Tensor[(1), float64], %y: Tensor[(1), float64]) { grad(@f)(%x, %y) }'''))
    assert let_names(eliminate_dead_code(mod)["f"]) == ["zero"]
    x, y = np.array([-1.05]), np.array([0.74])
    with jax.enable_x64(True):
        expected = jax.grad(lambda a, b: jnp.sum(jnp.min(b - b, axis=0, keepdims=True))
                            + jnp.sum(a), argnums=(0, 1))(x, y)
    for first_order in (False, True):
        _, grads = evaluate(grads_lowered(mod, first_order), x, y)
        for got, want in zip(grads, expected):
            np.testing.assert_allclose(got, want, rtol=1e-12)


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


# ---- inline_once (TVM's DeadCodeElimination(inline_once=True), test_pass_dead_code_elimination.py)

def inline_once(text: str) -> tuple[IRModule, IRModule]:
    mod = infer_types(parse(text))
    return mod, eliminate_dead_code(mod, inline_once=True)


def assert_same(got: IRModule, expected_text: str) -> None:
    expected = infer_types(parse(expected_text))
    assert structural_equal(got, expected), f"got\n{got.astext()}\nexpected\n{expected.astext()}"


def run(mod: IRModule, target: str, *args):
    program = get_target(target).build(mod, "main", {})
    return program(*[to_value(a, p.checked_type) for a, p in zip(args, mod["main"].params)])


def test_a_chain_of_lets_used_once_becomes_one_expression():
    mod, out = inline_once('''
    def @main(%x: Tensor[(3), float32]) {
      let %a = exp(%x);
      let %b = tanh(%a);
      let %twice = add(%x, %x);
      multiply(%b, add(%twice, %twice))
    }''')
    assert_same(out, '''
    def @main(%x: Tensor[(3), float32]) {
      let %twice = add(%x, %x);
      multiply(tanh(exp(%x)), add(%twice, %twice))
    }''')
    assert eliminate_dead_code(mod)["main"] is mod["main"]  # without the flag: nothing dead


def test_nothing_is_inlined_into_a_function():  # TVM's test_inline_into_function
    _, out = inline_once('''
    def @main() {
      let %x = add(1, 1);
      let %f = fn (%y: int32) -> int32 {
        let %z = add(%y, %y);
        add(%x, %z)
      };
      (%f(2), %f(3))
    }''')
    assert_same(out, '''
    def @main() {
      let %x = add(1, 1);
      let %f = fn (%y: int32) -> int32 { add(%x, add(%y, %y)) };
      (%f(2), %f(3))
    }''')


def test_effects_stay_in_order():  # TVM's test_refs
    text = '''
    def @f(%r: Ref[int32]) -> int32 {
      let %v = ref_read(%r);
      let %u = ref_write(%r, add(%v, 1));
      %v
    }
    def @main() -> int32 {
      let %r = ref(0);
      let %y = @f(%r);
      let %z = @f(%r);
      %z
    }'''
    mod, out = inline_once(text)
    assert_same(out, text)
    assert int(evaluate(mod)) == int(evaluate(out)) == 1


LOOP_AND_BRANCH = '''
def @main(%x: Tensor[(3), float32], %c: bool) {
  let %e = exp(%x);
  let %t = tanh(%x);
  let %loop = fn (%i: int32, %acc: Tensor[(3), float32]) -> Tensor[(3), float32] {
    if (less(%i, 3)) { %loop(add(%i, 1), add(%acc, %e)) } else { %acc }
  };
  let %s = sigmoid(%x);
  let %r = if (%c) { multiply(%t, 2f) } else { %x };
  (%loop(0, %x), %r)
}'''


@pytest.mark.parametrize("target", ["interp", "llvm"])
def test_a_value_moves_into_a_branch_but_not_into_a_loop(target):
    mod, out = inline_once(LOOP_AND_BRANCH)
    # %e, used once but in the loop, stays; %t goes into the branch; %s is dead; the loop,
    # used once, stays: it is recursive; %r, an if (whose branches might have effects), stays
    assert let_names(out["main"]) == ["e", "loop", "r"]
    x = np.array([0.5, -1.0, 2.0], np.float32)
    for c in (True, False):
        for program in (mod, out):
            loop, r = run(program, target, x, np.bool_(c))
            np.testing.assert_allclose(loop, x + 3 * np.exp(x), rtol=1e-5)
            np.testing.assert_allclose(r, 2 * np.tanh(x) if c else x, rtol=1e-5)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_programs(max_ops=10))
def test_random_programs_keep_their_values_with_inline_once(program_and_inputs):
    fn, inputs = program_and_inputs
    mod = infer_types(IRModule.from_expr(fn))
    out = eliminate_dead_code(mod, inline_once=True)
    for target in ("interp", "llvm"):
        assert_matches_jax(out, inputs, target=target, rtol=1e-4, atol=1e-5)


def test_an_unused_collective_stays():
    # the other ranks run it and wait for this one there
    mod = infer_types(parse('''
    def @main(%x: Tensor[(3), float32]) {
      let %unused = psum(%x);
      let %dead = exp(%x);
      %x
    }'''))
    assert let_names(eliminate_dead_code(mod)["main"]) == ["unused"]


def elif_chain(n: int) -> str:
    """``if k == 0 {..} else if k == 1 {..} ...``, each if's value let-bound (as the
    frontend translates an elif chain) and each branch with a dead let."""
    text = "%x"
    for i in reversed(range(n)):
        text = (f"let %joined{i} = if (equal(%k, {i}i64)) {{ let %dead{i} = exp(%x); "
                f"add(%x, {float(i)}f) }} else {{ {text} }}; %joined{i}")
    return f"def @main(%x: Tensor[(3), float32], %k: int64) {{ {text} }}"


def test_an_elif_chain_is_cleaned_in_time_linear_in_its_length(monkeypatch):
    """Each let's body's free variables come from one bottom-up walk (FreeVarSets): asked
    of the rest of the chain at each of n branches, they made the pass quadratic (0.8 s a
    run for 600 branches)."""
    from relaydsl.ir import visitor

    steps = [0]
    for cls in (visitor.ExprVisitor, visitor.ExprMutator, visitor.FreeVarSets):
        method = "_free" if cls is visitor.FreeVarSets else "visit"
        original = getattr(cls, method)

        def counted(self, expr, _original=original):
            steps[0] += 1
            return _original(self, expr)
        monkeypatch.setattr(cls, method, counted)
    work = {}
    x = np.array([1.0, -2.0, 0.5], np.float32)
    for n in (100, 200):
        mod = infer_types(parse(elif_chain(n)))
        steps[0] = 0
        out = eliminate_dead_code(mod)
        work[n] = steps[0]
        assert "dead" not in str(out["main"])
        for k in (0, n - 1, n):
            np.testing.assert_allclose(evaluate(out, x, np.int64(k)),
                                       x + (k if k < n else 0.0), rtol=1e-6)
    assert work[200] < 2.5 * work[100], work
