"""Partial evaluation (§4.3 of the 2019 Relay paper, after Thiemann and Dussart): run a
program on what is known at compile time and emit the rest.

An interpreter whose values are *partially static*:

- a static tensor is itself (a Constant); an op call on static tensors is evaluated with
  the op's NumPy reference, as constant folding does (an op whose type facet knows the
  result from its arguments' types, ``shape_of`` or ``cast_like``, folds on dynamic ones);
- aggregates mirror their structure: a tuple of partially static values, a constructor
  applied to them, a closure (its function and its environment), a reference (a cell of
  the simulated store);
- a dynamic value is a variable (or other atom) of the residual program.

So a projection of a static tuple, an ``if`` on a static condition, a ``match`` on a static
constructor, a call of a static closure or global (inlined) and a read of a static
reference are computed away; everything else is residual code, emitted in evaluation
order in A-normal form (each computation bound once by a ``let``), so effects keep their
order and are never duplicated. A static value used where code needs it (an argument of a
dynamic call, a branch's result) is *reified* there: a tuple or constructor call is built,
a closure becomes a function literal whose body is partially evaluated with dynamic
parameters, a reference becomes a ``ref(...)`` of its current contents and is dynamic from
then on (the store is flow-sensitive: reads and writes of a static reference are simulated).
Before code whose time of running is unknown -- the branches of a dynamic ``if`` or
``match``, a residual function's body -- the references it may reach are made dynamic.

Recursion terminates by memoisation: a call of a function that is already being inlined
with arguments of the same static signature would unroll forever, so the outer call is
*specialised* instead -- a residual function of the dynamic parts of its arguments (for a
global called with dynamic arguments only, the global itself), which the inner call calls.
A recursive function on a dynamic list becomes a loop over it; a recursive function whose
static arguments change on every call (a counter) unrolls, up to FUEL nested calls of the
same function (and BUDGET calls inlined in all; a program cut there is not a fixed point of
the pass, since running it again unrolls further). Loop unrolling falls out of it: a
frontend ``for i in range(3)`` is a recursive closure on a static counter, so it unrolls
into straight-line code, which fusion may then turn into one kernel.

Before and after:

>>> from relaydsl.ir.parser import parse
>>> from relaydsl.typing import infer_types
>>> mod = infer_types(parse('''
... def @main(%x: Tensor[(2), float32]) {
...   let %r = ref(%x);
...   let %double = fn (%n: int32) {
...     let %u = ref_write(%r, add(ref_read(%r), ref_read(%r)));
...     add(%n, 1)
...   };
...   let %t = (%double(0), %double(1), 2f);
...   if (less(%t.1, 3)) { multiply(ref_read(%r), %t.2) } else { %x }
... }'''))
>>> print(partial_evaluate(mod)["main"].body)
let %u = add(%x: Tensor[(2,), float32], %x);
let %u_1 = add(%u, %u);
multiply(%u_1, 2f)
"""
from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any as AnyValue


from relaydsl.chained import ChainedDict
from relaydsl.ir.adt import (
    Constructor, Pattern, PatternConstructor, PatternTuple, PatternVar, PatternWildcard,
)
from relaydsl.ir.expr import (
    Call, Clause, Constant, Expr, Function, GlobalVar, Grad, If, Let, Match, Op, RefCreate,
    RefRead, RefWrite, Tuple, TupleGetItem, Var,
)
from relaydsl.ir.module import IRModule
from relaydsl.ir.types import TupleType, Type, TypeVar
from relaydsl.ir.visitor import free_vars, post_order, type_vars_of
from relaydsl.ir.visitor import deep_recursion
from relaydsl.transform._util import ascribes, communicates, is_primitive, rewrite_functions
from relaydsl.transform.fold_constant import evaluate_call
from relaydsl.transform.pass_infra import ON_DEMAND, Pass

FUEL = 64
"""How many calls of one function may be inlined inside each other (a recursion whose
static arguments change on every call, such as a loop over a static counter, unrolls this
far; the rest is a residual call)."""
BUDGET = 10_000
"""How many calls the evaluation of one global function may inline in all (a recursion that
calls itself in both branches of a dynamic ``if`` would unroll exponentially); the calls
after those stay calls."""


@dataclass(frozen=True)
class PartialEvaluate(Pass, opt_level=ON_DEMAND,
                      description="run what is static, emit the rest: inlines closures, "
                                  "unrolls static loops"):
    """Every user function partially evaluated (see the module doc); folding an op call
    takes its type from the typed input."""

    def transform(self, mod: IRModule) -> IRModule:
        names = {fn: gv for gv, fn in mod.functions.items()}
        return rewrite_functions(mod, lambda fn: _PartialEvaluator(mod).function(names[fn]))


def partial_evaluate(mod: IRModule) -> IRModule:
    """``PartialEvaluate()(mod)``."""
    return PartialEvaluate()(mod)


# ---- partially static values ------------------------------------------------------------

class _Value:
    """A partially static value."""

    __slots__ = ()


@dataclass(frozen=True, eq=False, slots=True)
class _Dynamic(_Value):
    """Known at run time only: the atom of the residual program that holds it (a variable,
    a global, a primitive function)."""

    expr: Expr


@dataclass(frozen=True, eq=False, slots=True)
class _Tensor(_Value):
    constant: Constant


@dataclass(frozen=True, eq=False, slots=True)
class _Tuple(_Value):
    fields: tuple[_Value, ...]


@dataclass(frozen=True, eq=False, slots=True)
class _Data(_Value):
    """A constructor applied to partially static fields."""

    constructor: Constructor
    fields: tuple[_Value, ...]


@dataclass(frozen=True, eq=False, slots=True)
class _Closure(_Value):
    fn: Function
    frame: "_Frame | None"


@dataclass(frozen=True, eq=False, slots=True)
class _Name(_Value):
    """A global function, constructor or op used as a value."""

    expr: GlobalVar | Constructor | Op


@dataclass(eq=False, slots=True)
class _Cell:
    """A cell of the simulated store: static `contents` until the reference escapes to
    residual code, then the variable `residual` that holds the run-time reference."""

    contents: _Value | None
    residual: Var | None = None
    busy: bool = False  # being made dynamic (a reference reachable from its own contents)


@dataclass(frozen=True, eq=False, slots=True)
class _Ref(_Value):
    cell: _Cell


_UNIT = _Tuple(())

# The static part of a value (see _signature): equal signatures, equal residual code.
Signature = tuple[object, ...]


class _Frame(ChainedDict[Var, _Value]):
    """The variables one evaluation of a function body binds; the rest are its parent's
    (the frame its closure was made in). A variable is bound once per evaluation."""

    __slots__ = ()

    def lookup(self, v: Var) -> _Value:
        found = self.find(v)
        return _Dynamic(v) if found is None else found  # free in the function evaluated


# ---- the residual program ---------------------------------------------------------------

@dataclass(eq=False)
class _Scope:
    """A block of residual code (a function body, a branch, a clause): its bindings in order,
    and the residual functions made in it, which code in it and in its sub-blocks may call."""

    parent: "_Scope | None"
    bindings: list[tuple[Var, Expr]] = field(default_factory=list[tuple[Var, Expr]])
    reified: dict[_Closure, Var] = field(default_factory=dict[_Closure, Var])
    specialised: dict[tuple[object, Signature], Var] = field(
        default_factory=dict[tuple[object, Signature], Var])
    # The values of the shared dataflow nodes evaluated in this block, by (frame, node), in
    # the order computed (rollback drops the newest).
    shared: dict[tuple["_Frame", Expr], "_Value"] = field(
        default_factory=dict[tuple["_Frame", Expr], "_Value"])

    def push(self, value: Expr, name: str, annotation: Type | None = None) -> Var:
        var = Var(name, annotation)
        self.bindings.append((var, value))
        return var

    def visible(self) -> Iterator["_Scope"]:
        scope: _Scope | None = self
        while scope is not None:
            yield scope
            scope = scope.parent

    def finish(self, result: Expr) -> Expr:
        """The block's bindings around `result`. A computation bound last and returned stays
        in tail position unbound (a tail call stays one: loops run in constant stack)."""
        bindings = self.bindings
        if bindings and bindings[-1][0] is result and isinstance(result, Var) \
                and result.type_annotation is None \
                and not isinstance(bindings[-1][1], Function):  # a function may call itself
            result = bindings[-1][1]
            bindings = bindings[:-1]
        for var, value in reversed(bindings):
            result = Let(var, value, result)
        return result


@dataclass(eq=False)
class _Entry:
    """A call being evaluated: an inlining (`target` None) or the body of a residual function
    `target` (a global, or a let-bound function), which a call with the same signature calls."""

    key: object
    signature: tuple[Signature, ...]
    args: Sequence[_Value]  # keeps the objects whose ids are in the signature alive
    target: Expr | None = None


class _Specialise(Exception):
    """A call met `entry` again with the same signature: that call must become a residual
    function rather than be inlined (raised from the inner call to the outer one)."""

    def __init__(self, entry: _Entry):
        super().__init__()
        self.entry = entry


class _Unsupported(Exception):
    """What this evaluator leaves alone (a grad node, a reference inside its own contents):
    the function is kept as it is."""


def _signature(v: _Value) -> Signature:
    """The static part of `v`: calls with equal signatures compute the same residual code."""
    if isinstance(v, _Tensor):
        data = v.constant.data
        return ("T", data.dtype.str, data.shape, data.tobytes()) if data.size <= 16 \
            else ("T", v.constant)
    if isinstance(v, _Tuple):
        return ("U", *map(_signature, v.fields))
    if isinstance(v, _Data):
        return ("C", v.constructor, *map(_signature, v.fields))
    if isinstance(v, _Closure):
        return ("F", v)
    if isinstance(v, _Name):
        return ("N", v.expr)
    return ("D",)  # dynamic values and references (made dynamic before a residual call)


def _leaves(v: _Value) -> list[_Value]:
    """The parts of `v` a specialised function takes as parameters: its dynamic values and
    references."""
    if isinstance(v, (_Tuple, _Data)):
        return [leaf for f in v.fields for leaf in _leaves(f)]
    if isinstance(v, (_Dynamic, _Ref)):
        return [v]
    return []


def _replace_leaves(v: _Value, new: Iterator[_Value]) -> _Value:
    if isinstance(v, _Tuple):
        return _Tuple(tuple(_replace_leaves(f, new) for f in v.fields))
    if isinstance(v, _Data):
        return _Data(v.constructor, tuple(_replace_leaves(f, new) for f in v.fields))
    if isinstance(v, (_Dynamic, _Ref)):
        return next(new)
    return v


def _numpy(v: _Value) -> AnyValue:
    """The NumPy value of a static tensor or tuple of them (as op references take it), or
    None."""
    if isinstance(v, _Tensor):
        return v.constant.data
    if isinstance(v, _Tuple):
        fields = [_numpy(f) for f in v.fields]
        return None if any(f is None for f in fields) else tuple(fields)
    return None


def _from_literal(e: Expr) -> _Value:
    if isinstance(e, Tuple):
        return _Tuple(tuple(_from_literal(f) for f in e.fields))
    assert isinstance(e, Constant)
    return _Tensor(e)


def _irrefutable(p: Pattern) -> bool:
    if isinstance(p, PatternTuple):
        return all(_irrefutable(q) for q in p.patterns)
    return isinstance(p, (PatternVar, PatternWildcard))


def _test(p: Pattern, v: _Value) -> bool | None:
    """Whether `v` matches `p`: True, False, or None when that is known at run time only."""
    if isinstance(p, (PatternVar, PatternWildcard)):
        return True
    if isinstance(p, PatternConstructor):
        if not isinstance(v, _Data):
            return None
        if v.constructor is not p.constructor:
            return False
        return _all(_test(q, f) for q, f in zip(p.patterns, v.fields))
    assert isinstance(p, PatternTuple)
    if isinstance(v, _Tuple):
        return _all(_test(q, f) for q, f in zip(p.patterns, v.fields))
    return True if _irrefutable(p) else None


def _all(outcomes: Iterator[bool | None]) -> bool | None:
    seen = list(outcomes)
    if False in seen:
        return False
    return None if None in seen else True


# ---- the evaluator ----------------------------------------------------------------------

# What rollback restores: the scope, its binding count, reified and specialised functions, the
# cells and each cell's contents, the number of shared nodes' values it knew.
_Mark = tuple[_Scope, int, dict[_Closure, Var],
              dict[tuple[object, Signature], Var], list[_Cell],
              list[tuple[_Cell, _Value | None, Var | None]], int]

# The nodes whose value is evaluated once per frame however many uses share them (graph
# normal form's DAG: walked as a tree, a chain of n residual blocks, each using its input
# twice, took 2^n evaluations). They are pure dataflow (an op call that does not communicate,
# a tuple, a projection), so one value is what their sharing means (as a_normal_form binds
# such a node once).
_SHARABLE = (Call, Tuple, TupleGetItem)


class _PartialEvaluator:
    def __init__(self, mod: IRModule):
        self.mod = mod
        self.scope = _Scope(None)
        self.cells: list[_Cell] = []  # the static cells code in this scope may reach
        self.stack: list[_Entry] = []
        self.name = "x"  # the name of the variable being bound, for the residual ones
        self.free_vars: dict[Function, list[Var]] = {}
        self.own_type_vars: set[TypeVar] = set()
        self.params: set[Expr] = set()  # the parameters of the function being evaluated
        self.inlined = 0  # calls inlined so far

    def own(self, t: Type | None) -> Type | None:
        """`t`, for an annotation in the residual function, unless it mentions type
        variables of another global (one inlined here): inference finds those types."""
        if t is None or not set(type_vars_of(t)) <= self.own_type_vars:
            return None
        return t

    def fresh(self, v: Var) -> Var:
        return Var(v.name_hint, self.own(v.type_annotation), span=v.span)

    def function(self, gv: GlobalVar) -> Function:
        """The global function `gv` partially evaluated (its parameters kept)."""
        fn = self.mod[gv]
        self.own_type_vars = _type_vars_in(fn)
        self.params = set(fn.params)
        try:
            with deep_recursion():
                body = self.residual_body(fn, None, fn.params, target=gv, key=gv)
        except _Unsupported:
            return fn
        return Function(fn.params, body, fn.ret_type, fn.type_params, fn.attrs, span=fn.span)

    # -- scopes --

    def in_scope(self, run: Callable[[], _Value], *, reaches_all: bool = True) -> Expr:
        """The residual block of code `run` emits, whose time of running is unknown (a
        branch, a function body): the static cells it may reach (all, by default) are made
        dynamic before it; its own are gone after it."""
        if reaches_all:
            self.materialise_all()
        scope, cells = self.scope, self.cells
        self.scope, self.cells = _Scope(scope), []
        try:
            return self.scope.finish(self.reify(run()))
        finally:
            self.scope, self.cells = scope, cells

    def push(self, value: Expr, name: str | None = None) -> _Dynamic:
        return _Dynamic(self.scope.push(value, name or self.name))

    def residual_body(self, fn: Function, frame: _Frame | None,
                      values: Sequence[Var] | Sequence[_Value], target: Expr, key: object
                      ) -> Expr:
        """The body of `fn` (`key`: a global or closure) as the body of the residual function
        `target`, its parameters bound to `values` (its parameters, or the partially static
        arguments of a specialisation); a call of `key` with the same signature inside calls
        `target`."""
        bound = [v if isinstance(v, _Value) else _Dynamic(v) for v in values]
        inner = _Frame(frame, dict(zip(fn.params, bound)))
        signature = tuple(_signature(v) for v in bound)
        self.stack.append(_Entry(key, signature, bound, target))
        try:
            return self.in_scope(lambda: self.eval(fn.body, inner), reaches_all=False)
        finally:
            self.stack.pop()

    # -- the store --

    def materialise(self, cell: _Cell) -> Var:
        """The residual reference of `cell`, made (``ref`` of its contents) on first use."""
        if cell.residual is not None:
            return cell.residual
        if cell.busy:
            raise _Unsupported("a reference reachable from its own contents")
        cell.busy = True
        try:
            assert cell.contents is not None
            atom = self.reify(cell.contents)
        finally:
            cell.busy = False
        cell.residual = self.scope.push(RefCreate(atom), "r")
        cell.contents = None
        if cell in self.cells:
            self.cells.remove(cell)
        return cell.residual

    def materialise_all(self) -> None:
        for cell in list(self.cells):
            self.materialise(cell)

    def materialise_reachable(self, values: Sequence[_Value]) -> None:
        """Make dynamic the static cells a residual function may reach through `values`."""
        seen: set[_Value] = set()
        todo = list(values)
        while todo:
            v = todo.pop()
            if v in seen:
                continue
            seen.add(v)
            if isinstance(v, (_Tuple, _Data)):
                todo.extend(v.fields)
            elif isinstance(v, _Closure):
                free = self.free_vars.get(v.fn)
                if free is None:
                    free = self.free_vars[v.fn] = free_vars(v.fn)
                if v.frame is not None:
                    todo.extend(v.frame.lookup(x) for x in free)
            elif isinstance(v, _Ref) and v.cell.residual is None:
                assert v.cell.contents is not None
                todo.append(v.cell.contents)
                self.materialise(v.cell)

    # -- reification: a value as an atom of the residual program --

    def reify(self, v: _Value) -> Expr:
        if isinstance(v, _Dynamic):
            return v.expr
        if isinstance(v, _Tensor):
            return v.constant
        if isinstance(v, _Name):
            return v.expr
        if isinstance(v, _Tuple):
            return self.push(Tuple(tuple(self.reify(f) for f in v.fields))).expr
        if isinstance(v, _Data):
            return self.push(Call(v.constructor, tuple(self.reify(f) for f in v.fields))).expr
        if isinstance(v, _Ref):
            return self.materialise(v.cell)
        assert isinstance(v, _Closure)
        return self.reify_closure(v)

    def reify_closure(self, c: _Closure) -> Var:
        """A let-bound function literal for `c` (one per closure in a scope), its body
        evaluated with dynamic parameters; it calls itself where `c` would be called with
        dynamic arguments only."""
        for scope in self.scope.visible():
            if c in scope.reified:
                return scope.reified[c]
        self.materialise_reachable([c])
        var = Var(self.name if self.name != "x" else "f")
        self.scope.reified[c] = var
        params = [self.fresh(p) for p in c.fn.params]
        body = self.residual_body(c.fn, c.frame, params, target=var, key=c)
        fn = Function(tuple(params), body, self.own(c.fn.ret_type), attrs=c.fn.attrs,
                      span=c.fn.span)
        self.scope.bindings.append((var, fn))
        return var

    # -- evaluation --

    def eval(self, e: Expr, frame: _Frame) -> _Value:
        method = _DISPATCH.get(type(e))
        if method is None:
            raise _Unsupported(type(e).__name__)
        if not isinstance(e, _SHARABLE) or \
                (isinstance(e, Call) and (not isinstance(e.op, Op) or communicates(e))):
            return method(self, e, frame)
        key = (frame, e)
        for scope in self.scope.visible():  # a value from an enclosing block is in scope here
            found = scope.shared.get(key)
            if found is not None:
                return found
        value = method(self, e, frame)
        self.scope.shared[key] = value
        return value

    def eval_var(self, v: Var, frame: _Frame) -> _Value:
        return frame.lookup(v)

    def eval_constant(self, c: Constant, frame: _Frame) -> _Value:
        return _Tensor(c)

    def eval_name(self, e: GlobalVar | Constructor | Op, frame: _Frame) -> _Value:
        return _Name(e)

    def eval_function(self, fn: Function, frame: _Frame) -> _Value:
        if is_primitive(fn):
            return _Dynamic(fn)  # fused code: called as it is
        return _Closure(fn, frame)

    def eval_let(self, let: Let, frame: _Frame) -> _Value:
        node: Expr = let
        while isinstance(node, Let):  # a chain of lets, iteratively
            outer, self.name = self.name, node.var.name_hint
            try:
                value = self.eval(node.value, frame)
            finally:
                self.name = outer
            annotation = self.own(node.var.type_annotation)
            frame[node.var] = self.ascribed(node.var, value, annotation)
            node = node.body
        return self.eval(node, frame)

    def ascribed(self, var: Var, value: _Value, annotation: Type | None) -> _Value:
        """`value` bound to `var`, keeping the type `annotation` (`var`'s) ascribes it (a
        let's annotation may be there to make a type less static, ``relay.Any``)."""
        if isinstance(value, _Tuple) and isinstance(annotation, TupleType) and \
                len(annotation.fields) == len(value.fields):  # each field as its type says
            return _Tuple(tuple(self.ascribed(Var(var.name_hint, t), field, t)
                                for field, t in zip(value.fields, annotation.fields)))
        if annotation is None or not isinstance(value, _Dynamic) \
                or not ascribes(var, value.expr):
            return value
        return _Dynamic(self.scope.push(value.expr, var.name_hint, annotation))

    def eval_tuple(self, t: Tuple, frame: _Frame) -> _Value:
        return _Tuple(tuple(self.eval(f, frame) for f in t.fields))

    def eval_tuple_getitem(self, t: TupleGetItem, frame: _Frame) -> _Value:
        value = self.eval(t.tuple_value, frame)
        if isinstance(value, _Tuple):
            return value.fields[t.index]
        return self.push(TupleGetItem(self.reify(value), t.index, span=t.span))

    def eval_if(self, i: If, frame: _Frame) -> _Value:
        cond = self.eval(i.cond, frame)
        if isinstance(cond, _Tensor):
            return self.eval(i.true_branch if cond.constant.data.item() else i.false_branch,
                             frame)
        atom = self.reify(cond)
        then = self.in_scope(lambda: self.eval(i.true_branch, frame))
        otherwise = self.in_scope(lambda: self.eval(i.false_branch, frame))
        return self.push(If(atom, then, otherwise, span=i.span))

    def eval_match(self, m: Match, frame: _Frame) -> _Value:
        data = self.eval(m.data, frame)
        for clause in m.clauses:
            matches = _test(clause.lhs, data)
            if matches is None:
                break  # known at run time only: the match is residual
            if matches:
                self.bind(clause.lhs, data, frame)
                return self.eval(clause.rhs, frame)
        atom = self.reify(data)
        clauses: list[Clause] = []
        for clause in m.clauses:
            pattern = self.fresh_pattern(clause.lhs, frame)
            clauses.append(Clause(pattern, self.in_scope(lambda c=clause: self.eval(c.rhs, frame))))
        return self.push(Match(atom, tuple(clauses), m.complete, span=m.span))

    def bind(self, p: Pattern, v: _Value, frame: _Frame) -> None:
        """Bind the variables of `p`, which `v` matches."""
        if isinstance(p, PatternVar):
            frame[p.var] = v
        elif isinstance(p, (PatternConstructor, PatternTuple)):
            if not isinstance(v, (_Tuple, _Data)):  # a dynamic tuple: projected
                atom = self.reify(v)
                v = _Tuple(tuple(self.push(TupleGetItem(atom, i))
                                 for i in range(len(p.patterns))))
            for q, f in zip(p.patterns, v.fields):
                self.bind(q, f, frame)

    def fresh_pattern(self, p: Pattern, frame: _Frame) -> Pattern:
        """`p` binding new variables (dynamic values in `frame`) for a residual clause."""
        if isinstance(p, PatternVar):
            var = self.fresh(p.var)
            frame[p.var] = _Dynamic(var)
            return PatternVar(var, span=p.span)
        if isinstance(p, PatternConstructor):
            return PatternConstructor(p.constructor,
                                      tuple(self.fresh_pattern(q, frame) for q in p.patterns),
                                      span=p.span)
        if isinstance(p, PatternTuple):
            return PatternTuple(tuple(self.fresh_pattern(q, frame) for q in p.patterns),
                                span=p.span)
        return p

    def eval_ref_create(self, r: RefCreate, frame: _Frame) -> _Value:
        cell = _Cell(self.eval(r.value, frame))
        self.cells.append(cell)
        return _Ref(cell)

    def eval_ref_read(self, r: RefRead, frame: _Frame) -> _Value:
        ref = self.eval(r.ref, frame)
        if isinstance(ref, _Ref) and ref.cell.residual is None:
            assert ref.cell.contents is not None
            return ref.cell.contents
        return self.push(RefRead(self.reify(ref), span=r.span))

    def eval_ref_write(self, w: RefWrite, frame: _Frame) -> _Value:
        ref = self.eval(w.ref, frame)
        value = self.eval(w.value, frame)
        if isinstance(ref, _Ref) and ref.cell.residual is None:
            ref.cell.contents = value
        else:
            self.push(RefWrite(self.reify(ref), self.reify(value), span=w.span))
        return _UNIT

    def eval_grad(self, g: Grad, frame: _Frame) -> _Value:
        raise _Unsupported("grad nodes are lowered first (LowerGrads)")

    def eval_call(self, call: Call, frame: _Frame) -> _Value:
        args = [self.eval(a, frame) for a in call.args]  # arguments first, as the interpreter
        if isinstance(call.op, Op):
            return self.op_call(call, args)
        callee = self.eval(call.op, frame)
        if isinstance(callee, _Name) and isinstance(callee.expr, Constructor):
            return _Data(callee.expr, tuple(args))
        if isinstance(callee, _Name) and isinstance(callee.expr, GlobalVar) \
                and callee.expr in self.mod.functions:
            return self.apply(call, callee.expr, self.mod[callee.expr], None, args, callee.expr)
        if isinstance(callee, _Closure):
            return self.apply(call, callee, callee.fn, callee.frame, args, None)
        return self.residual_call(self.reify(callee), args, call)

    def residual_call(self, callee: Expr, args: Sequence[_Value], call: Call | None = None
                      ) -> _Dynamic:
        atoms = [self.reify(a) for a in args]
        return self.push(Call(callee, tuple(atoms), span=None if call is None else call.span))

    def op_call(self, call: Call, args: list[_Value]) -> _Value:
        assert isinstance(call.op, Op)
        values = [_numpy(a) for a in args]
        if all(v is not None for v in values) and call.has_type:
            literal = evaluate_call(call, values, call.checked_type)
            if literal is not None:
                return _from_literal(literal)
        new = Call(call.op, tuple(self.reify(a) for a in args), call.attrs, span=call.span)
        fold = call.op.definition.traits.fold_from_types
        if fold is not None and all(a.has_type for a in call.args):
            folded = fold(new, [a.checked_type for a in call.args])
            if isinstance(folded, Constant):
                return _Tensor(folded)
        return self.push(new)

    def apply(self, call: Call, key: object, fn: Function, frame: _Frame | None,
              args: list[_Value], gv: GlobalVar | None) -> _Value:
        """The `call` of the function `fn` (the global `gv`, or a closure over `frame`):
        inlined, unless it recurses with the same static signature (then specialised) or too
        deep."""
        if is_primitive(fn):
            return self.residual_call(fn, args)
        signature = tuple(_signature(a) for a in args)
        for scope in self.scope.visible():
            var = scope.specialised.get((key, signature))
            if var is not None:
                return self.residual_call(var, [leaf for a in args for leaf in _leaves(a)])
        depth = 0
        for entry in reversed(self.stack):
            if entry.key is key and entry.signature == signature:
                if entry.target is not None:  # dynamic arguments only: leaves are args
                    return self.residual_call(entry.target, args)
                raise _Specialise(entry)
            depth += entry.key is key
        if depth >= FUEL or self.inlined >= BUDGET:
            return self.residual_call(gv or self.reify(key), args)  # type: ignore[arg-type]
        self.inlined += 1
        entry = _Entry(key, signature, args)
        mark = self.mark()
        self.stack.append(entry)
        try:
            bound: dict[Var, _Value] = {}
            for p, a in zip(fn.params, args):
                t = p.type_annotation
                if gv is not None and t is not None and type_vars_of(t):
                    t = None  # the global's own type variables: inference finds these types
                if not (isinstance(a, _Dynamic) and a.expr in self.params):
                    t = None
                # An argument that is a parameter of ours keeps the parameter's type: that
                # may be all inference knows of it (a model's weight, typed by the function
                # it is passed to); other arguments have types of their own.
                bound[p] = self.ascribed(p, a, self.own(t))
            return self.eval(fn.body, _Frame(frame, bound))
        except _Specialise as again:
            if again.entry is not entry:
                raise
        finally:
            self.stack.pop()
        self.rollback(mark)
        return self.specialise(call, key, fn, frame, args, gv)

    def specialise(self, call: Call, key: object, fn: Function, frame: _Frame | None,
                   args: list[_Value], gv: GlobalVar | None) -> _Value:
        """The `call` of a recursive function as a call of a residual function of the
        dynamic parts of `args` (their static parts evaluated in its body), made here; for a
        global with dynamic arguments only, the global itself. The function's result type is
        the call's, where that is known (a loop that never ends has no other)."""
        self.materialise_reachable([*args, *([key] if isinstance(key, _Closure) else [])])
        signature = tuple(_signature(a) for a in args)
        leaves = [leaf for a in args for leaf in _leaves(a)]
        if gv is not None and all(s == ("D",) for s in signature):
            return self.residual_call(gv, args)
        var = Var(gv.name_hint if gv is not None else self.name if self.name != "x" else "f")
        self.scope.specialised[(key, signature)] = var
        params = [Var(f"p{i}") for i in range(len(leaves))]
        new = iter([_Dynamic(p) for p in params])
        values = [_replace_leaves(a, new) for a in args]
        body = self.residual_body(fn, frame, values, target=var, key=key)
        result = self.own(call.checked_type if call.has_type else None) or self.own(fn.ret_type)
        specialised = Function(tuple(params), body, result, span=fn.span)
        self.scope.bindings.append((var, specialised))
        return self.residual_call(var, leaves)

    # -- rolling back an inlining that turned out to recurse --

    def mark(self) -> _Mark:
        s = self.scope
        return (s, len(s.bindings), dict(s.reified), dict(s.specialised), list(self.cells),
                [(c, c.contents, c.residual) for c in self.cells], len(s.shared))

    def rollback(self, mark: _Mark) -> None:
        scope, n, reified, specialised, cells, contents, shared = mark
        assert scope is self.scope
        del scope.bindings[n:]
        for key in list(scope.shared)[shared:]:  # their values may be bindings just dropped
            del scope.shared[key]
        scope.reified, scope.specialised = reified, specialised
        self.cells = cells
        for cell, value, residual in contents:
            cell.contents, cell.residual = value, residual


def _type_vars_in(fn: Function) -> set[TypeVar]:
    """The type variables of `fn`'s own annotations (its type parameters and those free in
    it; a function nested in it included)."""
    found: set[TypeVar] = set(fn.type_params)

    def visit(e: Expr) -> None:
        if isinstance(e, Var) and e.type_annotation is not None:
            found.update(type_vars_of(e.type_annotation))
        elif isinstance(e, Function) and e.ret_type is not None:
            found.update(type_vars_of(e.ret_type))
    post_order(fn, visit)
    return found


_DISPATCH: dict[type, Callable[[_PartialEvaluator, AnyValue, _Frame], _Value]] = {
    Var: _PartialEvaluator.eval_var,
    Constant: _PartialEvaluator.eval_constant,
    GlobalVar: _PartialEvaluator.eval_name,
    Constructor: _PartialEvaluator.eval_name,
    Op: _PartialEvaluator.eval_name,
    Function: _PartialEvaluator.eval_function,
    Let: _PartialEvaluator.eval_let,
    Tuple: _PartialEvaluator.eval_tuple,
    TupleGetItem: _PartialEvaluator.eval_tuple_getitem,
    If: _PartialEvaluator.eval_if,
    Match: _PartialEvaluator.eval_match,
    RefCreate: _PartialEvaluator.eval_ref_create,
    RefRead: _PartialEvaluator.eval_ref_read,
    RefWrite: _PartialEvaluator.eval_ref_write,
    Grad: _PartialEvaluator.eval_grad,
    Call: _PartialEvaluator.eval_call,
}

