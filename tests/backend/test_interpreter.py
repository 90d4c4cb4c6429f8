"""The reference interpreter, checked against JAX (numbers) and plain Python (control, data).

Programs are built with the Python IR API and run without type inference.
"""
from __future__ import annotations

import functools
import sys

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import relaydsl.backend.interpreter as interpreter
from relaydsl.backend.interpreter import (
    Closure,
    ConstructorValue,
    Interpreter,
    InterpreterError,
    RefValue,
    evaluate,
    list_items,
    list_value,
    to_value,
)
from relaydsl.errors import RelayError
from relaydsl.ir import (
    Call,
    Clause,
    Constant,
    Function,
    GlobalVar,
    If,
    IRModule,
    Let,
    Match,
    Op,
    PatternConstructor,
    PatternTuple,
    PatternVar,
    PatternWildcard,
    RefCreate,
    RefRead,
    RefWrite,
    Span,
    TensorType,
    Tuple,
    TupleGetItem,
    TupleType,
    Var,
    const,
    define_adt,
)
from relaydsl.op import all_ops

I32 = TensorType((), "int32")
F32 = TensorType((), "float32")
BOOL = TensorType((), "bool")


def op(name: str, *args, **attrs) -> Call:
    return Call(Op.get(name), args, attrs)


def i32(v: int):
    return const(v, "int32")


def f32(v: float):
    return const(v, "float32")


def lets(bindings: list[tuple[Var, object]], body):
    """``let v0 = e0; let v1 = e1; ...; body``"""
    for var, value in reversed(bindings):
        body = Let(var, value, body)
    return body


def pvar(name: str) -> tuple[Var, PatternVar]:
    v = Var(name)
    return v, PatternVar(v)


def as_python(values) -> list:
    return [v.item() for v in values]


def test_the_ops_these_tests_use_are_registered():
    used = {"add", "subtract", "multiply", "divide", "equal", "less", "less_equal", "tanh",
            "sum", "mean", "max", "transpose", "concatenate", "split"}
    assert used <= set(all_ops())


# ---- closures and higher-order functions ----------------------------------------------------

def _make_adder_program() -> tuple:
    # let y = 3; let mk = fn(x) { let s = x * y; fn(z) { s + z } }; (mk, y)
    x, y, z, s, mk = Var("x", F32), Var("y"), Var("z", F32), Var("s"), Var("mk")
    maker = Function([x], Let(s, op("multiply", x, y), Function([z], op("add", s, z))))
    return y, mk, maker


def test_a_closure_keeps_the_let_bound_values_it_captured():
    y, mk, maker = _make_adder_program()
    f, g = Var("f"), Var("g")
    prog = lets(
        [(y, f32(3.0)), (mk, maker), (f, Call(mk, [f32(2.0)])), (g, Call(mk, [f32(10.0)]))],
        Tuple([Call(f, [f32(5.0)]), Call(g, [f32(5.0)])]),
    )
    out = evaluate(prog)

    def mk_jax(x):
        s = x * jnp.float32(3.0)
        return lambda z: s + z

    expected = (mk_jax(jnp.float32(2.0))(jnp.float32(5.0)),
                mk_jax(jnp.float32(10.0))(jnp.float32(5.0)))
    for got, want in zip(out, expected):
        assert got.dtype == np.float32 and got.shape == ()
        np.testing.assert_allclose(got, want)


def test_a_returned_closure_is_a_value_called_later():
    y, mk, maker = _make_adder_program()
    make = Function([], lets([(y, f32(3.0)), (mk, maker)], Call(mk, [f32(2.0)])))
    adder = evaluate(make)
    assert isinstance(adder, Closure)
    out = Interpreter().call(adder, [np.array([1.0, 2.0], dtype="float32")])
    np.testing.assert_allclose(out, jnp.float32(6.0) + jnp.array([1.0, 2.0], jnp.float32))
    assert out.dtype == np.float32


def test_higher_order_functions_compose_and_apply():
    f, g, x, v = Var("f"), Var("g"), Var("x"), Var("v")
    compose = Function([f, g], Function([x], Call(f, [Call(g, [x])])))
    twice = Function([f], Function([x], Call(f, [Call(f, [x])])))
    a = Var("a")
    tanh = Function([a], op("tanh", a))
    double = Function([a], op("multiply", a, f32(2.0)))
    c, t = Var("c"), Var("t")
    prog = Function([v], lets(
        [(c, compose), (t, twice)],
        Call(Call(t, [Call(c, [tanh, double])]), [v]),
    ))
    data = np.linspace(-1, 1, 5, dtype="float32")
    out = evaluate(prog, data)
    once = lambda u: jnp.tanh(u * 2.0)  # noqa: E731
    np.testing.assert_allclose(out, once(once(jnp.asarray(data))), rtol=1e-6)
    assert out.dtype == np.float32


def test_a_let_bound_function_may_call_itself():
    # let f = fn(n) { if n == 0 then 0 else n + f(n - 1) }; f(10)
    f, n = Var("f"), Var("n", I32)
    body = If(op("equal", n, i32(0)), i32(0), op("add", n, Call(f, [op("subtract", n, i32(1))])))
    assert evaluate(Let(f, Function([n], body), Call(f, [i32(10)]))) == 55


# ---- recursion through globals --------------------------------------------------------------

def _fact_fib_module() -> IRModule:
    mod = IRModule()
    fact, fib, n = GlobalVar("fact"), GlobalVar("fib"), Var("n", I32)
    mod.add(fact, Function([n], If(
        op("less_equal", n, i32(1)), i32(1),
        op("multiply", n, Call(fact, [op("subtract", n, i32(1))])),
    )))
    m = Var("m", I32)
    mod.add(fib, Function([m], If(
        op("less", m, i32(2)), m,
        op("add", Call(fib, [op("subtract", m, i32(1))]), Call(fib, [op("subtract", m, i32(2))])),
    )))
    return mod


def test_factorial_and_fibonacci_recurse_through_globals():
    mod = _fact_fib_module()
    for k in range(8):
        out = evaluate(mod, k, entry="fact")
        assert out.dtype == np.int32 and out == functools.reduce(int.__mul__, range(1, k + 1), 1)

    def fib(k):
        return k if k < 2 else fib(k - 1) + fib(k - 2)

    assert [evaluate(mod, k, entry="fib").item() for k in range(12)] == [fib(k) for k in range(12)]


def _even_odd_module() -> IRModule:
    mod = IRModule()
    even, odd = GlobalVar("even"), GlobalVar("odd")
    n, m = Var("n", I32), Var("m", I32)
    mod.add(even, Function([n], If(op("equal", n, i32(0)), const(True),
                                   Call(odd, [op("subtract", n, i32(1))]))))
    mod.add(odd, Function([m], If(op("equal", m, i32(0)), const(False),
                                  Call(even, [op("subtract", m, i32(1))]))))
    return mod


def test_mutual_recursion_between_globals():
    mod = _even_odd_module()
    for k in (0, 1, 2, 7, 10, 3001):
        assert evaluate(mod, k, entry="even").item() == (k % 2 == 0)
        assert evaluate(mod, k, entry="odd").item() == (k % 2 == 1)


def test_a_tail_recursive_loop_of_100000_iterations_needs_no_stack(monkeypatch):
    # loop(i, acc) = if i == 100000 then acc else loop(i + 1, acc + float32(i))
    mod = IRModule()
    loop, i, acc = GlobalVar("loop"), Var("i", I32), Var("acc", F32)
    mod.add(loop, Function([i, acc], If(
        op("equal", i, i32(100_000)), acc,
        Call(loop, [op("add", i, i32(1)), op("add", acc, op("cast", i, dtype="float32"))]),
    )))
    # The interpreter may not raise the recursion limit: only tail calls make this work.
    monkeypatch.setattr(interpreter, "RECURSION_LIMIT", 1)
    before = sys.getrecursionlimit()
    out = evaluate(mod, 0, 0.0, entry="loop")
    assert sys.getrecursionlimit() == before
    # The same float32 additions, in the same order.
    assert out.dtype == np.float32
    assert out == np.cumsum(np.arange(100_000, dtype=np.float32))[-1]


def test_mutual_tail_recursion_needs_no_stack(monkeypatch):
    monkeypatch.setattr(interpreter, "RECURSION_LIMIT", 1)
    assert evaluate(_even_odd_module(), 20_001, entry="odd").item() is True


def test_non_tail_recursion_ten_thousand_deep_uses_the_stack():
    mod = IRModule()
    xs = list(range(10_000))
    assert evaluate(mod, list_value(xs), entry="length") == 10_000
    a, b, v = Var("a"), Var("b"), Var("v")
    total = Function([v], Call(mod.get_global_var("foldr"),
                               [Function([a, b], op("add", a, b)), i32(0), v]))
    assert evaluate(total, list_value(xs), mod=mod) == sum(xs)


def test_recursion_deeper_than_the_limit_is_an_error_not_a_crash(monkeypatch):
    monkeypatch.setattr(interpreter, "RECURSION_LIMIT", 3_000)
    before = sys.getrecursionlimit()
    with pytest.raises(InterpreterError, match="recursion is too deep"):
        evaluate(IRModule(), list_value(range(5_000)), entry="length")
    assert sys.getrecursionlimit() == before


# ---- references -----------------------------------------------------------------------------

def test_references_are_created_read_and_written():
    r, u, w = Var("r"), Var("u"), Var("w")
    prog = lets(
        [(r, RefCreate(f32(1.0))), (u, RefWrite(r, op("add", RefRead(r), f32(2.0)))),
         (w, RefRead(r))],
        Tuple([u, w, r]),
    )
    unit, value, ref = evaluate(prog)
    assert unit == ()
    assert value.dtype == np.float32 and value == 3.0
    assert isinstance(ref, RefValue) and ref.value == 3.0


def test_a_counter_mutated_in_a_loop():
    # repeat(f, n) = if n == 0 then () else let _ = f(); repeat(f, n - 1)
    mod = IRModule()
    repeat, f, n, ignored = GlobalVar("repeat"), Var("f"), Var("n", I32), Var("_")
    mod.add(repeat, Function([f, n], If(
        op("equal", n, i32(0)), Tuple([]),
        Let(ignored, Call(f, []), Call(repeat, [f, op("subtract", n, i32(1))])),
    )))
    # let c = ref(0); let inc = fn() { c := !c + 2 }; repeat(inc, 250); !c
    c, inc, done = Var("c"), Var("inc"), Var("done")
    prog = lets(
        [(c, RefCreate(i32(0))), (inc, Function([], RefWrite(c, op("add", RefRead(c), i32(2))))),
         (done, Call(repeat, [inc, i32(250)]))],
        RefRead(c),
    )
    out = evaluate(prog, mod=mod)
    assert out.dtype == np.int32 and out == 500


def test_references_alias():
    a, b, t, u1, u2 = Var("a"), Var("b"), Var("t"), Var("u1"), Var("u2")
    # let a = ref(1); let b = a; let t = (a, ref(1)); b := 5; t.1 := 9; (!a, !t.0, !t.1)
    prog = lets(
        [(a, RefCreate(i32(1))), (b, a), (t, Tuple([a, RefCreate(i32(1))])),
         (u1, RefWrite(b, i32(5))), (u2, RefWrite(TupleGetItem(t, 1), i32(9)))],
        Tuple([RefRead(a), RefRead(TupleGetItem(t, 0)), RefRead(TupleGetItem(t, 1))]),
    )
    assert as_python(evaluate(prog)) == [5, 5, 9]


def test_effects_happen_left_to_right():
    r, u, v = Var("r"), Var("u"), Var("v")

    def write_then_read(value: int):
        return Let(u, RefWrite(r, i32(value)), RefRead(r))

    # Tuple fields, then call arguments, run left to right.
    f, x, y = Var("f"), Var("x"), Var("y")
    prog = lets(
        [(r, RefCreate(i32(0))), (f, Function([x, y], Tuple([x, y]))),
         (v, Tuple([write_then_read(1), write_then_read(2)]))],
        Tuple([v, Call(f, [write_then_read(3), write_then_read(4)]), RefRead(r)]),
    )
    (t0, t1), (c0, c1), last = evaluate(prog)
    assert [t0, t1, c0, c1, last] == [1, 2, 3, 4, 4]


# ---- algebraic data types -------------------------------------------------------------------

def _btree_module():
    mod = IRModule()
    btree = define_adt("BTree", ["a"], [
        ("Leaf", [lambda s, tv: tv[0]]),
        ("Node", [lambda s, tv: s, lambda s, tv: s]),
    ])
    mod.add_type(btree)
    leaf, node = btree.constructors
    # tsum(t) = match t { Leaf(v) => v | Node(left, right) => tsum(left) + tsum(right) }
    tsum, t = GlobalVar("tsum"), Var("t")
    (v, pv), (left, pleft), (right, pright) = pvar("v"), pvar("left"), pvar("right")
    mod.add(tsum, Function([t], Match(t, [
        Clause(PatternConstructor(leaf, [pv]), v),
        Clause(PatternConstructor(node, [pleft, pright]),
               op("add", Call(tsum, [left]), Call(tsum, [right]))),
    ])))
    # build(lo, hi): the balanced tree of leaves lo .. hi-1, made by the program itself.
    build, lo, hi, mid = GlobalVar("build"), Var("lo", I32), Var("hi", I32), Var("mid")
    mod.add(build, Function([lo, hi], If(
        op("equal", op("add", lo, i32(1)), hi), Call(leaf, [lo]),
        Let(mid, op("divide", op("add", lo, hi), i32(2)),
            Call(node, [Call(build, [lo, mid]), Call(build, [mid, hi])])),
    )))
    return mod, leaf, node


def test_a_user_defined_tree_built_and_folded_by_match():
    mod, leaf, node = _btree_module()
    tree = evaluate(mod, 0, 37, entry="build")
    assert isinstance(tree, ConstructorValue) and tree.constructor is node
    assert evaluate(mod, tree, entry="tsum") == sum(range(37))
    # A tree built in Python is matched the same way.
    hand = ConstructorValue(node, (ConstructorValue(leaf, (np.int32(4),)),
                                   ConstructorValue(leaf, (np.int32(-1),))))
    assert evaluate(mod, hand, entry="tsum") == 3


def test_a_user_defined_option():
    mod = IRModule()
    maybe = define_adt("Maybe", ["a"], [("Just", [lambda s, tv: tv[0]]), ("Nothing", [])])
    mod.add_type(maybe)
    just, nothing = maybe.constructors
    # safe_div(a, b) = if b == 0 then Nothing else Just(a / b); then match with a default.
    a, b, q = Var("a", F32), Var("b", F32), Var("q")
    safe = If(op("equal", b, f32(0.0)), Call(nothing, []), Call(just, [op("divide", a, b)]))
    (v, pv) = pvar("v")
    prog = Function([a, b], Let(q, safe, Match(q, [
        Clause(PatternConstructor(just, [pv]), v),
        Clause(PatternConstructor(nothing), f32(-1.0)),
    ])))
    np.testing.assert_allclose(evaluate(prog, 3.0, 4.0, mod=mod), jnp.float32(3.0) / 4.0)
    assert evaluate(prog, 3.0, 0.0, mod=mod) == -1.0


def test_nested_tuple_and_wildcard_patterns():
    mod = IRModule()
    cons, nil = mod.get_constructor("Cons"), mod.get_constructor("Nil")
    some, none = mod.get_constructor("Some"), mod.get_constructor("None")
    (a, pa), (b, pb), (c, pc), (d, pd), (e, pe) = (pvar(n) for n in "abcde")
    xs, opt = Var("xs"), Var("opt")
    # match (xs, opt) {
    #   (Cons((a, b), Cons(_, _)), Some(c)) => a + b + c     -- two or more pairs, and a Some
    #   (Cons((e, _), _), None)             => e             -- at least one pair, None
    #   (Nil, Some(d))                      => d
    #   _                                   => -1 }
    def cons_p(head, tail):
        return PatternConstructor(cons, [head, tail])

    body = Match(Tuple([xs, opt]), [
        Clause(PatternTuple([
            cons_p(PatternTuple([pa, pb]), cons_p(PatternWildcard(), PatternWildcard())),
            PatternConstructor(some, [pc]),
        ]), op("add", op("add", a, b), c)),
        Clause(PatternTuple([cons_p(PatternTuple([pe, PatternWildcard()]), PatternWildcard()),
                             PatternConstructor(none)]), e),
        Clause(PatternTuple([PatternConstructor(nil), PatternConstructor(some, [pd])]), d),
        Clause(PatternWildcard(), i32(-1)),
    ])
    prog = Function([xs, opt], body)

    def run(pairs, option):
        value = list_value([(np.int32(p), np.int32(q)) for p, q in pairs])
        opt_value = (ConstructorValue(some, (np.int32(option),)) if option is not None
                     else ConstructorValue(none, ()))
        return evaluate(prog, value, opt_value).item()

    def python(pairs, option):
        if len(pairs) >= 2 and option is not None:
            return pairs[0][0] + pairs[0][1] + option
        if pairs and option is None:
            return pairs[0][0]
        if not pairs and option is not None:
            return option
        return -1

    cases = [([(1, 2), (3, 4)], 10), ([(1, 2)], 10), ([(5, 6), (7, 8)], None), ([], 7),
             ([], None), ([(1, 2), (3, 4), (5, 6)], 0)]
    for pairs, option in cases:
        assert run(pairs, option) == python(pairs, option), (pairs, option)


def test_a_constructor_and_an_op_are_function_values():
    mod = IRModule()
    some = mod.get_constructor("Some")
    xs = Var("xs")
    wrapped = evaluate(Function([xs], Call(mod.get_global_var("map"), [some, xs])),
                       list_value([1.0, 2.0]), mod=mod)
    assert [w.name for w in list_items(wrapped)] == ["Some", "Some"]
    assert [w.fields[0].item() for w in list_items(wrapped)] == [1.0, 2.0]
    interp = Interpreter(mod)
    assert interp.call(Op.get("multiply"), [np.int32(6), np.int32(7)]) == 42
    assert interp.call(some, [np.float32(1)]).name == "Some"


# ---- the prelude ----------------------------------------------------------------------------

def _prelude_call(mod: IRModule, name: str, *args):
    return Call(mod.get_global_var(name), list(args))


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(-50, 50), max_size=12), st.lists(st.integers(-50, 50), max_size=12))
def test_the_prelude_agrees_with_python(xs, ys):
    mod = IRModule()
    lx, ly = list_value(np.array(xs, dtype="int32")), list_value(np.array(ys, dtype="int32"))
    a, b, x, y = Var("a"), Var("b"), Var("x"), Var("y")
    square = Function([a], op("multiply", a, a))
    minus = Function([a, b], op("subtract", a, b))
    run = lambda body: evaluate(Function([x, y], body), lx, ly, mod=mod)  # noqa: E731

    assert as_python(list_items(run(_prelude_call(mod, "map", square, x)))) == [v * v for v in xs]
    assert run(_prelude_call(mod, "foldl", minus, i32(100), x)) == functools.reduce(
        lambda acc, v: acc - v, xs, 100)
    assert run(_prelude_call(mod, "foldr", minus, i32(100), x)) == functools.reduce(
        lambda acc, v: v - acc, reversed(xs), 100)
    assert run(_prelude_call(mod, "length", x)) == len(xs)
    zipped = [tuple(p.item() for p in pair) for pair in list_items(
        run(_prelude_call(mod, "zip", x, y)))]
    assert zipped == list(zip(xs, ys))
    for k in range(len(xs)):
        out = run(_prelude_call(mod, "nth", x, i32(k)))
        assert out.dtype == np.int32 and out == xs[k]


def test_prelude_map_over_tensors_agrees_with_jax():
    mod = IRModule()
    rng = np.random.default_rng(0)
    tensors = [rng.standard_normal((2, 3)).astype("float32") for _ in range(4)]
    a, b, x = Var("a"), Var("b"), Var("x")
    total = _prelude_call(mod, "foldl", Function([a, b], op("add", a, op("tanh", b))),
                          op("zeros", shape=(2, 3), dtype="float32"), x)
    out = evaluate(Function([x], total), list_value(tensors), mod=mod)
    expected = sum((jnp.tanh(jnp.asarray(t)) for t in tensors), jnp.zeros((2, 3), jnp.float32))
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    assert out.dtype == np.float32


def test_a_match_with_no_matching_clause_says_where_and_what():
    mod = IRModule()
    with pytest.raises(InterpreterError, match="no clause of the match matches Nil"):
        evaluate(mod, list_value([1, 2, 3]), 5, entry="nth")
    cons = mod.get_constructor("Cons")
    h, xs = Var("h"), Var("xs")
    span = Span("prog.py", 3, 11, 3, 19, source_line="    match xs:")
    head = Function([xs], Match(xs, [Clause(PatternConstructor(cons, [PatternVar(h),
                                                                      PatternWildcard()]), h)],
                                complete=False, span=span))
    with pytest.raises(RelayError) as info:
        evaluate(head, list_value([]), mod=mod)
    message = str(info.value)
    assert "no clause of the match at prog.py:3:11 matches Nil" in message
    assert "    match xs:\n" in message and "^^^^" in message
    assert evaluate(head, list_value([2.5]), mod=mod) == 2.5


# ---- tuples, ops, arguments -----------------------------------------------------------------

def test_tuples_and_tuple_get_item():
    x, t = Var("x", TupleType((F32, TupleType((I32, BOOL))))), Var("t")
    prog = Function([x], Let(t, Tuple([TupleGetItem(TupleGetItem(x, 1), 0), TupleGetItem(x, 0)]),
                             Tuple([t, TupleGetItem(TupleGetItem(x, 1), 1), Tuple([])])))
    (first, second), flag, empty = evaluate(prog, (1.5, (7, True)))
    assert first.dtype == np.int32 and first == 7
    assert second.dtype == np.float32 and second == 1.5
    assert flag.dtype == np.bool_ and flag and empty == ()
    with pytest.raises(InterpreterError, match="cannot take field 2"):
        evaluate(TupleGetItem(Tuple([i32(1), i32(2)]), 2))


def test_op_calls_pass_their_attributes():
    rng = np.random.default_rng(1)
    data = rng.standard_normal((2, 3, 4)).astype("float32")
    x = Var("x", TensorType((2, 3, 4), "float32"))
    prog = Function([x], Tuple([
        op("sum", x, axis=1),
        op("sum", x, axis=(0, 2), keepdims=True),
        op("mean", x),
        op("max", x, axis=-1),
        op("transpose", x, axes=(2, 0, 1)),
        op("concatenate", Tuple([x, x]), axis=1),
        op("split", x, indices_or_sections=2, axis=2),
    ]))
    out = evaluate(prog, data)
    j = jnp.asarray(data)
    expected = (jnp.sum(j, axis=1), jnp.sum(j, axis=(0, 2), keepdims=True), jnp.mean(j),
                jnp.max(j, axis=-1), jnp.transpose(j, (2, 0, 1)), jnp.concatenate([j, j], axis=1))
    for got, want in zip(out, expected):
        assert got.dtype == np.float32 and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    halves = out[-1]
    assert isinstance(halves, tuple) and len(halves) == 2
    for got, want in zip(halves, jnp.split(j, 2, axis=2)):
        np.testing.assert_allclose(got, want)


def test_arguments_take_the_annotated_dtype():
    a, b, c = Var("a", TensorType((), "float16")), Var("b", TensorType((3,), "int32")), Var("c")
    out = evaluate(Function([a, b, c], Tuple([a, b, c])), 2, [1, 2, 3], 0.5)
    assert [v.dtype.name for v in out] == ["float16", "int32", "float32"]
    assert to_value(True).dtype == np.bool_ and to_value(7).dtype == np.int32
    with pytest.raises(InterpreterError, match=r"argument %b of fn\(%a, %b, %c\) must be"):
        evaluate(Function([a, b, c], a), 1.0, np.zeros(3, "float32"), 1)
    with pytest.raises(InterpreterError, match="must be Tensor"):
        evaluate(Function([a, b, c], a), 1.0, np.zeros(4, "int32"), 1)
    with pytest.raises(InterpreterError, match="must be"):
        evaluate(Function([b], b), [1.5, 2.0, 3.0])
    with pytest.raises(InterpreterError, match="takes 3 argument"):
        evaluate(Function([a, b, c], a), 1.0)


def test_lets_scope_lexically():
    t, r = Var("t"), Var("r")
    # let t = 1; let r = (let t = 10; t); t + r   -- the inner t does not leak
    assert evaluate(lets([(t, i32(1)), (r, Let(t, i32(10), t))], op("add", t, r))) == 11
    # let t = 1; let t = 2; t
    assert evaluate(lets([(t, i32(1)), (t, i32(2))], t)) == 2
    # let t = 1; let f = fn() { t }; let t = 2; f()   -- a closure keeps what it captured
    f = Var("f")
    assert evaluate(lets([(t, i32(1)), (f, Function([], t)), (t, i32(2))], Call(f, []))) == 1


def test_a_long_chain_of_lets_needs_no_stack(monkeypatch):
    monkeypatch.setattr(interpreter, "RECURSION_LIMIT", 1)
    vs = [Var(f"v{k}") for k in range(20_001)]
    chain = [(vs[0], i32(0))] + [(vs[k], op("add", vs[k - 1], i32(1))) for k in range(1, 20_001)]
    assert evaluate(lets(chain, vs[-1])) == 20_000


def test_evaluate_runs_a_module_main_and_plain_expressions():
    x = Var("x", I32)
    mod = IRModule()
    mod.add("main", Function([], op("multiply", i32(6), i32(7))))
    assert evaluate(mod) == 42
    assert evaluate(op("add", i32(2), i32(3))) == 5
    result = evaluate(const(np.ones(2, "float32")))
    result += 1  # results are the caller's own arrays, even for constants
    assert Interpreter().eval(op("add", x, x), {x: np.int32(4)}) == 8


def test_run_time_errors_are_clear():
    span = Span("p.py", 1, 1)
    with pytest.raises(InterpreterError, match=r"if at p\.py:1:1 must be a bool scalar"):
        evaluate(If(f32(1.0), i32(1), i32(2), span=span))
    with pytest.raises(InterpreterError, match="variable %ghost is not bound"):
        evaluate(op("add", Var("ghost"), i32(1)))
    with pytest.raises(InterpreterError, match="is not a function"):
        evaluate(Call(i32(3), [i32(1)]))
    with pytest.raises(InterpreterError, match="add failed on"):
        evaluate(op("add", const(np.zeros(2, "float32")), const(np.zeros(3, "float32"))))
    with pytest.raises(InterpreterError, match="expected a reference"):
        evaluate(RefRead(i32(1)))
    with pytest.raises(InterpreterError, match=r"fn\(%x\) takes 1 argument"):
        x = Var("x")
        evaluate(Call(Function([x], x), [i32(1), i32(2)]))


# ---- shapes known only at run time: the op's relation decides, on every target (issue 26,
# item 13) --------------------------------------------------------------------------------------

def _prelu_program():
    from relaydsl import Float, Tensor, relay

    src = '''
@relay
def channels(x: Tensor[Float, (1, relay.Any, 3)], a: Tensor[Float, (relay.Any,)]
             ) -> Tensor[Float, (1, relay.Any, 3)]:
    return relay.prelu(x, a)
'''
    return relay.function_from_source(src, {"relay": relay, "Tensor": Tensor, "Float": Float})


@pytest.mark.parametrize("target", ["interp", "llvm"])
def test_a_relation_any_dims_left_open_is_checked_when_the_shapes_are_known(target):
    from relaydsl import RelayTypeError

    exe = _prelu_program().build(target)
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(1, 2, 3)
    alpha = np.array([0.25, 0.5], np.float32)
    expected = jnp.where(x > 0, x, x * alpha[None, :, None])
    np.testing.assert_allclose(exe(x, alpha), expected, rtol=1e-6)
    # TVM's rule: alpha has data.shape[axis] elements; NumPy would broadcast a single one
    with pytest.raises(RelayTypeError, match=r"prelu: alpha Tensor\[\(1,\), float32\] must "
                                             r"have data\.shape\[1\] = 2 elements"):
        exe(x, alpha[:1])


# ---- graph normal form's sharing ---------------------------------------------------------------


class _Counting(Interpreter):
    """Counts the op calls it makes."""

    def __init__(self) -> None:
        super().__init__()
        self.op_calls = 0

    def _apply_op(self, *args, **kwargs):
        self.op_calls += 1
        return super()._apply_op(*args, **kwargs)


def test_a_deep_residual_chain_evaluates_each_shared_node_once():
    """30 residual blocks ``h = relu(tanh(h * w) + h)`` in graph normal form: each block's
    input is one node used twice. Walked as a tree that was 2^30 evaluations; now each op call
    runs once, and the value is JAX's."""
    blocks, rng = 30, np.random.default_rng(3)
    ws = [rng.uniform(-1, 1, (4,)).astype(np.float32) for _ in range(blocks)]
    x = Var("x", TensorType((4,), "float32"))
    h = x
    for w in ws:
        h = op("relu", op("add", op("tanh", op("multiply", h, Constant(w))), h))
    data = rng.uniform(-1, 1, (4,)).astype(np.float32)
    interp = _Counting()
    got = interp.call(interp.eval(Function([x], h)), [data])
    assert interp.op_calls == 4 * blocks
    ref = jnp.asarray(data)
    for w in ws:
        ref = jnp.maximum(jnp.tanh(ref * w) + ref, 0)
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)


def test_a_shared_node_that_reads_a_reference_is_evaluated_at_each_use():
    """Sharing means one value only for pure dataflow: ``!r + 1`` used before and after
    ``r := 5`` reads the cell each time, in order (as the tree the program stands for)."""
    r = Var("r")
    read = op("add", RefRead(r), f32(1.0))
    shared = Let(r, RefCreate(f32(1.0)), Tuple([read, RefWrite(r, f32(5.0)), read]))
    first, _, second = evaluate(shared)
    assert (float(first), float(second)) == (2.0, 6.0)


def test_a_shared_pure_node_under_a_nested_let_sees_that_lets_variable():
    """A nested let's memo is its own: the same node object under two lets binding its
    variable to different values gives each let's value (a child memo never leaks up)."""
    v = Var("v")
    node = op("multiply", v, f32(3.0))
    program = Tuple([Let(v, f32(1.0), node), Let(v, f32(2.0), node)])
    assert tuple(float(a) for a in evaluate(program)) == (3.0, 6.0)
