"""Inlining: calls of non-recursive globals are replaced by their bodies (InlineGlobals);
TVM's Inline (globals marked Inline=1, after tests/python/relay/test_pass_inline.py) and
InlineAll substitute and remove them. Values are checked against JAX on both targets."""
import numpy as np
import pytest

from relaydsl.backend.interpreter import evaluate, to_value
from relaydsl.backend.target import get_target
from relaydsl.ir.expr import Call, GlobalVar
from relaydsl.ir.module import IRModule
from relaydsl.ir.parser import parse
from relaydsl.ir.structural import structural_equal
from relaydsl.ir.visitor import post_order
from relaydsl.testing.oracle import assert_matches_jax
from relaydsl.transform import PassContext, PassTimingInstrument, pipeline
from relaydsl.transform.inline import InlineGlobals, inline, inline_all, inline_globals
from relaydsl.typing import infer_types

PROGRAM = """
def @sq(%x: Tensor[(3), float32]) { let %s = multiply(%x, %x); %s }
def @twice_sq(%x: Tensor[(3), float32]) { add(@sq(%x), @sq(%x)) }
def @count(%n: int32, %acc: Tensor[(3), float32]) -> Tensor[(3), float32] {
  if (less(%n, 1)) { %acc } else { @count(subtract(%n, 1), @sq(%acc)) }
}
def @main(%y: Tensor[(3), float32]) { add(@twice_sq(%y), @count(2, %y)) }
"""


def global_calls(fn):
    found = []
    post_order(fn.body, lambda e: found.append(e.op.name_hint)
               if isinstance(e, Call) and isinstance(e.op, GlobalVar) else None)
    return sorted(found)


def test_non_recursive_calls_disappear_and_recursive_ones_stay():
    mod = infer_types(parse(PROGRAM))
    inlined = inline_globals(mod)
    assert global_calls(inlined["main"]) == ["count"]
    assert global_calls(inlined["count"]) == ["count"]  # its call of @sq is inlined


def test_inlining_preserves_meaning_and_binds_fresh_variables():
    mod = infer_types(parse(PROGRAM))
    y = np.array([0.5, -1.0, 2.0], np.float32)
    before = evaluate(mod, y)
    after = evaluate(inline_globals(mod), y)
    np.testing.assert_allclose(after, 2 * y * y + y ** 4, rtol=1e-6)
    np.testing.assert_allclose(after, before, rtol=1e-6)
    # the two inlined copies of @sq bind different variables (%x, a variable, is substituted)
    binders = []
    from relaydsl.ir.expr import Let
    post_order(inline_globals(mod)["twice_sq"].body,
               lambda e: binders.append(e.var) if isinstance(e, Let) else None)
    assert len(binders) == len(set(map(id, binders))) == 2


def test_a_nested_functions_annotations_follow_whose_shape_variables_they_mention():
    # In the copy, @g's `n` is dropped from %h's parameter and result alike (the call gives
    # the types); the polymorphic literal keeps its own `m` (its type, the same at every call,
    # as relay.export_model makes of a model written with symbolic dims).
    mod = infer_types(parse('''
    def @g(%x: Tensor[(n), float32]) -> Tensor[(n), float32] {
      let %h = fn (%y: Tensor[(n), float32]) -> Tensor[(n), float32] { multiply(%y, 2f) };
      %h(%x)
    }
    def @poly(%x: Tensor[(n), float32]) {
      fn <m: Shape>(%y: Tensor[(m), float32]) -> Tensor[(m), float32] { add(%y, sum(%x)) }
    }
    def @main(%a: Tensor[(3), float32], %b: Tensor[(2), float32]) {
      let %k: fn (Tensor[(2), float32]) -> Tensor[(2), float32] = @poly(%a);
      (@g(%a), %k(%b))
    }'''))
    out = inline_globals(mod)
    assert global_calls(out["main"]) == []
    assert "fn <m: Shape>(%y: Tensor[(m,), float32]) -> Tensor[(m,), float32]" in out.astext()
    a, b = np.array([0.5, -1.0, 2.0], np.float32), np.array([1.0, 3.0], np.float32)
    for target in ("interp", "llvm"):
        got = get_target(target).build(out, "main", {})(a, b)
        np.testing.assert_allclose(got[0], 2 * a, rtol=1e-6)
        np.testing.assert_allclose(got[1], b + a.sum(), rtol=1e-6)


# ---- TVM's Inline (tests/python/relay/test_pass_inline.py, v0.16) and InlineAll -------------

T = "Tensor[(3, 5), float32]"


def typed(text: str) -> IRModule:
    return infer_types(parse(text.replace("T35", T)))


def check(got: IRModule, expected_text: str) -> None:
    expected = typed(expected_text)
    assert structural_equal(got, expected), f"got\n{got.astext()}\nexpected\n{expected.astext()}"


def user_globals(mod: IRModule) -> list[str]:
    return sorted(gv.name_hint for gv in mod.user_functions())


ARGS = [np.random.default_rng(i).standard_normal((3, 5)).astype(np.float32) for i in range(4)]


def same_values(before: IRModule, after: IRModule, args=ARGS) -> None:
    """`before` and `after` give JAX's values for main on both targets."""
    for program in (before, after):
        for target in ("interp", "llvm"):
            assert_matches_jax(program, args, target=target)


CHAIN = '''
def @g11(%x11: T35, Inline=1) { %x11 }
def @g1(%x1: T35, %y1: T35 {g1_attrs}) { add(add(%x1, %y1), @g11(%x1)) }
def @g2(%x2: T35, %y2: T35) { subtract(%x2, %y2) }
def @main(%p0: T35, %p1: T35, %p2: T35, %p3: T35) {
  multiply(@g1(%p0, %p1), @g2(%p2, %p3))
}'''


def test_only_the_marked_leaf_is_inlined_and_removed():
    mod = typed(CHAIN.replace(" {g1_attrs}", ""))
    out = inline(mod)
    check(out, '''
    def @g1(%x1: T35, %y1: T35) { add(add(%x1, %y1), %x1) }
    def @g2(%x2: T35, %y2: T35) { subtract(%x2, %y2) }
    def @main(%p0: T35, %p1: T35, %p2: T35, %p3: T35) {
      multiply(@g1(%p0, %p1), @g2(%p2, %p3))
    }''')
    same_values(mod, out)


def test_a_chain_of_marked_functions_is_inlined_in_one_pass():
    mod = typed(CHAIN.replace(" {g1_attrs}", ", Inline=1"))
    out = inline(mod)
    check(out, '''
    def @g2(%x2: T35, %y2: T35) { subtract(%x2, %y2) }
    def @main(%p0: T35, %p1: T35, %p2: T35, %p3: T35) {
      multiply(add(add(%p0, %p1), %p0), @g2(%p2, %p3))
    }''')
    same_values(mod, out)


SUM_UP = '''
def @sum_up(%i: int32, Inline=1) -> int32 {
  if (equal(%i, 0)) { %i } else { add(@sum_up(subtract(%i, 1)), %i) }
}
'''


def test_a_recursive_function_is_left_alone_whatever_its_mark():
    mod = typed(SUM_UP + 'def @main(%i: int32) { @sum_up(%i) }')
    out = inline(mod)
    check(out, SUM_UP + 'def @main(%i: int32) { @sum_up(%i) }')
    assert inline_all(mod)["sum_up"] is mod["sum_up"]
    same_values(mod, inline_all(mod), [np.int32(10)])


def test_a_marked_function_is_inlined_into_a_recursive_one():
    mod = typed('''
    def @gx(%x: int32, Inline=1) { %x }
    def @sum_up(%i: int32, Inline=1) -> int32 {
      if (equal(%i, 0)) { %i } else { add(add(@sum_up(subtract(%i, 1)), @gx(%i)), %i) }
    }
    def @main(%i: int32) { @sum_up(%i) }''')
    out = inline(mod)
    check(out, '''
    def @sum_up(%i: int32, Inline=1) -> int32 {
      if (equal(%i, 0)) { %i } else { add(add(@sum_up(subtract(%i, 1)), %i), %i) }
    }
    def @main(%i: int32) { @sum_up(%i) }''')
    np.testing.assert_array_equal(evaluate(out, np.int32(4)), 2 * (4 + 3 + 2 + 1))
    same_values(mod, out, [np.int32(4)])


def test_an_unreferenced_recursive_function_stays_and_marked_calls_go():
    mod = typed(SUM_UP + '''
    def @g1(%x1: Tensor[(2, 2), float32], Inline=1) { %x1 }
    def @main(%x: Tensor[(2, 2), float32], %y: Tensor[(2, 2), float32]) {
      add(add(%x, %y), @g1(%x))
    }''')
    out = inline(mod)
    check(out, SUM_UP + '''
    def @main(%x: Tensor[(2, 2), float32], %y: Tensor[(2, 2), float32]) {
      add(add(%x, %y), %x)
    }''')


def test_marked_functions_called_side_by_side():
    mod = typed('''
    def @g1(%x1: T35, %y1: T35, Inline=1) { add(%x1, %y1) }
    def @g2(%x2: T35, %y2: T35, Inline=1) { subtract(%x2, %y2) }
    def @main(%p0: T35, %p1: T35, %p2: T35, %p3: T35) {
      multiply(@g1(%p0, %p1), @g2(%p2, %p3))
    }''')
    out = inline(mod)
    check(out, '''
    def @main(%p0: T35, %p1: T35, %p2: T35, %p3: T35) {
      multiply(add(%p0, %p1), subtract(%p2, %p3))
    }''')
    same_values(mod, out)


def test_a_marked_global_used_as_a_value_becomes_its_function():
    mod = typed('''
    def @g1(Inline=1) { 1 }
    def @g2(Inline=1) { 2 }
    def @main(%p: bool) { (if (%p) { @g1 } else { @g2 })() }''')
    out = inline(mod)
    check(out, '''
    def @main(%p: bool) { (if (%p) { fn (Inline=1) { 1 } } else { fn (Inline=1) { 2 } })() }''')
    for target in ("interp", "llvm"):
        for program in (mod, out):
            assert run(program, target, np.array(True)) == 1
            assert run(program, target, np.array(False)) == 2


def test_a_marked_function_called_by_two_functions_is_inlined_into_both():
    mod = typed('''
    def @g1(%x1: T35, %y1: T35) { add(%x1, %y1) }
    def @g2(%x2: T35, %y2: T35, Inline=1) { subtract(%x2, %y2) }
    def @g0(%x0: T35, %y0: T35, %z0: T35) { add(@g2(%x0, %y0), %z0) }
    def @main(%p0: T35, %p1: T35, %p2: T35, %p3: T35) {
      multiply(@g1(%p0, %p1), @g2(%p2, %p3))
    }''')
    out = inline(mod)
    check(out, '''
    def @g1(%x1: T35, %y1: T35) { add(%x1, %y1) }
    def @g0(%x0: T35, %y0: T35, %z0: T35) { add(subtract(%x0, %y0), %z0) }
    def @main(%p0: T35, %p1: T35, %p2: T35, %p3: T35) {
      multiply(@g1(%p0, %p1), subtract(%p2, %p3))
    }''')
    same_values(mod, out)


@pytest.mark.parametrize("text", [
    # entries stay, marked or not
    '''def @g1(%x1: T35, %y1: T35, Inline=1) { add(%x1, %y1) }
       def @g2(%x2: T35, %y2: T35, Inline=1) { subtract(%x2, %y2) }''',
    # an unmarked callee of a marked entry is not inlined
    '''def @g1(%x1: T35, %y1: T35) { add(%x1, %y1) }
       def @g2(%x2: T35, %y2: T35, Inline=1) { subtract(%x2, @g1(%x2, %y2)) }''',
])
def test_nothing_to_inline(text):
    mod = typed(text)
    out = inline(mod)
    check(out, text)
    assert all(out[gv] is mod[gv] for gv in out.user_functions())


def test_a_marked_leaf_under_an_unmarked_callee_of_a_marked_entry():
    mod = typed('''
    def @g0(%x0: T35, %y0: T35, Inline=1) { multiply(%x0, %y0) }
    def @g1(%x1: T35, %y1: T35) { add(%x1, @g0(%x1, %y1)) }
    def @g2(%x2: T35, %y2: T35, Inline=1) { subtract(%x2, @g1(%x2, %y2)) }''')
    check(inline(mod), '''
    def @g1(%x1: T35, %y1: T35) { add(%x1, multiply(%x1, %y1)) }
    def @g2(%x2: T35, %y2: T35, Inline=1) { subtract(%x2, @g1(%x2, %y2)) }''')


def test_computed_arguments_are_let_bound_and_evaluated_once():
    mod = typed('''
    def @sq(%x: T35, Inline=1) { multiply(%x, %x) }
    def @main(%p0: T35, %p1: T35, %p2: T35, %p3: T35) { @sq(add(%p0, %p1)) }''')
    out = inline(mod)
    check(out, '''
    def @main(%p0: T35, %p1: T35, %p2: T35, %p3: T35) {
      let %x: T35 = add(%p0, %p1);
      multiply(%x, %x)
    }''')
    same_values(mod, out)


NETWORK = '''
def @layer(%x: Tensor[(4, 8), float32], %w: Tensor[(8, 8), float32]) {
  relu(dense(%x, %w))
}
def @block(%x: Tensor[(4, 8), float32], %w1: Tensor[(8, 8), float32],
           %w2: Tensor[(8, 8), float32]) {
  add(@layer(@layer(%x, %w1), %w2), %x)
}
def @head(%h: Tensor[(4, 8), float32]) { softmax(%h) }
def @main(%x: Tensor[(4, 8), float32], %w1: Tensor[(8, 8), float32],
          %w2: Tensor[(8, 8), float32]) {
  @head(@block(@block(%x, %w1, %w2), %w2, %w1))
}'''


def test_inline_all_makes_a_network_one_function():
    mod = typed(NETWORK)
    out = inline_all(mod)
    assert user_globals(out) == ["main"]
    assert global_calls(out["main"]) == []
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s).astype(np.float32) for s in [(4, 8), (8, 8), (8, 8)]]
    same_values(mod, out, args)


def test_inline_all_keeps_entries_and_recursion_and_inlines_into_them():
    mod = typed(SUM_UP.replace(", Inline=1", "") + '''
    def @twice(%i: int32) { multiply(%i, 2) }
    def @count(%i: int32) { @sum_up(@twice(%i)) }
    def @other(%i: int32) { @twice(@twice(%i)) }
    def @main(%i: int32) { add(@count(%i), 1) }''')
    out = inline_all(mod)
    assert user_globals(out) == ["main", "other", "sum_up"]
    check(out, SUM_UP.replace(", Inline=1", "") + '''
    def @other(%i: int32) { let %i1: int32 = multiply(%i, 2); multiply(%i1, 2) }
    def @main(%i: int32) { add(@sum_up(multiply(%i, 2)), 1) }''')
    same_values(mod, out, [np.int32(3)])


def test_the_passes_in_the_pipeline():
    assert "Inline" in pipeline.pass_names("llvm", 2)
    assert "Inline" not in pipeline.pass_names("llvm", 1)
    assert "InlineAll" not in pipeline.pass_names("llvm", 3)
    mod = typed(NETWORK)
    context = PassContext(opt_level=0, required_pass=["InlineAll"])
    out = pipeline.run(mod, "interp", context)
    assert user_globals(out) == ["main"]
    timing = PassTimingInstrument()
    with PassContext(required_pass=["InlineAll"], instruments=[timing]):
        program = get_target("llvm").build(mod, "main", {})
    assert "InlineAll" in [name for name, _ in timing.timings]
    rng = np.random.default_rng(1)
    args = [rng.standard_normal(s).astype(np.float32) for s in [(4, 8), (8, 8), (8, 8)]]
    np.testing.assert_allclose(program(*args), evaluate(mod, *args), rtol=1e-5, atol=1e-6)


def run(mod: IRModule, target: str, *args):
    program = get_target(target).build(mod, "main", {})
    return program(*[to_value(a, p.checked_type) for a, p in zip(args, mod["main"].params)])


def test_told_the_entries_inline_globals_drops_what_they_no_longer_reach():
    mod = infer_types(parse('''
    def @sq(%x: Tensor[(2), float32]) { multiply(%x, %x) }
    def @count(%n: int32, %x: Tensor[(2), float32]) -> Tensor[(2), float32] {
      if (equal(%n, 0)) { %x } else { @count(subtract(%n, 1), @sq(%x)) }
    }
    def @other(%x: Tensor[(2), float32]) { @sq(%x) }
    def @main(%x: Tensor[(2), float32]) { add(@sq(%x), @count(1, %x)) }'''))
    out = InlineGlobals(entries=("main",))(mod)
    kept = {gv.name_hint for gv in out.user_functions()}
    assert kept == {"main", "count"}  # @sq inlined everywhere, @other unreached; recursion stays
    assert {gv.name_hint for gv in InlineGlobals()(mod).user_functions()} == {
        "main", "count", "sq", "other"}
    x = np.array([1.5, -2.0], np.float32)
    np.testing.assert_allclose(evaluate(out, x, entry="main"), x * x + x * x, rtol=1e-6)
    np.testing.assert_allclose(evaluate(mod, x, entry="main"), x * x + x * x, rtol=1e-6)
