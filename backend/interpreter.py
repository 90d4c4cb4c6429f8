"""The reference interpreter: the executable spec of the whole Relay language, over NumPy.

Each construct has one obvious meaning here (STYLE.md practice 7):

- a tensor is a NumPy array (a 0-d array for a scalar; dtypes exactly as the program says),
  a tuple a Python tuple, ``ref(v)`` a RefValue, ``Cons(h, t)`` a ConstructorValue, and a
  function a Closure: its Function node and the values of its free variables;
- an op call runs the op's NumPy reference with the call's attributes as keywords
  (``numpy_ref(*args, **attrs)``); an Op or a Constructor used as a value is a function;
- a GlobalVar names a function of the module, so globals recurse and call each other;
- a call evaluates its arguments left to right, then the callee (as TVM's interpreter);
- ``if`` needs a bool scalar; ``match`` tries its clauses in order and fails loudly when
  none matches; ``r := v`` evaluates ``r``, then ``v``, and returns the empty tuple.

The evaluator is an environment loop: ``env`` maps each Var (by identity) to its value.
A node shared in graph normal form (two uses, one object) means one value: a pure dataflow
node (op calls that do not communicate, primitive calls, tuples, projections, over
variables and constants only) is evaluated once per frame and remembered there, so that a
chain of n residual blocks costs n, not 2^n. Anything that reads or writes a reference or
calls a closure is evaluated at each use, in order.
Let, If and Match are iterated, not recursed into, and a call in tail position comes back
as a TailCall to the trampoline behind ``Interpreter.call``: chains of lets and tail recursion
(a loop of any length) use no Python stack. Non-tail recursion (``foldr`` over a list of
10,000) does; the interpreter raises Python's recursion limit while it runs and reports an
InterpreterError, never a crash, when even that is too little.

Type inference need not have run: annotations are read only to turn Python numbers passed
as arguments into arrays of the annotated dtype, and to check the arrays passed.

A backend runs programs on this evaluator through one public hook: ``call_primitive(fn,
args)``, given to the constructor, makes each call of a primitive function (the fused
groups of ops that ``fuse_ops`` makes) instead of evaluating its body op by op; the llvm
backend runs a compiled kernel there (backend/llvm/executor.py).

>>> import numpy as np
>>> from relaydsl.ir import Call, Function, Op, TensorType, Var
>>> x = Var("x", TensorType((2,), "float32"))
>>> evaluate(Function([x], Call(Op.get("add"), (x, x))), [1.0, 2.5])
array([2., 5.], dtype=float32)
"""
from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any as AnyValue, Callable, ClassVar

import numpy as np

from relaydsl.chained import ChainedDict
from relaydsl.errors import RelayError
from relaydsl.ir.adt import (
    Constructor, Pattern, PatternConstructor, PatternTuple, PatternVar, PatternWildcard,
)
from relaydsl.ir.attrs import Attrs
from relaydsl.ir.expr import (
    Call, Clause, Constant, Expr, Function, GlobalVar, If, Let, Match, Op, RefCreate, RefRead,
    RefWrite, Tuple, TupleGetItem, Var,
)
from relaydsl.ir.module import IRModule
from relaydsl.ir.span import Span
from relaydsl.ir.types import AnyDim, TensorType, TupleType, Type, type_to_str
from relaydsl.ir.visitor import deep_recursion, free_vars
from relaydsl.prelude import prelude_definitions
from relaydsl.transform.fuse_ops import is_primitive
from relaydsl.transform.graph_normal_form import is_dataflow


class InterpreterError(RelayError, RuntimeError):
    """A program failed at run time: no clause matched, an op failed, a variable was unbound.

    The message says where (``at file:line:col``) when the node has a span, followed by the
    source line with a caret.
    """

    def __init__(self, message: str, span: Span | None = None):
        excerpt = span.excerpt() if span is not None else ""
        super().__init__(message + (f"\n{excerpt}" if excerpt else ""))
        self.raw_message = message
        self.span = span


# ---- values ---------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class Closure:
    """A function value: a Function node and the values of its free variables.

    `env` is filled when the closure is made (a recursive ``let f = fn ... f ...`` also puts
    the closure itself there) and never changes afterwards. `name` is ``@g`` for a global.
    """

    function: Function
    env: dict[Var, Value]
    name: str | None = None
    # a function value compiled elsewhere (native code's closure returned to Python): called
    # with the arguments instead of evaluating `function`, which then only gives its type
    external: Callable[[list[Value]], Value] | None = None

    def __repr__(self) -> str:
        return format_value(self)


@dataclass(eq=False)
class RefValue:
    """A mutable cell: ``ref(v)`` makes one, ``!r`` reads `value`, ``r := v`` replaces it."""

    value: Value

    def __repr__(self) -> str:
        return format_value(self)


@dataclass(frozen=True, eq=False)
class ConstructorValue:
    """A value of an algebraic data type: ``Cons(h, t)`` is ``ConstructorValue(Cons, (h, t))``."""

    constructor: Constructor
    fields: tuple[Value, ...] = ()

    @property
    def name(self) -> str:
        return self.constructor.name

    def __repr__(self) -> str:
        return format_value(self)


Value = np.ndarray | tuple | Closure | RefValue | ConstructorValue | Op | Constructor


@dataclass(frozen=True, slots=True)
class TailCall:
    """A call in tail position, handed back to the trampoline in ``_invoke`` instead of made."""

    fn: Value
    args: list[Value]
    call: Call


# ---- frames ---------------------------------------------------------------------------------

# The values of the shared dataflow nodes evaluated in one environment, by node identity; a
# let nested in a sub-expression opens a child that sees its parent's (its variables are the
# parent's and more) and keeps its own (they may use its variables).
_Memo = ChainedDict[Expr, "Value"]


class _Env(dict[Var, "Value"]):
    """An environment: the values of its variables, and the shared nodes it evaluated."""

    __slots__ = ("memo",)

    def __init__(self, bindings: Mapping[Var, Value], memo: _Memo) -> None:
        super().__init__(bindings)
        self.memo = memo


# The node kinds that graph normal form shares (is_dataflow says which of them are pure).
_SHARABLE = (Call, Tuple, TupleGetItem)


# ---- the evaluator --------------------------------------------------------------------------

class Interpreter:
    """Evaluates the expressions of one module.

    >>> from relaydsl.ir import Function, Tuple, TupleGetItem, Var, const
    >>> x = Var("x")
    >>> swap = Interpreter().eval(Function([x], Tuple([TupleGetItem(x, 1), TupleGetItem(x, 0)])))
    >>> Interpreter().call(swap, [(np.array(1, "int32"), np.array(2.0, "float32"))])
    (array(2., dtype=float32), array(1, dtype=int32))

    `call_primitive(fn, args) -> value`, when given, makes every call whose callee is a
    primitive function literal (``is_primitive``, made by fuse_ops): `fn` is that Function
    (the same object each time the call runs), `args` the argument values, evaluated left to
    right. The result must be what evaluating `fn`'s body would give.

    >>> from relaydsl.ir import Call, Op
    >>> from relaydsl.transform.fuse_ops import PRIMITIVE
    >>> y = Var("y")
    >>> double = Function([y], Call(Op.get("add"), (y, y)), attrs=PRIMITIVE)
    >>> def traced(fn, args):
    ...     print("primitive called")
    ...     return Interpreter().call(Interpreter().eval(fn), args)
    >>> Interpreter(call_primitive=traced).eval(Call(double, (const(1.5),)))
    primitive called
    array(3., dtype=float32)
    """

    def __init__(self, mod: IRModule | None = None, *,
                 call_primitive: Callable[[Function, list[Value]], Value] | None = None):
        self.mod = mod if mod is not None else IRModule()
        self.call_primitive = call_primitive
        self._globals: dict[GlobalVar, Closure] = {}
        self._free_vars: dict[Function, tuple[Var, ...]] = {}
        self._dataflow: dict[Expr, bool] = {}  # is_dataflow's answers, per node

    def eval(self, expr: Expr, env: Mapping[Var, Value] | None = None) -> Value:
        """The value of `expr` where each free Var has its value in `env`."""
        with _stack_room():
            return self._run(expr, _Env(env or {}, _Memo()), owned=True, tail=False)

    def call(self, fn: Value, args: Iterable[Value]) -> Value:
        """Calls a function value (Closure, Op or Constructor) with argument values."""
        with _stack_room():
            return self._invoke(fn, list(args), None)

    # The loop. Let, If and Match step to their body, branch or clause; other nodes dispatch
    # to one method each (see _EVAL below).
    def _run(self, expr: Expr, env: dict[Var, Value], *, owned: bool, tail: bool
             ) -> Value | TailCall:
        """Evaluates `expr` in `env`.

        Bindings of lets and clauses go into `env` itself when this evaluation `owned` it (a
        call's frame, whose bindings die with it), else into a copy made at the first binding,
        so that a sub-expression's bindings never leak to its siblings. With `tail`, a call
        of a closure is not made but returned as a TailCall.
        """
        while True:
            kind = type(expr)
            if kind is Let:
                value = self._let_value(expr, env)
                if not owned:
                    env, owned = _child(env), True
                env[expr.var] = value
                expr = expr.body
            elif kind is If:
                expr = expr.true_branch if self._condition(expr, env) else expr.false_branch
            elif kind is Match:
                clause, bindings = self._select(expr, env)
                if bindings and not owned:
                    env, owned = _child(env), True
                env.update(bindings)
                expr = clause.rhs
            elif kind is Call:
                return self._call(expr, env, tail)
            else:
                method = self._EVAL.get(kind)
                if method is None:
                    raise InterpreterError(f"cannot evaluate a {kind.__name__}: not a relay Expr")
                return method(self, expr, env)

    def _value(self, expr: Expr, env: dict[Var, Value]) -> Value:
        """The value of a sub-expression that is not in tail position; a pure dataflow node's
        once per environment (graph normal form's sharing)."""
        memo = env.memo if isinstance(env, _Env) else None
        if memo is None or not isinstance(expr, _SHARABLE) or \
                not is_dataflow(expr, self._dataflow):
            return self._run(expr, env, owned=False, tail=False)
        found = memo.find(expr)
        if found is None:
            found = memo[expr] = self._run(expr, env, owned=False, tail=False)
        return found

    def _invoke(self, fn: Value, args: list[Value], call: Call | None) -> Value:
        """Calls a function value: the trampoline.

        A closure's body runs in a fresh frame; a call the body makes in tail position comes
        back as a TailCall and is made by this loop rather than by recursion.
        """
        while isinstance(fn, Closure):
            if fn.external is not None:
                return fn.external(args)
            frame = self._frame(fn, args, call)
            result = self._run(fn.function.body, frame, owned=True, tail=True)
            if not isinstance(result, TailCall):
                return result
            fn, args, call = result.fn, result.args, result.call
        if isinstance(fn, Constructor):
            return self._construct(fn, args, call)
        if isinstance(fn, Op):
            return self._apply_op(fn, args, fn.definition.check_call(tuple(args), Attrs()), call)
        raise InterpreterError(
            f"the callee{_where(call)} is not a function: it is {format_value(fn)}", _span(call)
        )

    def _frame(self, closure: Closure, args: list[Value], call: Call | None) -> dict[Var, Value]:
        """The environment a closure's body runs in: its captured values and its arguments."""
        params = closure.function.params
        if len(args) != len(params):
            raise InterpreterError(
                f"{_describe_function(closure)} takes {len(params)} argument(s), "
                f"got {len(args)}{_where(call)}", _span(call)
            )
        frame = _Env(closure.env, _Memo())
        frame.update(zip(params, args))
        return frame

    # ---- one method per node --------------------------------------------------------------
    def _let_value(self, let: Let, env: dict[Var, Value]) -> Value:
        """The value a let binds; a let-bound function may call itself (``let f = fn .. f ..``)."""
        if type(let.value) is Function:
            return self._closure(let.value, env, recursive_var=let.var)
        value = self._value(let.value, env)
        if isinstance(value, np.ndarray) and let.var.has_type:
            t = let.var.checked_type
            if isinstance(t, TensorType) and value.shape != t.shape and t.is_static:
                raise _narrowed(let, value)
        return value

    def _condition(self, node: If, env: dict[Var, Value]) -> bool:
        cond = self._value(node.cond, env)
        if not (isinstance(cond, np.ndarray) and cond.dtype == np.bool_ and cond.size == 1):
            raise InterpreterError(
                f"the condition of the if{_where(node)} must be a bool scalar, "
                f"got {_describe(cond)}", node.span,
            )
        return bool(cond.item())

    def _select(self, node: Match, env: dict[Var, Value]) -> tuple[Clause, dict[Var, Value]]:
        """The first clause whose pattern matches the scrutinee, and the bindings it makes."""
        data = self._value(node.data, env)
        for clause in node.clauses:
            bindings: dict[Var, Value] = {}
            if _matches(clause.lhs, data, bindings):
                return clause, bindings
        raise InterpreterError(
            f"no clause of the match{_where(node)} matches {format_value(data)}", node.span
        )

    def _call(self, call: Call, env: dict[Var, Value], tail: bool) -> Value | TailCall:
        """Ops run their NumPy reference with the call's attributes; a primitive function
        goes to the `call_primitive` hook if there is one; a closure is entered, or, in tail
        position, handed back to the trampoline."""
        args = [self._value(a, env) for a in call.args]
        if type(call.op) is Op:
            return self._apply_op(call.op, args, call.attrs, call)
        if self.call_primitive is not None and is_primitive(call.op):
            return self.call_primitive(call.op, args)
        fn = self._value(call.op, env)
        if tail and isinstance(fn, Closure):
            return TailCall(fn, args, call)
        return self._invoke(fn, args, call)

    def _var(self, var: Var, env: dict[Var, Value]) -> Value:
        try:
            return env[var]
        except KeyError:
            raise InterpreterError(
                f"variable %{var.name_hint}{_where(var)} is not bound", var.span
            ) from None

    def _global_var(self, gv: GlobalVar, env: dict[Var, Value]) -> Value:
        closure = self._globals.get(gv)
        if closure is None:
            if gv not in self.mod.functions:
                raise InterpreterError(
                    f"global @{gv.name_hint}{_where(gv)} is not a function of this module",
                    gv.span,
                )
            closure = Closure(self.mod.functions[gv], {}, name=f"@{gv.name_hint}")
            self._globals[gv] = closure
        return closure

    def _constant(self, node: Constant, env: dict[Var, Value]) -> Value:
        return node.data

    def _op(self, node: Op, env: dict[Var, Value]) -> Value:
        return node  # called through _invoke with default attributes

    def _constructor(self, node: Constructor, env: dict[Var, Value]) -> Value:
        return node  # called through _invoke

    def _function(self, node: Function, env: dict[Var, Value]) -> Value:
        return self._closure(node, env)

    def _tuple(self, node: Tuple, env: dict[Var, Value]) -> Value:
        return tuple([self._value(f, env) for f in node.fields])

    def _tuple_getitem(self, node: TupleGetItem, env: dict[Var, Value]) -> Value:
        value = self._value(node.tuple_value, env)
        if not isinstance(value, tuple) or node.index >= len(value):
            raise InterpreterError(
                f"cannot take field {node.index}{_where(node)} of {format_value(value)}", node.span
            )
        return value[node.index]

    def _ref_create(self, node: RefCreate, env: dict[Var, Value]) -> Value:
        return RefValue(self._value(node.value, env))

    def _ref_read(self, node: RefRead, env: dict[Var, Value]) -> Value:
        return self._expect_ref(self._value(node.ref, env), node).value

    def _ref_write(self, node: RefWrite, env: dict[Var, Value]) -> Value:
        ref = self._expect_ref(self._value(node.ref, env), node)
        ref.value = self._value(node.value, env)
        return ()

    _EVAL: ClassVar[dict[type, Callable[..., Value]]] = {
        Var: _var, GlobalVar: _global_var, Constant: _constant, Op: _op,
        Constructor: _constructor, Function: _function, Tuple: _tuple,
        TupleGetItem: _tuple_getitem, RefCreate: _ref_create, RefRead: _ref_read,
        RefWrite: _ref_write,
    }

    # ---- helpers ---------------------------------------------------------------------------
    def _closure(self, fn: Function, env: dict[Var, Value], recursive_var: Var | None = None
                 ) -> Closure:
        """Captures the values of `fn`'s free variables (and itself, as `recursive_var`)."""
        free = self._free_vars.get(fn)
        if free is None:
            free = self._free_vars[fn] = tuple(free_vars(fn))
        captured = {v: env[v] for v in free if v in env}
        closure = Closure(fn, captured)
        if recursive_var is not None and recursive_var in free:
            captured[recursive_var] = closure
        return closure

    def _apply_op(self, op: Op, args: list[Value], attrs: Mapping[str, AnyValue],
                  call: Call | None) -> Value:
        if call is not None and any(_has_any_dim(a.checked_type) for a in call.args
                                    if a.has_type):
            _check_relation(op, args, call)
        try:
            out = op.definition.numpy_ref(*args, **attrs)
        except RelayError:
            raise
        except Exception as e:
            shown = ", ".join(_describe(a) for a in args)
            raise InterpreterError(
                f"{op.name}{_where(call)} failed on ({shown}): {type(e).__name__}: {e}",
                _span(call),
            ) from e
        return _from_numpy(out)

    def _construct(self, c: Constructor, args: list[Value], call: Call | None) -> Value:
        if len(args) != len(c.inputs):
            raise InterpreterError(
                f"constructor {c.name} takes {len(c.inputs)} argument(s), "
                f"got {len(args)}{_where(call)}", _span(call)
            )
        return ConstructorValue(c, tuple(args))

    @staticmethod
    def _expect_ref(value: Value, node: RefRead | RefWrite) -> RefValue:
        if not isinstance(value, RefValue):
            raise InterpreterError(
                f"expected a reference{_where(node)}, got {format_value(value)}", node.span
            )
        return value


def _child(env: dict[Var, Value]) -> dict[Var, Value]:
    """A copy of `env` for the bindings of a nested let or clause."""
    return _Env(env, _Memo(env.memo if isinstance(env, _Env) else None))


def _matches(pattern: Pattern, value: Value, bindings: dict[Var, Value]) -> bool:
    """Whether `value` matches `pattern`; the variables it binds go into `bindings`."""
    if isinstance(pattern, PatternWildcard):
        return True
    if isinstance(pattern, PatternVar):
        bindings[pattern.var] = value
        return True
    if isinstance(pattern, PatternConstructor):
        return (
            isinstance(value, ConstructorValue)
            and _same_constructor(value.constructor, pattern.constructor)
            and all(_matches(p, v, bindings) for p, v in zip(pattern.patterns, value.fields))
        )
    if isinstance(pattern, PatternTuple):
        return (
            isinstance(value, tuple) and len(value) == len(pattern.patterns)
            and all(_matches(p, v, bindings) for p, v in zip(pattern.patterns, value))
        )
    raise InterpreterError(f"unknown pattern {type(pattern).__name__}")


def _same_constructor(a: Constructor, b: Constructor) -> bool:
    return a is b or (a.belong_to is b.belong_to and a.tag == b.tag)


def _from_numpy(out: AnyValue) -> Value:
    """An op's result as a value: NumPy scalars become 0-d arrays, sequences tuples."""
    if isinstance(out, (tuple, list)):
        return tuple(_from_numpy(o) for o in out)
    return out if isinstance(out, np.ndarray) else np.asarray(out)


# ---- deep recursion -------------------------------------------------------------------------

# About six Python frames per nested non-tail call: over 30,000 nested calls fit.
RECURSION_LIMIT = 200_000


@contextlib.contextmanager
def _stack_room() -> Iterator[None]:
    """Raises Python's recursion limit while the interpreter runs; too deep is an error."""
    with deep_recursion(RECURSION_LIMIT):
        try:
            yield
        except RecursionError:
            raise InterpreterError(
                "the program's non-tail recursion is too deep for the interpreter (Python's "
                f"recursion limit of {sys.getrecursionlimit()} was reached); write the "
                "recursion in tail position (e.g. foldl rather than foldr) so that it runs "
                "as a loop"
            ) from None


# ---- entry points ---------------------------------------------------------------------------

def evaluate(program: Expr | IRModule, *args: AnyValue, mod: IRModule | None = None,
             entry: str = "main", interpreter: Interpreter | None = None) -> Value:
    """Runs a program and returns its value.

    For an IRModule, calls its global `entry` with `args`. For an Expr, evaluates it in
    `mod` (a fresh module with the prelude by default); a Function, or any expression when
    `args` are given, is then called with `args`. Python numbers and lists become arrays of
    the parameter's annotated dtype (float32/int32/bool without one); arrays must agree
    with the annotation. An `interpreter` of the module (e.g. one with a `call_primitive`
    hook) may be given to run a module's entry.
    """
    if isinstance(program, IRModule):
        if mod is not None and mod is not program:
            raise InterpreterError("evaluate(mod, ...) takes no second module")
        interp = interpreter if interpreter is not None else Interpreter(program)
        fn: Value = interp._global_var(program.get_global_var(entry), {})
        with _stack_room():
            return _export(interp._invoke(fn, _arguments(fn, args), None), args)
    interp = Interpreter(mod)
    with _stack_room():
        value = interp._run(program, _Env({}, _Memo()), owned=True, tail=False)
        if args or isinstance(program, Function):
            value = interp._invoke(value, _arguments(value, args), None)
        return _export(value, args)


def _arguments(fn: Value, args: tuple[AnyValue, ...]) -> list[Value]:
    if not isinstance(fn, Closure):
        return [to_value(a) for a in args]
    params = fn.function.params
    if len(args) != len(params):
        raise InterpreterError(f"{_describe_function(fn)} takes {len(params)} argument(s), "
                               f"got {len(args)}")
    return [
        to_value(a, p.type_annotation, what=f"argument %{p.name_hint} of {_describe_function(fn)}")
        for a, p in zip(args, params)
    ]


def to_value(x: AnyValue, annotation: Type | None = None, *, what: str = "the argument") -> Value:
    """A Python argument as an interpreter value.

    Numbers and (nested) lists become arrays: of the dtype of a TensorType `annotation`,
    else float32, int32 or bool. A tuple converts field by field. An array must have the
    annotated dtype and static dimensions.

    >>> to_value(3, TensorType((), "float16"))
    array(3., dtype=float16)
    """
    dtype = annotation.dtype if isinstance(annotation, TensorType) else None
    dtype = dtype if isinstance(dtype, str) else None
    if isinstance(x, tuple):
        fields = annotation.fields if isinstance(annotation, TupleType) else ()
        if len(fields) != len(x):
            fields = (None,) * len(x)
        return tuple(to_value(v, t, what=f"field {i} of {what}")
                     for i, (v, t) in enumerate(zip(x, fields)))
    if isinstance(x, (bool, int, float, list)):
        arr = np.asarray(x)
        if dtype is None:
            default = {"float64": "float32", "int64": "int32"}
            return arr.astype(default.get(arr.dtype.name, arr.dtype.name))
        if not np.can_cast(arr.dtype, dtype, casting="same_kind"):
            raise InterpreterError(f"{what} must be {type_to_str(annotation)}, got {x!r:.60}")
        x = arr.astype(dtype)
    if isinstance(x, np.generic):
        x = np.asarray(x)
    if isinstance(x, np.ndarray):
        if isinstance(annotation, TensorType) and not _fits(x, annotation):
            raise InterpreterError(
                f"{what} must be {type_to_str(annotation)}, got {_describe(x)}"
            )
        return x
    if isinstance(x, (Closure, RefValue, ConstructorValue, Op, Constructor)):
        return x
    raise InterpreterError(f"{what} is a {type(x).__name__}, which a relay program cannot take")


def _fits(arr: np.ndarray, t: TensorType) -> bool:
    if isinstance(t.dtype, str) and arr.dtype.name != t.dtype:
        return False
    return arr.ndim == len(t.shape) and all(
        not isinstance(d, int) or d == n for d, n in zip(t.shape, arr.shape)
    )


def _export(value: Value, args: tuple[AnyValue, ...] = ()) -> Value:
    """A result for the user: writable (constants are read-only) and never sharing memory
    with an argument (an identity or a reshape is NumPy's view of it), tuples field-wise."""
    if isinstance(value, np.ndarray):
        shared = any(isinstance(a, np.ndarray) and np.may_share_memory(value, a) for a in args)
        return value.copy() if shared or not value.flags.writeable else value
    if isinstance(value, tuple):
        return tuple(_export(v, args) for v in value)
    return value


# ---- lists ------------------------------------------------------------------------------

def list_value(items: Iterable[AnyValue], mod: IRModule | None = None) -> ConstructorValue:
    """The relay list ``Cons(items[0], Cons(..., Nil))`` of the prelude (or of `mod`).

    >>> list_items(list_value([1.0, 2.0]))
    [array(1., dtype=float32), array(2., dtype=float32)]
    """
    cons, nil = _list_constructors(mod)
    result = ConstructorValue(nil, ())
    for item in reversed(list(items)):
        result = ConstructorValue(cons, (to_value(item), result))
    return result


def list_items(value: Value) -> list[Value]:
    """The elements of a relay list value, first to last."""
    items = []
    while isinstance(value, ConstructorValue) and value.name == "Cons":
        items.append(value.fields[0])
        value = value.fields[1]
    if not (isinstance(value, ConstructorValue) and value.name == "Nil"):
        raise InterpreterError(f"not a relay list: ends in {format_value(value)}")
    return items


def _list_constructors(mod: IRModule | None) -> tuple[Constructor, Constructor]:
    if mod is None:
        list_type = prelude_definitions()[0][0]
    else:
        list_type = mod.get_type("List")
    return list_type.constructor("Cons"), list_type.constructor("Nil")


# ---- messages -------------------------------------------------------------------------------

def format_value(value: AnyValue, depth: int = 4) -> str:
    """A short rendering of a value for messages: ``Cons(1.0, Cons(2.0, ...))``."""
    if depth <= 0:
        return "..."
    if isinstance(value, np.ndarray):
        if value.ndim == 0:
            return repr(value.item())
        if value.size <= 8:
            return np.array2string(value, separator=", ")
        return _describe(value)
    if isinstance(value, tuple):
        inner = ", ".join(format_value(v, depth - 1) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, ConstructorValue):
        if not value.fields:
            return value.name
        return f"{value.name}({', '.join(format_value(f, depth - 1) for f in value.fields)})"
    if isinstance(value, RefValue):
        return f"ref({format_value(value.value, depth - 1)})"
    if isinstance(value, Closure):
        return f"<closure {_describe_function(value)}>"
    if isinstance(value, Op):
        return f"<op {value.name}>"
    if isinstance(value, Constructor):
        return f"<constructor {value.name}>"
    return f"<{type(value).__name__}>"


def _describe(value: AnyValue) -> str:
    if isinstance(value, np.ndarray):
        return f"a {value.dtype} array of shape {value.shape}"
    return format_value(value)


def _describe_function(closure: Closure) -> str:
    if closure.name is not None:
        return closure.name
    return f"fn({', '.join('%' + p.name_hint for p in closure.function.params)})"


def _span(node: Expr | None) -> Span | None:
    return None if node is None else node.span


def _narrowed(let: Let, value: np.ndarray) -> InterpreterError:
    """A let whose variable has a static type its value lacks at run time: a value typed
    with ``relay.Any`` dimensions that type checking unified with static ones (``y:
    Tensor[Float, (2, 3)] = grown``), taking them on trust."""
    t = let.var.checked_type
    return InterpreterError(
        f"{let.var.name_hint}{_where(let)} is of type {type_to_str(t)} but has shape "
        f"{tuple(value.shape)} at run time: a value whose type has relay.Any dimensions "
        "was used where static ones are required", let.span)


def _where(node: Expr | None) -> str:
    span = _span(node)
    return f" at {span}" if span is not None else ""


def _has_any_dim(t: Type) -> bool:
    if isinstance(t, TensorType):
        return any(isinstance(d, AnyDim) for d in t.shape)
    return isinstance(t, TupleType) and any(_has_any_dim(f) for f in t.fields)


def _value_type(value: Value) -> Type:
    if isinstance(value, tuple):
        return TupleType(tuple(_value_type(v) for v in value))
    return TensorType(np.shape(value), np.asarray(value).dtype.name)


def _check_relation(op: Op, args: list[Value], call: Call) -> None:
    """The op's type relation on the shapes the arguments have: what a ``relay.Any``
    dimension left unchecked when the program was typed (a one-element alpha for a prelu
    of two channels) is the located RelayTypeError the llvm target raises, not an answer
    NumPy's broadcasting makes up."""
    from relaydsl.typing import infer_type

    params = [Var(f"a{i}", _value_type(a)) for i, a in enumerate(args)]
    infer_type(Function(params, Call(op, tuple(params), call.attrs, call.type_args,
                                     span=call.span)))


__all__ = [
    "Closure", "ConstructorValue", "Interpreter", "InterpreterError", "RefValue", "Value",
    "evaluate", "format_value", "list_items", "list_value", "to_value",
]
