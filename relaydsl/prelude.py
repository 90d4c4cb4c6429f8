"""The prelude every IRModule starts with: List, Option, Tree and their combinators.

It sits above the op layer (``length`` and ``nth`` call add, equal and subtract) and installs
itself into relaydsl.ir.module when imported, as an op declares itself into the IR's op table;
``import relaydsl`` imports it, so ``IRModule()`` always starts with it.

The functions are TVM's (python/tvm/relay/std/prelude.rly) and behave as its tests expect. It
is built as IR, not parsed from text as TVM's is: ``parse`` makes modules that start with the
prelude, so the prelude cannot be parsed by it. In the text format::

    type List[a] { Cons(a, List[a]), Nil }
    type Option[a] { Some(a), None }
    type Tree[a] { Rose(a, List[Tree[a]]) }
    def @id<a>(%x: a) -> a
    def @compose<a, b, c>(%f: fn(b) -> c, %g: fn(a) -> b) -> fn(a) -> c     # f after g
    def @flip<a, b, c>(%f: fn(a, b) -> c) -> fn(b, a) -> c
    def @hd<a>(%xs: List[a]) -> a                                           # error on Nil
    def @tl<a>(%xs: List[a]) -> List[a]                                     # error on Nil
    def @nth<a>(%xs: List[a], %n: int32) -> a
    def @update<a>(%xs: List[a], %n: int32, %v: a) -> List[a]               # xs with xs[n] = v
    def @length<a>(%xs: List[a]) -> int32
    def @map<a, b>(%f: fn(a) -> b, %xs: List[a]) -> List[b]
    def @foldl<a, b>(%f: fn(a, b) -> a, %acc: a, %xs: List[b]) -> a
    def @foldr<a, b>(%f: fn(a, b) -> b, %acc: b, %xs: List[a]) -> b
    def @foldr1<a>(%f: fn(a, a) -> a, %xs: List[a]) -> a                  # error on Nil
    def @sum(%xs: List[int32]) -> int32
    def @concat<a>(%xs: List[a], %ys: List[a]) -> List[a]
    def @filter<a>(%f: fn(a) -> bool, %xs: List[a]) -> List[a]
    def @zip<a, b>(%xs: List[a], %ys: List[b]) -> List[(a, b)]             # to the shorter
    def @rev<a>(%xs: List[a]) -> List[a]
    def @map_accumr<a, b, c>(%f: fn(a, b) -> (a, c), %init: a, %xs: List[b]) -> (a, List[c])
    def @map_accuml<a, b, c>(%f: fn(a, b) -> (a, c), %init: a, %xs: List[b]) -> (a, List[c])
    def @unfoldr<a, b>(%f: fn(a) -> Option[(a, b)], %seed: a) -> List[b]
    def @unfoldl<a, b>(%f: fn(a) -> Option[(a, b)], %seed: a) -> List[b]   # unfoldr reversed
    def @tmap<a, b>(%f: fn(a) -> b, %t: Tree[a]) -> Tree[b]
    def @size<a>(%t: Tree[a]) -> int32                                      # its nodes
    def @iterate<a>(%f: fn(a) -> a, %n: int32) -> fn(a) -> a               # f composed n times

``map_accuml`` threads the accumulator from the left; as TVM's, it conses each output onto
the list built so far, so its list comes out in reverse order (``map_accumr``'s in order).
"""
from __future__ import annotations

import functools

import numpy as np

from relaydsl.ir.adt import PatternConstructor, PatternVar, PatternWildcard, define_adt
from relaydsl.ir.adt import Constructor, Pattern
from relaydsl.ir.expr import (
    Call, Clause, Constant, Expr, Function, GlobalVar, If, Let, Match, Tuple, TupleGetItem, Var,
)
from relaydsl.ir.module import Prelude, install_prelude
from relaydsl.ir.types import FuncType, TensorType, TupleType, Type, TypeCall, TypeVar
from relaydsl.op.registry import ops

_INT = TensorType((), "int32")
_BOOL = TensorType((), "bool")


def _int(v: int) -> Constant:
    return Constant(np.array(v, dtype="int32"))


@functools.cache
def prelude_definitions() -> Prelude:
    """The prelude's ADTs and global functions (built once; nodes are shared by every module)."""
    list_t = define_adt("List", ["a"],
                        [("Cons", [lambda s, tv: tv[0], lambda s, tv: s]), ("Nil", [])])
    option_t = define_adt("Option", ["a"], [("Some", [lambda s, tv: tv[0]]), ("None", [])])
    cons, nil = list_t.constructors
    tree_t = define_adt(
        "Tree", ["a"],
        [("Rose", [lambda s, tv: tv[0], lambda s, tv: TypeCall(list_t.header, (s,))])],
    )

    rose = tree_t.constructors[0]
    some, none = option_t.constructors

    def List(t: Type) -> TypeCall:  # reads like the type it builds
        return TypeCall(list_t.header, (t,))

    def Tree(t: Type) -> TypeCall:
        return TypeCall(tree_t.header, (t,))

    def Option(t: Type) -> TypeCall:
        return TypeCall(option_t.header, (t,))

    def Fn(*types: Type) -> FuncType:  # Fn(a, b, r): fn(a, b) -> r
        return FuncType(types[:-1], types[-1])

    def case(c: Constructor, *fields: Pattern | Var | None) -> PatternConstructor:
        """A constructor pattern; a Var field binds it, None ignores it."""
        return PatternConstructor(c, tuple(
            PatternVar(f) if isinstance(f, Var) else PatternWildcard() if f is None else f
            for f in fields))

    def match(data: Expr, *clauses: tuple[Pattern, Expr], complete: bool = True) -> Match:
        return Match(data, tuple(Clause(p, body) for p, body in clauses), complete=complete)

    def call(name: str, *args: Expr) -> Call:
        return Call(gv[name], args)

    def Cons(h: Expr, t: Expr) -> Call:
        return Call(cons, (h, t))

    def Nil() -> Call:
        return Call(nil, ())

    funcs: dict[GlobalVar, Function] = {}
    gv = {name: GlobalVar(name) for name in (
        "id", "compose", "flip", "hd", "tl", "nth", "update", "length", "map", "foldl", "foldr",
        "foldr1", "sum", "concat", "filter", "zip", "rev", "map_accumr", "map_accuml",
        "unfoldr", "unfoldl", "tmap", "size", "iterate")}

    def define(name: str, params: list[Var], body: Expr, ret: Type,
               type_params: tuple[TypeVar, ...]) -> None:
        funcs[gv[name]] = Function(tuple(params), body, ret, type_params)

    # id<a>(x) = x
    a = TypeVar("a")
    x = Var("x", a)
    define("id", [x], x, a, (a,))

    # compose<a, b, c>(f, g) = fn(x) { f(g(x)) }
    a, b, c = TypeVar("a"), TypeVar("b"), TypeVar("c")
    f, g, x = Var("f", Fn(b, c)), Var("g", Fn(a, b)), Var("x", a)
    define("compose", [f, g], Function((x,), Call(f, (Call(g, (x,)),)), c), Fn(a, c), (a, b, c))

    # flip<a, b, c>(f) = fn(y, x) { f(x, y) }
    a, b, c = TypeVar("a"), TypeVar("b"), TypeVar("c")
    f, x, y = Var("f", Fn(a, b, c)), Var("x", a), Var("y", b)
    define("flip", [f], Function((y, x), Call(f, (x, y)), c), Fn(b, a, c), (a, b, c))

    # hd<a>(xs) = match? xs { Cons(h, _) => h };  tl<a>(xs) = match? xs { Cons(_, t) => t }
    a = TypeVar("a")
    xs, h = Var("xs", List(a)), Var("h")
    define("hd", [xs], match(xs, (case(cons, h, None), h), complete=False), a, (a,))
    a = TypeVar("a")
    xs, t = Var("xs", List(a)), Var("t")
    define("tl", [xs], match(xs, (case(cons, None, t), t), complete=False), List(a), (a,))

    # nth<a>(xs, n) = match? xs { Cons(h, t) => if n == 0 then h else nth(t, n - 1) }
    a = TypeVar("a")
    xs, n, h, t = Var("xs", List(a)), Var("n", _INT), Var("h"), Var("t")
    body = If(ops.equal(n, _int(0)), h, call("nth", t, ops.subtract(n, _int(1))))
    define("nth", [xs, n], match(xs, (case(cons, h, t), body), complete=False), a, (a,))

    # update<a>(xs, n, v) = match? xs { Cons(h, t) => if n == 0 then Cons(v, t)
    #                                                  else Cons(h, update(t, n - 1, v)) }
    a = TypeVar("a")
    xs, n, v, h, t = Var("xs", List(a)), Var("n", _INT), Var("v", a), Var("h"), Var("t")
    body = If(ops.equal(n, _int(0)), Cons(v, t),
              Cons(h, call("update", t, ops.subtract(n, _int(1)), v)))
    define("update", [xs, n, v], match(xs, (case(cons, h, t), body), complete=False), List(a),
           (a,))

    # length<a>(xs) = match xs { Cons(_, t) => 1 + length(t) | Nil => 0 }
    a = TypeVar("a")
    xs, t = Var("xs", List(a)), Var("t")
    body = match(xs, (case(cons, None, t), ops.add(_int(1), call("length", t))),
                 (case(nil), _int(0)))
    define("length", [xs], body, _INT, (a,))

    # map<a, b>(f, xs) = match xs { Cons(h, t) => Cons(f(h), map(f, t)) | Nil => Nil }
    a, b = TypeVar("a"), TypeVar("b")
    f, xs, h, t = Var("f", Fn(a, b)), Var("xs", List(a)), Var("h"), Var("t")
    body = match(xs, (case(cons, h, t), Cons(Call(f, (h,)), call("map", f, t))),
                 (case(nil), Nil()))
    define("map", [f, xs], body, List(b), (a, b))

    # foldl<a, b>(f, acc, xs) = match xs { Cons(h, t) => foldl(f, f(acc, h), t) | Nil => acc }
    a, b = TypeVar("a"), TypeVar("b")
    f, acc, xs, h, t = Var("f", Fn(a, b, a)), Var("acc", a), Var("xs", List(b)), Var("h"), Var("t")
    body = match(xs, (case(cons, h, t), call("foldl", f, Call(f, (acc, h)), t)),
                 (case(nil), acc))
    define("foldl", [f, acc, xs], body, a, (a, b))

    # foldr<a, b>(f, acc, xs) = match xs { Cons(h, t) => f(h, foldr(f, acc, t)) | Nil => acc }
    a, b = TypeVar("a"), TypeVar("b")
    f, acc, xs, h, t = Var("f", Fn(a, b, b)), Var("acc", b), Var("xs", List(a)), Var("h"), Var("t")
    body = match(xs, (case(cons, h, t), Call(f, (h, call("foldr", f, acc, t)))),
                 (case(nil), acc))
    define("foldr", [f, acc, xs], body, b, (a, b))

    # foldr1<a>(f, xs) = match? xs { Cons(h, Nil) => h | Cons(h, t) => f(h, foldr1(f, t)) }
    a = TypeVar("a")
    f, xs, h1, h, t = Var("f", Fn(a, a, a)), Var("xs", List(a)), Var("h1"), Var("h"), Var("t")
    body = match(xs, (case(cons, h1, case(nil)), h1),
                 (case(cons, h, t), Call(f, (h, call("foldr1", f, t)))), complete=False)
    define("foldr1", [f, xs], body, a, (a,))

    # sum(xs) = foldl(fn(x, y) { x + y }, 0, xs), on int32 as TVM's
    xs, x, y = Var("xs", List(_INT)), Var("x", _INT), Var("y", _INT)
    define("sum", [xs], call("foldl", Function((x, y), ops.add(x, y), _INT), _int(0), xs), _INT,
           ())

    # concat<a>(xs, ys) = foldr(fn(h, t) { Cons(h, t) }, ys, xs)
    a = TypeVar("a")
    xs, ys, h, t = Var("xs", List(a)), Var("ys", List(a)), Var("h", a), Var("t", List(a))
    define("concat", [xs, ys], call("foldr", Function((h, t), Cons(h, t), List(a)), ys, xs),
           List(a), (a,))

    # filter<a>(f, xs) = match xs { Cons(h, t) => if f(h) then Cons(h, filter(f, t))
    #                                             else filter(f, t) | Nil => Nil }
    a = TypeVar("a")
    f, xs, h, t = Var("f", Fn(a, _BOOL)), Var("xs", List(a)), Var("h"), Var("t")
    rest = call("filter", f, t)
    body = match(xs, (case(cons, h, t), If(Call(f, (h,)), Cons(h, rest), rest)),
                 (case(nil), Nil()))
    define("filter", [f, xs], body, List(a), (a,))

    # zip<a, b>(xs, ys): pairs up to the shorter list.
    a, b = TypeVar("a"), TypeVar("b")
    xs, ys = Var("xs", List(a)), Var("ys", List(b))
    h1, t1, h2, t2 = Var("h1"), Var("t1"), Var("h2"), Var("t2")
    inner = match(ys, (case(cons, h2, t2), Cons(Tuple((h1, h2)), call("zip", t1, t2))),
                  (case(nil), Nil()))
    body = match(xs, (case(cons, h1, t1), inner), (case(nil), Nil()))
    define("zip", [xs, ys], body, List(TupleType((a, b))), (a, b))

    # rev<a>(xs) = foldl(fn(t, h) { Cons(h, t) }, Nil, xs)
    a = TypeVar("a")
    xs, t, h = Var("xs", List(a)), Var("t", List(a)), Var("h", a)
    define("rev", [xs], call("foldl", Function((t, h), Cons(h, t), List(a)), Nil(), xs),
           List(a), (a,))

    # map_accumr<a, b, c>(f, init, xs) = foldr(fn(x, acc) { let r = f(acc.0, x);
    #                                        (r.0, Cons(r.1, acc.1)) }, (init, Nil), xs)
    # map_accuml: the same with foldl, fn(acc, x).
    for name in ("map_accumr", "map_accuml"):
        a, b, c = TypeVar("a"), TypeVar("b"), TypeVar("c")
        state = TupleType((a, List(c)))
        f, init, xs = Var("f", Fn(a, b, TupleType((a, c)))), Var("init", a), Var("xs", List(b))
        x, acc, r = Var("x", b), Var("acc", state), Var("r")
        step = Let(r, Call(f, (TupleGetItem(acc, 0), x)),
                   Tuple((TupleGetItem(r, 0), Cons(TupleGetItem(r, 1), TupleGetItem(acc, 1)))))
        params = (x, acc) if name == "map_accumr" else (acc, x)
        fold = "foldr" if name == "map_accumr" else "foldl"
        define(name, [f, init, xs],
               call(fold, Function(params, step, state), Tuple((init, Nil())), xs),
               state, (a, b, c))

    # unfoldr<a, b>(f, seed) = match f(seed) { Some(r) => Cons(r.1, unfoldr(f, r.0))
    #                                          | None => Nil }
    a, b = TypeVar("a"), TypeVar("b")
    f, seed, r = Var("f", Fn(a, Option(TupleType((a, b))))), Var("seed", a), Var("r")
    body = match(Call(f, (seed,)),
                 (case(some, r),
                  Cons(TupleGetItem(r, 1), call("unfoldr", f, TupleGetItem(r, 0)))),
                 (case(none), Nil()))
    define("unfoldr", [f, seed], body, List(b), (a, b))

    # unfoldl<a, b>(f, seed) = rev(unfoldr(f, seed))
    a, b = TypeVar("a"), TypeVar("b")
    f, seed = Var("f", Fn(a, Option(TupleType((a, b))))), Var("seed", a)
    define("unfoldl", [f, seed], call("rev", call("unfoldr", f, seed)), List(b), (a, b))

    # tmap<a, b>(f, t) = match t { Rose(v, ts) => Rose(f(v), map(fn(u) { tmap(f, u) }, ts)) }
    a, b = TypeVar("a"), TypeVar("b")
    f, tree, u = Var("f", Fn(a, b)), Var("t", Tree(a)), Var("u", Tree(a))
    v, ts = Var("v"), Var("ts")
    each = Function((u,), call("tmap", f, u), Tree(b))
    body = match(tree, (case(rose, v, ts), Call(rose, (Call(f, (v,)), call("map", each, ts)))))
    define("tmap", [f, tree], body, Tree(b), (a, b))

    # size<a>(t) = match t { Rose(_, ts) => 1 + sum(map(fn(u) { size(u) }, ts)) }
    a = TypeVar("a")
    tree, ts, u = Var("t", Tree(a)), Var("ts"), Var("u", Tree(a))
    each = Function((u,), call("size", u), _INT)
    body = match(tree, (case(rose, None, ts),
                        ops.add(_int(1), call("sum", call("map", each, ts)))))
    define("size", [tree], body, _INT, (a,))

    # iterate<a>(f, n) = if n == 0 then id else compose(f, iterate(f, n - 1))
    a = TypeVar("a")
    f, n = Var("f", Fn(a, a)), Var("n", _INT)
    body = If(ops.equal(n, _int(0)), gv["id"],
              call("compose", f, call("iterate", f, ops.subtract(n, _int(1)))))
    define("iterate", [f, n], body, Fn(a, a), (a,))

    return (list_t, option_t, tree_t), funcs


install_prelude(prelude_definitions)
