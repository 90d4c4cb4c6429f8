"""The operator registry: one definition per op, read by every stage (DESIGN.md §3).

An ``OpDef`` holds every facet of one operator, written together in one block of one
family file (tensor.py, reduce.py, transform.py, nn/...), as JAX's lax.py keeps a
primitive's impl, JVP and lowerings side by side:

* name, inputs and the attribute schema (defaults, validation, docs);
* the type relation (shapes and dtypes in, result type out);
* the fusion pattern kind;
* the NumPy reference (the interpreter's semantics) and the JAX lowering (the oracle's;
  JAX is imported lazily, see lazy_jax.py);
* the gradient rule, written in Relay, with its one-line math as its docstring (or
  ``differentiable=False``);
* the compute rule, written in ``relaydsl.te``, that backends lower;
* ``Traits``: what other stages ask of an op instead of checking its name.

An OpDef is complete and frozen once defined: ``register`` checks every facet. It is
also how Relay code is built: calling it makes a ``Call`` (attributes by keyword, or
positionally in the schema's order), and ``ops.<name>`` reaches any op without importing
its family (what gradient rules of one family use to call another's ops).

>>> from relaydsl.ir import TensorType, Var
>>> from relaydsl.op import ops
>>> ops.add.pattern.name
'BROADCAST'
>>> x = Var("x", TensorType((2, 3)))
>>> ops.sum(x, 1).attrs.axis                 # attributes positionally, in schema order
1
"""
from __future__ import annotations

import enum
import inspect
from types import ModuleType
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any as AnyValue, Callable, Sequence

from relaydsl.errors import IRError
from relaydsl.ir.attrs import Attrs, freeze, is_tuple
from relaydsl.ir.span import Span
from relaydsl.ir.expr import Call, Expr, Op, declare_op, suggest
from relaydsl.op.lazy_jax import LazyModule
from relaydsl.ir.types import DTYPES, FuncType, Kind, Type, TypeRelation, TypeVar
from relaydsl.te.rules import ComputeRule, checked

if TYPE_CHECKING:
    from relaydsl.op.collective import Collective
    from relaydsl.op.quantize_rule import QuantizeRule


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
    return is_tuple(v) and all(_is_int(i) for i in v)


def _pair(v: int | tuple[int, ...]) -> tuple[int, int]:
    """An int or (h, w) as (h, w): ``2 -> (2, 2)``."""
    if isinstance(v, int):
        return (v, v)
    if len(v) != 2:
        raise ValueError(f"expected an int or 2 ints (h, w), got {len(v)} values")
    return (v[0], v[1])


def _padding(v: int | tuple[int, ...]) -> tuple[int, int, int, int]:
    """An int, (h, w) or (top, left, bottom, right) as the four: ``(1, 2) -> (1, 2, 1, 2)``."""
    if isinstance(v, int):
        return (v, v, v, v)
    if len(v) == 2:
        return (v[0], v[1], v[0], v[1])
    if len(v) != 4:
        raise ValueError("expected an int, 2 ints (h, w) or 4 ints (top, left, bottom, right), "
                         f"got {v}")
    return (v[0], v[1], v[2], v[3])


def _single(v: int | tuple[int, ...]) -> tuple[int]:
    """An int or (w,) as (w,), the 1-D counterpart of "pair": ``2 -> (2,)``."""
    if isinstance(v, int):
        return (v,)
    if len(v) != 1:
        raise ValueError(f"expected an int or 1 int (w), got {len(v)} values")
    return (v[0],)


def _padding1d(v: int | tuple[int, ...]) -> tuple[int, int]:
    """An int, (w,) or (left, right) as the two: ``1 -> (1, 1)``."""
    if isinstance(v, int):
        return (v, v)
    if len(v) == 1:
        return (v[0], v[0])
    if len(v) != 2:
        raise ValueError(f"expected an int, 1 int or 2 ints (left, right), got {v}")
    return (v[0], v[1])


def _triple(v: int | tuple[int, ...]) -> tuple[int, int, int]:
    """An int or (d, h, w) as (d, h, w), the 3-D counterpart of "pair": ``2 -> (2, 2, 2)``."""
    if isinstance(v, int):
        return (v, v, v)
    if len(v) != 3:
        raise ValueError(f"expected an int or 3 ints (d, h, w), got {len(v)} values")
    return (v[0], v[1], v[2])


def _padding3d(v: int | tuple[int, ...]) -> tuple[int, ...]:
    """An int, (d, h, w) or (front, top, left, back, bottom, right) as the six, as TVM's."""
    if isinstance(v, int):
        return (v,) * 6
    if len(v) == 3:
        return (*v, *v)
    if len(v) != 6:
        raise ValueError("expected an int, 3 ints (d, h, w) or 6 ints "
                         f"(front, top, left, back, bottom, right), got {v}")
    return tuple(v)


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
    "optional_ints": ("None, an int or a tuple of ints",
                      lambda v: v is None or _is_int(v) or _ints(v)),
    "pair": ("an int or a tuple of ints", lambda v: _is_int(v) or _ints(v)),
    "optional_pair": ("None, an int or a tuple of ints",
                      lambda v: v is None or _is_int(v) or _ints(v)),
    "padding": ("an int or a tuple of ints", lambda v: _is_int(v) or _ints(v)),
    "single": ("an int or a tuple of ints", lambda v: _is_int(v) or _ints(v)),
    "optional_single": ("None, an int or a tuple of ints",
                        lambda v: v is None or _is_int(v) or _ints(v)),
    "padding1d": ("an int or a tuple of ints", lambda v: _is_int(v) or _ints(v)),
    "triple": ("an int or a tuple of ints", lambda v: _is_int(v) or _ints(v)),
    "padding3d": ("an int or a tuple of ints", lambda v: _is_int(v) or _ints(v)),
}

# Kinds whose values are stored in one canonical form, so every consumer reads that form.
# A canonicaliser raises ValueError (a message) for a value of the right type but wrong form.
_KIND_CANONICAL: dict[str, Callable[[AnyValue], AnyValue]] = {
    "float": float,
    "pair": _pair,  # (h, w)
    "optional_pair": lambda v: None if v is None else _pair(v),
    "padding": _padding,  # (top, left, bottom, right)
    "single": _single,  # (w,)
    "optional_single": lambda v: None if v is None else _single(v),
    "padding1d": _padding1d,  # (left, right)
    "triple": _triple,  # (d, h, w)
    "padding3d": _padding3d,  # (front, top, left, back, bottom, right)
}


@dataclass(frozen=True)
class Attr:
    """One attribute of an op: name, kind (a key of _KIND_CHECKS), default, extra check.

    A value of a kind in _KIND_CANONICAL is stored canonicalised: a "pair" given as ``2`` is
    ``(2, 2)``, a "padding" given as ``(1, 2)`` is ``(1, 2, 1, 2)`` (and their 1-D
    counterparts: a "single" ``2`` is ``(2,)``, a "padding1d" ``1`` is ``(1, 1)``; and 3-D ones: a
    "triple" ``2`` is ``(2, 2, 2)``, a "padding3d" ``1`` is ``(1,) * 6``); a default
    is written in canonical form. `check(value)` sees the canonical value and returns an error
    message or None.
    """

    name: str
    kind: str
    default: AnyValue = REQUIRED
    check: Callable[[AnyValue], str | None] | None = None
    doc: str = ""
    # Given by keyword only: where TVM's signature has a parameter we lack before this one
    # (take's batch_dims before mode, the pools' dilation before padding), a positional
    # argument would mean something else to a TVM user.
    keyword_only: bool = False

    def __post_init__(self) -> None:
        if self.kind not in _KIND_CHECKS:
            raise ValueError(f"unknown attribute kind {self.kind!r}")

    def validate(self, op_name: str, value: AnyValue, span: Span | None) -> AnyValue:
        value = freeze(value)
        what, ok = _KIND_CHECKS[self.kind]
        if not ok(value):
            raise IRError(
                f"{op_name}: attribute {self.name!r} must be {what}, "
                f"got {type(value).__name__} {value!r}",
                span,
            )
        if self.kind in _KIND_CANONICAL:
            try:
                value = _KIND_CANONICAL[self.kind](value)
            except ValueError as e:
                raise IRError(f"{op_name}: attribute {self.name!r}: {e}", span) from None
        if self.check is not None:
            problem = self.check(value)
            if problem:
                raise IRError(f"{op_name}: attribute {self.name!r}: {problem}", span)
        return value


Relation = Callable[..., AnyValue]  # (arg types, attrs, RelationContext) -> result type
# What NumPy references and JAX lowerings compute on: a numpy.ndarray, or a jax.Array (JAX is
# imported lazily, so its type is not at hand; the two share no static type).
Array = AnyValue
ArrayModule = ModuleType | LazyModule  # numpy, or jax.numpy (lazy_jax.jnp)
UnaryArrayFn = Callable[[Array], Array]
BinaryArrayFn = Callable[[Array, Array], Array]
GradientRule = Callable[[Call, Expr], list[Expr]]  # (call, output adjoint) -> input adjoints


@dataclass(frozen=True)
class Traits:
    """What stages other than the op's own definition may ask of it (never its name).

    - ``result_arity(attrs)``: for an op whose result is a tuple, its number of fields
      (None when the attributes do not fix it; 0 when these attributes make the result one
      tensor, as topk's ``ret_type="values"``); the trait is None for an op whose result is
      always one tensor.
    - ``contraction``: a matrix product the backends run as a GEMM; fusion lets a 2-D
      transpose feeding it join its group, and the GEMM reads that operand transposed.
    - ``transpose``: a pure axis permutation (what a contraction can read through strides).
    - ``fold_from_types(call, arg_types)``: an expression equal to the call, known at compile
      time from its arguments' types and its constant arguments (shape_of of a static
      shape; cast_like of a constant; ones_like of a small static shape; collapse_sum_like
      to the data's own shape, the data), or None. Constant folding asks it first.
    - ``infers_inputs``: inputs whose type the relation works out from the others and the
      attributes (TVM's dense with ``units``): a model's hidden parameters, left unannotated.
    - ``arithmetic``: one of the four arithmetic operations ``x + y``, ``x - y``, ``x * y``,
      ``x / y``, elementwise on broadcast operands: applied to slices of its operands, it
      gives the slices of its result (CombineParallelConv2D combines them across branches).
    - ``quantize``: the op's quantization rule (quantize_rule.QuantizeRule: which operands
      annotation quantizes, how realization runs it on integers); None runs it in float.
    - ``collective``: the op's result depends on every rank of a distributed job
      (collective.py's ``Collective``, which backends apply to the compute rule's output):
      its calls are not pure, so passes never fold, merge, move or drop them.
    """

    result_arity: Callable[[Attrs], int | None] | None = None
    contraction: bool = False
    transpose: bool = False
    fold_from_types: Callable[[Call, Sequence[Type]], Expr | None] | None = None
    infers_inputs: tuple[int, ...] = ()
    arithmetic: bool = False
    quantize: QuantizeRule | None = None
    collective: Collective | None = None


@dataclass(frozen=True, eq=False)
class OpDef:
    """Everything about one operator. See the module docstring."""

    name: str
    inputs: tuple[str, ...]
    type_relation: Relation
    pattern: OpPattern
    numpy_ref: Callable[..., AnyValue]
    jax_lower: Callable[..., AnyValue]
    compute: ComputeRule
    gradient: GradientRule | None = None
    differentiable: bool = True
    attrs: tuple[Attr, ...] = ()
    doc: str = ""
    traits: Traits = Traits()
    op: Op = field(init=False, repr=False)  # the IR node, made by register()

    @property
    def num_inputs(self) -> int:
        return len(self.inputs)

    def __repr__(self) -> str:
        return f"<op {self.name}>"

    @property
    def infers_inputs(self) -> tuple[int, ...]:
        return self.traits.infers_inputs

    def __call__(self, *args: AnyValue, span: Span | None = None, **attrs: AnyValue) -> Call:
        """A call of this op: ``ops.sum(x, 1)`` or ``ops.sum(x, axis=1)``."""
        inputs, attrs = self.bind_arguments(args, attrs, span)
        return Call(self.op, inputs, Attrs(attrs), span=span)

    @property
    def positional_attrs(self) -> tuple[Attr, ...]:
        """The attributes a call may give positionally after the inputs, in TVM's order
        (computed each time: a functools.cached_property holds one lock for every op on
        Python 3.11, which a child forked meanwhile would wait for forever)."""
        n = next((i for i, a in enumerate(self.attrs) if a.keyword_only), len(self.attrs))
        return self.attrs[:n]

    def bind_arguments(self, args: Sequence[AnyValue], kwargs: dict[str, AnyValue],
                       span: Span | None = None
                       ) -> tuple[tuple[AnyValue, ...], dict[str, AnyValue]]:
        """(inputs, attributes) of a call written as in Python: the inputs positionally or by
        name, then the attributes positionally (``positional_attrs``) or by name. Unknown
        and repeated names, and a missing input, are IRErrors; attribute values are checked
        later (``check_call``)."""
        kwargs = dict(kwargs)
        if len(args) == self.num_inputs and not any(k in self.inputs for k in kwargs):
            return tuple(args), kwargs  # how the passes build calls: inputs, attributes by name
        positional = self.positional_attrs
        if len(args) > self.num_inputs + len(positional):
            kw = len(self.attrs) - len(positional)
            raise IRError(
                f"{self.name} takes {self.num_inputs} input(s) and {len(positional)} "
                f"positional attribute(s){f' ({kw} more by keyword only)' if kw else ''}, "
                f"got {len(args)} positional arguments; see help(relay.{self.name})", span)
        inputs = list(args[:self.num_inputs])
        for name in self.inputs[len(inputs):]:
            if name not in kwargs:
                given = ", ".join(self.inputs[:len(inputs)]) or "none"
                raise IRError(f"{self.name}: missing input {name!r} (inputs "
                              f"{', '.join(self.inputs)}; given: {given})", span)
            inputs.append(kwargs.pop(name))
        for a, value in zip(positional, args[self.num_inputs:]):
            if a.name in kwargs:
                raise IRError(f"{self.name}: attribute {a.name!r} given twice", span)
            kwargs[a.name] = value
        for name in kwargs:
            if name in self.inputs:
                raise IRError(f"{self.name}: input {name!r} given twice", span)
        return tuple(inputs), kwargs

    @property
    def signature(self) -> inspect.Signature:
        """The Python signature of ``relay.<name>``: inputs, then attributes with defaults."""
        P = inspect.Parameter
        params = [P(n, P.POSITIONAL_OR_KEYWORD) for n in self.inputs]
        for a in self.attrs:
            kind = P.KEYWORD_ONLY if a.keyword_only or a not in self.positional_attrs \
                else P.POSITIONAL_OR_KEYWORD
            params.append(P(a.name, kind, default=P.empty if a.default is REQUIRED
                            else a.default))
        return inspect.Signature(_in_order(params))

    def help_text(self) -> str:
        """The docstring of ``relay.<name>``: what it computes, its attributes, its gradient."""
        lines = [self.doc or f"The {self.name} operator.", ""]
        lines.append("Inputs: " + (", ".join(self.inputs) or "none") + ".")
        if self.attrs:
            lines += ["", "Attributes:"]
            for a in self.attrs:
                what = _KIND_CHECKS[a.kind][0]
                default = "required" if a.default is REQUIRED else f"default {a.default!r}"
                note = f": {a.doc}" if a.doc else ""
                lines.append(f"    {a.name} ({what}, {default}){note}")
        if self.gradient is not None and self.gradient.__doc__:
            lines += ["", "Gradient: " + " ".join(self.gradient.__doc__.split())]
        elif not self.differentiable:
            lines += ["", "Not differentiable."]
        lines += ["", f"Fusion pattern: {self.pattern.name}."]
        return "\n".join(lines)

    def check_call(self, args: Sequence[object], attrs: Attrs, span: Span | None = None) -> Attrs:
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
            raise IRError(
                f"{self.name}: unknown attribute(s) {', '.join(unknown)}; known: {known}", span)
        out: dict[str, AnyValue] = {}
        for a in self.attrs:
            if a.name in attrs:
                out[a.name] = a.validate(self.name, attrs[a.name], span)
            elif a.default is REQUIRED:
                raise IRError(f"{self.name}: attribute {a.name!r} is required", span)
            else:
                out[a.name] = a.default
        return Attrs(out)

    def func_type(self, attrs: Attrs) -> FuncType:
        """A fresh generic type ``fn<t0..tn, r>(t0..tn) -> r where Rel(t0..tn, r)``, for one call
        site."""
        params = tuple(TypeVar(f"{self.name}_in{i}", Kind.Type) for i in range(self.num_inputs))
        ret = TypeVar(f"{self.name}_out", Kind.Type)
        rel = TypeRelation(self.name, self.type_relation, params, ret, attrs)
        return FuncType(params, ret, (*params, ret), (rel,))


def _in_order(params: list[inspect.Parameter]) -> list[inspect.Parameter]:
    """Keyword-only parameters after the others (a Signature requires it)."""
    keyword = [p for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY]
    return [p for p in params if p.kind is not inspect.Parameter.KEYWORD_ONLY] + keyword


_REGISTRY: dict[str, OpDef] = {}


def register(opdef: OpDef) -> OpDef:
    """Add a complete op (each name defined exactly once) and return it, frozen."""
    name = opdef.name
    if name in _REGISTRY:
        raise ValueError(f"op {name} is registered twice")
    missing = [facet for facet in ("type_relation", "numpy_ref", "jax_lower", "compute")
               if not callable(getattr(opdef, facet))]
    if opdef.differentiable != (opdef.gradient is not None):
        missing.append("gradient" if opdef.differentiable else "differentiable=True")
    if missing:
        raise ValueError(f"op {name} is incomplete: {', '.join(missing)}")
    object.__setattr__(opdef, "compute", checked(name, opdef.compute))
    object.__setattr__(opdef, "op", declare_op(name, opdef))
    _REGISTRY[name] = opdef
    return opdef


def lookup(name: str) -> OpDef:
    """The op called `name` (an IRError with suggestions for an unknown name)."""
    try:
        return _REGISTRY[name]
    except KeyError:
        raise IRError(f"unknown operator {name!r}.{suggest(name, _REGISTRY)}") from None


def all_ops() -> dict[str, OpDef]:
    return dict(_REGISTRY)


class _Ops:
    """``ops.<name>``: every registered op by its name, for code that builds Relay."""

    def __getattr__(self, name: str) -> OpDef:
        if name.startswith("__"):
            raise AttributeError(name)
        return lookup(name)

    def __dir__(self) -> list[str]:
        return sorted(_REGISTRY)


ops = _Ops()
