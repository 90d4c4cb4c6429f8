"""The operator registry: one entry per op, read by every stage (DESIGN.md §3).

An ``OpDef`` holds, for one operator: its name and inputs, the attribute
schema (defaults, validation), the type relation, the fusion pattern kind,
the NumPy reference (the interpreter's semantics), the JAX lowering (the
test oracle's), and -- filled by later stages -- the gradient rule and the
tensor-expression compute rule. Families of ops live one file each
(tensor.py, reduce.py, transform.py, nn.py) and call ``register``.

>>> from relaydsl.op import lookup
>>> lookup("add").pattern.name
'BROADCAST'
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any as AnyValue, Callable

from relaydsl.errors import IRError
from relaydsl.ir.attrs import Attrs, freeze
from relaydsl.ir.span import Span
from relaydsl.ir.types import DTYPES, FuncType, Kind, TypeRelation, TypeVar


class OpPattern(enum.IntEnum):
    """Fusion pattern kinds, ordered as TVM orders them (lower fuses more freely)."""

    ELEMWISE = 0
    BROADCAST = 1
    INJECTIVE = 2
    COMM_REDUCE = 3
    OUT_ELEMWISE_FUSABLE = 4
    TUPLE = 7
    OPAQUE = 8


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: AnyValue = _Required()

# Attribute kinds and how a value of each is validated/normalised.
def _is_int(v: AnyValue) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _ints(v: AnyValue) -> bool:
    return isinstance(v, tuple) and all(_is_int(i) for i in v)


_KIND_CHECKS: dict[str, tuple[str, Callable[[AnyValue], bool]]] = {
    "int": ("an int", _is_int),
    "float": ("a number", lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)),
    "bool": ("a bool", lambda v: isinstance(v, bool)),
    "str": ("a string", lambda v: isinstance(v, str)),
    "dtype": (f"a dtype ({', '.join(DTYPES)})", lambda v: v in DTYPES),
    "optional_dtype": (
        f"None or a dtype ({', '.join(DTYPES)})", lambda v: v is None or v in DTYPES
    ),
    "ints": ("a tuple of ints", _ints),
    "int_or_ints": ("an int or a tuple of ints", lambda v: _is_int(v) or _ints(v)),
    "optional_int": ("an int or None", lambda v: v is None or _is_int(v)),
    "optional_ints": ("None, an int or a tuple of ints", lambda v: v is None or _is_int(v) or _ints(v)),
}


@dataclass(frozen=True)
class Attr:
    """One attribute of an op: name, kind (a key of _KIND_CHECKS), default, extra check.

    `check(value)` returns an error message or None.
    """

    name: str
    kind: str
    default: AnyValue = REQUIRED
    check: Callable[[AnyValue], str | None] | None = None
    doc: str = ""

    def __post_init__(self) -> None:
        if self.kind not in _KIND_CHECKS:
            raise ValueError(f"unknown attribute kind {self.kind!r}")

    def validate(self, op_name: str, value: AnyValue, span: Span | None) -> AnyValue:
        value = freeze(value)
        if self.kind == "float" and _is_int(value):
            value = float(value)
        what, ok = _KIND_CHECKS[self.kind]
        if not ok(value):
            raise IRError(
                f"{op_name}: attribute {self.name!r} must be {what}, got {type(value).__name__} {value!r}",
                span,
            )
        if self.check is not None:
            problem = self.check(value)
            if problem:
                raise IRError(f"{op_name}: attribute {self.name!r}: {problem}", span)
        return value


@dataclass
class OpDef:
    """Everything about one operator. See the module docstring."""

    name: str
    inputs: tuple[str, ...]
    type_relation: Callable[..., AnyValue]
    pattern: OpPattern
    numpy_ref: Callable[..., AnyValue]
    jax_lower: Callable[..., AnyValue]
    attrs: tuple[Attr, ...] = ()
    doc: str = ""
    differentiable: bool = True
    # Inputs whose type the relation can work out from the other inputs and the attributes
    # (TVM's dense with `units`, conv2d with `channels`): left unannotated, as a model's hidden
    # parameters are, they do not hold the relation back; the relation assigns their types.
    infers_inputs: tuple[int, ...] = ()
    gradient: Callable[..., AnyValue] | None = None  # filled by the differentiation issue
    compute: Callable[..., AnyValue] | None = None  # filled by the te/llvm issue
    op: AnyValue = field(default=None, repr=False)  # the IR Op node, set by register()

    @property
    def num_inputs(self) -> int:
        return len(self.inputs)

    def check_call(self, args: tuple, attrs: Attrs, span: Span | None = None) -> Attrs:
        """Arity and attributes of a call; returns the attributes with defaults filled in."""
        if len(args) != self.num_inputs:
            names = ", ".join(self.inputs) or "no inputs"
            raise IRError(
                f"{self.name} takes {self.num_inputs} argument(s) ({names}), got {len(args)}", span
            )
        schema = {a.name: a for a in self.attrs}
        unknown = [k for k in attrs if k not in schema]
        if unknown:
            known = ", ".join(schema) or "none"
            raise IRError(f"{self.name}: unknown attribute(s) {', '.join(unknown)}; known: {known}", span)
        out = {}
        for a in self.attrs:
            if a.name in attrs:
                out[a.name] = a.validate(self.name, attrs[a.name], span)
            elif a.default is REQUIRED:
                raise IRError(f"{self.name}: attribute {a.name!r} is required", span)
            else:
                out[a.name] = a.default
        return Attrs(out)

    def func_type(self, attrs: Attrs) -> FuncType:
        """A fresh generic type ``fn<t0..tn, r>(t0..tn) -> r where Rel(t0..tn, r)`` for one call site."""
        params = tuple(TypeVar(f"{self.name}_in{i}", Kind.Type) for i in range(self.num_inputs))
        ret = TypeVar(f"{self.name}_out", Kind.Type)
        rel = TypeRelation(self.name, self.type_relation, params, ret, attrs)
        return FuncType(params, ret, (*params, ret), (rel,))


_REGISTRY: dict[str, OpDef] = {}


def register(opdef: OpDef) -> OpDef:
    """Add an op; each name is defined exactly once."""
    from relaydsl.ir.expr import Op

    if opdef.name in _REGISTRY:
        raise ValueError(f"op {opdef.name} is registered twice")
    _REGISTRY[opdef.name] = opdef
    opdef.op = Op(opdef.name)
    return opdef


def lookup(name: str) -> OpDef:
    _ensure_loaded()
    try:
        return _REGISTRY[name]
    except KeyError:
        from relaydsl.ir.expr import suggest

        raise IRError(f"unknown operator {name!r}.{suggest(name, _REGISTRY)}") from None


def all_ops() -> dict[str, OpDef]:
    _ensure_loaded()
    return dict(_REGISTRY)


_loaded = False


def _ensure_loaded() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        import relaydsl.op.families  # noqa: F401  (registers every family)
