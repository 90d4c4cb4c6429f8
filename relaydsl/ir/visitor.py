"""The one way to traverse IR: ExprFunctor[T], a method per node kind and a memo per node;
ExprVisitor and ExprMutator are the two functors passes start from; ExprFunctorWithArgs, a
functor whose methods take extra arguments (and keep no memo), for code emitters.

Memoisation (keyed by the node: nodes hash by identity) means a DAG with shared subterms is
walked once per node, not once per path. Chains of ``let`` are walked
iteratively so a program with a hundred thousand lets does not exhaust
Python's stack. The mutator returns the very same node when no child changed.

>>> from relaydsl.ir.expr import Var, Tuple
>>> x = Var("x"); t = Tuple([x, x])
>>> class Count(ExprVisitor):
...     def __init__(self): super().__init__(); self.vars = 0
...     def visit_var(self, v): self.vars += 1
>>> c = Count(); c.visit(t); c.vars   # x is shared: visited once
1
"""
from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Generator, Mapping

from typing import (
    Any as AnyValue, Callable, ClassVar, Generic, ParamSpec, TypeVar as PyTypeVar, cast,
)

from relaydsl.ir.adt import (
    Constructor, Pattern, PatternConstructor, PatternTuple, PatternVar,
)
from relaydsl.ir.adt import pattern_vars
from relaydsl.errors import IRError
from relaydsl.ir.expr import (
    Call, Clause, Constant, Expr, Function, GlobalVar, Grad, If, Let, Match, Op, RefCreate, RefRead,
    RefWrite, Tuple, TupleGetItem, Var,
)
from relaydsl.ir.types import (
    AnyDim, Dim, DType, FuncType, GlobalTypeVar, RefType, TensorType, TupleType, Type, TypeCall,
    TypeRelation, TypeVar,
)

T = PyTypeVar("T")
P = ParamSpec("P")

_VISIT_NAME: dict[type[Expr], str] = {
    Var: "visit_var", GlobalVar: "visit_global_var", Constant: "visit_constant", Op: "visit_op",
    Call: "visit_call", Let: "visit_let", Function: "visit_function", Tuple: "visit_tuple",
    TupleGetItem: "visit_tuple_getitem", If: "visit_if", Match: "visit_match",
    RefCreate: "visit_ref_create", RefRead: "visit_ref_read", RefWrite: "visit_ref_write",
    Grad: "visit_grad",
    Constructor: "visit_constructor",
}


def children(expr: Expr) -> tuple[Expr, ...]:
    """The direct subexpressions of `expr`, in evaluation order: what every walk visits.

    Binding occurrences are included (a let's variable, a function's parameters, the
    variables a match clause binds) before the expressions in their scope. Ops,
    constructors, globals, constants and variables have none.

    >>> from relaydsl.ir.expr import If, Let, Var, const
    >>> x = Var("x")
    >>> [type(c).__name__ for c in children(Let(x, const(1.0), x))]
    ['Var', 'Constant', 'Var']
    """
    if isinstance(expr, Call):
        return (expr.op, *expr.args)
    if isinstance(expr, Let):
        return (expr.var, expr.value, expr.body)
    if isinstance(expr, Function):
        return (*expr.params, expr.body)
    if isinstance(expr, Tuple):
        return expr.fields
    if isinstance(expr, TupleGetItem):
        return (expr.tuple_value,)
    if isinstance(expr, If):
        return (expr.cond, expr.true_branch, expr.false_branch)
    if isinstance(expr, Match):
        return (expr.data, *(e for c in expr.clauses for e in (*pattern_vars(c.lhs), c.rhs)))
    if isinstance(expr, Grad):
        return (expr.fn,)
    if isinstance(expr, RefCreate):
        return (expr.value,)
    if isinstance(expr, RefRead):
        return (expr.ref,)
    if isinstance(expr, RefWrite):
        return (expr.ref, expr.value)
    return ()


def scoped_children(expr: Expr) -> list[tuple[Expr, int | None]]:
    """``children(expr)``, each with the number of the scope it opens, or None in `expr`'s own.

    A function's body (0), an if's branches (0: then, 1: else) and a match's clauses (by
    position) open scopes; everything else -- binding occurrences, a let's value and body, a
    call's arguments, an if's condition -- is in `expr`'s scope. Passes that bind values per
    scope (A-normal form, fusion regions) walk with this.

    >>> from relaydsl.ir.expr import If, Var
    >>> c, a, b = Var("c"), Var("a"), Var("b")
    >>> [(v.name_hint, scope) for v, scope in scoped_children(If(c, a, b))]
    [('c', None), ('a', 0), ('b', 1)]
    """
    kids = children(expr)
    if isinstance(expr, Function):
        scopes: list[int | None] = [*(None for _ in expr.params), 0]
    elif isinstance(expr, If):
        scopes = [None, 0, 1]
    elif isinstance(expr, Match):
        scopes = [None]
        for i, clause in enumerate(expr.clauses):
            scopes += [*(None for _ in pattern_vars(clause.lhs)), i]
    else:
        scopes = [None] * len(kids)
    return list(zip(kids, scopes, strict=True))


class ExprFunctorWithArgs(Generic[P, T]):
    """A function of expressions taking extra arguments, passed through to each node kind's
    method (TVM's ``ExprFunctor<R(const Expr&, Args...)>``): ``visit(e, *args)`` dispatches
    on e's class to ``visit_<kind>(e, *args)``. It keeps no memo, since a result depends on
    the arguments as well as the node (an environment, the statements to emit into): a node
    is visited once per use. A kind the subclass does not handle is refused with
    ``unsupported``.

    >>> from relaydsl.ir.expr import Var, Tuple
    >>> class Render(ExprFunctorWithArgs[[dict[Var, str]], str]):
    ...     def visit_var(self, v, names): return names[v]
    ...     def visit_tuple(self, t, names):
    ...         return "(" + ", ".join(self.visit(f, names) for f in t.fields) + ")"
    >>> x = Var("x"); Render().visit(Tuple([x, Tuple([x])]), {x: "a"})
    '(a, (a))'
    """

    # visit_<kind> of each node class, per functor class: one dict lookup a node, where a
    # getattr by name would search the class hierarchy and bind a method each time
    _methods: ClassVar[dict[type[Expr], Callable[..., AnyValue]]] = {}

    def __init_subclass__(cls, **kwargs: AnyValue) -> None:
        super().__init_subclass__(**kwargs)
        cls._methods = {kind: getattr(cls, name) for kind, name in _VISIT_NAME.items()}

    def visit(self, expr: Expr, *args: P.args, **kwargs: P.kwargs) -> T:
        method = self._methods.get(type(expr))
        if method is None:
            raise self.unsupported(expr)
        return method(self, expr, *args, **kwargs)

    def unsupported(self, expr: Expr) -> Exception:
        """The error for a node this functor does not handle (subclasses word it)."""
        return IRError(f"{type(self).__name__}: unsupported {type(expr).__name__} node")

    # Every kind is refused unless the subclass handles it.
    def visit_var(self, var: Var, *args: P.args, **kwargs: P.kwargs) -> T:
        raise self.unsupported(var)

    def visit_global_var(self, gv: GlobalVar, *args: P.args, **kwargs: P.kwargs) -> T:
        raise self.unsupported(gv)

    def visit_constant(self, c: Constant, *args: P.args, **kwargs: P.kwargs) -> T:
        raise self.unsupported(c)

    def visit_op(self, op: Op, *args: P.args, **kwargs: P.kwargs) -> T:
        raise self.unsupported(op)

    def visit_constructor(self, c: Constructor, *args: P.args, **kwargs: P.kwargs) -> T:
        raise self.unsupported(c)

    def visit_call(self, call: Call, *args: P.args, **kwargs: P.kwargs) -> T:
        raise self.unsupported(call)

    def visit_let(self, let: Let, *args: P.args, **kwargs: P.kwargs) -> T:
        raise self.unsupported(let)

    def visit_function(self, fn: Function, *args: P.args, **kwargs: P.kwargs) -> T:
        raise self.unsupported(fn)

    def visit_tuple(self, t: Tuple, *args: P.args, **kwargs: P.kwargs) -> T:
        raise self.unsupported(t)

    def visit_tuple_getitem(self, t: TupleGetItem, *args: P.args, **kwargs: P.kwargs) -> T:
        raise self.unsupported(t)

    def visit_if(self, i: If, *args: P.args, **kwargs: P.kwargs) -> T:
        raise self.unsupported(i)

    def visit_match(self, m: Match, *args: P.args, **kwargs: P.kwargs) -> T:
        raise self.unsupported(m)

    def visit_grad(self, g: Grad, *args: P.args, **kwargs: P.kwargs) -> T:
        raise self.unsupported(g)

    def visit_ref_create(self, r: RefCreate, *args: P.args, **kwargs: P.kwargs) -> T:
        raise self.unsupported(r)

    def visit_ref_read(self, r: RefRead, *args: P.args, **kwargs: P.kwargs) -> T:
        raise self.unsupported(r)

    def visit_ref_write(self, r: RefWrite, *args: P.args, **kwargs: P.kwargs) -> T:
        raise self.unsupported(r)


class ExprFunctor(ExprFunctorWithArgs[[], T]):
    """The one traversal (TVM's ExprFunctor): a memoised function of expressions with a method
    per node kind. ``visit(e)`` dispatches on e's class to ``visit_<kind>`` and computes a
    shared node once: ``memo`` maps each node visited to its result (nodes hash by identity,
    so a DAG's shared subterm is one key). A kind the subclass does not handle is refused
    with ``unsupported``. ExprVisitor and ExprMutator are the two functors every pass starts
    from; a functor of its own suits an evaluator (a type, a value or a text per node);
    ExprFunctorWithArgs, of which this is the memoised case without arguments, one whose
    result depends on arguments too.

    By default a let chain binds each variable to its value's result (``bound``) and is
    walked iteratively; a variable's result is what it is bound to.

    >>> from relaydsl.ir.expr import Var, Tuple, Let
    >>> class Depth(ExprFunctor[int]):
    ...     def visit_tuple(self, t): return 1 + max(self.visit(f) for f in t.fields)
    >>> x = Var("x"); d = Depth(); d.bound[x] = 0
    >>> d.visit(Let(Var("y"), Tuple([x]), Tuple([x, Tuple([x])])))
    2
    """

    def __init__(self) -> None:
        self.memo: dict[Expr, T] = {}
        self.bound: dict[Var, T] = {}

    def visit(self, expr: Expr) -> T:
        memo = self.memo
        if expr in memo:
            return memo[expr]
        result = memo[expr] = self.dispatch(expr)
        return result

    def dispatch(self, expr: Expr) -> T:
        """``visit_<kind>(expr)``, unmemoised: what `visit` calls on a node not seen yet."""
        # (the base's visit written out: type inference calls this per node, and a super()
        # call would be one more Python frame each time)
        name = _VISIT_NAME.get(type(expr))
        if name is None:
            raise self.unsupported(expr)
        method: Callable[[Expr], T] = getattr(self, name)
        return method(expr)

    def visit_let(self, let: Let) -> T:
        e: Expr = let
        while isinstance(e, Let):
            self.bound[e.var] = self.visit(e.value)
            e = e.body
        return self.visit(e)

    def visit_var(self, var: Var) -> T:
        if var not in self.bound:
            raise self.unsupported(var)
        return self.bound[var]


class ExprVisitor(ExprFunctor[None]):
    """Visits every node once. Override ``visit_*``; call the base method to recurse."""

    def visit(self, expr: Expr) -> None:
        if expr in self.memo:
            return
        self.memo[expr] = None  # before its children: a node is entered once
        # (dispatch inlined: one Python frame fewer per node on the passes' hot path)
        getattr(self, _VISIT_NAME[type(expr)])(expr)

    def visit_var(self, var: Var) -> None:
        pass

    def visit_global_var(self, gv: GlobalVar) -> None:
        pass

    def visit_constant(self, c: Constant) -> None:
        pass

    def visit_op(self, op: Op) -> None:
        pass

    def visit_constructor(self, c: Constructor) -> None:
        pass

    def visit_call(self, call: Call) -> None:
        self.visit(call.op)
        for a in call.args:
            self.visit(a)

    def visit_let(self, let: Let) -> None:
        # Iterative over the chain of lets: each binding visited in order, then the final body.
        node: Expr = let
        while isinstance(node, Let):
            self.visit(node.var)
            self.visit(node.value)
            node = node.body
            if node in self.memo:
                return
            if isinstance(node, Let):
                self.memo[node] = None
                self.visit_let_binding(node)
        self.visit(node)

    def visit_let_binding(self, let: Let) -> None:
        """Called for each let of a chain after the first (the first goes through visit_let)."""

    def visit_function(self, fn: Function) -> None:
        for p in fn.params:
            self.visit(p)
        self.visit(fn.body)

    def visit_tuple(self, t: Tuple) -> None:
        for f in t.fields:
            self.visit(f)

    def visit_tuple_getitem(self, t: TupleGetItem) -> None:
        self.visit(t.tuple_value)

    def visit_if(self, i: If) -> None:
        self.visit(i.cond)
        self.visit(i.true_branch)
        self.visit(i.false_branch)

    def visit_match(self, m: Match) -> None:
        self.visit(m.data)
        for c in m.clauses:
            self.visit_pattern(c.lhs)
            self.visit(c.rhs)

    def visit_pattern(self, p: Pattern) -> None:
        if isinstance(p, PatternVar):
            self.visit(p.var)
        elif isinstance(p, PatternConstructor):
            self.visit(p.constructor)
            for sub in p.patterns:
                self.visit_pattern(sub)
        elif isinstance(p, PatternTuple):
            for sub in p.patterns:
                self.visit_pattern(sub)

    def visit_grad(self, g: Grad) -> None:
        self.visit(g.fn)

    def visit_ref_create(self, r: RefCreate) -> None:
        self.visit(r.value)

    def visit_ref_read(self, r: RefRead) -> None:
        self.visit(r.ref)

    def visit_ref_write(self, r: RefWrite) -> None:
        self.visit(r.ref)
        self.visit(r.value)


class ExprMutator(ExprFunctor[Expr]):
    """Rebuilds an expression bottom-up. Override ``visit_*`` to rewrite; unchanged nodes are
    reused."""

    def visit(self, expr: Expr) -> Expr:
        hit = self.memo.get(expr)
        if hit is not None:
            return hit
        result = self.memo[expr] = getattr(self, _VISIT_NAME[type(expr)])(expr)  # (as above)
        return result

    def visit_var(self, var: Var) -> Expr:
        return var

    def visit_global_var(self, gv: GlobalVar) -> Expr:
        return gv

    def visit_constant(self, c: Constant) -> Expr:
        return c

    def visit_op(self, op: Op) -> Expr:
        return op

    def visit_constructor(self, c: Constructor) -> Expr:
        return c

    def visit_call(self, call: Call) -> Expr:
        op = self.visit(call.op)
        args = [self.visit(a) for a in call.args]
        if op is call.op and all(a is b for a, b in zip(args, call.args)):
            return call
        return Call(op, tuple(args), call.attrs, call.type_args, span=call.span)

    def visit_let(self, let: Let) -> Expr:
        # Walk down the chain iteratively, visiting the bindings in program order, then the
        # final body; rebuild the chain from the bottom up.
        chain: list[Let] = []
        node: Expr = let
        while isinstance(node, Let) and (node is let or node not in self.memo):
            chain.append(node)
            node = node.body
        new_bindings = [(self.visit_let_var(link.var), self.visit(link.value)) for link in chain]
        body = self.visit(node)
        for link, (var, value) in zip(reversed(chain), reversed(new_bindings)):
            if var is link.var and value is link.value and body is link.body:
                body = link
            else:
                body = self.rebuild_let(link, var, value, body)
            if link is not let:
                self.memo[link] = body
        return body

    def visit_let_var(self, var: Var) -> Var:
        return self._visit_bound_var(var)

    def _visit_bound_var(self, var: Var) -> Var:
        result = self.visit(var)
        assert isinstance(result, Var), "a mutator must map a bound Var to a Var"
        return result

    def rebuild_let(self, old: Let, var: Var, value: Expr, body: Expr) -> Expr:
        return Let(var, value, body, span=old.span)

    def visit_function(self, fn: Function) -> Expr:
        params = [self._visit_bound_var(p) for p in fn.params]
        body = self.visit(fn.body)
        if body is fn.body and all(a is b for a, b in zip(params, fn.params)):
            return fn
        return Function(tuple(params), body, fn.ret_type, fn.type_params, fn.attrs, span=fn.span)

    def visit_tuple(self, t: Tuple) -> Expr:
        fields = [self.visit(f) for f in t.fields]
        if all(a is b for a, b in zip(fields, t.fields)):
            return t
        return Tuple(tuple(fields), span=t.span)

    def visit_tuple_getitem(self, t: TupleGetItem) -> Expr:
        value = self.visit(t.tuple_value)
        if value is t.tuple_value:
            return t
        return TupleGetItem(value, t.index, span=t.span)

    def visit_if(self, i: If) -> Expr:
        c, a, b = self.visit(i.cond), self.visit(i.true_branch), self.visit(i.false_branch)
        if c is i.cond and a is i.true_branch and b is i.false_branch:
            return i
        return If(c, a, b, span=i.span)

    def visit_match(self, m: Match) -> Expr:
        data = self.visit(m.data)
        clauses = [Clause(self.visit_pattern(c.lhs), self.visit(c.rhs)) for c in m.clauses]
        if data is m.data and all(
            a.lhs is b.lhs and a.rhs is b.rhs for a, b in zip(clauses, m.clauses)
        ):
            return m
        return Match(data, tuple(clauses), m.complete, span=m.span)

    def visit_pattern(self, p: Pattern) -> Pattern:
        if isinstance(p, PatternVar):
            var = self._visit_bound_var(p.var)
            return p if var is p.var else PatternVar(var, span=p.span)
        if isinstance(p, PatternConstructor):
            subs = [self.visit_pattern(s) for s in p.patterns]
            ctor = self.visit(p.constructor)
            if ctor is p.constructor and all(a is b for a, b in zip(subs, p.patterns)):
                return p
            # a constructor's visit returns a Constructor; PatternConstructor checks it does
            return PatternConstructor(cast(Constructor, ctor), tuple(subs), span=p.span)
        if isinstance(p, PatternTuple):
            subs = [self.visit_pattern(s) for s in p.patterns]
            if all(a is b for a, b in zip(subs, p.patterns)):
                return p
            return PatternTuple(tuple(subs), span=p.span)
        return p

    def visit_grad(self, g: Grad) -> Expr:
        fn = self.visit(g.fn)
        return g if fn is g.fn else Grad(fn, span=g.span)

    def visit_ref_create(self, r: RefCreate) -> Expr:
        v = self.visit(r.value)
        return r if v is r.value else RefCreate(v, span=r.span)

    def visit_ref_read(self, r: RefRead) -> Expr:
        v = self.visit(r.ref)
        return r if v is r.ref else RefRead(v, span=r.span)

    def visit_ref_write(self, r: RefWrite) -> Expr:
        ref, v = self.visit(r.ref), self.visit(r.value)
        return r if ref is r.ref and v is r.value else RefWrite(ref, v, span=r.span)


def let_chain(let: Let) -> tuple[list[Let], Expr]:
    """The lets of a chain starting at `let`, outermost first, and the body after the last:
    what a pass walks iteratively, so a long chain does not recurse."""
    chain: list[Let] = []
    node: Expr = let
    while isinstance(node, Let):
        chain.append(node)
        node = node.body
    return chain, node


def post_order(expr: Expr, fn: Callable[[Expr], None]) -> None:
    """Call `fn` on every sub-expression once, children before parents."""
    _PostOrder(fn).visit(expr)


class _PostOrder(ExprVisitor):
    def __init__(self, fn: Callable[[Expr], None]) -> None:
        super().__init__()
        self.fn = fn

    def visit(self, expr: Expr) -> None:
        if expr in self.memo:
            return
        super().visit(expr)
        self.fn(expr)

    def visit_let_binding(self, let: Let) -> None:
        pass


def free_vars(expr: Expr) -> list[Var]:
    """Free local variables of `expr`, in order of first occurrence."""
    # Bound-before-use holds in well-scoped IR, so one pass suffices.
    finder = _FreeVars()
    finder.visit(expr)
    return finder.free


class _FreeVars(ExprVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.binders: set[Var] = set()
        self.seen: set[Var] = set()
        self.free: list[Var] = []

    def visit_var(self, var: Var) -> None:
        if var not in self.binders and var not in self.seen:
            self.seen.add(var)
            self.free.append(var)

    def visit_let(self, let: Let) -> None:
        node: Expr = let
        while isinstance(node, Let):
            self.binders.add(node.var)
            self.visit(node.value)
            node = node.body
        self.visit(node)

    def visit_function(self, fn: Function) -> None:
        self.binders.update(fn.params)
        self.visit(fn.body)

    def visit_pattern(self, p: Pattern) -> None:
        self.binders.update(pattern_vars(p))


class FreeVarSets:
    """``free_vars`` as sets, for many nodes of one program: each node's set is computed
    once, from its children's. A pass asking for the free variables of every let's body
    walked the rest of the program at each let: quadratic in the length of an elif chain
    (DeadCodeElimination: 0.8 s a run for 600 branches).

    >>> from relaydsl.ir.expr import Let, Var, const
    >>> x, y = Var("x"), Var("y")
    >>> sorted(v.name_hint for v in FreeVarSets()(Let(x, y, x)))
    ['y']
    """

    def __init__(self) -> None:
        self._memo: dict[Expr, frozenset[Var]] = {}

    def __call__(self, expr: Expr) -> frozenset[Var]:
        got = self._memo.get(expr)
        if got is None:
            got = self._memo[expr] = self._free(expr)
        return got

    def _free(self, expr: Expr) -> frozenset[Var]:
        if isinstance(expr, Var):
            return frozenset((expr,))
        if isinstance(expr, Let):  # iteratively: a chain of thousands of lets
            chain, body = let_chain(expr)
            free = self(body)
            for let in reversed(chain):
                free = (free | self(let.value)) - {let.var}
            return free
        if isinstance(expr, Function):
            return self(expr.body) - set(expr.params)
        if isinstance(expr, Match):
            return self(expr.data).union(*(self(c.rhs) - set(pattern_vars(c.lhs))
                                           for c in expr.clauses))
        return frozenset[Var]().union(*(self(c) for c in children(expr)))


class TypeMutator:
    """Rebuilds a type; override ``visit_type_var`` etc. Used for substitution and resolution."""

    def visit(self, t: Type) -> Type:
        if isinstance(t, TypeVar):
            return self.visit_type_var(t)
        if isinstance(t, TensorType):
            shape = tuple(self.visit_dim(d) for d in t.shape)
            dtype = self.visit_dtype(t.dtype)
            if dtype is t.dtype and all(a is b for a, b in zip(shape, t.shape)):
                return t
            return TensorType(shape, dtype)
        # each rebuilt only when a part changed: type inference resolves many types a pass
        if isinstance(t, TupleType):
            fields = tuple(self.visit(f) for f in t.fields)
            return t if _same(fields, t.fields) else TupleType(fields)
        if isinstance(t, RefType):
            value = self.visit(t.value)
            return t if value is t.value else RefType(value)
        if isinstance(t, FuncType):
            args, ret = tuple(self.visit(a) for a in t.arg_types), self.visit(t.ret_type)
            relations = tuple(self._visit_relation(r) for r in t.relations)
            if ret is t.ret_type and _same(args, t.arg_types) and _same(relations, t.relations):
                return t
            return FuncType(args, ret, t.type_params, relations)
        if isinstance(t, TypeCall):
            args = tuple(self.visit(a) for a in t.args)
            return t if _same(args, t.args) else TypeCall(t.func, args)
        return t  # GlobalTypeVar

    def _visit_relation(self, r: TypeRelation) -> TypeRelation:
        args, out = tuple(self.visit(a) for a in r.args), self.visit(r.out)
        if out is r.out and _same(args, r.args):
            return r
        return TypeRelation(r.name, r.func, args, out, r.attrs)

    def visit_type_var(self, tv: TypeVar) -> Type:
        return tv

    def visit_dim(self, d: Dim) -> Dim:
        if isinstance(d, TypeVar):
            return cast(Dim, self.visit_type_var(d))  # a Shape variable stands for a dimension
        return d

    def visit_dtype(self, d: DType) -> DType:
        if isinstance(d, TypeVar):
            return cast(DType, self.visit_type_var(d))  # a BaseType variable stands for a dtype
        return d


def _same(new: tuple[object, ...], old: tuple[object, ...]) -> bool:
    return all(a is b for a, b in zip(new, old))


class _SubstituteTypes(TypeMutator):
    def __init__(self, mapping: Mapping[TypeVar, object]):
        self.mapping = mapping

    def visit_type_var(self, tv: TypeVar) -> Type:
        # A dimension or a dtype for a Shape or BaseType variable: what visit_dim and
        # visit_dtype take it for.
        return cast(Type, self.mapping.get(tv, tv))


class _CollectTypeVars(TypeMutator):
    def __init__(self) -> None:
        self.found: dict[TypeVar, None] = {}  # ordered, without duplicates

    def visit_type_var(self, tv: TypeVar) -> Type:
        self.found[tv] = None
        return tv


def substitute_types(t: Type, mapping: Mapping[TypeVar, object]) -> Type:
    """Replace type variables (of any kind) by the mapped types/dims/dtypes."""
    return _SubstituteTypes(mapping).visit(t)


def type_vars_of(t: Type) -> list[TypeVar]:
    """All type variables occurring in `t`, in order, without duplicates."""
    if isinstance(t, TensorType) and t.is_ground:
        return []  # the common case, without a walk
    collect = _CollectTypeVars()
    collect.visit(t)
    return list(collect.found)


__all__ = [
    "ExprVisitor", "ExprMutator", "ExprFunctor", "ExprFunctorWithArgs", "children", "let_chain",
    "pattern_vars", "post_order", "free_vars", "FreeVarSets", "TypeMutator", "substitute_types",
    "type_vars_of", "AnyDim", "GlobalTypeVar",
]


# How deep the compiler may recurse. The frontend, type inference, the passes and the
# lowering walk expressions recursively, a few Python frames per level of nesting; Python
# itself compiles expressions nested about 3 x its recursion limit deep (``x + x + ... + x``
# of ~2,900 terms), and we compile whatever Python compiles. Python 3.11 runs
# Python-to-Python calls without growing the C stack, so the limit only guards against
# runaway recursion.
COMPILER_RECURSION_LIMIT = 50_000

_deep_lock = threading.Lock()
_deep_users = 0
_limit_before = 0


@contextlib.contextmanager
def deep_recursion(limit: int | None = None) -> Generator[None, None, None]:
    """Raises Python's recursion limit (to `limit`, by default COMPILER_RECURSION_LIMIT) while
    code recurses over a deep expression.

    Python's limit is one for the whole process: the first of concurrent users raises it and
    the last one out restores it, so one thread leaving never lowers it under another.
    """
    global _deep_users, _limit_before
    with _deep_lock:
        if _deep_users == 0:
            _limit_before = sys.getrecursionlimit()
        _deep_users += 1
        limit = COMPILER_RECURSION_LIMIT if limit is None else limit
        if sys.getrecursionlimit() < limit:
            sys.setrecursionlimit(limit)
    try:
        yield
    finally:
        with _deep_lock:
            _deep_users -= 1
            if _deep_users == 0:
                sys.setrecursionlimit(_limit_before)
