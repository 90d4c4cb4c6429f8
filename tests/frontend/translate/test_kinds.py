"""What the translator knows of a value's kind, from its type or its construction (kinds.py)."""
from relaydsl.frontend.translate.kinds import (
    KnownKinds, TupleKind, ValueKind, is_tuple, kind_of_type,
)
from relaydsl.frontend.translate.bindings import Binding
from relaydsl.frontend.translate.literals import Number
from relaydsl.ir.expr import Call, Function, Grad, If, Let, Tuple, TupleGetItem, Var, const
from relaydsl.ir.types import FuncType, TensorType, TupleType, TypeCall, TypeVar
from relaydsl.op import ops
from relaydsl.prelude import prelude_definitions

T = TensorType((3,), "float32")
TENSOR, TUPLE = ValueKind.TENSOR, ValueKind.TUPLE


def test_a_declared_type_gives_the_kind_and_a_tuple_type_its_fields_kinds():
    list_of_t = TypeCall(prelude_definitions()[0][0].header, (T,))
    assert kind_of_type(T) is TENSOR
    assert kind_of_type(TupleType((T, TupleType((T, list_of_t))))) == \
        TupleKind((TENSOR, TupleKind((TENSOR, ValueKind.LIST))))
    assert kind_of_type(FuncType((T,), T)) is ValueKind.FUNCTION
    assert kind_of_type(TypeVar("a")) is None and kind_of_type(None) is None


def test_constructions_give_kinds_and_a_name_its_binding_s():
    kinds = KnownKinds()
    x, unknown = Var("x", T), Var("y")
    pair = Tuple([x, unknown])
    env = {"y": Binding(unknown, ValueKind.LIST)}
    assert kinds.of(Number(2, None), env) is TENSOR and kinds.of(const(1.0), env) is TENSOR
    assert kinds.of(pair, env) == TupleKind((TENSOR, ValueKind.LIST))
    assert kinds.of(TupleGetItem(pair, 1), env) is ValueKind.LIST
    assert kinds.of(TupleGetItem(Var("t"), 0), env) is None
    assert kinds.of(Let(Var("z"), x, pair), env) == TupleKind((TENSOR, ValueKind.LIST))
    assert kinds.of(If(const(True), x, x), env) is TENSOR
    assert kinds.of(If(const(True), x, pair), env) is None
    assert kinds.of(ops.split(x, indices_or_sections=2), env) == TupleKind((TENSOR, TENSOR))
    assert kinds.of(ops.exp(x), env) is TENSOR
    # topk's attributes decide: a (values, indices) pair, or one tensor
    assert kinds.of(ops.topk(x, k=2), env) == TupleKind((TENSOR, TENSOR))
    assert kinds.of(ops.topk(x, k=2, ret_type="values"), env) is TENSOR
    f = Function([x], x)
    assert kinds.of(f, env) is ValueKind.FUNCTION and kinds.of(Grad(f), env) is ValueKind.GRAD
    assert kinds.of(Call(Grad(f), [x]), env) == TupleKind((TENSOR, TUPLE))


def test_noted_kinds_and_results_of_function_values():
    kinds = KnownKinds()
    f, call = Var("f"), Call(Var("g"), [])
    assert kinds.of(call, {}) is None and kinds.result(f) is None
    kinds.note(call, TUPLE)
    kinds.note_result(f, TENSOR)
    assert kinds.of(call, {}) is TUPLE and kinds.result(f) is TENSOR
    assert is_tuple(TUPLE) and is_tuple(TupleKind(())) and not is_tuple(TENSOR)
