"""The prelude's functions, as TVM's tests of its prelude expect (tests/python/relay/test_adt.py),
run on both targets; called from decorated code; shadowed by a module's own definitions."""
from __future__ import annotations

import textwrap
from typing import Any

import numpy as np
import pytest

from relaydsl import Float, Int, Tensor, relay
from relaydsl.backend.interpreter import ConstructorValue
from relaydsl.backend.target import get_target
from relaydsl.ir.module import IRModule
from relaydsl.ir.parser import parse
from relaydsl.typing import infer_types

TARGETS = ["interp", "llvm"]


def plain(v: Any) -> Any:
    """A run's value as Python data: a List as a list, a Tree as (value, children), an Option as
    its value or None, a tuple as a tuple, a scalar as a number."""
    if isinstance(v, ConstructorValue):
        if v.name in ("Cons", "Nil"):
            out = []
            while v.name == "Cons":
                out.append(plain(v.fields[0]))
                v = v.fields[1]
            return out
        if v.name == "Rose":
            return (plain(v.fields[0]), plain(v.fields[1]))
        return plain(v.fields[0]) if v.fields else None
    if isinstance(v, tuple):
        return tuple(plain(f) for f in v)
    return np.asarray(v).item()


def run(text: str, target: str, *args: Any) -> Any:
    mod = infer_types(parse(textwrap.dedent(text)))
    return plain(get_target(target).build(mod, "main", {})(*args))


LIST = "Cons(1, Cons(2, Cons(3, Nil)))"
TREE = "Rose(1, Cons(Rose(2, Nil), Cons(Rose(3, Cons(Rose(4, Nil), Nil)), Nil)))"


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("expr, expected", [
    (f"@hd({LIST})", 1),
    (f"@tl({LIST})", [2, 3]),
    (f"@nth({LIST}, 2)", 3),
    (f"@update({LIST}, 1, 7)", [1, 7, 3]),
    (f"@update({LIST}, 0, 7)", [7, 2, 3]),
    (f"@length({LIST})", 3),
    ("@length(Nil)", 0),
    (f"@sum({LIST})", 6),
    ("@sum(Nil)", 0),
    (f"@map(fn (%x: int32) {{ multiply(%x, 2) }}, {LIST})", [2, 4, 6]),
    (f"@foldl(fn (%a: int32, %x: int32) {{ subtract(%a, %x) }}, 0, {LIST})", -6),
    (f"@foldr(fn (%x: int32, %a: int32) {{ subtract(%x, %a) }}, 0, {LIST})", 2),
    (f"@foldr1(fn (%x: int32, %a: int32) {{ subtract(%x, %a) }}, {LIST})", 2),  # 1 - (2 - 3)
    ("@foldr1(fn (%x: int32, %a: int32) { subtract(%x, %a) }, Cons(5, Nil))", 5),
    (f"@concat({LIST}, Cons(4, Cons(5, Nil)))", [1, 2, 3, 4, 5]),
    (f"@concat(Nil, {LIST})", [1, 2, 3]),
    (f"@filter(fn (%x: int32) {{ greater(%x, 1) }}, {LIST})", [2, 3]),
    (f"@filter(fn (%x: int32) {{ greater(%x, 5) }}, {LIST})", []),
    (f"@zip({LIST}, Cons(4f, Cons(5f, Nil)))", [(1, 4.0), (2, 5.0)]),
    (f"@rev({LIST})", [3, 2, 1]),
    ("@rev(Cons(1, Nil))", [1]),
    # TVM's test_map_accumr and test_map_accuml: the running sums, consed as they come
    (f"@map_accumr(fn (%a: int32, %x: int32) {{ %0 = add(%a, %x); (%0, %0) }}, 0, {LIST})",
     (6, [6, 5, 3])),
    (f"@map_accuml(fn (%a: int32, %x: int32) {{ %0 = add(%a, %x); (%0, %0) }}, 0, {LIST})",
     (6, [6, 3, 1])),
    # TVM's test_unfoldr and test_unfoldl: count down from 3
    ("@unfoldr(fn (%n: int32) { if (greater(%n, 0)) { Some((subtract(%n, 1), %n)) } "
     "else { None } }, 3)", [3, 2, 1]),
    ("@unfoldl(fn (%n: int32) { if (greater(%n, 0)) { Some((subtract(%n, 1), %n)) } "
     "else { None } }, 3)", [1, 2, 3]),
    (f"@tmap(fn (%x: int32) {{ multiply(%x, 10) }}, {TREE})",
     (10, [(20, []), (30, [(40, [])])])),
    (f"@size({TREE})", 4),
    ("@size(Rose(1, Nil))", 1),
    # TVM's test_iterate: x + 1 composed 3 times, at 1
    ("@iterate(fn (%x: int32) { add(%x, 1) }, 3)(1)", 4),
    ("@iterate(fn (%x: int32) { add(%x, 1) }, 0)(1)", 1),
    ("@compose(fn (%x: int32) { add(%x, 1) }, fn (%x: int32) { multiply(%x, 2) })(5)", 11),
    ("@flip(fn (%x: int32, %y: int32) { subtract(%x, %y) })(1, 10)", 9),
    ("@id(5)", 5),
])
def test_prelude_function(expr: str, expected: Any, target: str) -> None:
    assert run(f"def @main() {{ {expr} }}", target) == expected


@pytest.mark.parametrize("target", TARGETS)
def test_prelude_functions_on_tensors(target: str) -> None:
    """Lists of float tensors: update, rev and foldr1 move them whole."""
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    mod = infer_types(parse(textwrap.dedent("""
        def @main(%x: Tensor[(2, 3), float32]) {
          %0 = Cons(%x, Cons(negative(%x), Cons(exp(%x), Nil)));
          %1 = fn (%a: Tensor[(2, 3), float32], %b: Tensor[(2, 3), float32]) { add(%a, %b) };
          (@foldr1(%1, @update(%0, 1, %x)), @hd(@rev(%0)))
        }""")))
    total, last = get_target(target).build(mod, "main", {})(x)
    np.testing.assert_allclose(total, x + x + np.exp(x), rtol=1e-6)
    np.testing.assert_allclose(last, np.exp(x), rtol=1e-6)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("expr, ret", [
    ("@hd(Nil)", "int32"), ("@tl(Nil)", "List[int32]"), ("@nth(Cons(1, Nil), 1)", "int32"),
    ("@update(Nil, 0, 1)", "List[int32]"),
    ("@foldr1(fn (%x: int32, %y: int32) { add(%x, %y) }, Nil)", "int32"),
])
def test_partial_functions_fail_on_too_short_lists(expr: str, ret: str, target: str) -> None:
    with pytest.raises(Exception, match="match"):
        run(f"def @main() -> {ret} {{ {expr} }}", target)


@pytest.mark.parametrize("target", TARGETS)
def test_a_modules_own_sum_and_hd_leave_the_prelude_working(target: str) -> None:
    """The prelude's size calls its sum: a module defining @sum and @hd of its own gets its
    own under those names, and the prelude's size and update keep working (they used to lose
    the function they call)."""
    text = f"""
        def @sum(%x: float32) -> float32 {{ negative(%x) }}
        def @hd(%x: float32) -> float32 {{ %x }}
        def @main(%x: float32) {{
          (@sum(%x), @hd(%x), @size({TREE}), @update({LIST}, 2, 9))
        }}"""
    assert run(text, target, np.float32(2.0)) == (-2.0, 2.0, 4, [1, 2, 9])
    mod = infer_types(parse(textwrap.dedent(text)))
    printed = mod.astext()
    assert "def @sum(%x: float32)" in printed.replace("Tensor[(), float32]", "float32")
    assert infer_types(parse(printed)).astext() == printed


def test_every_module_starts_with_the_prelude_functions() -> None:
    names = {gv.name_hint for gv in IRModule().functions}
    assert names == {
        "id", "compose", "flip", "hd", "tl", "nth", "update", "length", "map", "foldl", "foldr",
        "foldr1", "sum", "concat", "filter", "zip", "rev", "map_accumr", "map_accuml",
        "unfoldr", "unfoldl", "tmap", "size", "iterate"}


@pytest.mark.parametrize("target", TARGETS)
def test_prelude_functions_from_decorated_code(target: str) -> None:
    """relay.<name> calls the prelude's function (relay.sum stays the reduction op)."""
    @relay
    def f(x: Tensor[Float, 3]) -> Tensor[Float, 3]:
        xs = relay.Cons(x, relay.Cons(x * 2.0, relay.Cons(x * 3.0, relay.Nil())))
        kept = relay.filter(lambda v: relay.sum(v) > 0.0, relay.rev(relay.update(xs, 0, -x)))
        twice = relay.iterate(lambda v: v + 1.0, 2)
        return relay.foldr1(lambda a, b: a + b, relay.concat(kept, relay.tl(xs))) + twice(x)

    @relay
    def n(k: Int) -> Int:
        return relay.length(relay.tl(relay.Cons(k, relay.Cons(k, relay.Nil()))))

    x = np.array([1.0, 2.0, 3.0], np.float32)
    expected = 3 * x + 2 * x + 2 * x + 3 * x + (x + 2)  # rev -> [3x, 2x, -x], -x dropped
    np.testing.assert_allclose(relay.build(f, target=target)(x), expected, rtol=1e-6)
    assert int(relay.build(n, target=target)(np.int32(4))) == 1
