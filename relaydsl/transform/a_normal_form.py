"""To A-normal form: bind every computation to a variable, once, in evaluation order.

In graph form a node referenced twice stands for one value (the interpreter evaluates a pure
one once per frame; an evaluator walking the graph as a tree would not). This pass binds
each call (primitive calls included), tuple, projection, ``if``, ``match`` and reference
operation to a ``let``, so that it is evaluated exactly once, before its first use, and
every argument becomes a variable, constant or global. Example input (graph form; ``%0``
is one node, shared by both branches)::

    fn (%x) {
      %0 = fn (%p0, Primitive=1) { exp(%p0) }(%x);
      if (%c) { add(%0, %0) } else { %0 }
    }

Output::

    fn (%x) {
      let %t1 = fn (%p0, Primitive=1) { exp(%p0) }(%x);
      if (%c) { let %t2 = add(%t1, %t1); %t2 } else { %t1 }
    }

Scoping. Each node is bound in the innermost scope (function body, ``if`` branch, ``match``
clause) enclosing all its uses -- their least common ancestor in the scope tree: a node used
only inside a branch is bound inside that branch, one used in both branches before the
``if``. A block ends with an atom (a variable), as in TVM, except that a call of a
non-primitive function, an ``if`` or a ``match`` ending a block stays there unbound, so tail
calls remain tail calls and loops written as recursion run in constant stack. Existing lets
keep their variables; a let-bound function is still bound directly (so it may call itself). Function
literals are values and are not bound; primitive function literals stay in the callee
position of their calls, and their bodies (graph form, as fuse_ops builds them) are left
alone. The result is typed: every node it builds takes the type of the node it stands for
(binding a value does not change its type), so a typed input is not inferred again.

``outside_a_normal_form`` is the form's definition as a check (every operand an atom or a
function literal, no computation reached twice), which a consumer that emits each node once
per use asserts with ``check_a_normal_form`` (the llvm target's native lowering: the
accelerator's host fallback once handed it graph form, and a shared residual input was
lowered once per path, 2^n times).
"""
from __future__ import annotations

from dataclasses import dataclass

from relaydsl.ir.adt import Constructor
from relaydsl.ir.expr import (
    Call, Clause, Constant, Expr, Function, GlobalVar, Grad, If, Let, Match, Op, RefCreate,
    RefRead, RefWrite, Tuple, TupleGetItem, Var,
)
from relaydsl.ir.module import IRModule
from relaydsl.errors import IRError
from relaydsl.ir.visitor import scoped_children
from relaydsl.ir.visitor import deep_recursion
from relaydsl.transform._util import is_primitive
from relaydsl.transform.pass_infra import Pass

_ATOMS = (Var, GlobalVar, Constant, Op, Constructor)


@dataclass(eq=False)
class _Scope:
    parent: "_Scope | None"
    depth: int


def _lca(a: _Scope, b: _Scope) -> _Scope:
    while a is not b:
        if a.depth < b.depth:
            b = b.parent  # type: ignore[assignment]
        elif b.depth < a.depth:
            a = a.parent  # type: ignore[assignment]
        else:
            a, b = a.parent, b.parent  # type: ignore[assignment]
    return a


def _edges(e: Expr) -> list[tuple[Expr, int | None]]:
    """Children of `e` with the scope each opens (a primitive function's body is left alone)."""
    return [] if is_primitive(e) else scoped_children(e)


class _Analysis:
    """Use counts of every node and the scope each is bound in (LCA of its uses' scopes)."""

    def __init__(self, body: Expr, root_scope: _Scope):
        self.uses: dict[Expr, list[tuple[Expr, int | None]]] = {}
        order: list[Expr] = []
        seen: set[Expr] = set()
        stack: list[tuple[Expr, bool]] = [(body, False)]
        while stack:  # iterative post-order over the DAG
            e, expanded = stack.pop()
            if expanded:
                order.append(e)
                continue
            if e in seen:
                continue
            seen.add(e)
            stack.append((e, True))
            for child, key in reversed(_edges(e)):
                if isinstance(child, _ATOMS):
                    continue
                self.uses.setdefault(child, []).append((e, key))
                stack.append((child, False))
        self.scope: dict[Expr, _Scope] = {body: root_scope}
        self.child_scope: dict[tuple[Expr, int], _Scope] = {}
        for e in reversed(order):  # users before the nodes they use
            if e is not body:
                scopes = [self._use_scope(user, key) for user, key in self.uses[e]]
                s = scopes[0]
                for other in scopes[1:]:
                    s = _lca(s, other)
                self.scope[e] = s
            for _, key in _edges(e):
                if key is not None:
                    self._use_scope(e, key)

    def _use_scope(self, user: Expr, key: int | None) -> _Scope:
        parent = self.scope[user]
        if key is None:
            return parent
        s = self.child_scope.get((user, key))
        if s is None:
            s = self.child_scope[(user, key)] = _Scope(parent, parent.depth + 1)
        return s

    def count(self, e: Expr) -> int:
        return len(self.uses.get(e, ()))


def _typed(new: Expr, like: Expr) -> Expr:
    """`new`, which stands for `like`, with `like`'s type (if it has one yet)."""
    if like.has_type and not new.has_type:
        new.set_checked_type(like.checked_type)
    return new


def _stays_in_tail_position(e: Expr) -> bool:
    """A call of a (non-primitive) function, an if or a match ending a block stays unbound:
    tail calls remain tail calls. Everything else there is bound like any other value."""
    if isinstance(e, (If, Match)):
        return True
    return isinstance(e, Call) and not isinstance(e.op, (Op, Constructor)) and \
        not is_primitive(e.op)


class _ToANF:
    def __init__(self, analysis: _Analysis):
        self.a = analysis
        self.done: dict[Expr, Expr] = {}
        self.blocks: dict[_Scope, list[tuple[Var, Expr]]] = {}  # the open blocks
        self.counter = 0

    def block(self, root: Expr, scope: _Scope) -> Expr:
        """`root` as a block of scope `scope`: its bindings as lets around its value."""
        bindings: list[tuple[Var, Expr]] = []
        self.blocks[scope] = bindings
        result = self.convert(root, self.direct(root, scope), tail=True)
        del self.blocks[scope]
        for var, value in reversed(bindings):
            result = _typed(Let(var, value, result), result)
        return result

    def direct(self, e: Expr, scope: _Scope) -> bool:
        """Whether `e` may stay unbound where it is: used once, and bound in this scope."""
        return self.a.count(e) <= 1 and self.a.scope.get(e) is scope

    def emit(self, e: Expr, value: Expr) -> Var:
        self.counter += 1
        var = _typed(Var(f"t{self.counter}"), e)
        assert isinstance(var, Var)
        self.blocks[self.a.scope[e]].append((var, value))
        self.done[e] = var
        return var

    def convert(self, e: Expr, direct: bool = False, tail: bool = False) -> Expr:
        """`e` with its sub-computations bound; itself bound unless `direct` (the caller
        places it: a let's value, or a block's result when `tail` and `e` is a tail call,
        an ``if`` or a ``match``)."""
        if isinstance(e, _ATOMS) or is_primitive(e):
            return e
        hit = self.done.get(e)
        if hit is not None:
            return hit
        if isinstance(e, Let):
            return self.convert_lets(e, direct, tail)
        if isinstance(e, Function):
            new = _typed(Function(e.params, self.block(e.body, self.a.child_scope[(e, 0)]),
                                  e.ret_type, e.type_params, e.attrs, span=e.span), e)
            self.done[e] = new  # a function literal is a value: not bound
            return new
        new = _typed(self.rebuild(e), e)
        if direct and (not tail or _stays_in_tail_position(e)):
            return new
        return self.emit(e, new)

    def convert_lets(self, let: Let, direct: bool, tail: bool) -> Expr:
        scope = self.a.scope[let]
        node: Expr = let
        while isinstance(node, Let) and (node is let or (
                self.a.count(node) <= 1 and node not in self.done)):
            value = self.convert(node.value, self.direct(node.value, scope))
            self.blocks[scope].append((node.var, value))
            node = node.body
        result = self.convert(node, direct and self.direct(node, scope), tail)
        if not direct:
            self.done[let] = result
        return result

    def rebuild(self, e: Expr) -> Expr:
        c = self.convert
        match e:
            case Call(op=op, args=args):
                new_args = tuple(c(a) for a in args)  # arguments first, then the callee
                return Call(c(op), new_args, e.attrs, e.type_args, span=e.span)
            case Tuple(fields=fields):
                return Tuple(tuple(c(f) for f in fields), span=e.span)
            case TupleGetItem(tuple_value=t, index=i):
                return TupleGetItem(c(t), i, span=e.span)
            case If(cond=cond, true_branch=a, false_branch=b):
                new_cond = c(cond)
                return If(new_cond, self.block(a, self.a.child_scope[(e, 0)]),
                          self.block(b, self.a.child_scope[(e, 1)]), span=e.span)
            case Match(data=data, clauses=clauses, complete=complete):
                new_data = c(data)
                return Match(new_data, tuple(
                    Clause(cl.lhs, self.block(cl.rhs, self.a.child_scope[(e, i)]))
                    for i, cl in enumerate(clauses)), complete, span=e.span)
            case RefCreate(value=v):
                return RefCreate(c(v), span=e.span)
            case RefRead(ref=v):
                return RefRead(c(v), span=e.span)
            case RefWrite(ref=ref, value=v):
                new_ref = c(ref)
                return RefWrite(new_ref, c(v), span=e.span)
            case Grad(fn=fn):
                return Grad(c(fn), span=e.span)
            case _:
                raise AssertionError(f"to_a_normal_form: unexpected node {type(e).__name__}")


def a_normal_form_function(fn: Function) -> Function:
    """The A-normal form of one function (nested functions included)."""
    if is_primitive(fn):
        return fn
    with deep_recursion():
        root = _Scope(None, 1)
        analysis = _Analysis(fn.body, root)
        body = _ToANF(analysis).block(fn.body, root)
    new = Function(fn.params, body, fn.ret_type, fn.type_params, fn.attrs, span=fn.span)
    return _typed(new, fn)  # type: ignore[return-value]


def _operands(e: Expr) -> tuple[Expr, ...]:
    """What `e` computes from: in A-normal form each is an atom or a function literal."""
    match e:
        case Call(op=op, args=args):
            return (op, *args)
        case Tuple(fields=fields):
            return fields
        case TupleGetItem(tuple_value=t):
            return (t,)
        case If(cond=cond):
            return (cond,)
        case Match(data=data):
            return (data,)
        case RefCreate(value=v) | RefRead(ref=v) | Grad(fn=v):
            return (v,)
        case RefWrite(ref=ref, value=v):
            return (ref, v)
        case _:
            return ()


def outside_a_normal_form(fn: Function) -> Expr | None:
    """The first computation in `fn` (nested functions included, primitive functions' bodies
    not) that breaks A-normal form -- an operand that is itself a computation, or a
    computation reached twice (a shared node of graph form) -- or None. Walks iteratively,
    so a body of any depth is checked without recursion.

    >>> from relaydsl.ir import Op
    >>> x = Var("x"); exp = Op.get("exp")
    >>> shared = Call(exp, [x])
    >>> outside_a_normal_form(Function([x], Call(Op.get("add"), [shared, shared]))) is shared
    True
    >>> t = Var("t")
    >>> outside_a_normal_form(Function([x], Let(t, shared, Call(Op.get("add"), [t, t]))))
    """
    seen: set[Expr] = set()
    blocks: list[Expr] = [fn.body]  # expressions in a let's value or a block's place
    while blocks:
        e = blocks.pop()
        while isinstance(e, Let):
            blocks.append(e.value)
            e = e.body
        if isinstance(e, _ATOMS) or is_primitive(e):
            continue
        if isinstance(e, Function):
            blocks.append(e.body)
            continue
        if e in seen:
            return e
        seen.add(e)
        for operand in _operands(e):
            if isinstance(operand, Function) and not is_primitive(operand):
                blocks.append(operand.body)
            elif not (isinstance(operand, _ATOMS) or is_primitive(operand)):
                return operand
        if isinstance(e, If):
            blocks += [e.true_branch, e.false_branch]
        elif isinstance(e, Match):
            blocks += [c.rhs for c in e.clauses]
    return None


def check_a_normal_form(fn: Function, name: str, consumer: str) -> None:
    """Raises IRError unless `fn`, the function `name`, is in A-normal form, which
    `consumer` (a lowering that emits each node once per use) requires."""
    bad = outside_a_normal_form(fn)
    if bad is not None:
        where = f" at {bad.span}" if bad.span is not None else ""
        raise IRError(f"{consumer} takes functions in A-normal form (each computation bound "
                      f"once by a let: the ToANormalForm pass), but @{name} has a "
                      f"{type(bad).__name__}{where} used as an operand or shared")


@dataclass(frozen=True)
class ToANormalForm(Pass, opt_level=0,
                    description="bind every computation once, in order, in the innermost scope "
                                "using it"):
    """Every global function in A-normal form (see the module doc)."""

    def transform(self, mod: IRModule) -> IRModule:
        out = mod.copy()
        for gv, fn in mod.functions.items():
            out.add(gv, a_normal_form_function(fn))
        return out


def to_a_normal_form(mod: IRModule) -> IRModule:
    """``ToANormalForm()(mod)``: every global function of `mod` in A-normal form."""
    return ToANormalForm()(mod)


__all__ = ["ToANormalForm", "to_a_normal_form", "a_normal_form_function",
           "outside_a_normal_form", "check_a_normal_form"]
