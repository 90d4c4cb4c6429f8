"""``relay.to_python(f)``: a typed Relay program as readable, runnable Python and NumPy.

The program is rendered as a Python syntax tree, which astunparse prints:

- each global function the entry reaches is a ``def`` (so globals recurse), its parameters
  and result annotated with their Relay types (as strings);
- a ``let`` is one assignment statement; a let-bound function a nested ``def`` (it may call
  itself: loops are tail-recursive local functions); a function literal elsewhere a
  ``lambda``, or a ``def`` when its body needs statements;
- an op call calls the op's NumPy reference (``numpy_op("nn.dense")``: the registry's
  ``numpy_ref``, which the reference interpreter runs too), attributes as keywords;
- ``if`` is an if statement (a conditional expression where both branches are
  expressions); ``match`` an if/elif chain of ``isinstance`` tests on constructor classes
  (one ``NamedTuple`` class per constructor: ``Cons(head, tail)``, ``Nil()``);
- tuples are tuples, ``t.0`` is ``t[0]``; a reference is a one-element list.

Grad nodes are lowered first (the pipeline's LowerGrads: reverse-mode AD code with closures
and references), so the source of a gradient is the AD program. Recursion runs on Python's
stack, loops included: long loops need ``sys.setrecursionlimit``.

>>> from relaydsl.ir.parser import parse
>>> from relaydsl.typing import infer_types
>>> mod = infer_types(parse('''
... def @main(%x: Tensor[(3), float32]) -> Tensor[(3), float32] {
...   let %y = multiply(%x, %x);
...   if (less(sum(%y), 10f)) { %y } else { negative(%y) }
... }'''))
>>> print(python_source(mod))
# @main, rendered from its typed Relay program by relay.to_python
import numpy as np
from typing import NamedTuple
from relaydsl.tools.to_python import numpy_op
multiply = numpy_op('multiply')
less = numpy_op('less')
sum = numpy_op('sum')
negative = numpy_op('negative')
<BLANKLINE>
def main(x: 'Tensor[(3,), float32]') -> 'Tensor[(3,), float32]':
    y = multiply(x, x)
    if less(sum(y), np.array(10.0, dtype='float32')):
        return y
    else:
        return negative(y)
<BLANKLINE>
"""
from __future__ import annotations

import ast
import keyword
from collections.abc import Callable
from typing import Any as AnyValue

import astunparse
import numpy as np

from relaydsl.ir.adt import (
    Constructor, Pattern, PatternConstructor, PatternTuple, PatternVar, PatternWildcard,
)
from relaydsl.ir.attrs import Attrs
from relaydsl.ir.expr import (
    Call, Constant, Expr, Function, GlobalVar, Grad, If, Let, Match, Op, RefCreate, RefRead,
    RefWrite, Tuple, TupleGetItem, Var,
)
from relaydsl.ir.module import IRModule
from relaydsl.ir.visitor import ExprFunctorWithArgs
from relaydsl.op import lookup
from relaydsl.transform.pipeline import LowerGrads


def numpy_op(name: str) -> Callable[..., AnyValue]:
    """The op `name` as a function on NumPy arrays: its registry reference (``numpy_ref``),
    attributes left out taking their defaults, results as the interpreter has them (NumPy
    scalars as 0-d arrays, tuples)."""
    opdef = lookup(name)

    def run(*args: AnyValue, **attrs: AnyValue) -> AnyValue:
        return _as_value(opdef.numpy_ref(*args, **opdef.check_call(args, Attrs(attrs))))

    run.__name__ = run.__qualname__ = name.replace(".", "_")
    return run


def _as_value(out: AnyValue) -> AnyValue:
    if isinstance(out, (tuple, list)):
        return tuple(_as_value(o) for o in out)
    return out if isinstance(out, np.ndarray) else np.asarray(out)


def python_source(mod: IRModule, entry: str = "main", name: str | None = None) -> str:
    """The typed module's `entry`, and every global it reaches, as Python source; running
    it defines the function `name` (default: `entry`)."""
    mod = LowerGrads()(mod)
    renderer = _Renderer(mod)
    tree = renderer.module(mod.get_global_var(entry), name or entry)
    source = astunparse.unparse(ast.fix_missing_locations(tree)).lstrip("\n")
    return f"# @{entry}, rendered from its typed Relay program by relay.to_python\n{source}"


_Finish = Callable[[ast.expr], ast.stmt]  # what a computed value becomes: return or assign


class _Renderer(ExprFunctorWithArgs[[list[ast.stmt]], ast.expr]):
    """Renders expressions: ``visit(e, out)`` is e's Python expression, with the statements
    that must run before it appended to `out`."""

    def __init__(self, mod: IRModule):
        self.mod = mod
        self.names: dict[object, str] = {}  # Var, GlobalVar, op name, Constructor -> name
        # the names the source itself uses (op references may shadow other builtins)
        self.taken = {"np", "NamedTuple", "numpy_op", "isinstance", "ValueError", "object"}
        self.ops: dict[str, str] = {}  # op name -> its Python name
        self.constructors: dict[tuple, Constructor] = {}
        self.pending: list[GlobalVar] = []

    # ---- names ------------------------------------------------------------------------------
    def fresh(self, hint: str) -> str:
        """A new identifier like `hint`: every local is unique in the whole source, so no
        nested def ever shadows (and then wrongly reads) a name of its enclosing scope."""
        base = "".join(c if c.isalnum() or c == "_" else "_" for c in hint) or "v"
        if base[0].isdigit():
            base = f"v{base}"
        if keyword.iskeyword(base):
            base += "_"
        name, n = base, 1
        while name in self.taken:
            name, n = f"{base}_{n}", n + 1
        self.taken.add(name)
        return name

    def local(self, var: Var) -> str:
        if var not in self.names:
            self.names[var] = self.fresh(var.name_hint)
        return self.names[var]

    def global_name(self, gv: GlobalVar, hint: str | None = None) -> str:
        if gv not in self.names:
            self.names[gv] = self.fresh(hint or gv.name_hint)
            self.pending.append(gv)
        return self.names[gv]

    def op_name(self, name: str) -> str:
        if name not in self.ops:
            self.ops[name] = self.fresh(name.replace(".", "_"))
        return self.ops[name]

    def constructor_name(self, c: Constructor) -> str:
        key = (c.belong_to, c.tag)
        if key not in self.names:
            self.names[key] = self.fresh(c.name)
            self.constructors[key] = c
        return self.names[key]

    # ---- the module -------------------------------------------------------------------------
    def module(self, entry: GlobalVar, name: str) -> ast.Module:
        self.global_name(entry, name)
        defs: list[ast.stmt] = []
        while self.pending:  # the entry, then each global it reaches
            gv = self.pending.pop(0)
            defs.append(self.function_def(self.names[gv], self.mod[gv]))
        header = [
            ast.Import([ast.alias("numpy", "np")]),
            ast.ImportFrom("typing", [ast.alias("NamedTuple")], 0),
            ast.ImportFrom("relaydsl.tools.to_python", [ast.alias("numpy_op")], 0),
        ]
        ops = [_assign(python, ast.Call(ast.Name("numpy_op"), [ast.Constant(name)], []))
               for name, python in self.ops.items()]
        classes = [self.constructor_class(key, c) for key, c in self.constructors.items()]
        return ast.Module([*header, *ops, *classes, *reversed(defs)], [])

    def constructor_class(self, key: tuple, c: Constructor) -> ast.ClassDef:
        """``class Cons(NamedTuple)`` with one field per constructor input."""
        fields: list[ast.stmt] = [
            ast.AnnAssign(ast.Name(f"field{i}"), ast.Name("object"), None, 1)
            for i in range(len(c.inputs))]
        doc = ast.Expr(ast.Constant(f"A value of the data type {c.belong_to.name}."))
        return ast.ClassDef(self.names[key], [ast.Name("NamedTuple")], [], [doc, *fields], [])

    def function_def(self, name: str, fn: Function) -> ast.FunctionDef:
        params = [ast.arg(self.local(p), _type_annotation(p)) for p in fn.params]
        body: list[ast.stmt] = []
        self.emit(fn.body, body, ast.Return)
        returns = ast.Constant(str(fn.ret_type)) if fn.ret_type is not None else \
            _type_annotation(fn.body)
        arguments = ast.arguments([], params, None, [], [], None, [])
        return ast.FunctionDef(name, arguments, body, [], returns)

    # ---- statements ---------------------------------------------------------------------------
    def emit(self, e: Expr, out: list[ast.stmt], finish: _Finish) -> None:
        """Statements into `out` computing `e`, whose value `finish` returns or assigns."""
        while isinstance(e, Let):
            self.bind(e.var, e.value, out)
            e = e.body
        if isinstance(e, If):
            then: list[ast.stmt] = []
            orelse: list[ast.stmt] = []
            test = self.visit(e.cond, out)
            self.emit(e.true_branch, then, finish)
            self.emit(e.false_branch, orelse, finish)
            out.append(ast.If(test, then, orelse))
        elif isinstance(e, Match):
            self.match(e, out, finish)
        else:
            out.append(finish(self.visit(e, out)))

    def bind(self, var: Var, value: Expr, out: list[ast.stmt]) -> None:
        """``let var = value``: one statement (a def for a function, an if for a branch)."""
        if isinstance(value, Function):
            out.append(self.function_def(self.local(var), value))
        elif isinstance(value, (If, Match, Let)):
            name = self.local(var)
            self.emit(value, out, lambda v: _assign(name, v))
        else:
            value_ast = self.visit(value, out)
            out.append(_assign(self.local(var), value_ast))

    def match(self, e: Match, out: list[ast.stmt], finish: _Finish) -> None:
        """An if/elif chain over the clauses, in order; the last test always holds when the
        match is complete (else no clause matching raises, as in the interpreter)."""
        data = self.visit(e.data, out)
        if not isinstance(data, ast.Name):
            name = self.fresh("scrutinee")
            out.append(_assign(name, data))
            data = ast.Name(name)
        chain: list[ast.stmt] = [ast.Raise(ast.Call(ast.Name("ValueError"), [ast.Constant(
            "no clause of the match matches")], []), None)]
        for clause in reversed(e.clauses):
            tests: list[ast.expr] = []
            body: list[ast.stmt] = []
            self.pattern(clause.lhs, data, tests, body)
            self.emit(clause.rhs, body, finish)
            if not tests:  # always matches: what follows is never reached
                chain = body
            else:
                test = tests[0] if len(tests) == 1 else ast.BoolOp(ast.And(), tests)
                chain = [ast.If(test, body, chain)]
        out.extend(chain)

    def pattern(self, p: Pattern, value: ast.expr, tests: list[ast.expr],
                bindings: list[ast.stmt]) -> None:
        """The tests `value` must pass to match `p`, and the assignments of its variables."""
        if isinstance(p, PatternVar):
            bindings.append(_assign(self.local(p.var), value))
        elif isinstance(p, PatternConstructor):
            cls = ast.Name(self.constructor_name(p.constructor))
            tests.append(ast.Call(ast.Name("isinstance"), [value, cls], []))
            for i, q in enumerate(p.patterns):
                self.pattern(q, _index(value, i), tests, bindings)
        elif isinstance(p, PatternTuple):
            for i, q in enumerate(p.patterns):
                self.pattern(q, _index(value, i), tests, bindings)
        elif not isinstance(p, PatternWildcard):
            raise TypeError(f"to_python: unknown pattern {type(p).__name__}")

    # ---- expressions ---------------------------------------------------------------------------
    # visit(e, out): the Python expression of `e`; what must run before it (a def, a let's
    # assignment, a branch needing statements, a reference write) goes into `out`.
    def unsupported(self, expr: Expr) -> Exception:
        return TypeError(f"to_python: not a relay expression: {type(expr).__name__}")

    def visit_var(self, var: Var, out: list[ast.stmt]) -> ast.expr:
        return ast.Name(self.local(var))

    def visit_global_var(self, gv: GlobalVar, out: list[ast.stmt]) -> ast.expr:
        return ast.Name(self.global_name(gv))

    def visit_constant(self, c: Constant, out: list[ast.stmt]) -> ast.expr:
        return _array(c.data)

    def visit_op(self, op: Op, out: list[ast.stmt]) -> ast.expr:
        return ast.Name(self.op_name(op.name))

    def visit_constructor(self, c: Constructor, out: list[ast.stmt]) -> ast.expr:
        return ast.Name(self.constructor_name(c))

    def visit_tuple(self, t: Tuple, out: list[ast.stmt]) -> ast.expr:
        return ast.Tuple([self.visit(f, out) for f in t.fields])

    def visit_tuple_getitem(self, t: TupleGetItem, out: list[ast.stmt]) -> ast.expr:
        return _index(self.visit(t.tuple_value, out), t.index)

    def visit_let(self, let: Let, out: list[ast.stmt]) -> ast.expr:
        e: Expr = let
        while isinstance(e, Let):
            self.bind(e.var, e.value, out)
            e = e.body
        return self.visit(e, out)

    def visit_match(self, m: Match, out: list[ast.stmt]) -> ast.expr:
        name = self.fresh("matched")
        self.match(m, out, lambda v: _assign(name, v))
        return ast.Name(name)

    def visit_ref_create(self, r: RefCreate, out: list[ast.stmt]) -> ast.expr:
        return ast.List([self.visit(r.value, out)])

    def visit_ref_read(self, r: RefRead, out: list[ast.stmt]) -> ast.expr:
        return _index(self.visit(r.ref, out), 0)

    def visit_ref_write(self, r: RefWrite, out: list[ast.stmt]) -> ast.expr:
        target = ast.Subscript(self.visit(r.ref, out), ast.Constant(0), ast.Store())
        out.append(ast.Assign([target], self.visit(r.value, out)))
        return ast.Tuple([])

    def visit_grad(self, g: Grad, out: list[ast.stmt]) -> ast.expr:
        raise TypeError("to_python: a grad node is left after LowerGrads")

    def visit_call(self, e: Call, out: list[ast.stmt]) -> ast.expr:
        callee = self.visit(e.op, out)
        args = [self.visit(a, out) for a in e.args]
        keywords = []
        if isinstance(e.op, Op):  # attributes at their defaults are left out
            defaults = {a.name: a.default for a in lookup(e.op.name).attrs}
            keywords = [ast.keyword(k, _literal(v)) for k, v in e.attrs.items()
                        if k not in defaults or not _same(v, defaults[k])]
        return ast.Call(callee, args, keywords)

    def visit_if(self, e: If, out: list[ast.stmt]) -> ast.expr:
        """``a if c else b`` where both branches are expressions; else an if statement
        assigning a fresh name (each branch's statements stay inside its branch)."""
        test = self.visit(e.cond, out)
        then: list[ast.stmt] = []
        orelse: list[ast.stmt] = []
        then_value = self.visit(e.true_branch, then)
        else_value = self.visit(e.false_branch, orelse)
        if not then and not orelse:
            return ast.IfExp(test, then_value, else_value)
        name = self.fresh("branch")
        then.append(_assign(name, then_value))
        orelse.append(_assign(name, else_value))
        out.append(ast.If(test, then, orelse))
        return ast.Name(name)

    def visit_function(self, fn: Function, out: list[ast.stmt]) -> ast.expr:
        """A lambda where the body is one expression, else a def before its use."""
        body: list[ast.stmt] = []
        params = [self.local(p) for p in fn.params]
        value = self.visit(fn.body, body)
        if not body:
            arguments = ast.arguments([], [ast.arg(p) for p in params], None, [], [], None, [])
            return ast.Lambda(arguments, value)
        name = self.fresh("fn")
        out.append(self.function_def(name, fn))
        return ast.Name(name)


def _same(value: AnyValue, default: AnyValue) -> bool:
    try:
        return type(value) is type(default) and bool(value == default)
    except ValueError:  # values whose == is not one bool
        return False


def _assign(name: str, value: ast.expr) -> ast.stmt:
    return ast.Assign([ast.Name(name, ast.Store())], value)


def _index(value: ast.expr, i: int) -> ast.expr:
    return ast.Subscript(value, ast.Constant(i), ast.Load())


def _type_annotation(e: Expr) -> ast.expr | None:
    return ast.Constant(str(e.checked_type)) if e.has_type else None


def _array(data: np.ndarray) -> ast.expr:
    """``np.array(<values>, dtype='float32')``: exact, since float32 values print as the
    shortest decimal that reads back as the same float32 (NumPy's repr)."""
    values = ast.parse(np.array2string(data, separator=", ", threshold=data.size + 1,
                                       floatmode="unique", max_line_width=10**9)
                       .replace("nan", "np.nan").replace("inf", "np.inf"), mode="eval").body
    return ast.Call(ast.Attribute(ast.Name("np"), "array"), [values],
                    [ast.keyword("dtype", ast.Constant(data.dtype.name))])


def _literal(value: AnyValue) -> ast.expr:
    """An attribute value (a number, string, bool, None or a tuple of them) as source."""
    if isinstance(value, (tuple, list)):
        return ast.Tuple([_literal(v) for v in value])
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return ast.Constant(value)
    raise TypeError(f"to_python: cannot write the attribute value {value!r} as source")


__all__ = ["python_source", "numpy_op"]
