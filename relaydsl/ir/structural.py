"""Structural (alpha-) equality and hashing of expressions, types and modules.

Two terms are structurally equal when they have the same shape and the
variables they bind are bound at corresponding positions (by ``let``, function
parameters, pattern variables, and the ``type_params`` of functions and function
types). Names are only hints and never compared. A *free* variable is equal only
to itself, unless ``map_free_vars=True``, in which case free variables are
matched consistently in order of first occurrence. Inside a module every global
function is compared on its own, with the type variables free in it (symbolic
dimensions of its signature) matched consistently, so ``parse(astext(m))`` equals
``m``.

Sharing is not observable: a DAG whose subterm is referenced twice equals the
tree that spells it out twice, and both hash alike. Both algorithms run on an
explicit work stack with a memo keyed by node identity, so they are linear on
DAGs and never recurse along long ``let`` chains (or any other deep nesting).

>>> from relaydsl.ir.expr import Function, Var
>>> x, y = Var("x"), Var("y")
>>> structural_equal(Function([x], x), Function([y], y))
True
>>> structural_hash(Function([x], x)) == structural_hash(Function([y], y))
True
>>> structural_equal(x, y), structural_equal(x, y, map_free_vars=True)
(False, True)
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any as AnyValue, Callable, Iterator, TypeVar as PyTypeVar

import numpy as np

from relaydsl.ir.adt import (
    Constructor, Pattern, PatternConstructor, PatternTuple, PatternVar, PatternWildcard, TypeData,
)
from relaydsl.ir.attrs import Attrs, is_tuple
from relaydsl.ir.expr import (
    Call, Constant, Expr, Function, GlobalVar, Grad, If, Let, Match, Op, RefCreate, RefRead,
    RefWrite, Tuple, TupleGetItem, Var,
)
from relaydsl.ir.module import IRModule
from relaydsl.ir.node import conforms
from relaydsl.ir.printer import astext
from relaydsl.ir.visitor import (
    ExprFunctor, ExprFunctorWithArgs, children, deep_recursion, let_chain,
)
from relaydsl.ir.types import (
    AnyDim, FuncType, GlobalTypeVar, RefType, TensorType, TupleType, Type, TypeCall, TypeVar,
)

Node = Expr | Type | IRModule | TypeData
_T = PyTypeVar("_T")


# ---------------------------------------------------------------------------
# Paths: where in the two terms a difference was found (a linked list, built cheaply).
# ---------------------------------------------------------------------------
class _Path(tuple["_Path | None", str]):
    """(parent, label): a linked list of labels, cheap to extend, rendered only on failure."""

    __slots__ = ()

    def child(self, label: str) -> "_Path":
        return _Path((self, label))

    def render(self) -> str:
        labels: list[str] = []
        node: _Path | None = self
        while node is not None:
            labels.append(node[1])
            node = node[0]
        labels.reverse()
        out: list[str] = []
        i = 0
        while i < len(labels):  # compress runs such as 100,000 nested `.body`
            j = i
            while j < len(labels) and labels[j] == labels[i]:
                j += 1
            out.append(labels[i] if j - i < 4 else f"{labels[i]}{{x{j - i}}}")
            i = j
        return "".join(out)


_Pairs = list[tuple[Expr, Expr, _Path]]  # the child pairs a node pair's comparison gives


@dataclass(frozen=True, slots=True)
class _Mismatch:
    path: _Path
    reason: str
    lhs: AnyValue
    rhs: AnyValue


class _NotEqual(Exception):
    def __init__(self, mismatch: _Mismatch):
        super().__init__(mismatch.reason)
        self.mismatch = mismatch


def _values_equal(a: AnyValue, b: AnyValue) -> bool:
    """Attribute values: equal types and values; floats bitwise (so NaN equals NaN)."""
    if type(a) is not type(b):
        return False
    if is_tuple(a):
        return len(a) == len(b) and all(_values_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, float):
        return np.float64(a).tobytes() == np.float64(b).tobytes()
    return bool(a == b)


def _attrs_equal(a: Attrs, b: Attrs) -> bool:
    return list(a) == list(b) and all(_values_equal(a[k], b[k]) for k in a)


def _constants_equal(a: Constant, b: Constant) -> bool:
    x, y = a.data, b.data
    return x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes()


# ---------------------------------------------------------------------------
# Equality
# ---------------------------------------------------------------------------
class _Equal(ExprFunctorWithArgs[[AnyValue, _Path], _Pairs]):
    """One comparison. Variable maps are global (each Var is bound once in well-formed IR);
    a binder met again with a different partner re-binds, so a shared function equals
    two copies of it."""

    def __init__(self, map_free_vars: bool, map_free_type_vars: bool):
        self.map_free_vars = map_free_vars
        self.map_free_type_vars = map_free_type_vars
        self.vars: tuple[dict[Var, Var], dict[Var, Var]] = ({}, {})
        self.tvars: tuple[dict[TypeVar, TypeVar], dict[TypeVar, TypeVar]] = ({}, {})
        self.memo: set[tuple[Expr, Expr]] = set()  # the node pairs compared

    # ---- failure -----------------------------------------------------------
    @staticmethod
    def fail(path: _Path, reason: str, a: AnyValue, b: AnyValue) -> None:
        raise _NotEqual(_Mismatch(path, reason, a, b))

    # ---- variables -----------------------------------------------------------
    @staticmethod
    def _bind(maps: tuple[dict[_T, _T], dict[_T, _T]], a: _T, b: _T) -> None:
        l2r, r2l = maps
        if a in l2r:
            r2l.pop(l2r[a], None)
        if b in r2l:
            l2r.pop(r2l[b], None)
        l2r[a], r2l[b] = b, a

    @staticmethod
    def _lookup(maps: tuple[dict[_T, _T], dict[_T, _T]], a: _T, b: _T, may_map: bool) -> bool:
        l2r, r2l = maps
        if a in l2r:
            return l2r[a] is b
        if b in r2l:
            return False
        if a is b or may_map:
            l2r[a], r2l[b] = b, a
            return True
        return False

    def bind_var(self, a: Var, b: Var, path: _Path) -> None:
        self._bind(self.vars, a, b)
        self.annotation(a, b, path)

    def annotation(self, a: Var, b: Var, path: _Path) -> None:
        ta, tb = a.type_annotation, b.type_annotation
        if (ta is None) != (tb is None):
            self.fail(path, "one variable is annotated, the other is not", a, b)
        if ta is not None and tb is not None:
            self.type(ta, tb, path.child(".type_annotation"))

    def var(self, a: Var, b: Var, path: _Path) -> None:
        known = a in self.vars[0] or b in self.vars[1]
        if not self._lookup(self.vars, a, b, self.map_free_vars):
            self.fail(path, "different variables", a, b)
        if not known and a is not b:
            self.annotation(a, b, path)

    def bind_type_params(self, a: tuple[TypeVar, ...], b: tuple[TypeVar, ...], path: _Path) -> None:
        if len(a) != len(b):
            self.fail(path, f"{len(a)} vs {len(b)} type parameters", a, b)
        for i, (x, y) in enumerate(zip(a, b)):
            if x.kind is not y.kind:
                self.fail(path.child(f"[{i}]"), f"kinds {x.kind.name} vs {y.kind.name}", x, y)
            self._bind(self.tvars, x, y)

    def type_var(self, a: TypeVar, b: TypeVar, path: _Path) -> None:
        if a.kind is not b.kind:
            self.fail(path, f"kinds {a.kind.name} vs {b.kind.name}", a, b)
        if not self._lookup(self.tvars, a, b, self.map_free_type_vars):
            self.fail(path, "different type variables", a, b)

    # ---- types (shallow trees: plain recursion) ---------------------------------
    def type(self, a: AnyValue, b: AnyValue, path: _Path) -> None:
        a, b = _normal_type(a), _normal_type(b)
        if type(a) is not type(b):
            self.fail(path, f"{type(a).__name__} vs {type(b).__name__}", a, b)
        if isinstance(a, TypeVar):
            self.type_var(a, b, path)
        elif isinstance(a, TensorType):
            self.tensor_type(a, b, path)
        elif isinstance(a, TupleType):
            self.sequence(a.fields, b.fields, path.child(".fields"), self.type)
        elif isinstance(a, RefType):
            self.type(a.value, b.value, path.child(".value"))
        elif isinstance(a, FuncType):
            self.func_type(a, b, path)
        elif isinstance(a, TypeCall):
            if a.func.name != b.func.name:
                self.fail(path, f"ADT {a.func.name} vs {b.func.name}", a, b)
            self.sequence(a.args, b.args, path.child(".args"), self.type)
        elif isinstance(a, (int, str)):
            if a != b:
                self.fail(path, f"{a} vs {b}", a, b)
        elif not isinstance(a, AnyDim):
            raise TypeError(f"structural_equal: not a type: {type(a).__name__}")

    def tensor_type(self, a: TensorType, b: TensorType, path: _Path) -> None:
        if len(a.shape) != len(b.shape):
            self.fail(path, f"rank {len(a.shape)} vs {len(b.shape)}", a, b)
        for i, (x, y) in enumerate(zip(a.shape, b.shape)):
            self.type(x, y, path.child(f".shape[{i}]"))
        self.type(a.dtype, b.dtype, path.child(".dtype"))

    def func_type(self, a: FuncType, b: FuncType, path: _Path) -> None:
        self.bind_type_params(a.type_params, b.type_params, path.child(".type_params"))
        self.sequence(a.arg_types, b.arg_types, path.child(".arg_types"), self.type)
        self.type(a.ret_type, b.ret_type, path.child(".ret_type"))
        if len(a.relations) != len(b.relations):
            self.fail(path, "different numbers of type relations", a, b)
        for i, (r, s) in enumerate(zip(a.relations, b.relations)):
            p = path.child(f".relations[{i}]")
            if r.name != s.name or not _attrs_equal(r.attrs or Attrs(), s.attrs or Attrs()):
                self.fail(p, f"relation {r.name} vs {s.name}", r, s)
            self.sequence(r.args, s.args, p.child(".args"), self.type)
            self.type(r.out, s.out, p.child(".out"))

    def sequence(self, a: tuple[_T, ...], b: tuple[_T, ...], path: _Path,
                 each: Callable[[_T, _T, _Path], None]) -> None:
        if len(a) != len(b):
            self.fail(path, f"{len(a)} vs {len(b)} elements", a, b)
        for i, (x, y) in enumerate(zip(a, b)):
            each(x, y, path.child(f"[{i}]"))

    def optional_type(self, a: Type | None, b: Type | None, path: _Path) -> None:
        if (a is None) != (b is None):
            self.fail(path, "one is annotated, the other is not", a, b)
        if a is not None:
            self.type(a, b, path)

    # ---- patterns -------------------------------------------------------------
    def pattern(self, a: Pattern, b: Pattern, path: _Path) -> None:
        match a, b:
            case PatternWildcard(), PatternWildcard():
                pass
            case PatternVar(), PatternVar():
                self.bind_var(a.var, b.var, path)
            case PatternConstructor(), PatternConstructor():
                if a.constructor.name != b.constructor.name:
                    self.fail(path, f"constructor {a.constructor.name} vs {b.constructor.name}",
                              a, b)
                self.sequence(a.patterns, b.patterns, path, self.pattern)
            case PatternTuple(), PatternTuple():
                self.sequence(a.patterns, b.patterns, path, self.pattern)
            case _:
                self.fail(path, f"{type(a).__name__} vs {type(b).__name__}", a, b)

    # ---- expressions: an explicit stack, pre-order, left to right ---------------
    def expr(self, root_a: Expr, root_b: Expr, root_path: _Path) -> None:
        stack: list[tuple[Expr, Expr, _Path]] = [(root_a, root_b, root_path)]
        while stack:
            a, b, path = stack.pop()
            if a is b and isinstance(a, (Constant, Op, GlobalVar, Constructor)):
                continue  # identical leaves; larger nodes may hold differently mapped vars
            if type(a) is not type(b):
                self.fail(path, f"{type(a).__name__} vs {type(b).__name__}", a, b)
            if isinstance(a, Var) and isinstance(b, Var):
                self.var(a, b, path)
                continue
            key = (a, b)
            if key in self.memo:
                continue
            self.memo.add(key)
            children = self.visit(a, b, path)
            stack.extend(reversed(children))

    # ---- one node pair: visit(a, b, path) compares the non-Expr parts of a and b (of the
    # same class) and returns the child pairs to compare ----------------------------------
    def unsupported(self, expr: Expr) -> Exception:
        return TypeError(f"structural_equal: unknown expression {type(expr).__name__}")

    def visit_constant(self, a: Constant, b: Constant, path: _Path) -> _Pairs:
        if not _constants_equal(a, b):
            self.fail(path, "constants differ", a, b)
        return []

    def names(self, name_a: str, name_b: str, a: Expr, b: Expr, path: _Path) -> _Pairs:
        if name_a != name_b:
            self.fail(path, f"{name_a} vs {name_b}", a, b)
        return []

    def visit_global_var(self, a: GlobalVar, b: GlobalVar, path: _Path) -> _Pairs:
        return self.names(a.name_hint, b.name_hint, a, b, path)

    def visit_op(self, a: Op, b: Op, path: _Path) -> _Pairs:
        return self.names(a.name, b.name, a, b, path)

    def visit_constructor(self, a: Constructor, b: Constructor, path: _Path) -> _Pairs:
        return self.names(a.name, b.name, a, b, path)

    def visit_let(self, a: Let, b: Let, path: _Path) -> _Pairs:
        p = path.child
        self.bind_var(a.var, b.var, p(".var"))
        return [(a.value, b.value, p(".value")), (a.body, b.body, p(".body"))]

    def visit_tuple(self, a: Tuple, b: Tuple, path: _Path) -> _Pairs:
        self.lengths(a.fields, b.fields, path)
        return [(x, y, path.child(f".fields[{i}]"))
                for i, (x, y) in enumerate(zip(a.fields, b.fields))]

    def visit_tuple_getitem(self, a: TupleGetItem, b: TupleGetItem, path: _Path) -> _Pairs:
        if a.index != b.index:
            self.fail(path, f"index {a.index} vs {b.index}", a, b)
        return [(a.tuple_value, b.tuple_value, path.child(".tuple_value"))]

    def visit_if(self, a: If, b: If, path: _Path) -> _Pairs:
        p = path.child
        return [(a.cond, b.cond, p(".cond")), (a.true_branch, b.true_branch, p(".true_branch")),
                (a.false_branch, b.false_branch, p(".false_branch"))]

    def visit_ref_create(self, a: RefCreate, b: RefCreate, path: _Path) -> _Pairs:
        return [(a.value, b.value, path.child(".value"))]

    def visit_ref_read(self, a: RefRead, b: RefRead, path: _Path) -> _Pairs:
        return [(a.ref, b.ref, path.child(".ref"))]

    def visit_grad(self, a: Grad, b: Grad, path: _Path) -> _Pairs:
        return [(a.fn, b.fn, path.child(".fn"))]

    def visit_ref_write(self, a: RefWrite, b: RefWrite, path: _Path) -> _Pairs:
        return [(a.ref, b.ref, path.child(".ref")), (a.value, b.value, path.child(".value"))]

    def lengths(self, a: tuple[object, ...], b: tuple[object, ...], path: _Path) -> None:
        if len(a) != len(b):
            self.fail(path, f"{len(a)} vs {len(b)} elements", a, b)

    def visit_call(self, a: Call, b: Call, path: _Path) -> _Pairs:
        self.lengths(a.args, b.args, path.child(".args"))
        if not _attrs_equal(a.attrs, b.attrs):
            self.fail(path.child(".attrs"), f"attributes {dict(a.attrs)} vs {dict(b.attrs)}", a, b)
        self.sequence(a.type_args, b.type_args, path.child(".type_args"), self.type)
        args = [(x, y, path.child(f".args[{i}]")) for i, (x, y) in enumerate(zip(a.args, b.args))]
        return [(a.op, b.op, path.child(".op")), *args]

    def visit_function(self, a: Function, b: Function, path: _Path) -> _Pairs:
        self.bind_type_params(a.type_params, b.type_params, path.child(".type_params"))
        self.lengths(a.params, b.params, path.child(".params"))
        for i, (x, y) in enumerate(zip(a.params, b.params)):
            self.bind_var(x, y, path.child(f".params[{i}]"))
        self.optional_type(a.ret_type, b.ret_type, path.child(".ret_type"))
        if not _attrs_equal(a.attrs, b.attrs):
            self.fail(path.child(".attrs"), f"attributes {dict(a.attrs)} vs {dict(b.attrs)}", a, b)
        return [(a.body, b.body, path.child(".body"))]

    def visit_match(self, a: Match, b: Match, path: _Path) -> _Pairs:
        if a.complete != b.complete:
            self.fail(path, "a complete match vs an incomplete one", a, b)
        self.lengths(a.clauses, b.clauses, path.child(".clauses"))
        out = [(a.data, b.data, path.child(".data"))]
        for i, (x, y) in enumerate(zip(a.clauses, b.clauses)):
            self.pattern(x.lhs, y.lhs, path.child(f".clauses[{i}].lhs"))
            out.append((x.rhs, y.rhs, path.child(f".clauses[{i}].rhs")))
        return out

    # ---- ADT definitions -----------------------------------------------------------
    def type_data(self, a: TypeData, b: TypeData, path: _Path) -> None:
        if a.header.name != b.header.name:
            self.fail(path, f"type {a.header.name} vs {b.header.name}", a, b)
        self.bind_type_params(a.type_vars, b.type_vars, path.child(".type_vars"))
        self.lengths(a.constructors, b.constructors, path.child(".constructors"))
        for i, (x, y) in enumerate(zip(a.constructors, b.constructors)):
            p = path.child(f".constructors[{i}]")
            if x.name != y.name:
                self.fail(p, f"constructor {x.name} vs {y.name}", x, y)
            self.sequence(x.inputs, y.inputs, p.child(".inputs"), self.type)


def _normal_type(t: AnyValue) -> AnyValue:
    """A bare ADT name denotes the same type as its application to no arguments."""
    return TypeCall(t, ()) if isinstance(t, GlobalTypeVar) else t


def _module_parts(m: IRModule) -> tuple[dict[str, Function], dict[str, TypeData]]:
    funcs = {gv.name_hint: fn for gv, fn in m.functions.items()}
    types = {h.name: td for h, td in m.type_definitions.items()}
    return funcs, types


def _compare_modules(a: IRModule, b: IRModule, map_free_vars: bool) -> None:
    funcs_a, types_a = _module_parts(a)
    funcs_b, types_b = _module_parts(b)
    root = _Path((None, ""))
    for what, left, right, sigil in (("type", types_a, types_b, "type "),
                                     ("global", funcs_a, funcs_b, "@")):
        only = sorted(set(left) ^ set(right))
        if only:
            side = "lhs" if only[0] in left else "rhs"
            _Equal.fail(root.child(f"{sigil}{only[0]}"), f"{what} {only[0]} only in the {side}",
                        left.get(only[0]), right.get(only[0]))
    for name in sorted(types_a):
        path = root.child(f"type {name}")
        _Equal(map_free_vars, True).type_data(types_a[name], types_b[name], path)
    for name in sorted(funcs_a):
        # Each global on its own: type variables free in its signature match per function.
        _Equal(map_free_vars, True).expr(funcs_a[name], funcs_b[name], root.child(f"@{name}"))


def _compare(a: Node, b: Node, map_free_vars: bool) -> None:
    with deep_recursion():  # one frame per level: as deep as the text format reads
        _compare_nodes(a, b, map_free_vars)


def _compare_nodes(a: Node, b: Node, map_free_vars: bool) -> None:
    root = _Path((None, ""))
    if isinstance(a, IRModule) and isinstance(b, IRModule):
        _compare_modules(a, b, map_free_vars)
    elif isinstance(a, Expr) and isinstance(b, Expr):
        _Equal(map_free_vars, map_free_vars).expr(a, b, root)
    elif isinstance(a, Type) and isinstance(b, Type):
        _Equal(map_free_vars, map_free_vars).type(a, b, root)
    elif isinstance(a, TypeData) and isinstance(b, TypeData):
        _Equal(map_free_vars, map_free_vars).type_data(a, b, root)
    else:
        for x in (a, b):
            if not conforms(x, (Expr, Type, IRModule, TypeData)):
                raise TypeError(f"structural equality is defined on Expr, Type, TypeData and "
                                f"IRModule, got {type(x).__name__}")
        _Equal.fail(root, f"{type(a).__name__} vs {type(b).__name__}", a, b)


def structural_equal(a: Node, b: Node, *, map_free_vars: bool = False) -> bool:
    """Alpha-equality of two expressions, types or modules (see the module docstring).

    >>> from relaydsl.ir.expr import Let, Var, const
    >>> x, y = Var("x"), Var("y")
    >>> structural_equal(Let(x, const(1.0), x), Let(y, const(1.0), y))
    True
    >>> structural_equal(Let(x, const(1.0), x), Let(y, const(2.0), y))
    False
    """
    try:
        _compare(a, b, map_free_vars)
    except _NotEqual:
        return False
    return True


def assert_structural_equal(a: Node, b: Node, map_free_vars: bool = False) -> None:
    """Raise AssertionError showing both texts and the first differing sub-term and its path.

    >>> from relaydsl.ir.expr import Var
    >>> assert_structural_equal(Var("x"), Var("y"), map_free_vars=True)
    """
    try:
        _compare(a, b, map_free_vars)
    except _NotEqual as e:
        m = e.mismatch
        raise AssertionError(
            f"not structurally equal at {m.path.render() or '<root>'}: {m.reason}\n"
            f"-- lhs sub-term --\n{_text(m.lhs)}\n-- rhs sub-term --\n{_text(m.rhs)}\n"
            f"-- lhs --\n{_text(a)}\n-- rhs --\n{_text(b)}"
        ) from None


def _text(x: AnyValue) -> str:
    if isinstance(x, (Expr, Type, IRModule)):
        try:
            return astext(x)
        except Exception as err:  # a broken term must not hide the mismatch itself
            return f"<unprintable {type(x).__name__}: {err}>"
    return repr(x)


# ---------------------------------------------------------------------------
# Hashing: consistent with structural_equal, context-free per node so it can be memoised.
# ---------------------------------------------------------------------------
class _Hasher(ExprFunctor[int]):
    """Bound variables hash by their binding position (parameter index, pattern slot, the
    shape of a let's value) so alpha-equivalent terms hash alike; free ones by identity
    unless they are mapped."""

    def __init__(self, map_free_vars: bool, map_free_type_vars: bool):
        super().__init__()
        self.map_free_vars = map_free_vars
        self.map_free_type_vars = map_free_type_vars
        self.var_labels: dict[Var, int] = {}
        self.tvar_labels: dict[TypeVar, int] = {}

    # ---- labels ---------------------------------------------------------------
    def label_var(self, v: Var, *where: AnyValue) -> None:
        ann = self.type(v.type_annotation) if v.type_annotation is not None else 0
        self.var_labels[v] = hash(("bound", *where, ann))

    def var(self, v: Var) -> int:
        label = self.var_labels.get(v)
        if label is not None:
            return label
        ann = self.type(v.type_annotation) if v.type_annotation is not None else 0
        return hash(("free", ann) if self.map_free_vars else ("free", id(v)))

    def label_type_params(self, params: tuple[TypeVar, ...], where: str) -> None:
        for i, tv in enumerate(params):
            self.tvar_labels[tv] = hash((where, tv.kind.name, i, len(params)))

    def type_var(self, tv: TypeVar) -> int:
        label = self.tvar_labels.get(tv)
        if label is not None:
            return label
        return hash(("free", tv.kind.name, None if self.map_free_type_vars else id(tv)))

    # ---- types ---------------------------------------------------------------------
    def type(self, t: AnyValue) -> int:
        t = _normal_type(t)
        if isinstance(t, TypeVar):
            return self.type_var(t)
        if isinstance(t, TensorType):
            return hash(("tensor", tuple(self.type(d) for d in t.shape), self.type(t.dtype)))
        if isinstance(t, TupleType):
            return hash(("tuple", tuple(self.type(f) for f in t.fields)))
        if isinstance(t, RefType):
            return hash(("ref", self.type(t.value)))
        if isinstance(t, FuncType):
            self.label_type_params(t.type_params, "fn-type")
            rels = tuple((r.name, tuple(self.type(x) for x in r.args)) for r in t.relations)
            args = tuple(self.type(a) for a in t.arg_types)
            return hash(("fn", args, self.type(t.ret_type), rels))
        if isinstance(t, TypeCall):
            return hash(("adt", t.func.name, tuple(self.type(a) for a in t.args)))
        if isinstance(t, AnyDim):
            return hash("?")
        if isinstance(t, (int, str)):
            return hash(("dim", t))
        raise TypeError(f"structural_hash: not a type: {type(t).__name__}")

    # ---- patterns --------------------------------------------------------------------
    def pattern(self, p: Pattern, slots: Iterator[int]) -> int:
        """Labels the variables `p` binds (by slot) and returns its hash."""
        if isinstance(p, PatternVar):
            self.label_var(p.var, "pattern", next(slots))
            return hash(("pvar", self.var_labels[p.var]))
        if isinstance(p, PatternConstructor):
            return hash((p.constructor.name, tuple(self.pattern(s, slots) for s in p.patterns)))
        if isinstance(p, PatternTuple):
            return hash(("ptuple", tuple(self.pattern(s, slots) for s in p.patterns)))
        return hash("_")

    # ---- ADT definitions ------------------------------------------------------------
    def type_data(self, td: TypeData) -> int:
        self.label_type_params(td.type_vars, "adt")
        ctors = tuple((c.name, tuple(self.type(t) for t in c.inputs)) for c in td.constructors)
        return hash(("data", td.header.name, ctors))

    # ---- expressions: a node's hash from its children's, memoised ----------------------
    def expr(self, root: Expr) -> int:
        with deep_recursion():
            return self.visit(root)

    def visit(self, expr: Expr) -> int:
        if isinstance(expr, Var):  # not memoised: hashes by its label where it is bound
            return self.var(expr)
        return super().visit(expr)

    def kids(self, e: Expr) -> tuple[int, ...]:
        return tuple(self.visit(c) for c in children(e))

    def visit_constant(self, c: Constant) -> int:
        return hash(("const", c.data.dtype.str, c.data.shape, c.data.tobytes()))

    def visit_global_var(self, gv: GlobalVar) -> int:
        return hash(("global", gv.name_hint))

    def visit_op(self, op: Op) -> int:
        return hash(("Op", op.name))

    def visit_constructor(self, c: Constructor) -> int:
        return hash(("Constructor", c.name))

    def visit_call(self, call: Call) -> int:
        type_args = tuple(self.type(t) for t in call.type_args)
        return hash(("call", self.kids(call), _attrs_key(call.attrs), type_args))

    def visit_let(self, let: Let) -> int:
        # iterative over the chain, so a long one does not recurse
        chain, body = let_chain(let)
        values: list[int] = []
        for e in chain:
            self.label_var(e.var, "let", _shallow(e.value))
            values.append(self.visit(e.value))
        h = self.visit(body)
        for e, value in zip(reversed(chain), reversed(values)):
            h = self.memo[e] = hash(("let", self.var_labels[e.var], (value, h)))
        return h

    def visit_function(self, fn: Function) -> int:
        self.label_type_params(fn.type_params, "fn")
        for i, p in enumerate(fn.params):
            self.label_var(p, "param", i, len(fn.params))
        ret = self.type(fn.ret_type) if fn.ret_type is not None else 0
        params = tuple(self.var_labels[p] for p in fn.params)
        return hash(("fn", params, ret, self.visit(fn.body), _attrs_key(fn.attrs)))

    def visit_tuple_getitem(self, t: TupleGetItem) -> int:
        return hash(("getitem", t.index, self.visit(t.tuple_value)))

    def visit_match(self, m: Match) -> int:
        patterns = tuple(self.pattern(c.lhs, itertools.count()) for c in m.clauses)
        return hash(("match", m.complete, patterns, self.kids(m)))

    # the other kinds hash by their kind and children
    def visit_tuple(self, t: Tuple) -> int:
        return self.of_kind(t)

    def visit_if(self, i: If) -> int:
        return self.of_kind(i)

    def visit_grad(self, g: Grad) -> int:
        return self.of_kind(g)

    def visit_ref_create(self, r: RefCreate) -> int:
        return self.of_kind(r)

    def visit_ref_read(self, r: RefRead) -> int:
        return self.of_kind(r)

    def visit_ref_write(self, r: RefWrite) -> int:
        return self.of_kind(r)

    def of_kind(self, e: Expr) -> int:
        return hash((type(e).__name__, self.kids(e)))


def _shallow(e: Expr) -> tuple[str | int, ...]:
    """A context-free summary of a let's value, to tell let-bound variables apart."""
    if isinstance(e, Call):
        callee = e.op
        name = callee.name if isinstance(callee, (Op, Constructor)) else (
            callee.name_hint if isinstance(callee, GlobalVar) else type(callee).__name__)
        return ("call", name, len(e.args))
    return (type(e).__name__,)


def _attrs_key(attrs: Attrs) -> tuple[tuple[str, AnyValue], ...]:
    return tuple((k, _value_key(attrs[k])) for k in attrs)


def _value_key(v: AnyValue) -> AnyValue:
    if is_tuple(v):
        return tuple(_value_key(x) for x in v)
    if isinstance(v, float):
        return ("float", np.float64(v).tobytes())
    return (type(v).__name__, v)


def structural_hash(x: Node, *, map_free_vars: bool = False) -> int:
    """A hash consistent with structural_equal (equal terms hash alike).

    >>> from relaydsl.ir.expr import Function, Var
    >>> a, b = Var("a"), Var("b")
    >>> structural_hash(Function([a, b], a)) == structural_hash(Function([b, a], b))
    True
    """
    if isinstance(x, IRModule):
        funcs, types = _module_parts(x)
        parts = [("type", name, _Hasher(map_free_vars, True).type_data(types[name]))
                 for name in sorted(types)]
        parts += [("global", name, _Hasher(map_free_vars, True).expr(funcs[name]))
                  for name in sorted(funcs)]
        return hash(tuple(parts))
    hasher = _Hasher(map_free_vars, map_free_vars)
    if isinstance(x, Expr):
        return hasher.expr(x)
    if isinstance(x, Type):
        return hasher.type(x)
    if conforms(x, TypeData):
        return hasher.type_data(x)
    raise TypeError(f"structural_hash is defined on Expr, Type, TypeData and IRModule, "
                    f"got {type(x).__name__}")


__all__ = ["structural_equal", "structural_hash", "assert_structural_equal"]
