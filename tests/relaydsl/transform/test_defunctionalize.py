"""Defunctionalization (relaydsl/transform/defunctionalize.py): a higher-order global called
with a static function target becomes a first-order copy specialised to it (the cases of
TVM's tests/python/relay/test_pass_defunctionalization.py, v0.16, where the target is
static). Values before and after agree on both targets, compared with NumPy."""
import numpy as np
import pytest

from relaydsl import Float, Tensor, relay
from relaydsl.backend.interpreter import list_items, list_value
from relaydsl.ir.expr import Call, GlobalVar
from relaydsl.ir.module import IRModule
from relaydsl.ir.structural import structural_equal
from relaydsl.ir.types import FuncType, TypeCall
from relaydsl.ir.visitor import post_order
from relaydsl.transform import PassContext, PassTimingInstrument
from relaydsl.transform.defunctionalize import defunctionalize
from tests.relaydsl.transform.module_helpers import run, typed

TARGETS = ["interp", "llvm"]
RNG = np.random.default_rng(0)


def higher_order_calls(mod: IRModule, entry: str = "main") -> list[str]:
    """The calls of globals that pass a function, in `entry` and the globals it reaches
    (TVM's assert_no_higher_order_functions, for calls of globals), by callee."""
    found, seen, todo = [], set(), [mod.get_global_var(entry)]
    while todo:
        gv = todo.pop()
        if gv in seen:
            continue
        seen.add(gv)

        def visit(e):
            if isinstance(e, GlobalVar) and e in mod.functions:
                todo.append(e)
            if isinstance(e, Call) and isinstance(e.op, GlobalVar) and \
                    any(isinstance(a.checked_type, FuncType) for a in e.args):
                found.append(e.op.name_hint)
        post_order(mod[gv].body, visit)
    return sorted(found)


def floats(n: int) -> list[np.float32]:
    return [np.float32(v) for v in RNG.uniform(-2, 2, n)]


def test_a_literal_target():  # TVM's test_simple
    mod = typed('''
    def @simple<A, B>(%f: fn(A) -> B, %xs: A) -> B { %f(%xs) }
    def @main(%l: Tensor[(5, 5), float32]) -> Tensor[(5, 5), float32] {
      @simple(fn (%x) { %x }, %l)
    }''')
    out = defunctionalize(mod)
    expected = typed('''
    def @simple<A, B>(%f: fn(A) -> B, %xs: A) -> B { %f(%xs) }
    def @simple_fn(%xs: Tensor[(5, 5), float32]) -> Tensor[(5, 5), float32] { %xs }
    def @main(%l: Tensor[(5, 5), float32]) -> Tensor[(5, 5), float32] { @simple_fn(%l) }''')
    assert structural_equal(out, expected), out.astext()
    assert higher_order_calls(mod) == ["simple"] and higher_order_calls(out) == []
    x = RNG.standard_normal((5, 5)).astype(np.float32)
    for target in TARGETS:
        np.testing.assert_array_equal(run(out, target, x), x)


MAP = '''
def @id<A>(%x: A) -> A { %x }
def @mymap<A, B>(%f: fn(A) -> B, %xs: List[A]) -> List[B] {
  match (%xs) {
    Cons(%x, %rest) => Cons(%f(%x), @mymap(%f, %rest)),
    Nil => Nil,
  }
}
'''


def test_a_recursive_global_with_a_global_target():  # TVM's test_global_recursion
    mod = typed(MAP + 'def @main(%l: List[float32]) -> List[float32] { @mymap(@id, %l) }')
    out = defunctionalize(mod)
    expected = typed(MAP + '''
    def @mymap_id(%xs: List[float32]) {
      match (%xs) {
        Cons(%x, %rest) => Cons(@id(%x), @mymap_id(%rest)),
        Nil => Nil,
      }
    }
    def @main(%l: List[float32]) -> List[float32] { @mymap_id(%l) }''')
    assert structural_equal(out, expected), out.astext()
    assert higher_order_calls(out) == []
    items = floats(10)
    for target in TARGETS:
        np.testing.assert_array_equal(list_items(run(out, target, list_value(items))), items)


def test_a_parameter_the_recursion_changes_has_no_static_target():
    # TVM's test_recursive_datatype: @sum calls itself with a new closure each time
    mod = typed('''
    def @id<A>(%x: A) -> A { %x }
    def @sum(%f: fn(int32) -> int32, %k: List[int32]) -> int32 {
      match (%k) {
        Cons(%x, %rest) => @sum(fn (%n: int32) { add(%x, %f(%n)) }, %rest),
        Nil => %f(0),
      }
    }
    def @main(%l: List[int32]) -> int32 { @sum(@id, %l) }''')
    out = defunctionalize(mod)
    assert out["main"] is mod["main"] and out["sum"] is mod["sum"]
    values = [int(v) for v in RNG.integers(1, 100, 10)]
    for target in TARGETS:
        assert int(run(out, target, list_value(np.int32(values)))) == sum(values)


CLOSURES = MAP + '''
def @main(%l: List[float32], %s: float32) {
  let %scale = fn (%v: float32) { multiply(%v, %s) };
  (@mymap(@id, %l), @mymap(%scale, %l), @map(%scale, %l),
   @foldl(fn (%a: float32, %b: float32) { add(%a, multiply(%b, %s)) }, 0f, %l))
}'''


def test_closures_pass_their_captures():
    mod = typed(CLOSURES)
    out = defunctionalize(mod)
    assert set(higher_order_calls(mod)) == {"foldl", "map", "mymap"}
    assert higher_order_calls(out) == []
    assert sorted(gv.name_hint for gv in out.user_functions()) == \
        ["foldl_fn", "id", "main", "map_scale", "mymap", "mymap_id", "mymap_scale"]
    # the captured %s leads the copy's parameters; the literal is applied in place
    copy = out["mymap_scale"]
    assert [p.name_hint for p in copy.params] == ["s", "xs"]
    assert isinstance(copy.params[1].checked_type, TypeCall)
    assert structural_equal(copy, typed(MAP + '''
    def @mymap_scale(%s: float32, %xs: List[float32]) -> List[float32] {
      match (%xs) {
        Cons(%x, %rest) => Cons((let %v: float32 = %x; multiply(%v, %s)), @mymap_scale(%s, %rest)),
        Nil => Nil,
      }
    }''')["mymap_scale"])


@pytest.mark.parametrize("target", TARGETS)
def test_closures_keep_their_values(target):
    mod = typed(CLOSURES)
    out = defunctionalize(mod)
    items, s = floats(6), np.float32(1.5)
    for program in (mod, out):
        same, scaled, mapped, total = run(program, target, list_value(items), s)
        np.testing.assert_array_equal(list_items(same), items)
        np.testing.assert_allclose(list_items(scaled), [v * s for v in items], rtol=1e-6)
        np.testing.assert_allclose(list_items(mapped), [v * s for v in items], rtol=1e-6)
        np.testing.assert_allclose(total, sum(items) * s, rtol=1e-5)


def test_several_targets_and_mutual_recursion():
    mod = typed('''
    def @inc(%x: float32) -> float32 { add(%x, 1f) }
    def @dbl(%x: float32) -> float32 { multiply(%x, 2f) }
    def @compose(%f: fn(float32) -> float32, %g: fn(float32) -> float32, %x: float32) {
      %g(%f(%x))
    }
    def @ping(%f: fn(float32) -> float32, %n: int32, %x: float32) -> float32 {
      if (less(%n, 1)) { %x } else { @pong(%f, subtract(%n, 1), %f(%x)) }
    }
    def @pong(%f: fn(float32) -> float32, %n: int32, %x: float32) -> float32 {
      @ping(%f, %n, %x)
    }
    def @main(%x: float32) { (@compose(@inc, @dbl, %x), @ping(@dbl, 3, %x)) }''')
    out = defunctionalize(mod)
    assert higher_order_calls(out) == []
    assert sorted(gv.name_hint for gv in out.user_functions()) == [
        "compose", "compose_inc", "compose_inc_dbl", "dbl", "inc", "main", "ping", "ping_dbl",
        "pong", "pong_dbl"]
    for target in TARGETS:
        composed, pinged = run(out, target, np.float32(1.5))
        assert composed == 5.0 and pinged == 12.0


@relay
def scale_and_sum(xs: relay.List[Tensor[Float, 2]], s: Float) -> Tensor[Float, 2]:
    scaled = relay.map(lambda x: x * s, xs)
    return relay.foldl(lambda acc, x: acc + relay.tanh(x), relay.zeros(shape=(2,)), scaled)


@pytest.mark.parametrize("target", TARGETS)
def test_a_frontend_program(target):
    items = [RNG.standard_normal(2).astype(np.float32) for _ in range(4)]
    s = np.float32(0.5)
    want = sum(np.tanh(v * s) for v in items)
    entry = scale_and_sum.global_var.name_hint
    out = defunctionalize(scale_and_sum.mod)
    assert set(higher_order_calls(scale_and_sum.mod, entry)) == {"foldl", "map"}
    assert higher_order_calls(out, entry) == []
    np.testing.assert_allclose(run(out, target, list_value(items), s, entry=entry), want,
                               rtol=1e-5)
    timing = PassTimingInstrument()  # the pass on demand, in the pipeline of relay.build
    with PassContext(required_pass=["Defunctionalization"], instruments=[timing]):
        exe = relay.build(scale_and_sum, target=target)
    assert "Defunctionalization" in [name for name, _ in timing.timings]
    np.testing.assert_allclose(exe(list_value(items), s), want, rtol=1e-5)
