"""Eta-expansion (relaydsl/transform/eta_expand.py): globals and constructors used as values
become function literals calling them (TVM's EtaExpand, after
tests/python/relay/test_pass_eta_expand.py, v0.16). Values are unchanged on both targets."""
import numpy as np
import pytest

from relaydsl.backend.interpreter import list_items, list_value, to_value
from relaydsl.backend.target import get_target
from relaydsl.ir.expr import Call, Function, GlobalVar, Op, Var
from relaydsl.ir.module import IRModule
from relaydsl.ir.parser import parse
from relaydsl.ir.structural import structural_equal
from relaydsl.ir.visitor import post_order
from relaydsl.transform.eta_expand import eta_expand
from relaydsl.typing import infer_types

TARGETS = ["interp", "llvm"]


def typed(text: str) -> IRModule:
    return infer_types(parse(text))


def run(mod: IRModule, target: str, *args):
    program = get_target(target).build(mod, "main", {})
    return program(*[to_value(a, p.checked_type) for a, p in zip(args, mod["main"].params)])


def check(got: IRModule, expected_text: str) -> None:
    expected = typed(expected_text)
    assert structural_equal(got["main"], expected["main"]), \
        f"got\n{got.astext()}\nexpected\n{expected.astext()}"


AUX = "def @aux(%x: int32) -> int32 { %x }\n"


def test_a_global_used_as_a_value_is_expanded():
    out = eta_expand(typed(AUX + "def @main() -> fn(int32) -> int32 { @aux }"),
                     expand_constructor=False)
    check(out, AUX + "def @main() -> fn(int32) -> int32 { fn (%x: int32) { @aux(%x) } }")


def test_a_constructor_used_as_a_value_is_expanded():
    out = eta_expand(typed("def @main<A>() -> fn(A, List[A]) -> List[A] { Cons }"),
                     expand_global_var=False)
    check(out, "def @main<A>() -> fn(A, List[A]) -> List[A] { fn (%x, %xs) { Cons(%x, %xs) } }")


PROGRAM = AUX.replace("int32", "float32") + '''
def @main(%a: float32, %l: List[float32]) {
  let %f = @aux;
  let %c = Cons;
  let %g = if (less(%a, 0f)) { @aux } else { fn (%y: float32) { multiply(%y, 2f) } };
  let %head = match (%l) { Cons(%h, _) => %h, Nil => %a };
  (%f(%a), %g(%a), %c(%a, %l), @foldr(Cons, Nil, %l), add(@aux(%a), %head))
}'''


def expansions(fn: Function) -> list[str]:
    """The names of what the literals ``fn (%x...) { callee(%x...) }`` in `fn` call."""
    found: list[str] = []

    def visit(e):
        if isinstance(e, Function) and isinstance(e.body, Call) and \
                list(e.body.args) == list(e.params):
            callee = e.body.op
            found.append(callee.name_hint if isinstance(callee, GlobalVar) else callee.name)
    post_order(fn.body, visit)
    return sorted(found)


def test_calls_stay_and_flags_choose_what_is_expanded():
    mod = typed(PROGRAM)
    assert eta_expand(mod, expand_global_var=False, expand_constructor=False)["main"] \
        is mod["main"]
    assert expansions(mod["main"]) == []
    assert expansions(eta_expand(mod)["main"]) == ["Cons", "Cons", "aux", "aux"]
    assert expansions(eta_expand(mod, expand_constructor=False)["main"]) == ["aux", "aux"]
    assert expansions(eta_expand(mod, expand_global_var=False)["main"]) == ["Cons", "Cons"]
    calls = []  # the call @aux(%a) and Nil (a nullary constructor, called) stay
    post_order(eta_expand(mod)["main"].body, lambda e: calls.append(e.op) if
               isinstance(e, Call) and not isinstance(e.op, (Op, Var)) else None)
    assert sorted(getattr(c, "name_hint", getattr(c, "name", "")) for c in calls) == \
        ["Cons", "Cons", "Nil", "aux", "aux", "aux", "foldr"]


@pytest.mark.parametrize("target", TARGETS)
def test_values_are_unchanged(target):
    mod = typed(PROGRAM)
    out = eta_expand(mod)
    items = [np.float32(1.5), np.float32(-2.0)]
    for a in (np.float32(-3.0), np.float32(0.5)):
        for program in (mod, out):
            f, g, c, copy, aux_and_head = run(program, target, a, list_value(items))
            assert f == a and aux_and_head == a + items[0]
            assert g == (a if a < 0 else 2 * a)
            np.testing.assert_array_equal(list_items(c), [a, *items])
            np.testing.assert_array_equal(list_items(copy), items)
