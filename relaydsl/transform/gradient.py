"""Higher-order reverse-mode automatic differentiation (MAPL 2018 §4.2).

Every tensor value ``v`` of the differentiated program becomes a pair
``(v, ref(zeros_like(v)))``: the value and a reference that accumulates its
adjoint. A backpropagator ``bp: Ref[fn() -> ()]`` is threaded through the
program; each operator call extends it with a closure that reads the call's
output adjoint, applies the op's gradient rule (defined with the op, relaydsl/op)
and adds the results into its inputs' references, then calls the previous
backpropagator. Control flow, closures, recursion, tuples, ADTs and
references are lifted structurally, so the result is ordinary Relay and can
itself be differentiated again (grad of grad). An ADT whose constructors declare
tensor fields is lifted to a twin ADT (``_Lifting``); the gradient with respect to
an ADT argument is a value of the same ADT holding the tensors' gradients.

Example: ``grad(fn (%x) { tanh(%x) })`` becomes, in outline::

    fn (%x) {
      let %bp = ref(fn () { () });
      let %a = (%x, ref(zeros_like(%x)));
      let %r = <lifted body: (tanh(%a.0), ref(zeros_like(..))), extending %bp>;
      ref_write(%r.1, ones_like(%r.0));
      ref_read(%bp)();
      (%r.0, (ref_read(%a.1),))
    }

Free variables of the differentiated function are treated as constants
(their adjoints are dropped); globals it calls are differentiated into
``@name_grad`` globals that take the backpropagator as their first argument.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from relaydsl.errors import IRError, RelayTypeError
from relaydsl.ir.adt import (
    Constructor, Pattern, PatternConstructor, PatternVar, TypeData, pattern_vars,
)
from relaydsl.ir.expr import (
    Call, Clause, Constant, Expr, Function, GlobalVar, Grad, If, Let, Match, Op, RefCreate,
    RefRead, RefWrite, Tuple, TupleGetItem, Var,
)
from relaydsl.ir.module import IRModule
from relaydsl.ir.types import (
    FuncType, GlobalTypeVar, RefType, TensorType, TupleType, Type, TypeCall, has_float, is_float,
    type_to_str,
)
from relaydsl.ir.visitor import ExprMutator, post_order, type_vars_of
from relaydsl.transform.dead_code import DeadCodeElimination
from relaydsl.transform.first_order_gradient import first_order_gradient, supports
from relaydsl.transform.pass_infra import Pass
from relaydsl.typing import infer_types
from relaydsl.typing.infer import call_graph_sccs
from relaydsl.op.grad_util import input_adjoints
from relaydsl.op.registry import ops

BACKPROP_TYPE = RefType(FuncType((), TupleType(())))


def _seq(effects: Sequence[Expr], result: Expr) -> Expr:
    """Evaluate `effects` in order, then `result`."""
    for effect in reversed(effects):
        result = Let(Var("_"), effect, result)
    return result


def value_of(lifted: Expr, t: Type) -> Expr:
    """The original value inside a lifted one."""
    if isinstance(t, TensorType):
        return TupleGetItem(lifted, 0)
    if isinstance(t, TupleType):
        return Tuple(tuple(value_of(TupleGetItem(lifted, i), f)
                           for i, f in enumerate(t.fields)))
    raise RelayTypeError(
        f"grad: an operator input of type {type_to_str(t)} cannot be differentiated")


def accumulate(lifted: Expr, grad: Expr, t: Type) -> list[Expr]:
    """Effects adding `grad` into the adjoint references of `lifted` (floats only)."""
    if isinstance(t, TensorType):
        if not is_float(t.dtype):
            return []
        ref = TupleGetItem(lifted, 1)
        return [RefWrite(ref, ops.add(RefRead(ref), grad))]
    if isinstance(t, TupleType):
        return [e for i, f in enumerate(t.fields)
                for e in accumulate(TupleGetItem(lifted, i), TupleGetItem(grad, i), f)]
    return []


class _Lifting:
    """The types of the differentiated program, and the conversions of values into and out of it.

    A tensor ``t`` becomes ``(t, ref t)``; tuples, functions and references lift
    componentwise. An ADT lifts through its type parameters (``List[t]`` becomes
    ``List[lift t]``) unless its constructors declare fields holding tensors (directly, in
    tuples, or through another such ADT): a field declared ``Tensor[..]`` cannot hold a pair,
    so such an ADT gets a lifted twin (``STree_lifted``: the same type parameters, each
    constructor's fields lifted), which lifted code builds and matches instead. ADT values from
    outside the differentiated function enter through a generated global that walks them
    (``@lift_STree``), and their gradients leave through another (``@adjoint_STree``): the same
    tree with each tensor replaced by its gradient, as for a JAX pytree.

    One instance serves every grad node of a module, so each twin and walk is made once;
    grad of grad lifts a twin in turn (``STree_lifted_lifted``).
    """

    def __init__(self, mod: IRModule):
        self.mod = mod
        self.twins: dict[GlobalTypeVar, GlobalTypeVar | None] = {}
        self.walks: dict[tuple[bool, Type], GlobalVar] = {}
        self.names: set[str] = set()  # chosen before their definitions enter the module

    def type(self, t: Type) -> Type:
        """The type of a value in the differentiated program: tensors carry an adjoint reference."""
        if isinstance(t, TensorType):
            return TupleType((t, RefType(t)))
        if isinstance(t, TupleType):
            return TupleType(tuple(self.type(f) for f in t.fields))
        if isinstance(t, FuncType):
            return FuncType(tuple(self.type(a) for a in t.arg_types), self.type(t.ret_type),
                            t.type_params)
        if isinstance(t, TypeCall):
            return TypeCall(self.twin(t.func) or t.func, tuple(self.type(a) for a in t.args))
        if isinstance(t, RefType):
            return RefType(self.type(t.value))
        return t  # type variables stand for lifted types already

    def twin(self, header: GlobalTypeVar) -> GlobalTypeVar | None:
        """The lifted twin of ADT `header`, added to the module on first use; None for an ADT
        declaring no field that holds a tensor."""
        if header in self.twins:
            return self.twins[header]
        td = self.mod.type_definitions[header]
        if not self._declares_tensors(td):
            self.twins[header] = None
            return None
        twin = GlobalTypeVar(self._fresh(f"{header.name}_lifted"), header.kind)
        self.twins[header] = twin  # before its fields, which may mention the ADT itself
        ctors = tuple(Constructor(self._fresh(f"{c.name}_lifted"),
                                  tuple(self.type(t) for t in c.inputs), twin, c.tag)
                      for c in td.constructors)
        self.mod.add_type(TypeData(twin, td.type_vars, ctors))
        return twin

    def constructor(self, c: Constructor) -> Constructor:
        """The constructor lifted code uses for `c`: its twin's, if its ADT has a twin."""
        twin = self.twin(c.belong_to)
        return c if twin is None else self.mod.type_definitions[twin].constructors[c.tag]

    def _declares_tensors(self, td: TypeData) -> bool:
        """Whether a constructor of `td`, or of an ADT its fields mention, declares a field
        holding a tensor (type parameters aside: ``List[t]`` lifts through ``t``)."""
        seen, todo = {td.header}, [td]
        while todo:
            for c in todo.pop().constructors:
                mentioned: list[GlobalTypeVar] = []
                if any(_holds_tensor(t, mentioned) for t in c.inputs):
                    return True
                for header in mentioned:
                    if header not in seen:
                        seen.add(header)
                        todo.append(self.mod.type_definitions[header])
        return False

    def constant(self, value: Expr, t: Type) -> Expr:
        """A value of type `t` entering the differentiated program from outside: each of its
        tensors gets a fresh zero adjoint."""
        if isinstance(t, TensorType):
            return Tuple((value, RefCreate(ops.zeros_like(value))))
        if isinstance(t, TupleType):
            v = Var("c")
            return Let(v, value, Tuple(tuple(self.constant(TupleGetItem(v, i), f)
                                             for i, f in enumerate(t.fields))))
        if isinstance(t, TypeCall):
            if self.type(t) == t:
                return value  # no tensor in it (values of type variables are lifted already)
            return Call(self._walk(t, into_lifted=True), (value,), span=value.span)
        raise RelayTypeError(f"grad: a value of type {type_to_str(t)} from outside the "
                             "differentiated function is not supported (pass it as an argument)",
                             value.span)

    def adjoint(self, lifted: Expr, t: Type) -> Expr:
        """The gradient accumulated in `lifted`, a lifted value of type `t`, as a value of type
        `t`: for an ADT, the same structure with each tensor replaced by its gradient."""
        if isinstance(t, TensorType):
            return RefRead(TupleGetItem(lifted, 1))
        if isinstance(t, TupleType):
            return Tuple(tuple(self.adjoint(TupleGetItem(lifted, i), f)
                               for i, f in enumerate(t.fields)))
        if isinstance(t, TypeCall) and self.type(t) != t:
            return Call(self._walk(t, into_lifted=False), (lifted,))
        if isinstance(t, TypeCall) and not type_vars_of(t):
            return lifted  # no tensor in it: the structure itself, as JAX's empty pytrees
        raise RelayTypeError(f"grad: cannot take the adjoint of a value of type {type_to_str(t)}")

    def _walk(self, t: TypeCall, *, into_lifted: bool) -> GlobalVar:
        """The global rebuilding a value of ADT instance `t` into the lifted program
        (``@lift_STree``: every field through `constant`) or its gradient out of it
        (``@adjoint_STree``: every field through `adjoint`). It is generic in the type
        variables of `t` (``List[Tensor[(n, 4)]]`` in a shape-polymorphic function), which
        type inference instantiates at each call."""
        gv = self.walks.get((into_lifted, t))
        if gv is not None:
            return gv
        prefix = "lift" if into_lifted else "adjoint"
        gv = self.walks[into_lifted, t] = GlobalVar(self._fresh(f"{prefix}_{t.func.name}"))
        clauses: list[Clause] = []
        for c in self.mod.type_definitions[t.func].constructors:
            fields = self.mod.field_types(c, t)
            xs = [Var(f"f{i}") for i in range(len(fields))]
            source, target = (c, self.constructor(c)) if into_lifted else (self.constructor(c), c)
            convert = self.constant if into_lifted else self.adjoint
            clauses.append(Clause(PatternConstructor(source, tuple(PatternVar(x) for x in xs)),
                                  Call(target, tuple(convert(x, f) for x, f in zip(xs, fields)))))
        lifted = self.type(t)
        x = Var("x", t if into_lifted else lifted)
        self.mod.add(gv, Function((x,), Match(x, tuple(clauses)), lifted if into_lifted else t,
                                  tuple(type_vars_of(t))))
        return gv

    def _fresh(self, name: str) -> str:
        """`name`, or `name` with underscores appended, unused by the module and this lifting."""
        mod = self.mod
        while name in self.names or mod.has_global(name) or mod.has_type(name) \
                or mod.has_constructor(name):
            name += "_"
        self.names.add(name)
        return name


def _holds_tensor(t: Type, mentioned: list[GlobalTypeVar]) -> bool:
    """Whether `t` holds a tensor outside other ADTs' definitions; notes in `mentioned` the ADTs
    it holds values of."""
    if isinstance(t, TensorType):
        return True
    if isinstance(t, TypeCall):
        mentioned.append(t.func)
        parts: tuple[Type, ...] = t.args
    elif isinstance(t, TupleType):
        parts = t.fields
    elif isinstance(t, FuncType):
        parts = (*t.arg_types, t.ret_type)
    elif isinstance(t, RefType):
        parts = (t.value,)
    else:
        return False
    return any(_holds_tensor(p, mentioned) for p in parts)


class _Lift(ExprMutator):
    """Lifts one function body; `bp` is the backpropagator reference in scope."""

    def __init__(self, ad: "_ReverseAD", bp: Var):
        super().__init__()
        self.ad = ad
        self.lifting = ad.lifting
        self.bp = bp
        self.vars: dict[Var, Var] = {}

    # ---- binders -----------------------------------------------------------------
    def bind(self, v: Var) -> Var:
        annotation = self.lifting.type(v.checked_type) if v.has_type else None
        new = Var(v.name_hint, annotation, span=v.span)
        self.vars[v] = new
        return new

    def visit_let_var(self, var: Var) -> Var:
        return self.vars.get(var) or self.bind(var)

    def visit_var(self, var: Var) -> Expr:
        mapped = self.vars.get(var)
        if mapped is not None:
            return mapped
        return self.lifting.constant(var, var.checked_type)  # a free variable: a constant here

    def visit_function(self, fn: Function) -> Expr:
        params = tuple(self.bind(p) for p in fn.params)
        body = self.visit(fn.body)
        ret = None
        if fn.has_type and isinstance(fn.checked_type, FuncType):
            ret = self.lifting.type(fn.checked_type.ret_type)
        return Function(params, body, ret, fn.type_params, span=fn.span)

    def visit_pattern(self, p: Pattern) -> Pattern:
        for v in pattern_vars(p):
            if v not in self.vars:
                self.bind(v)
        return super().visit_pattern(p)

    def visit_let(self, let: Let) -> Expr:
        # A let-bound function may call itself: bind before the value is lifted.
        node: Expr = let
        while isinstance(node, Let):
            if node.var not in self.vars:
                self.bind(node.var)
            node = node.body
        return super().visit_let(let)

    # ---- values ------------------------------------------------------------------
    def visit_constant(self, c: Constant) -> Expr:
        return self.lifting.constant(c, TensorType(c.data.shape, c.data.dtype.name))

    def visit_global_var(self, gv: GlobalVar) -> Expr:
        """A global used as a value: a closure passing this backpropagator on."""
        t = gv.checked_type
        assert isinstance(t, FuncType)
        # A polymorphic global's own shape parameters are not this scope's: the closure's
        # parameters then take their types from the call of the lifted global (an instance).
        params = tuple(Var(f"p{i}", None if t.type_params else self.lifting.type(a))
                       for i, a in enumerate(t.arg_types))
        return Function(params, Call(self.ad.lifted_global(gv), (self.bp, *params)))

    def visit_constructor(self, c: Constructor) -> Expr:
        """Called, used as a value or matched: the constructor of the lifted ADT."""
        return self.lifting.constructor(c)

    def visit_if(self, i: If) -> Expr:
        cond = TupleGetItem(self.visit(i.cond), 0)
        return If(cond, self.visit(i.true_branch), self.visit(i.false_branch), span=i.span)

    def visit_grad(self, g: Grad) -> Expr:
        raise AssertionError("inner grad nodes are lowered before outer ones")

    def visit_call(self, call: Call) -> Expr:
        if isinstance(call.op, Op):
            return self.op_call(call)
        args = tuple(self.visit(a) for a in call.args)
        if isinstance(call.op, GlobalVar):
            return Call(self.ad.lifted_global(call.op), (self.bp, *args), span=call.span)
        return Call(self.visit(call.op), args, span=call.span)

    def op_call(self, call: Call) -> Expr:
        """let args; let v = op(args.0); let r = (v, ref(0)); bp := fn() { rule; old() }; r"""
        op = call.op
        assert isinstance(op, Op)
        opdef = op.definition
        arg_types = [a.checked_type for a in call.args]
        arg_vars = [Var(f"{op.name}_in{i}") for i in range(len(call.args))]
        values = tuple(value_of(v, t) for v, t in zip(arg_vars, arg_types))
        for v, t in zip(values, arg_types):
            v.set_checked_type(t)  # the rules read their inputs' types (axes, shapes)
        out_type = call.checked_type
        out = Var(f"{op.name}_out")
        lifted_out = Var(f"{op.name}_lifted")
        effects: list[Expr] = []
        wants_grad = any(has_float(t) for t in arg_types)
        if opdef.differentiable and wants_grad:
            g = Var("g")
            try:
                grads = input_adjoints(Call(op, values, call.attrs), g)
            except IRError as e:  # a rule that cannot apply here: say where the call is
                if e.span is not None or call.span is None:
                    raise
                raise IRError(e.raw_message, call.span) from None
            updates = [e for v, d, t in zip(arg_vars, grads, arg_types)
                       for e in accumulate(v, d, t)]
            old = Var("bp_old")
            backprop = Function((), Let(g, self.lifting.adjoint(lifted_out, out_type),
                                        _seq(updates, Call(old, ()))))
            effects = [RefWrite(self.bp, Let(old, RefRead(self.bp), backprop))]
        body = Let(out, Call(op, values, call.attrs, span=call.span),
                   Let(lifted_out, self.lifting.constant(out, out_type), _seq(effects, lifted_out)))
        for v, a in reversed(list(zip(arg_vars, call.args))):
            body = Let(v, self.visit(a), body)
        return body


class _ReverseAD:
    """Lowers grad nodes of one module, making `@g_grad` for each global g they reach."""

    def __init__(self, mod: IRModule, lifting: _Lifting):
        self.mod = mod
        self.lifting = lifting
        self.lifted: dict[GlobalVar, GlobalVar] = {}

    def lifted_global(self, gv: GlobalVar) -> GlobalVar:
        new = self.lifted.get(gv)
        if new is not None:
            return new
        name = f"{gv.name_hint}_grad"
        while self.mod.has_global(name):  # a user's function may have the name already
            name += "_"
        new = GlobalVar(name)
        self.lifted[gv] = new
        fn = self.mod[gv]
        bp = Var("bp", BACKPROP_TYPE)
        lifter = _Lift(self, bp)
        params = [lifter.bind(p) for p in fn.params]
        t = fn.checked_type
        assert isinstance(t, FuncType)
        body = lifter.visit(fn.body)
        self.mod.add(new, Function((bp, *params), body, self.lifting.type(t.ret_type),
                                   fn.type_params, span=fn.span))
        return new

    def grad(self, node: Grad) -> Function:
        """The function computing (f(args), gradients) for ``grad(f)``."""
        t = node.fn.checked_type
        if not isinstance(t, FuncType) or not isinstance(t.ret_type, TensorType):
            raise RelayTypeError(f"grad needs a function returning a tensor, got "
                                 f"{type_to_str(t)}", node.span)
        # The shape parameters of a polymorphic global are its own, not this scope's: the
        # types are then left to inference, which instantiates them at this use.
        generic = isinstance(node.fn, GlobalVar) and bool(t.type_params)
        params = tuple(Var(f"x{i}", None if generic else a) for i, a in enumerate(t.arg_types))
        bp = Var("bp", BACKPROP_TYPE)
        lifter = _Lift(self, bp)
        args = tuple(Var(f"x{i}_lifted") for i in range(len(params)))
        result = Var("result")
        value = TupleGetItem(result, 0)
        adjoints = Tuple(tuple(self.lifting.adjoint(a, ty) for a, ty in zip(args, t.arg_types)))
        body = _seq([RefWrite(TupleGetItem(result, 1), ops.ones_like(value)),
                     Call(RefRead(bp), ())], Tuple((value, adjoints)))
        body = Let(result, Call(lifter.visit(node.fn), args, span=node.span), body)
        for a, p, ty in reversed(list(zip(args, params, t.arg_types))):
            body = Let(a, self.lifting.constant(p, ty), body)
        body = Let(bp, RefCreate(Function((), Tuple(()))), body)
        ret = None if generic else TupleType((t.ret_type, TupleType(t.arg_types)))
        return Function(params, body, ret, span=node.span)


def _innermost_grad(mod: IRModule) -> tuple[GlobalVar, Grad] | None:
    """A grad node containing no other, in a global calling no global that has one."""
    order = [gv for scc in call_graph_sccs(mod, list(mod.functions)) for gv in scc]
    for gv in order:  # callees first
        grad = _first_grad(mod[gv])
        if grad is not None:
            return gv, grad
    return None


def _first_grad(fn: Expr) -> Grad | None:
    """The first grad node of ``fn`` in post-order, which contains no other."""
    found: list[Grad] = []

    def note(e: Expr) -> None:
        if isinstance(e, Grad) and not found:
            found.append(e)

    post_order(fn, note)
    return found[0] if found else None


@dataclass(frozen=True)
class FirstOrderGradients(Pass, opt_level=3, requires=(DeadCodeElimination,),
                          description="a grad of straight-line code becomes a reference-free "
                                      "adjoint program"):
    """Each grad of straight-line first-order code (a function literal, or a global) replaced
    by its adjoint program from first_order_gradient.py: no references, no closures. The
    other grad nodes stay, for LowerGrads.

    Such a grad contains no other (its function is straight-line), so the replacements are
    independent of each other and of the order the remaining grads are lowered in. Dead pure
    code is removed first (DeadCodeElimination), as for LowerGrads.
    """

    def transform(self, mod: IRModule) -> IRModule:
        out = mod.copy()
        adjoints = _FirstOrderGrads(out)
        for gv, fn in list(out.user_functions().items()):
            new_fn = adjoints.visit(fn)
            if new_fn is not fn:
                assert isinstance(new_fn, Function)
                out.add(gv, new_fn)
        return out


class _FirstOrderGrads(ExprMutator):
    """Grad nodes of straight-line functions -> their first-order adjoint functions.

    The adjoint of a global is a global too, ``@f_adjoint``: it is generic in f's shape
    parameters, and the type checker instantiates them at each use, as for f itself. (Put
    in place of the grad node, it would carry f's own shape parameters into the caller.)
    """

    def __init__(self, mod: IRModule):
        super().__init__()
        self.mod = mod
        self.functions = dict(mod.functions)  # the typed globals, before any replacement
        self.adjoints: dict[GlobalVar, GlobalVar] = {}

    def visit_grad(self, g: Grad) -> Expr:
        if isinstance(g.fn, Function) and supports(g.fn):
            return first_order_gradient(g.fn)
        if isinstance(g.fn, GlobalVar) and supports(self.functions[g.fn]):
            return self.adjoint_global(g.fn)
        return super().visit_grad(g)

    def adjoint_global(self, gv: GlobalVar) -> GlobalVar:
        adjoint = self.adjoints.get(gv)
        if adjoint is None:
            name = f"{gv.name_hint}_adjoint"
            while self.mod.has_global(name):
                name += "_"
            adjoint = self.mod.add(name, first_order_gradient(self.functions[gv]))
            self.adjoints[gv] = adjoint
        return adjoint


@dataclass(frozen=True)
class LowerGrads(Pass, opt_level=0, requires=(DeadCodeElimination,),
                 description="the remaining grad nodes become reverse-mode AD code (closures, "
                             "references)"):
    """Every grad node replaced by ordinary Relay, innermost first.

    Dead pure code is removed first (DeadCodeElimination: dead code contributes nothing to a
    gradient, as in JAX, and would send nan adjoints, 0 * inf, back).
    """

    def transform(self, mod: IRModule) -> IRModule:
        out = mod.copy()
        lifting = _Lifting(out)
        while (found := _innermost_grad(out)) is not None:
            gv, node = found
            replacement = _ReverseAD(out, lifting).grad(node)
            new_fn = _ReplaceGrad(node, replacement).visit(out[gv])
            assert isinstance(new_fn, Function)
            out.add(gv, new_fn)
            infer_types(out)  # the next grad, an enclosing one, is lowered from a typed program
        return out


def lower_grads(mod: IRModule) -> IRModule:
    """``LowerGrads()(mod)``: every grad node of `mod` replaced by ordinary Relay."""
    return LowerGrads()(mod)


class _ReplaceGrad(ExprMutator):
    """Replaces one grad node (by identity) with its lowered form."""

    def __init__(self, node: Grad, replacement: Expr) -> None:
        super().__init__()
        self.node, self.replacement = node, replacement

    def visit_grad(self, g: Grad) -> Expr:
        return self.replacement if g is self.node else super().visit_grad(g)


__all__ = ["BACKPROP_TYPE", "FirstOrderGradients", "LowerGrads", "lower_grads"]
