"""The prelude every IRModule starts with: List, Option, Tree and their combinators.

It sits above the op layer (``length`` and ``nth`` call add, equal and subtract) and installs
itself into relaydsl.ir.module when imported, as an op declares itself into the IR's op table;
``import relaydsl`` imports it, so ``IRModule()`` always starts with it.

In the text format::

    type List[a] { Cons(a, List[a]), Nil }
    type Option[a] { Some(a), None }
    type Tree[a] { Rose(a, List[Tree[a]]) }
    def @map<a, b>(%f: fn(a) -> b, %xs: List[a]) -> List[b]
    def @foldl<a, b>(%f: fn(a, b) -> a, %acc: a, %xs: List[b]) -> a
    def @foldr<a, b>(%f: fn(a, b) -> b, %acc: b, %xs: List[a]) -> b
    def @zip<a, b>(%xs: List[a], %ys: List[b]) -> List[(a, b)]
    def @length<a>(%xs: List[a]) -> int32
    def @nth<a>(%xs: List[a], %n: int32) -> a
"""
from __future__ import annotations

import functools

import numpy as np

from relaydsl.ir.adt import PatternConstructor, PatternVar, PatternWildcard, define_adt
from relaydsl.ir.expr import Call, Clause, Constant, Function, GlobalVar, If, Match, Tuple, Var
from relaydsl.ir.module import Prelude, install_prelude
from relaydsl.ir.types import FuncType, TensorType, TupleType, TypeCall, TypeVar
from relaydsl.op.registry import ops

_INT = TensorType((), "int32")


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

    def List(t):  # reads like the type it builds
        return TypeCall(list_t.header, (t,))

    funcs: dict[GlobalVar, Function] = {}
    gv = {name: GlobalVar(name) for name in ("map", "foldl", "foldr", "zip", "length", "nth")}

    # map<a, b>(f, xs) = match xs { Cons(h, t) => Cons(f(h), map(f, t)) | Nil => Nil }
    a, b = TypeVar("a"), TypeVar("b")
    f, xs, h, t = Var("f", FuncType((a,), b)), Var("xs", List(a)), Var("h"), Var("t")
    body = Match(xs, (
        Clause(PatternConstructor(cons, (PatternVar(h), PatternVar(t))),
               Call(cons, (Call(f, (h,)), Call(gv["map"], (f, t))))),
        Clause(PatternConstructor(nil), Call(nil, ())),
    ))
    funcs[gv["map"]] = Function((f, xs), body, List(b), (a, b))

    # foldl<a, b>(f, acc, xs) = match xs { Cons(h, t) => foldl(f, f(acc, h), t) | Nil => acc }
    a, b = TypeVar("a"), TypeVar("b")
    f, acc, xs = Var("f", FuncType((a, b), a)), Var("acc", a), Var("xs", List(b))
    h, t = Var("h"), Var("t")
    body = Match(xs, (
        Clause(PatternConstructor(cons, (PatternVar(h), PatternVar(t))),
               Call(gv["foldl"], (f, Call(f, (acc, h)), t))),
        Clause(PatternConstructor(nil), acc),
    ))
    funcs[gv["foldl"]] = Function((f, acc, xs), body, a, (a, b))

    # foldr<a, b>(f, acc, xs) = match xs { Cons(h, t) => f(h, foldr(f, acc, t)) | Nil => acc }
    a, b = TypeVar("a"), TypeVar("b")
    f, acc, xs = Var("f", FuncType((a, b), b)), Var("acc", b), Var("xs", List(a))
    h, t = Var("h"), Var("t")
    body = Match(xs, (
        Clause(PatternConstructor(cons, (PatternVar(h), PatternVar(t))),
               Call(f, (h, Call(gv["foldr"], (f, acc, t))))),
        Clause(PatternConstructor(nil), acc),
    ))
    funcs[gv["foldr"]] = Function((f, acc, xs), body, b, (a, b))

    # zip<a, b>(xs, ys): pairs up to the shorter list.
    a, b = TypeVar("a"), TypeVar("b")
    xs, ys = Var("xs", List(a)), Var("ys", List(b))
    h1, t1, h2, t2 = Var("h1"), Var("t1"), Var("h2"), Var("t2")
    pair_t = TupleType((a, b))
    inner = Match(ys, (
        Clause(PatternConstructor(cons, (PatternVar(h2), PatternVar(t2))),
               Call(cons, (Tuple((h1, h2)), Call(gv["zip"], (t1, t2))))),
        Clause(PatternConstructor(nil), Call(nil, ())),
    ))
    body = Match(xs, (
        Clause(PatternConstructor(cons, (PatternVar(h1), PatternVar(t1))), inner),
        Clause(PatternConstructor(nil), Call(nil, ())),
    ))
    funcs[gv["zip"]] = Function((xs, ys), body, List(pair_t), (a, b))

    # length<a>(xs) = match xs { Cons(_, t) => 1 + length(t) | Nil => 0 }
    a = TypeVar("a")
    xs, t = Var("xs", List(a)), Var("t")
    body = Match(xs, (
        Clause(PatternConstructor(cons, (PatternWildcard(), PatternVar(t))),
               ops.add(_int(1), Call(gv["length"], (t,)))),
        Clause(PatternConstructor(nil), _int(0)),
    ))
    funcs[gv["length"]] = Function((xs,), body, _INT, (a,))

    # nth<a>(xs, n) = match xs { Cons(h, t) => if n == 0 then h else nth(t, n - 1) }
    # (no Nil clause: an error)
    a = TypeVar("a")
    xs, n, h, t = Var("xs", List(a)), Var("n", _INT), Var("h"), Var("t")
    body = Match(xs, (
        Clause(PatternConstructor(cons, (PatternVar(h), PatternVar(t))),
               If(ops.equal(n, _int(0)), h, Call(gv["nth"], (t, ops.subtract(n, _int(1)))))),
    ), complete=False)
    funcs[gv["nth"]] = Function((xs, n), body, a, (a,))

    return (list_t, option_t, tree_t), funcs


install_prelude(prelude_definitions)
