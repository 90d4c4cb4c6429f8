"""The Relay text format (Figure 2 of the 2019 paper), printed; parser.py reads it back.

A module prints as a version header, its ADT definitions, its global functions
and, when non-scalar constants occur, a ``#[metadata]`` constant pool::

    #[version = "0.0.5"]
    type Pair[a, b] {
      MkPair(a, b),
    }
    def @main(%x: Tensor[(3,), float32], %y: Tensor[(3,), float32]) -> Tensor[(3,), float32] {
      %0 = add(%x, meta[Constant][0]);
      let %z = multiply(%0, %y);
      sum(%z, axis=[0], keepdims=True)
    }
    #[metadata]
    {"Constant": [
      {"dtype": "float32", "shape": [3], "data": [1.0, 2.0, 3.0]}
    ]}

Display is A-normal-ish: an operand that is not atomic (a variable, global,
operator, constructor or constant) is bound to a temporary ``%n = ...;`` first,
and a subterm shared within one block is printed once and then referred to by
its temporary. Temporaries are only names for graph nodes: parsing them back
builds the same DAG, with no ``let``. Blocks (function bodies, branches, match
arms) scope their temporaries, because hoisting out of a branch would change
what is evaluated. Variables keep their name hints, made unique per global.
"""
from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Callable
from typing import Any as AnyValue, TypeGuard, cast

import numpy as np

from relaydsl.errors import IRError
from relaydsl.ir.adt import (
    Constructor, Pattern, PatternConstructor, PatternTuple, PatternVar, PatternWildcard, TypeData,
)
from relaydsl.ir.attrs import Attrs, freeze, is_tuple
from relaydsl.ir.expr import (
    Call, Constant, Expr, Function, GlobalVar, Grad, If, Let, Match, Op, RefCreate, RefRead,
    RefWrite, Tuple, TupleGetItem, Var,
)
from relaydsl.ir.module import IRModule, installed_prelude
from relaydsl.ir.node import conforms
from relaydsl.ir.types import DTYPES, Type, TypeVar, type_param_to_str, type_to_str
from relaydsl.ir.visitor import ExprFunctorWithArgs, children, deep_recursion

VERSION = "0.0.5"
HEADER = f'#[version = "{VERSION}"]'
METADATA = "#[metadata]"
INDENT = "  "

# Scalar literal suffixes, by dtype (parser.py reads the same table).
LITERAL_SUFFIX = {
    "float16": "f16", "float32": "f", "float64": "f64",
    "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64", "uint8": "u8",
}
RESERVED_TYPE_NAMES = frozenset({*DTYPES, "Tensor", "Ref", "fn", "_", "Shape", "Type", "BaseType"})
DTYPE_LIKE = re.compile(r"(float|u?int|bool)\d*")  # names the parser takes for dtypes
_DTYPE_NAMES = {np.dtype(d): d for d in DTYPES}
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# The text format's nesting limit: the parser refuses deeper programs, the printer prints
# any it reads. Both recurse per level, with Python's recursion limit raised by
# FRAMES_PER_LEVEL frames (at most, between two levels: a match clause's block) per level.
MAX_NESTING = 10_000
FRAMES_PER_LEVEL = 12


def astext(node: Expr | Type | IRModule, *, include_prelude: bool = False,
           show_types: bool = False) -> str:
    """The Relay text of an expression, a type or a module.

    >>> from relaydsl.ir.expr import Call, Function, Op, Var
    >>> x = Var("x")
    >>> print(astext(Function([x], Call(Op.get("add"), [x, Call(Op.get("exp"), [x])]))))
    #[version = "0.0.5"]
    fn (%x) {
      %0 = exp(%x);
      add(%x, %0)
    }
    """
    # as deep as the parser reads (MAX_NESTING levels): the printer recurses per level
    with deep_recursion(sys.getrecursionlimit() + FRAMES_PER_LEVEL * MAX_NESTING):
        return _astext(node, include_prelude, show_types)


def _astext(node: Expr | Type | IRModule, include_prelude: bool, show_types: bool) -> str:
    if isinstance(node, Type):
        return type_to_str(node, _Names(RESERVED_TYPE_NAMES).type_var)
    printer = _Printer(show_types)
    if isinstance(node, IRModule):
        body = printer.module(node, include_prelude)
    elif conforms(node, Expr):
        printer.reserved = _module_type_names(None)
        printer.names = _Names(printer.reserved)
        body = _join(printer.block(node))
    else:
        raise IRError(f"astext prints an Expr, a Type or an IRModule, got {type(node).__name__}")
    return "\n".join(filter(None, [HEADER, body, printer.metadata_text()]))


def _module_type_names(mod: IRModule | None) -> frozenset[str]:
    """Names a type variable must not take: keywords, dtypes and ADT names (the prelude's
    when there is no module)."""
    if mod is None:
        return RESERVED_TYPE_NAMES | {td.header.name for td in installed_prelude()[0]}
    return RESERVED_TYPE_NAMES | {h.name for h in mod.type_definitions}


def _join(lines: list[str]) -> str:
    return "\n".join(lines)


def _indent(lines: list[str]) -> list[str]:
    return [INDENT + line if line else line for text in lines for line in text.split("\n")]


def sanitize(name: str) -> str:
    """A name hint made into an identifier.

    >>> sanitize("x.1"), sanitize("0"), sanitize("h")
    ('x_1', 'v0', 'h')
    """
    clean = re.sub(r"[^A-Za-z0-9_]", "_", name) or "v"
    return clean if not clean[0].isdigit() else "v" + clean


class _Names:
    """Unique display names for the variables and type variables of one global."""

    def __init__(self, reserved_types: frozenset[str]):
        self.vars: dict[Var, str] = {}
        self.used: set[str] = set()
        self.type_vars: dict[TypeVar, str] = {}
        self.used_types: set[str] = set(reserved_types)

    @staticmethod
    def _fresh(hint: str, used: set[str]) -> str:
        name, i = hint, 0
        while name in used:
            i += 1
            name = f"{hint}_{i}"
        used.add(name)
        return name

    def var(self, v: Var) -> str:
        name = self.vars.get(v)
        if name is None:
            name = self.vars[v] = self._fresh(sanitize(v.name_hint), self.used)
        return "%" + name

    def type_var(self, tv: TypeVar) -> str:
        name = self.type_vars.get(tv)
        if name is None:
            hint = sanitize(tv.name)
            hint = hint + "_" if DTYPE_LIKE.fullmatch(hint) else hint  # `int33` reads as a typo
            name = self.type_vars[tv] = self._fresh(hint, self.used_types)
        return name


class _Printer(ExprFunctorWithArgs[[list[str]], str]):
    def __init__(self, show_types: bool):
        self.show_types = show_types
        self.constants: list[Constant] = []
        self.constant_text: dict[Constant, str] = {}
        self.reserved: frozenset[str] = RESERVED_TYPE_NAMES
        self.names = _Names(self.reserved)
        self.memo: dict[Expr, str] = {}          # graph node -> its temporary, while in scope
        self.scopes: list[list[Expr]] = []
        self.temps = 0

    # ---- module ---------------------------------------------------------------
    def module(self, mod: IRModule, include_prelude: bool) -> str:
        self.reserved = _module_type_names(mod)
        types = mod.type_definitions if include_prelude else mod.user_types()
        funcs = mod.functions if include_prelude else mod.user_functions()
        # A prelude function the module's own definition shadows has no name of its own to print.
        funcs = {gv: fn for gv, fn in funcs.items() if mod.get_global_var(gv.name_hint) is gv}
        parts = [self.type_data(td) for td in types.values()]
        parts += [self.definition(gv, fn) for gv, fn in funcs.items()]
        return "\n".join(parts)

    def type_data(self, td: TypeData) -> str:
        self.names = _Names(self.reserved - {td.header.name})
        params = ", ".join(type_param_to_str(tv, self.names.type_var) for tv in td.type_vars)
        head = f"type {td.header.name}" + (f"[{params}]" if td.type_vars else "")
        ctors: list[str] = []
        for c in td.constructors:
            inputs = ", ".join(self.type(t) for t in c.inputs)
            ctors.append(f"{INDENT}{c.name}" + (f"({inputs})" if c.inputs else "") + ",")
        return "\n".join([head + " {", *ctors, "}"])

    def definition(self, gv: GlobalVar, fn: Function) -> str:
        if not _IDENT.match(gv.name_hint):
            raise IRError(f"global name {gv.name_hint!r} is not an identifier, so it has no text")
        self.names = _Names(self.reserved)
        self.memo, self.scopes, self.temps = {}, [], 0
        return self.function(fn, f"def @{gv.name_hint}")

    # ---- types -------------------------------------------------------------------
    def type(self, t: Type) -> str:
        return type_to_str(t, self.names.type_var)

    def type_comment(self, e: Expr) -> str:
        if self.show_types and e.has_type:
            return f" /* ty={self.type(e.checked_type)} */"
        return ""

    # ---- blocks ------------------------------------------------------------------
    def block(self, e: Expr) -> list[str]:
        """Temporaries and lets, then the block's result (a let chain is walked in a loop)."""
        lines: list[str] = []
        self.scopes.append([])
        try:
            node = e
            while isinstance(node, Let) and node not in self.memo:
                var = self.var_decl(node.var)  # named first: a let-bound function may recurse
                value = self.value(node.value, lines)
                lines.append(f"let {var} = {value}{self.type_comment(node.value)};")
                node = node.body
            result = self.value(node, lines)
            lines.append(result + (self.type_comment(node) if not self.is_atomic(node) else ""))
        finally:
            for key in self.scopes.pop():
                del self.memo[key]
        return lines

    def var_decl(self, v: Var) -> str:
        name = self.names.var(v)
        return name if v.type_annotation is None else f"{name}: {self.type(v.type_annotation)}"

    def value(self, e: Expr, lines: list[str]) -> str:
        """`e` as the right-hand side of a binding: its operands become temporaries first."""
        if self.is_atomic(e) or e in self.memo:
            return self.atom(e, lines)
        for operand in self.operands(e):
            if not self.is_atomic(operand):
                self.atom(operand, lines)
        return self.head(e, lines)

    @staticmethod
    def is_atomic(e: Expr) -> bool:
        return isinstance(e, (Var, GlobalVar, Op, Constructor, Constant))

    @staticmethod
    def operands(e: Expr) -> list[Expr]:
        """The sub-expressions printed inline in `e`'s own line (not inside a nested block)."""
        if isinstance(e, (Function, Let)):
            return []  # their insides are blocks
        if isinstance(e, (If, Match)):
            return [e.cond if isinstance(e, If) else e.data]  # the branches are blocks
        return list(children(e))

    def atom(self, e: Expr, lines: list[str]) -> str:
        """A short reference to `e`, emitting temporaries (post-order, on a stack) as needed."""
        if isinstance(e, Var):
            if e not in self.names.vars:  # free: its first use shows its annotation
                return self.var_decl(e)
            return self.names.var(e)
        if isinstance(e, GlobalVar):
            return f"@{e.name_hint}"
        if isinstance(e, Op):
            return e.name
        if isinstance(e, Constructor):
            return e.name if e.inputs else f"constructor({e.name})"
        if isinstance(e, Constant):
            return self.constant(e)
        stack: list[tuple[Expr, bool]] = [(e, False)]
        while stack:
            node, ready = stack.pop()
            if self.is_atomic(node) or node in self.memo:
                continue
            if not ready:
                stack.append((node, True))
                stack.extend((c, False) for c in reversed(self.operands(node)))
                continue
            text = self.head(node, lines)
            name = f"%{self.temps}"
            self.temps += 1
            lines.append(f"{name} = {text}{self.type_comment(node)};")
            self.memo[node] = name
            self.scopes[-1].append(node)
        return self.memo[e]

    # ---- one node, operands already atomic: visit(e, lines) ------------------------------
    def head(self, e: Expr, lines: list[str]) -> str:
        """`e` itself, its operands as atoms (temporaries emitted into `lines` as needed)."""
        return self.visit(e, lines)

    def unsupported(self, expr: Expr) -> Exception:
        return IRError(f"astext: unknown expression {type(expr).__name__}")

    def visit_call(self, call: Call, lines: list[str]) -> str:
        return self.call(call, lambda x: self.atom(x, lines))

    def visit_tuple(self, t: Tuple, lines: list[str]) -> str:
        inner = ", ".join(self.atom(f, lines) for f in t.fields)
        return f"({inner},)" if len(t.fields) == 1 else f"({inner})"

    def visit_tuple_getitem(self, t: TupleGetItem, lines: list[str]) -> str:
        return f"{self.atom(t.tuple_value, lines)}.{t.index}"

    def visit_ref_create(self, r: RefCreate, lines: list[str]) -> str:
        return f"ref({self.atom(r.value, lines)})"

    def visit_ref_read(self, r: RefRead, lines: list[str]) -> str:
        return f"ref_read({self.atom(r.ref, lines)})"

    def visit_grad(self, g: Grad, lines: list[str]) -> str:
        return f"grad({self.atom(g.fn, lines)})"

    def visit_ref_write(self, r: RefWrite, lines: list[str]) -> str:
        return f"ref_write({self.atom(r.ref, lines)}, {self.atom(r.value, lines)})"

    def visit_if(self, i: If, lines: list[str]) -> str:
        cond = self.atom(i.cond, lines)
        then, other = _indent(self.block(i.true_branch)), _indent(self.block(i.false_branch))
        return _join([f"if ({cond}) {{", *then, "} else {", *other, "}"])

    def visit_match(self, m: Match, lines: list[str]) -> str:
        return self.match(m, self.atom(m.data, lines))

    def visit_function(self, fn: Function, lines: list[str]) -> str:
        return self.function(fn, "fn ")

    def visit_let(self, let: Let, lines: list[str]) -> str:
        return _join(["(", *_indent(self.block(let)), ")"])

    def call(self, e: Call, a: Callable[[Expr], str]) -> str:
        callee = e.op.name if isinstance(e.op, Constructor) else a(e.op)
        if isinstance(e.op, Constructor) and not e.args and not e.type_args:
            return callee  # `Nil`
        type_args = f"<{', '.join(self.type(t) for t in e.type_args)}>" if e.type_args else ""
        args = [a(x) for x in e.args]
        if isinstance(e.op, Op):
            args += attr_items(e.attrs, {x.name: x.default for x in e.op.definition.attrs})
        return f"{callee}{type_args}({', '.join(args)})"

    def function(self, fn: Function, head: str) -> str:
        tps = ", ".join(type_param_to_str(tv, self.names.type_var) for tv in fn.type_params)
        params = [self.var_decl(p) for p in fn.params] + attr_items(fn.attrs, {})
        ret = f" -> {self.type(fn.ret_type)}" if fn.ret_type is not None else ""
        sig = f"{head}{f'<{tps}>' if tps else ''}({', '.join(params)}){ret} {{"
        return _join([sig, *_indent(self.block(fn.body)), "}"])

    def match(self, m: Match, data: str) -> str:
        lines = [f"match{'' if m.complete else '?'} ({data}) {{"]
        for clause in m.clauses:
            pattern = self.pattern(clause.lhs)
            body = self.block(clause.rhs)
            if len(body) == 1 and "\n" not in body[0]:
                lines.append(f"{INDENT}{pattern} => {body[0]},")
            else:
                lines += [f"{INDENT}{pattern} => {{", *_indent(_indent(body)), f"{INDENT}}},"]
        return _join([*lines, "}"])

    def pattern(self, p: Pattern) -> str:
        if isinstance(p, PatternWildcard):
            return "_"
        if isinstance(p, PatternVar):
            return self.var_decl(p.var)
        if isinstance(p, PatternConstructor):
            if not p.patterns:
                return p.constructor.name
            return f"{p.constructor.name}({', '.join(self.pattern(s) for s in p.patterns)})"
        if isinstance(p, PatternTuple):
            inner = ", ".join(self.pattern(s) for s in p.patterns)
            return f"({inner},)" if len(p.patterns) == 1 else f"({inner})"
        raise IRError(f"astext: unknown pattern {type(p).__name__}")

    # ---- constants ---------------------------------------------------------------------
    def constant(self, c: Constant) -> str:
        text = self.constant_text.get(c)
        if text is None:
            text = scalar_literal(c.data)
            if text is None:
                text = f"meta[Constant][{len(self.constants)}]"
                self.constants.append(c)
            self.constant_text[c] = text
        return text

    def metadata_text(self) -> str:
        if not self.constants:
            return ""
        entries = [json.dumps(encode_constant(c.data)) for c in self.constants]
        body = ",\n".join(INDENT + e for e in entries)
        return f'{METADATA}\n{{"Constant": [\n{body}\n]}}'


def attr_items(attrs: Attrs, defaults: dict[str, AnyValue]) -> list[str]:
    """``name=value`` for each attribute that differs from its default.

    >>> attr_items(Attrs({"axis": (1,), "keepdims": False}), {"axis": None, "keepdims": False})
    ['axis=[1]']
    """
    out: list[str] = []
    for key, value in attrs.items():
        if key in defaults and _same_value(value, freeze(defaults[key])):
            continue
        out.append(f"{key}={attr_value_text(value)}")
    return out


def _same_value(a: AnyValue, b: AnyValue) -> bool:
    if type(a) is not type(b):
        return False
    if is_tuple(a):
        return len(a) == len(b) and all(_same_value(x, y) for x, y in zip(a, b))
    return bool(a == b)


def attr_value_text(v: AnyValue) -> str:
    """An attribute value as a Python-like literal.

    >>> [attr_value_text(v) for v in (None, True, 3, 0.5, "same", (1, (2,)), float("-inf"))]
    ['None', 'True', '3', '0.5', '"same"', '[1, [2]]', '-inf']
    """
    if v is None or isinstance(v, bool):
        return str(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return repr(v)  # exact; 'inf', '-inf' and 'nan' are read back too
    if isinstance(v, str):
        return json.dumps(v)
    if is_tuple(v):
        return f"[{', '.join(attr_value_text(x) for x in v)}]"
    raise IRError(f"attribute value {v!r} of type {type(v).__name__} has no text form")


def scalar_literal(data: np.ndarray) -> str | None:
    """The inline literal for a scalar constant, or None (it goes to the metadata section).

    >>> [scalar_literal(np.array(v, d)) for v, d in [(1, "float32"), (2, "int32"), (True, "bool")]]
    ['1f', '2i32', 'True']
    >>> scalar_literal(np.array(1.5, "float64")), scalar_literal(np.array([1.0]))
    ('1.5f64', None)
    """
    if data.shape != ():
        return None
    dtype = _DTYPE_NAMES[data.dtype]
    value = cast(np.generic, data[()])  # a 0-d array indexed by () is its NumPy scalar
    if dtype == "bool":
        return str(bool(value))
    if dtype.startswith(("int", "uint")):
        return f"{int(value)}{LITERAL_SUFFIX[dtype]}"
    assert isinstance(value, np.floating)  # every other dtype is handled above
    number = cast(np.floating, value)  # (isinstance leaves its precision unknown)
    if not np.isfinite(number):
        return None
    return float_text(number) + LITERAL_SUFFIX[dtype]


def float_text(value: np.floating) -> str:
    """The shortest decimal text that reads back as exactly `value` in its own dtype.

    >>> float_text(np.float32(0.1)), float_text(np.float64(0.1)), float_text(np.float16(-2.0))
    ('0.1', '0.1', '-2')
    """
    scalar_type = type(value)
    exact = float(value)  # every float16/32/64 value, exactly
    negative_zero = exact == 0 and math.copysign(1.0, exact) < 0
    if abs(exact) < 1e15 and exact == int(exact) and not negative_zero:
        return str(int(exact))
    text = str(value)
    if scalar_type(float(text)).tobytes() != value.tobytes():
        text = repr(exact)
    return text


def encode_constant(data: np.ndarray) -> dict[str, AnyValue]:
    """A constant as JSON: dtype, shape, and the values in C order. Floats are exact;
    non-finite ones are strings (``"inf"``, ``"-inf"``, ``"nan"``, or ``"nan:0x..."``).

    >>> encode_constant(np.array([[0.5, np.inf]], dtype="float32"))
    {'dtype': 'float32', 'shape': [1, 2], 'data': [0.5, 'inf']}
    """
    flat = data.ravel()
    values: list[AnyValue] = flat.tolist()
    if data.dtype.kind == "f":
        canonical_nan = np.array(np.nan, dtype=data.dtype).tobytes()
        for i, x in enumerate(values):
            if not np.isfinite(x):
                values[i] = _non_finite(flat[i], canonical_nan)
    return {"dtype": data.dtype.name, "shape": list(data.shape), "data": values}


def _non_finite(x: np.floating, canonical_nan: bytes) -> str:
    if np.isinf(x):
        return "inf" if x > 0 else "-inf"
    if x.tobytes() == canonical_nan:
        return "nan"
    bits = int.from_bytes(x.tobytes(), "little")
    return f"nan:{bits:#x}"


def decode_constant(entry: AnyValue) -> np.ndarray:
    """The inverse of encode_constant; raises ValueError on malformed entries, among them a
    value that is not of the dtype or out of its range.

    >>> decode_constant({"dtype": "int8", "shape": [2], "data": [1, -1]})
    array([ 1, -1], dtype=int8)
    >>> decode_constant({"dtype": "uint8", "shape": [], "data": [-1]})
    Traceback (most recent call last):
    ValueError: -1 is out of range for uint8
    """
    if not is_json_object(entry) or set(entry) != {"dtype", "shape", "data"}:
        raise ValueError('a constant must be {"dtype": ..., "shape": [...], "data": [...]}')
    dtype, shape, values = entry["dtype"], entry["shape"], entry["data"]
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise ValueError(f"unknown dtype {_short(dtype)}")
    if not _is_shape(shape):
        raise ValueError(f"bad shape {_short(shape)}")
    size = math.prod(shape)
    if not is_json_array(values) or len(values) != size:
        raise ValueError(f"shape {_short(shape)} needs {_short(size)} values")
    np_dtype = np.dtype(dtype)
    decode = {"f": _decode_float, "b": _decode_bool}.get(np_dtype.kind, _decode_int)
    return np.array([decode(v, np_dtype) for v in values], dtype=np_dtype).reshape(shape)


def is_json_object(v: object) -> TypeGuard[dict[object, object]]:
    """Whether a value read from JSON is an object (``isinstance`` alone cannot say what its
    keys and values are)."""
    return isinstance(v, dict)


def is_json_array(v: object) -> TypeGuard[list[object]]:
    """Whether a value read from JSON is an array (of values of any type)."""
    return isinstance(v, list)


def _is_shape(v: object) -> TypeGuard[list[int]]:
    return is_json_array(v) and all(_is_int(d) and d >= 0 for d in v)


def _is_int(v: object) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


def _short(v: AnyValue) -> str:
    """`v` for an error message, cut short: a malformed file may hold a huge value."""
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _decode_bool(v: AnyValue, dtype: np.dtype) -> bool:
    if not isinstance(v, bool):
        raise ValueError(f"bad bool value {_short(v)}")
    return v


def _decode_int(v: AnyValue, dtype: np.dtype) -> int:
    if not _is_int(v):
        raise ValueError(f"bad {dtype} value {_short(v)}")
    info = np.iinfo(dtype)
    if not info.min <= v <= info.max:
        raise ValueError(f"{_short(v)} is out of range for {dtype}")
    return v


def _decode_float(v: AnyValue, dtype: np.dtype) -> np.floating:
    if isinstance(v, str):
        if v.startswith("nan:"):
            bits = int(v[4:], 16) if re.fullmatch(r"0x[0-9a-f]+", v[4:]) else -1
            if not 0 <= bits < 1 << 8 * dtype.itemsize:
                raise ValueError(f"bad NaN payload {_short(v)}")
            nan = np.frombuffer(bits.to_bytes(dtype.itemsize, "little"), dtype=dtype)[0]
            if not np.isnan(nan):
                raise ValueError(f"{v} is not a NaN of {dtype}")
            return nan
        if v not in ("inf", "-inf", "nan"):
            raise ValueError(f"bad float value {_short(v)}")
        return dtype.type(v)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"bad float value {_short(v)}")
    with np.errstate(over="ignore"):
        value = dtype.type(v) if isinstance(v, float) or abs(v) < 2 ** 1024 else dtype.type("inf")
    if not np.isfinite(value):  # a finite value beyond the dtype's range: infinities are text
        raise ValueError(f"{_short(v)} is out of range for {dtype}")
    return value


__all__ = ["astext", "VERSION", "HEADER", "METADATA", "LITERAL_SUFFIX", "DTYPE_LIKE",
           "encode_constant", "decode_constant", "scalar_literal", "float_text", "attr_items",
           "attr_value_text", "sanitize"]
