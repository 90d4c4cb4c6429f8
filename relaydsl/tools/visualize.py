"""``relay.visualize(f)``: a Relay function as a dataflow graph, in Graphviz's DOT language.

Each op call is a box, each parameter and constant an oval, and each edge carries the
shape and dtype of the value flowing along it (``3x4 float32``). In the program the llvm
backend runs (``relay.visualize(f, fused=True)``), the ops of each fused primitive function
are drawn inside a cluster: one cluster is one compiled kernel. Control flow and data types
are drawn as their values flow: an ``if`` is a diamond fed by its condition and both
branches; a ``match`` a diamond fed by its scrutinee and each clause; a call of a global
(``@f``) or of a local function is one node.

The DOT text (``graph.source``) needs nothing installed. Rendering it (``graph.svg()``,
``graph.render("g.png")``, and the picture a Jupyter notebook shows through
``_repr_svg_``/``_repr_html_``) runs Graphviz's ``dot`` program, which must be on PATH
(the ``graphviz`` Python package calls the same program, so it would not help without it).

>>> from relaydsl.ir.parser import parse
>>> from relaydsl.typing import infer_types
>>> mod = infer_types(parse("def @main(%x: Tensor[(3), float32]) { exp(add(%x, %x)) }"))
>>> print(visualize(mod).source)  # doctest: +NORMALIZE_WHITESPACE
digraph "main" {
  rankdir=TB;
  node [fontname="Helvetica", fontsize=11];
  edge [fontname="Helvetica", fontsize=9];
  n0 [label="%x", shape=oval, style=filled, fillcolor="#dbe9f6"];
  n1 [label="add", shape=box, style="rounded,filled", fillcolor="#f5f5f5"];
  n0 -> n1 [label="3 float32"];
  n0 -> n1 [label="3 float32"];
  n2 [label="exp", shape=box, style="rounded,filled", fillcolor="#f5f5f5"];
  n1 -> n2 [label="3 float32"];
  n3 [label="return", shape=oval, style=filled, fillcolor="#dff0d8"];
  n2 -> n3 [label="3 float32"];
}
"""
from __future__ import annotations

import html
import shutil
import subprocess
from pathlib import Path

from relaydsl.ir.adt import (
    Constructor, Pattern, PatternConstructor, PatternTuple, PatternVar, pattern_vars,
)
from relaydsl.ir.expr import (
    Call, Constant, Expr, Function, GlobalVar, Grad, If, Let, Match, Op, RefCreate, RefRead,
    RefWrite, Tuple, TupleGetItem, Var,
)
from relaydsl.ir.module import IRModule
from relaydsl.ir.types import TensorType, Type
from relaydsl.ir.visitor import ExprFunctorWithArgs, post_order
from relaydsl.transform._util import is_primitive

_DOT_MISSING = ("rendering a graph runs Graphviz's `dot` program, which is not on PATH: "
                "install Graphviz (apt-get install graphviz, brew install graphviz or conda "
                "install graphviz); the DOT text needs nothing: graph.source")


class Graph:
    """A graph in DOT text (``source``); rendered by Graphviz's ``dot`` when asked."""

    def __init__(self, source: str):
        self.source = source

    def __str__(self) -> str:
        return self.source

    def __repr__(self) -> str:
        return f"<relay graph: {self.source.count(' -> ')} edges; .source is its DOT text>"

    def pipe(self, format: str = "svg") -> bytes:
        """The graph rendered by ``dot`` in `format` (svg, png, pdf, ...)."""
        dot = shutil.which("dot")
        if dot is None:
            raise RuntimeError(_DOT_MISSING)
        done = subprocess.run([dot, f"-T{format}"], input=self.source.encode(),
                              capture_output=True, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"dot -T{format} failed: {done.stderr.decode().strip()}")
        return done.stdout

    def svg(self) -> str:
        """The graph as SVG text."""
        return self.pipe("svg").decode()

    def render(self, path: str | Path) -> Path:
        """Writes the graph to `path`, in the format its suffix names (``.svg``, ``.png``,
        ``.pdf``; ``.dot`` or ``.gv`` writes the DOT text, with no Graphviz needed)."""
        path = Path(path)
        format = path.suffix.lstrip(".").lower()
        if format in ("dot", "gv"):
            path.write_text(self.source)
        elif not format:
            raise ValueError(f"{path}: name the format by the suffix (.svg, .png, .pdf, .dot)")
        else:
            path.write_bytes(self.pipe(format))
        return path

    def _repr_svg_(self) -> str | None:
        """Jupyter's picture of the graph; None (no picture) without Graphviz."""
        return self.svg() if shutil.which("dot") else None

    def _repr_html_(self) -> str:
        """The SVG where Graphviz is installed; else the DOT text, and how to get a picture."""
        if shutil.which("dot"):
            return self.svg()
        return (f"<p>{html.escape(_DOT_MISSING)}</p>"
                f"<pre>{html.escape(self.source)}</pre>")


def visualize(program: IRModule | Function, entry: str = "main") -> Graph:
    """The dataflow graph of `entry` of the typed module `program` (or of a typed Function).

    Edges carry the types of the values along them (where types are known); the ops of a
    fused primitive function are a cluster. Only the entry is drawn: a call of another
    global is one node.
    """
    fn = program[entry] if isinstance(program, IRModule) else program
    builder = _Builder()
    builder.lines.append(f"digraph {_quote(entry)} {{")
    builder.lines += ["  rankdir=TB;", '  node [fontname="Helvetica", fontsize=11];',
                      '  edge [fontname="Helvetica", fontsize=9];']
    env = {p: builder.node(f"%{p.name_hint}", "input") for p in fn.params}
    result = builder.value(fn.body, env)
    builder.edge(result, builder.node("return", "output"), fn.body)
    builder.lines.append("}")
    return Graph("\n".join(builder.lines) + "\n")


_STYLES = {
    "input": 'shape=oval, style=filled, fillcolor="#dbe9f6"',
    "output": 'shape=oval, style=filled, fillcolor="#dff0d8"',
    "op": 'shape=box, style="rounded,filled", fillcolor="#f5f5f5"',
    "const": 'shape=oval, style=filled, fillcolor="#fcf3cf"',
    "call": 'shape=box, style="filled", fillcolor="#e8daef"',
    "control": 'shape=diamond, style=filled, fillcolor="#fdebd0"',
    "data": 'shape=box, style="rounded,dashed"',
}


class _Builder(ExprFunctorWithArgs[[dict[Var, str]], str]):
    """Walks the expressions, one node per value; ``lines`` collects the DOT statements."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.indent = "  "
        self.count = 0
        self.clusters = 0
        self.memo: dict[Expr, str] = {}  # a shared node (graph normal form) is drawn once

    def node(self, label: str, kind: str) -> str:
        name = f"n{self.count}"
        self.count += 1
        self.lines.append(f"{self.indent}{name} [label={_quote(label)}, {_STYLES[kind]}];")
        return name

    def edge(self, source: str, target: str, value: Expr | None, label: str = "") -> None:
        text = " ".join(x for x in (label, _type_label(value)) if x)
        attrs = f" [label={_quote(text)}]" if text else ""
        self.lines.append(f"{self.indent}{source} -> {target}{attrs};")

    def operation(self, label: str, kind: str, inputs: list[tuple[str, Expr, str]]) -> str:
        """A node fed by `inputs`: (source node, the value's expression, edge label)."""
        name = self.node(label, kind)
        for source, value, edge_label in inputs:
            self.edge(source, name, value, edge_label)
        return name

    def cluster(self, label: str, style: str) -> None:
        self.lines.append(f"{self.indent}subgraph cluster_{self.clusters} {{")
        self.clusters += 1
        self.indent += "  "
        self.lines.append(f"{self.indent}label={_quote(label)}; {style}")

    def end_cluster(self) -> None:
        self.indent = self.indent[:-2]
        self.lines.append(f"{self.indent}}}")

    def value(self, e: Expr, env: dict[Var, str]) -> str:
        """The node producing the value of `e`, drawing what it takes."""
        if isinstance(e, (Var, Let)):  # what they name depends on the environment
            return self.visit(e, env)
        if e not in self.memo:
            self.memo[e] = self.visit(e, env)
        return self.memo[e]

    def bound_value(self, var: Var, value: Expr, env: dict[Var, str]) -> str:
        if isinstance(value, Function) and not is_primitive(value):
            return self.function(value, f"fn %{var.name_hint}", {**env})
        return self.value(value, env)

    def inputs(self, args: tuple[Expr, ...], env: dict[Var, str]) -> list[tuple[str, Expr, str]]:
        return [(self.value(a, env), a, "") for a in args]

    # ---- visit(e, env): draws `e` (value() draws a shared expression once) ----------------
    def unsupported(self, expr: Expr) -> Exception:
        return TypeError(f"visualize: not a relay expression: {type(expr).__name__}")

    def visit_var(self, var: Var, env: dict[Var, str]) -> str:
        if var not in env:  # a free variable of a nested function
            env[var] = self.node(f"%{var.name_hint}", "input")
        return env[var]

    def visit_let(self, let: Let, env: dict[Var, str]) -> str:
        e: Expr = let
        while isinstance(e, Let):  # the variable names the node of its value
            env = {**env, e.var: self.bound_value(e.var, e.value, env)}
            e = e.body
        return self.value(e, env)

    def visit_constant(self, c: Constant, env: dict[Var, str]) -> str:
        label = str(c.data.item()) if c.data.size == 1 else "const"
        return self.node(label, "const")

    def visit_global_var(self, gv: GlobalVar, env: dict[Var, str]) -> str:
        return self.node(f"@{gv.name_hint}", "call")

    def visit_op(self, op: Op, env: dict[Var, str]) -> str:
        return self.node(op.name, "call")

    def visit_constructor(self, c: Constructor, env: dict[Var, str]) -> str:
        return self.node(c.name, "call")

    def visit_function(self, fn: Function, env: dict[Var, str]) -> str:
        return self.function(fn, "fn", env)

    def visit_tuple(self, t: Tuple, env: dict[Var, str]) -> str:
        return self.operation("tuple", "data", self.inputs(t.fields, env))

    def visit_tuple_getitem(self, t: TupleGetItem, env: dict[Var, str]) -> str:
        return self.operation(f".{t.index}", "data", self.inputs((t.tuple_value,), env))

    def visit_if(self, e: If, env: dict[Var, str]) -> str:
        cond = self.value(e.cond, env)
        branches = [(self.value(b, dict(env)), b, label)
                    for b, label in ((e.true_branch, "then"), (e.false_branch, "else"))]
        return self.operation("if", "control", [(cond, e.cond, "cond"), *branches])

    def visit_match(self, e: Match, env: dict[Var, str]) -> str:
        data = self.value(e.data, env)
        clauses = []
        for c in e.clauses:
            inner = dict(env)
            for v in pattern_vars(c.lhs):
                inner[v] = self.operation(f"%{v.name_hint}", "data", [(data, e.data, "")])
            clauses.append((self.value(c.rhs, inner), c.rhs, _pattern_label(c.lhs)))
        return self.operation("match", "control", [(data, e.data, ""), *clauses])

    def visit_ref_create(self, r: RefCreate, env: dict[Var, str]) -> str:
        return self.operation("ref", "data", self.inputs((r.value,), env))

    def visit_ref_read(self, r: RefRead, env: dict[Var, str]) -> str:
        return self.operation("read", "data", self.inputs((r.ref,), env))

    def visit_ref_write(self, r: RefWrite, env: dict[Var, str]) -> str:
        return self.operation(":=", "data", self.inputs((r.ref, r.value), env))

    def visit_grad(self, g: Grad, env: dict[Var, str]) -> str:
        return self.operation("grad", "call", self.inputs((g.fn,), env))

    def visit_call(self, e: Call, env: dict[Var, str]) -> str:
        args = self.inputs(e.args, env)
        callee = e.op
        if isinstance(callee, Op):
            return self.operation(callee.name, "op", args)
        if isinstance(callee, Function) and is_primitive(callee):
            # a fused group: its ops in a cluster, fed by the call's arguments
            self.cluster("fused: " + " + ".join(_op_names(callee.body)),
                         'style="rounded,filled"; fillcolor="#eef6ee"; color="#5b9b5b";')
            inner = {p: source for p, (source, _, _) in zip(callee.params, args)}
            result = self.value(callee.body, inner)
            self.end_cluster()
            return result
        if isinstance(callee, (GlobalVar, Constructor)):
            return self.operation(_callee_label(callee), "call", args)
        return self.operation("call", "call", [(self.value(callee, env), callee, "fn"), *args])

    def function(self, fn: Function, label: str, env: dict[Var, str]) -> str:
        """A function value: its body drawn in a dashed cluster; the node is its result."""
        self.cluster(label, 'style="dashed"; color="#999999";')
        inner = {**env, **{p: self.node(f"%{p.name_hint}", "input") for p in fn.params}}
        result = self.value(fn.body, inner)
        self.end_cluster()
        return result


def _op_names(e: Expr) -> list[str]:
    """The ops called in a primitive function's body, in the order they are reached."""
    names: list[str] = []

    def note(x: Expr) -> None:
        if isinstance(x, Call) and isinstance(x.op, Op):
            names.append(x.op.name)

    post_order(e, note)  # arguments before the calls they feed: the order of evaluation
    return list(dict.fromkeys(names))


def _callee_label(callee: GlobalVar | Constructor) -> str:
    return f"@{callee.name_hint}" if isinstance(callee, GlobalVar) else callee.name


def _pattern_label(p: Pattern) -> str:
    if isinstance(p, PatternVar):
        return f"%{p.var.name_hint}"
    if isinstance(p, PatternConstructor):
        inner = ", ".join(_pattern_label(q) for q in p.patterns)
        return f"{p.constructor.name}({inner})" if p.patterns else p.constructor.name
    if isinstance(p, PatternTuple):
        return "(" + ", ".join(_pattern_label(q) for q in p.patterns) + ")"
    return "_"


def _type_label(e: Expr | None) -> str:
    """The type of `e`'s value, short: ``3x4 float32`` for a tensor; empty if untyped."""
    if e is None or not e.has_type:
        return ""
    return _short(e.checked_type)


def _short(t: Type) -> str:
    if isinstance(t, TensorType):
        dims = "x".join(str(d) for d in t.shape) or "scalar"
        return f"{dims} {t.dtype}"
    text = str(t)
    return text if len(text) <= 40 else text[:37] + "..."


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


__all__ = ["Graph", "visualize"]
