"""``x[i]``, `i` a constant int, where the translator does not know whether `x` is a tuple or a
tensor: type inference decides.

What the translator knows of a value (kinds.py) comes from annotations and constructions. An
unannotated parameter of a lambda or nested ``def``, a pattern variable or a list's element
may be either: ``relay.foldr(lambda p, acc: p[0] + acc, init, pairs)`` projects, the same
lambda over a list of vectors takes a row. There ``x[i]`` becomes ``getitem(%x, index=i)``,
a call whose type relation waits for the type of ``%x``: a tuple's field ``i`` for a tuple,
for a tensor the row ``i``, typed as indexing a tensor is everywhere else. Once the module is
typed, ``resolve_getitems`` makes each call that projection or that slice (as Python,
``i < 0`` counts from the end), and types the module again::

    fn (%p, %acc) { add(getitem(%p, index=0), %acc) }       # %p: (float32, float32)
    ==> fn (%p, %acc) { add(%p.0, %acc) }
    fn (%v, %acc) { add(getitem(%v, index=-1), %acc) }      # %v: Tensor[(3,), float32]
    ==> fn (%v, %acc) { add(squeeze(strided_slice(%v, begin=[-1], ...), axis=[0]), %acc) }

``getitem`` is the frontend's: the IR knows it as an op (declared, so inference types it),
but it is not in the op registry and nothing after the decorators' typing ever sees it.
"""
from __future__ import annotations

from relaydsl.errors import IRError
from relaydsl.ir.attrs import Attrs
from relaydsl.ir.expr import Call, Expr, Function, TupleGetItem, Var, declare_op
from relaydsl.ir.module import IRModule
from relaydsl.ir.span import Span
from relaydsl.ir.types import (
    FuncType, Kind, TensorType, TupleType, Type, TypeRelation, TypeVar, type_to_str,
)
from relaydsl.ir.visitor import ExprMutator
from relaydsl.op import ops
from relaydsl.op.registry import Attr
from relaydsl.typing import infer_types
from relaydsl.typing.relations import RelationContext

_TO_END = 2**31 - 1  # an `end` past any axis: what slicing to the end of the axis means


def index_end(i: int) -> int:
    """The end of the one-element slice at constant index `i`: ``x[-1]`` is ``x[-1:]``."""
    return i + 1 if i != -1 else _TO_END


def tensor_row(x: Expr, i: int, span: Span | None = None) -> Expr:
    """``x[i]`` of a tensor, at a constant index: the slice of axis 0, that axis dropped."""
    sliced = ops.strided_slice(x, begin=[i], end=[index_end(i)], strides=[1], axes=[0],
                               span=span)
    return ops.squeeze(sliced, axis=[0], span=span)


def _getitem_rel(args: list[Type], attrs: Attrs, ctx: RelationContext) -> Type | None:
    t, i = args[0], attrs.index
    if isinstance(t, TupleType):
        n = len(t.fields)
        if not -n <= i < n:
            ctx.fail(f"tuple index {i} is out of range: the tuple has {n} fields")
        return t.fields[i]
    if isinstance(t, TensorType) and t.ndim == 0:
        ctx.fail(f"indexing with [{i}] needs a tuple or a tensor with an axis, got a scalar, "
                 f"{type_to_str(t)}")
    if isinstance(t, TensorType):  # typed as the slice it becomes, failing as it would
        row = tensor_row(Var("x"), i)  # (built for its ops' attributes, defaults filled in)
        assert isinstance(row, Call) and isinstance(row.args[0], Call)
        sliced = ops.strided_slice.type_relation([t], row.args[0].attrs, ctx)
        return None if sliced is None else ops.squeeze.type_relation([sliced], row.attrs, ctx)
    ctx.fail(f"indexing with [{i}] needs a tuple or a tensor, got {type_to_str(t)}")


class _GetItemDefinition:
    """What the IR and type inference ask of an op's definition (an OpDef's call checking,
    attribute schema and type), for ``getitem``: one input and an int `index`."""

    name = "getitem"
    inputs = ("data",)
    attrs = (Attr("index", "int", doc="the constant index; negative counts from the end"),)
    infers_inputs: tuple[int, ...] = ()

    def check_call(self, args: tuple, attrs: Attrs, span: Span | None = None) -> Attrs:
        if len(args) != 1 or set(attrs) != {"index"}:
            raise IRError(f"getitem takes one input and the attribute index, got {len(args)} "
                          f"input(s) and {sorted(attrs)}", span)
        return Attrs({"index": self.attrs[0].validate(self.name, attrs["index"], span)})

    def func_type(self, attrs: Attrs) -> FuncType:
        """``fn<t, r>(t) -> r where getitem(t, r)``, fresh for one call site."""
        arg, ret = TypeVar("getitem_in0", Kind.Type), TypeVar("getitem_out", Kind.Type)
        rel = TypeRelation(self.name, _getitem_rel, (arg,), ret, attrs)
        return FuncType((arg,), ret, (arg, ret), (rel,))


GETITEM = declare_op(_GetItemDefinition.name, _GetItemDefinition())


def getitem(x: Expr, i: int, span: Span | None = None) -> Call:
    """``x[i]`` for an `x` that is a tuple or a tensor, which type inference will say."""
    return Call(GETITEM, (x,), Attrs({"index": i}), span=span)


def resolve_getitems(mod: IRModule) -> IRModule:
    """`mod`, typed, with each ``getitem`` made the projection or the slice its operand's
    type says, typed again; `mod` itself when it has none. Changes `mod` in place (a module
    the caller has just gathered and typed)."""
    changed = False
    for gv, fn in mod.user_functions().items():
        new = _Resolve().visit(fn)
        if new is not fn:
            assert isinstance(new, Function)  # a function's rewrite is a function
            mod.add(gv, new)
            changed = True
    return infer_types(mod) if changed else mod


class _Resolve(ExprMutator):
    def visit_call(self, call: Call) -> Expr:
        if call.op is not GETITEM:
            return super().visit_call(call)
        x, i = self.visit(call.args[0]), call.attrs.index
        t = call.args[0].checked_type
        if isinstance(t, TupleType):
            return TupleGetItem(x, i % len(t.fields), span=call.span)
        return tensor_row(x, i, call.span)
