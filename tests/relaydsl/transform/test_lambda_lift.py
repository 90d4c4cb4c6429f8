"""Lambda lifting (relaydsl/transform/lambda_lift.py): local function literals become globals,
closures globals marked Closure=1 that take their captures (TVM's LambdaLift, after
tests/python/relay/test_pass_lambda_lift.py, v0.16). Programs give the same values before
and after on both targets, compared with NumPy."""
import numpy as np
import pytest

from relaydsl import Float, Tensor, relay
from relaydsl.backend.interpreter import list_items, list_value
from relaydsl.ir.expr import Function
from relaydsl.ir.module import IRModule
from relaydsl.ir.structural import structural_equal
from relaydsl.ir.visitor import post_order
from relaydsl.transform import PassContext, PassTimingInstrument
from relaydsl.transform.lambda_lift import is_closure_global, lambda_lift
from tests.relaydsl.transform.module_helpers import run, typed

TARGETS = ["interp", "llvm"]
RNG = np.random.default_rng(0)


def user_globals(mod: IRModule) -> list[str]:
    return sorted(gv.name_hint for gv in mod.user_functions())


def local_literals(mod: IRModule) -> int:
    """The function literals in user globals, but for those a closure global returns."""
    found = []
    for fn in mod.user_functions().values():
        body = fn.body.body if is_closure_global(fn) else fn.body
        post_order(body, lambda e: found.append(e) if isinstance(e, Function) else None)
    return len(found)


def check(got: IRModule, expected_text: str) -> None:
    expected = typed(expected_text)
    assert structural_equal(got, expected), f"got\n{got.astext()}\nexpected\n{expected.astext()}"


T = "Tensor[(10, 5), float32]"


def test_a_nested_literal_becomes_a_global():  # TVM's test_basic
    mod = typed(f'''
    def @main(%x1: {T}, %y1: Tensor[(1, 5), float32]) {{
      (fn (%x2: {T}, %y2: Tensor[(1, 5), float32]) {{ add(%x2, %y2) }})(%x1, %y1)
    }}''')
    out = lambda_lift(mod)
    check(out, f'''
    def @main_lambda(%x2: {T}, %y2: Tensor[(1, 5), float32]) {{ add(%x2, %y2) }}
    def @main(%x1: {T}, %y1: Tensor[(1, 5), float32]) {{ @main_lambda(%x1, %y1) }}''')
    x, y = np.ones((10, 5), np.float32), np.arange(5, dtype=np.float32)[None]
    for target in TARGETS:
        np.testing.assert_allclose(run(out, target, x, y), x + y)


def test_a_closure_becomes_a_global_of_its_captures():  # TVM's test_closure
    mod = typed('''
    def @main() {
      let %outer = fn (%y: Tensor[(2), float32]) {
        fn (%x: Tensor[(2), float32]) { add(%x, %y) }
      };
      %outer(ones(shape=[2]))(zeros(shape=[2]))
    }''')
    out = lambda_lift(mod)
    assert user_globals(out) == ["main", "main_lambda", "main_outer"]
    check(out, '''
    def @main_lambda(%y1: Tensor[(2), float32], Closure=1) {
      fn (%x: Tensor[(2), float32]) { add(%x, %y1) }
    }
    def @main_outer(%y: Tensor[(2), float32]) { @main_lambda(%y) }
    def @main() { @main_outer(ones(shape=[2]))(zeros(shape=[2])) }''')
    for target in TARGETS:
        np.testing.assert_allclose(run(out, target), np.ones(2, np.float32))


LOOP = '''
def @main(%x: Tensor[(2), float32]) {
  let %while_loop = fn (%i: int32, %s: Tensor[(2), float32]) -> Tensor[(2), float32] {
    if (less(%i, 10)) { %while_loop(add(%i, 1), add(%s, %x)) } else { %s }
  };
  %while_loop(0, zeros(shape=[2]))
}'''


def test_a_recursive_local_function_calls_its_global():  # TVM's test_recursive
    out = lambda_lift(typed(LOOP))
    check(out, '''
    def @main_while_loop(%x1: Tensor[(2), float32], Closure=1) {
      fn (%i: int32, %s: Tensor[(2), float32]) -> Tensor[(2), float32] {
        if (less(%i, 10)) { @main_while_loop(%x1)(add(%i, 1), add(%s, %x1)) } else { %s }
      }
    }
    def @main(%x: Tensor[(2), float32]) {
      let %while_loop = @main_while_loop(%x);
      %while_loop(0, zeros(shape=[2]))
    }''')
    x = np.array([0.5, -2.0], np.float32)
    for target in TARGETS:
        np.testing.assert_allclose(run(out, target, x), 10 * x, rtol=1e-6)


def test_a_closed_recursive_function_is_called_directly():
    out = lambda_lift(typed('''
    def @main(%n: int32) {
      let %fact = fn (%k: int32) -> int32 {
        if (less(%k, 2)) { 1 } else { multiply(%k, %fact(subtract(%k, 1))) }
      };
      %fact(%n)
    }'''))
    check(out, '''
    def @main_fact(%k: int32) -> int32 {
      if (less(%k, 2)) { 1 } else { multiply(%k, @main_fact(subtract(%k, 1))) }
    }
    def @main(%n: int32) { @main_fact(%n) }''')
    for target in TARGETS:
        assert int(run(out, target, np.int32(6))) == 720


NESTED = '''
def @main(%x: Tensor[(3), float32], %b: float32, %l: List[float32]) {
  let %shift = fn (%y: Tensor[(3), float32]) { add(%y, %b) };
  let %loop = fn (%i: int32, %acc: Tensor[(3), float32]) -> Tensor[(3), float32] {
    if (less(%i, 3)) {
      let %twice = fn (%z: Tensor[(3), float32]) { %shift(%shift(%z)) };
      %loop(add(%i, 1), %twice(%acc))
    } else { %acc }
  };
  let %scaled = @map(fn (%v: float32) { multiply(%v, %b) }, %l);
  let %total = match (%scaled) {
    Cons(%h, %t) => add(%h, @foldl(fn (%a: float32, %e: float32) { add(%a, %e) }, 0f, %t)),
    Nil => 0f,
  };
  (%loop(0, %x), %scaled, %total)
}'''


def nested_expected(x, b, items):
    scaled = [v * b for v in items]
    return x + 6 * b, scaled, np.float32(sum(scaled))


@pytest.mark.parametrize("target", TARGETS)
def test_closures_recursion_and_lists_keep_their_values(target):
    mod = typed(NESTED)
    out = lambda_lift(mod)
    assert local_literals(out) == 0 and local_literals(mod) == 5
    assert user_globals(out) == ["main", "main_lambda", "main_lambda1", "main_loop",
                                 "main_shift", "main_twice"]
    x, b = np.array([1.0, -2.0, 0.5], np.float32), np.float32(0.25)
    items = [np.float32(v) for v in (1.0, 2.0, 4.0)]
    want_loop, want_scaled, want_total = nested_expected(x, b, items)
    for program in (mod, out):
        loop, scaled, total = run(program, target, x, b, list_value(items))
        np.testing.assert_allclose(loop, want_loop, rtol=1e-6)
        np.testing.assert_allclose(list_items(scaled), want_scaled, rtol=1e-6)
        np.testing.assert_allclose(total, want_total, rtol=1e-6)


def test_lifting_twice_lifts_nothing_more():
    once = lambda_lift(typed(NESTED))
    twice = lambda_lift(once)
    assert user_globals(twice) == user_globals(once)
    assert structural_equal(twice, once)


POLYMORPHIC = '''
def @make(%w: Tensor[(4, 3), float32]) {
  let %apply = fn (%x: Tensor[(n, 4), float32]) { matmul(%x, %w) };
  (%apply, fn (%y: Tensor[(n, 4), float32]) { %apply(%y) })
}
def @main(%x: Tensor[(2, 4), float32], %w: Tensor[(4, 3), float32]) {
  let %fs = @make(%w);
  (%fs.0(%x), %fs.1(%x))
}'''


@pytest.mark.parametrize("target", TARGETS)
def test_escaping_closures_keep_the_shape_variable_of_their_function(target):
    # @make is polymorphic in n through its closures' annotations; where they were, a let
    # ascribes the lifted globals' values their types, so n stays @make's (without it, the
    # closure global's own n was left unknown: "cannot infer a complete type")
    out = lambda_lift(typed(POLYMORPHIC))
    assert local_literals(out) == 0
    assert str(out["make"].checked_type) == \
        "fn<n: Shape>(Tensor[(4, 3), float32]) -> (fn(Tensor[(n, 4), float32]) -> " \
        "Tensor[(n, 3), float32], fn(Tensor[(n, 4), float32]) -> Tensor[(n, 3), float32])"
    x, w = RNG.standard_normal((2, 4)).astype(np.float32), \
        RNG.standard_normal((4, 3)).astype(np.float32)
    for result in run(out, target, x, w):
        np.testing.assert_allclose(result, x @ w, rtol=1e-5)


def test_primitive_functions_stay():
    mod = typed('''
    def @main(%x: Tensor[(3), float32]) {
      %0 = fn (%p: Tensor[(3), float32], Primitive=1) { exp(%p) };
      %0(%x)
    }''')
    assert lambda_lift(mod)["main"] is mod["main"]


@relay
def power_and_adder(x: Tensor[Float, 3]) -> Tensor[Float, 3]:
    def power_of_two(n, y):
        if n <= 0:
            return y
        return power_of_two(n - 1, y * 2.0)

    def adder(k):
        return lambda y: y + k

    add_x = adder(x)
    total = x
    for i in range(3):
        total = total + add_x(power_of_two(i, x))
    return total


@pytest.mark.parametrize("target", TARGETS)
def test_a_frontend_program_with_closures_and_loops(target):
    x = np.array([0.5, 1.0, -1.5], np.float32)
    want = x + (x + x) + (2 * x + x) + (4 * x + x)
    out = lambda_lift(power_and_adder.mod)
    assert local_literals(out) == 0
    np.testing.assert_allclose(run(out, target, x, entry="power_and_adder"), want, rtol=1e-6)
    # the pass on demand, in the pipeline of relay.build
    timing = PassTimingInstrument()
    with PassContext(required_pass=["LambdaLift"], instruments=[timing]):
        exe = relay.build(power_and_adder, target=target)
    assert "LambdaLift" in [name for name, _ in timing.timings]
    np.testing.assert_allclose(exe(x), want, rtol=1e-6)
