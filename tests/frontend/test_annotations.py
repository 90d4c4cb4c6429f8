"""User annotations -> Relay types, call-time argument checks, and the typeguard checker."""
from __future__ import annotations

import dataclasses
import re
import types
import typing
import warnings

import jax.numpy as jnp
import numpy as np
import pytest
import typeguard
from hypothesis import given, settings, strategies as st
from typeguard import TypeCheckError, check_type, typechecked

import relaydsl  # first: relaydsl/__init__ imports frontend.annotations (an import cycle)
import relaydsl.frontend.annotations as annotations
from relaydsl.frontend.annotations import (
    AdtAnnotation,
    Any,
    Bool,
    Float,
    Float16,
    Float32,
    Float64,
    Fn,
    Int,
    Int8,
    Int16,
    Int32,
    Int64,
    List,
    Option,
    Tensor,
    Tree,
    UInt8,
    annotation_to_type,
    check_argument,
)
from relaydsl.ir.adt import define_adt
from relaydsl.ir.module import IRModule
from relaydsl.ir.types import (
    AnyDim,
    FuncType,
    Kind,
    TensorType,
    TupleType,
    TypeCall,
    TypeVar,
    type_to_str,
)


def to_type(ann: object, symbols: dict[str, TypeVar] | None = None, **kw: typing.Any):
    return annotation_to_type(ann, symbols={} if symbols is None else symbols, **kw)


# ---- dtype markers ------------------------------------------------------------------------

MARKERS = [
    (Float, "float32"), (Int, "int32"), (Float16, "float16"), (Float32, "float32"),
    (Float64, "float64"), (Int8, "int8"), (Int16, "int16"), (Int32, "int32"), (Int64, "int64"),
    (UInt8, "uint8"), (Bool, "bool"),
]


@pytest.mark.parametrize(("marker", "dtype"), MARKERS, ids=lambda m: repr(m))
def test_a_bare_marker_is_a_scalar_of_its_dtype(marker, dtype):
    assert marker.dtype == dtype
    assert to_type(marker) == TensorType((), dtype)
    assert to_type(Tensor[marker, ()]) == TensorType((), dtype)


def test_markers_read_as_written_and_compare_by_dtype():
    assert [repr(m) for m in (Float, Int, Float64, UInt8, Bool)] == [
        "Float", "Int", "Float64", "UInt8", "Bool"]
    assert Float == Float32 and Int == Int32 and Float != Float64
    assert Tensor[Float, 3] == Tensor[Float32, 3]


def test_python_scalar_types_are_float_int_bool():
    assert to_type(float) == TensorType((), "float32")
    assert to_type(int) == TensorType((), "int32")
    assert to_type(bool) == TensorType((), "bool")


# ---- Tensor[dtype, shape] -----------------------------------------------------------------

def test_tensor_shapes():
    assert to_type(Tensor[Float, (2, 3)]) == TensorType((2, 3), "float32")
    assert to_type(Tensor[Int, 10]) == TensorType((10,), "int32")
    assert to_type(Tensor[Float, ()]) == TensorType((), "float32")
    assert to_type(Tensor[Float, (np.int64(4),)]) == TensorType((4,), "float32")
    assert to_type(Tensor[Float, (0, 5)]) == TensorType((0, 5), "float32")


def test_symbolic_dims_share_one_shape_variable_per_signature():
    symbols: dict[str, TypeVar] = {}
    x = to_type(Tensor[Float, ("n", 128)], symbols)
    y = to_type(Tensor[Float, "n"], symbols)  # a bare name is 1-D
    n = symbols["n"]
    assert n.kind is Kind.Shape and n.name == "n"
    assert x == TensorType((n, 128), "float32") and y == TensorType((n,), "float32")
    assert x.shape[0] is y.shape[0] is n
    other = to_type(Tensor[Float, "n"])  # another signature: another variable
    assert other.shape[0] is not n


def test_any_dims():
    t = to_type(Tensor[Float, (Any, 3)])
    assert t == TensorType((Any, 3), "float32")
    assert isinstance(t.shape[0], AnyDim)
    assert repr(Tensor[Float, (Any, "n")]) == "Tensor[Float, (Any, 'n')]"


def test_tensor_annotations_are_immutable_hashable_values():
    a = Tensor[Float, (2, 3)]
    assert (a.dtype, a.shape) == (Float, (2, 3))
    assert repr(a) == "Tensor[Float, (2, 3)]"
    assert repr(Tensor[Int, 10]) == "Tensor[Int, (10,)]"
    assert a == Tensor[Float, (2, 3)] and hash(a) == hash(Tensor[Float, (2, 3)])
    assert len({a, Tensor[Float, (2, 3)], Tensor[Float, (3, 2)]}) == 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.shape = (1,)  # type: ignore[misc]


def test_tensor_annotations_are_python_annotations():
    def f(x: Tensor[Float, (2, 3)], y: tuple[Float, Tensor[Int, "n"]]) -> Fn[[Float], Float]:
        return abs

    hints = typing.get_type_hints(f)
    assert hints["x"] == Tensor[Float, (2, 3)]
    assert hints["return"] == Fn[[Float], Float]
    assert typing.get_args(typing.Optional[Tensor[Float, 3]])[0] == Tensor[Float, 3]  # noqa: UP045


SHAPE_FORMS = re.escape("write Tensor[Float, (2, 3)], Tensor[Float, 10] (1-D)")


@pytest.mark.parametrize(("make", "message"), [
    (lambda: Tensor[Float], r"Tensor takes a dtype and a shape, got Tensor\[Float\]"),
    (lambda: Tensor[Float, 2, 3], r"Tensor takes a dtype and a shape, got Tensor\[Float, 2, 3\]"),
    (lambda: Tensor["x", 3], r"the dtype of Tensor\['x', 3\] must be one of Float, Int, "),
    (lambda: Tensor[np.float32, 3], r"the dtype of Tensor\[.*float32.*\] must be one of"),
    (lambda: Tensor[Float, -1], r"negative dimension -1 in Tensor\[Float, -1\]"),
    (lambda: Tensor[Float, (2, -3)], r"negative dimension -3"),
    (lambda: Tensor[Float, 2.0], r"dimension 2.0 in Tensor\[Float, 2.0\] must be an int"),
    (lambda: Tensor[Float, (True,)], r"dimension True .* must be an int, a name or relay.Any"),
    (lambda: Tensor[Float, (typing.Any,)], r"use relay.Any, not typing.Any"),
    (lambda: Tensor[Float, ("2n",)], r"symbolic dimension '2n' .* is not a valid name"),
    (lambda: Tensor[Float, [2, 3]], r"dimension \[2, 3\] .* must be an int"),
])
def test_bad_tensor_forms_show_the_accepted_ones(make, message):
    with pytest.raises(TypeError, match=message) as info:
        make()
    assert re.search(SHAPE_FORMS, str(info.value))


# ---- tuples, functions, ADTs --------------------------------------------------------------

def test_tuples():
    f32, i32 = TensorType((), "float32"), TensorType((), "int32")
    assert to_type(tuple[Float, Int]) == TupleType((f32, i32))
    assert to_type(typing.Tuple[Float, Int]) == TupleType((f32, i32))  # noqa: UP006 (the old spelling)
    assert to_type(tuple[()]) == TupleType(())
    assert to_type(typing.Tuple[()]) == TupleType(())  # noqa: UP006
    assert to_type(tuple[Float, tuple[Int, bool]]) == TupleType(
        (f32, TupleType((i32, TensorType((), "bool")))))
    assert to_type(None) == TupleType(()) and to_type(type(None)) == TupleType(())


@pytest.mark.parametrize(("ann", "message"), [
    (tuple[Float, ...], r"tuple\[Float, \.\.\.\] \(a tuple of any length\)"),
    (tuple, r"unsupported annotation tuple \(give each field a type"),
    (typing.Tuple, r"unsupported annotation typing.Tuple \(give each field a type"),  # noqa: UP006
    (list[float], r"unsupported annotation list\[float\] \(a Python list; use relay.List"),
    (np.ndarray, r"unsupported annotation ndarray \(a NumPy array; give dtype and shape"),
    ("Float", r"unsupported annotation 'Float' \(a string; evaluate postponed annotations"),
    (Tensor, r"unsupported annotation Tensor \(Tensor needs a dtype and a shape"),
    (3, r"unsupported annotation 3; write Tensor\[Float, \(2, 3\)\], Float, tuple\[\.\.\.\], "
        r"relay.Fn\[\[\.\.\.\], R\] or an ADT"),
    (str, r"unsupported annotation str; write Tensor"),
])
def test_unsupported_annotations(ann, message):
    with pytest.raises(TypeError, match=message):
        to_type(ann)


def test_function_types_share_the_signature_symbols():
    symbols: dict[str, TypeVar] = {}
    t = to_type(Fn[[Tensor[Float, "n"], Int], tuple[Float, Tensor[Float, "n"]]], symbols)
    n = symbols["n"]
    assert t == FuncType(
        (TensorType((n,), "float32"), TensorType((), "int32")),
        TupleType((TensorType((), "float32"), TensorType((n,), "float32"))),
    )
    assert to_type(Fn[[], Float]) == FuncType((), TensorType((), "float32"))
    assert repr(Fn[[Float, Tensor[Float, 3]], bool]) == "Fn[[Float, Tensor[Float, (3,)]], bool]"
    assert hash(Fn[[Float], Float]) == hash(Fn[[Float], Float])


@pytest.mark.parametrize(("make", "message"), [
    (lambda: Fn[Float, Float], r"Fn takes a list of parameter annotations and a result"),
    (lambda: Fn[[Float]], r"Fn takes a list of parameter annotations and a result"),
    (lambda: Fn[[Float, "x"], Float], r"unsupported annotation 'x'"),
    (lambda: Fn[[Float], list], r"unsupported annotation list"),
])
def test_bad_function_forms(make, message):
    with pytest.raises(TypeError, match=message):
        make()


def test_prelude_adts():
    mod = IRModule()
    list_t, option_t, tree_t = (mod.get_type(n).header for n in ("List", "Option", "Tree"))
    f3 = TensorType((3,), "float32")
    assert to_type(List[Tensor[Float, 3]], mod=mod) == TypeCall(list_t, (f3,))
    assert to_type(Option[Int]) == TypeCall(option_t, (TensorType((), "int32"),))
    assert to_type(Tree[tuple[Float, Float]]) == TypeCall(
        tree_t, (TupleType((TensorType((), "float32"),) * 2),))
    assert to_type(List[List[Float]]) == TypeCall(
        list_t, (TypeCall(list_t, (TensorType((), "float32"),)),))
    assert repr(List[Tensor[Float, 3]]) == "List[Tensor[Float, (3,)]]" and repr(Tree) == "Tree"
    assert List[Float] == List[Float] and hash(List[Float]) == hash(List[Float])


def test_adt_symbols_and_arity():
    symbols: dict[str, TypeVar] = {}
    t = to_type(List[Tensor[Float, ("n", 2)]], symbols)
    assert t.args[0].shape[0] is symbols["n"]
    with pytest.raises(TypeError, match=r"List takes 1 type argument\(s\); write "
                                        r"List\[Tensor\[Float, 3\]\]"):
        to_type(List)
    with pytest.raises(TypeError, match=r"List takes 1 type argument\(s\), got 2"):
        List[Float, Int]
    with pytest.raises(TypeError, match=r"List\[Float\] is already applied"):
        List[Float][Int]
    with pytest.raises(TypeError, match=r"unsupported annotation 'x'"):
        List["x"]


def make_pair_adt():
    return define_adt("Pair", ["a", "b"], [("MkPair", [lambda s, tv: tv[0], lambda s, tv: tv[1]])])


def test_user_adts_any_object_with_type_data():
    pair = make_pair_adt()
    color = define_adt("Color", [], [("Red", []), ("Green", [])])

    class Color:  # what a declaration in Python might produce
        type_data = color

    class Pair:
        type_data = pair

        def __class_getitem__(cls, item):
            return types.GenericAlias(cls, item)

    f32 = TensorType((), "float32")
    assert to_type(Color) == TypeCall(color.header, ())
    assert to_type(Pair[Float, Int]) == TypeCall(pair.header, (f32, TensorType((), "int32")))
    assert to_type(AdtAnnotation(pair)[Float, Float]) == TypeCall(pair.header, (f32, f32))


def test_adts_are_added_to_the_module():
    pair = make_pair_adt()
    mod = IRModule()
    to_type(AdtAnnotation(pair)[Float, Float], mod=mod)
    assert mod.get_type("Pair") is pair
    to_type(AdtAnnotation(pair)[Int, Int], mod=mod)  # already there: fine
    with pytest.raises(TypeError, match="names a type Pair other than the one defined"):
        to_type(AdtAnnotation(make_pair_adt())[Float, Float], mod=mod)


def test_relay_types_pass_through():
    t = TensorType((2,), "int8")
    assert to_type(t) is t


# ---- call-time checks ---------------------------------------------------------------------

def check(ann: object, value: object, name: str = "x", bindings: dict | None = None):
    return check_argument(name, to_type(ann), value, {} if bindings is None else bindings)


def test_exact_arrays_pass_without_copying():
    x = np.ones((2, 3), np.float32)
    out = check(Tensor[Float, (2, 3)], x)
    assert out is x
    assert check(Tensor[Float, (Any, 3)], np.ones((7, 3), np.float32)).shape == (7, 3)
    assert check(Tensor[UInt8, 2], np.ones(2, np.uint8)).dtype == np.uint8


def test_arrays_come_back_c_contiguous_with_native_byte_order():
    x = np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2]
    out = check(Tensor[Float, (3, 2)], x)
    assert out.flags.c_contiguous and np.array_equal(out, x)
    swapped = np.arange(3, dtype=">f4")
    out = check(Tensor[Float, 3], swapped)
    assert out.dtype == np.float32 and out.dtype.isnative and np.array_equal(out, [0, 1, 2])


def test_python_numbers_become_0d_arrays_when_the_kind_allows():
    cases = [(Float, 2, np.float32), (Float, 2.5, np.float32), (Float64, 1, np.float64),
             (Int, 7, np.int32), (Int8, -128, np.int8), (UInt8, 255, np.uint8),
             (Bool, True, np.bool_)]
    for marker, value, dtype in cases:
        out = check(marker, value)
        assert isinstance(out, np.ndarray) and out.shape == () and out.dtype == dtype
        assert out == value
    assert check(Float, np.float32(1.5)).shape == ()


@pytest.mark.parametrize(("ann", "value", "message"), [
    (Int, 2.5, "argument 'x': expected Tensor[(), int32], got a Python float (2.5); "
               "a float cannot become int32"),
    (Float, True, "argument 'x': expected Tensor[(), float32], got a Python bool (True); "
                  "a bool cannot become float32"),
    (Int, False, "a bool cannot become int32"),
    (Bool, 1, "argument 'x': expected Tensor[(), bool], got a Python int (1); "
              "an int cannot become bool"),
    (Int8, 300, "got a Python int (300); out of range for int8"),
    (UInt8, -1, "got a Python int (-1); out of range for uint8"),
    (Float16, 1e10, "out of range for float16"),
    (Float, np.int64(1), "argument 'x': expected Tensor[(), float32], got a NumPy int64 "
                         "scalar; cast it with x.astype(np.float32)"),
    (Bool, np.int32(1), "cast it with x.astype(np.bool_)"),
    (Float, "1.0", "argument 'x': expected Tensor[(), float32], got a str"),
    (Float, None, "argument 'x': expected Tensor[(), float32], got a NoneType"),
])
def test_python_and_numpy_scalars_that_do_not_fit(ann, value, message):
    with pytest.raises(TypeError) as info:
        check(ann, value)
    assert message in str(info.value)


def test_lists_are_python_numbers_too():
    out = check(Tensor[Float, (2, 2)], [[1, 2], [3.5, 4]])
    assert out.dtype == np.float32 and out.tolist() == [[1, 2], [3.5, 4]]
    assert check(Tensor[Int, 0], []).dtype == np.int32
    arrays = [np.ones(2, np.float32), np.zeros(2, np.float32)]
    assert check(Tensor[Float, (2, 2)], arrays).dtype == np.float32
    with pytest.raises(TypeError, match=r"got a list of shape \(2,\); a float cannot become int32"):
        check(Tensor[Int, 2], [1.0, 2.0])
    with pytest.raises(TypeError, match=r"got a list; the list is ragged"):
        check(Tensor[Float, 2], [[1.0], [2.0, 3.0]])
    with pytest.raises(TypeError, match=r"expected Tensor\[\(2, 2\), float32\], got a list"):
        check(Tensor[Float, (2, 2)], [np.ones(2), np.zeros(2)])


def test_array_likes_go_through_np_asarray():
    class ArrayLike:  # JAX and PyTorch arrays look like this to NumPy
        def __array__(self, dtype=None, copy=None):
            return np.ones(3, np.float32)

    assert check(Tensor[Float, 3], ArrayLike()).dtype == np.float32


def test_the_dtype_kind_must_match():
    with pytest.raises(TypeError) as info:
        check(Tensor[Float, (64, 784)], np.zeros((64, 784), np.int64))
    assert str(info.value) == (
        "argument 'x': expected Tensor[(64, 784), float32], got an int64 array of shape "
        "(64, 784); cast it with x.astype(np.float32)")
    with pytest.raises(TypeError, match=r"got a float64 array of shape \(3,\); cast it with "
                                        r"x\.astype\(np\.int32\)"):
        check(Tensor[Int, 3], np.zeros(3))
    # NumPy's default int64 for Int (int32) is taken when its values fit (issue 13, item 2)
    narrowed = check(Tensor[Int, 3], np.arange(3, dtype=np.int64))
    assert narrowed.dtype == np.int32 and narrowed.tolist() == [0, 1, 2]
    with pytest.raises(TypeError, match=r"got an int64 array of shape \(3,\); -3000000000 is "
                                        r"out of range for int32"):
        check(Tensor[Int, 3], np.array([1, -3_000_000_000, 2]))


@pytest.mark.filterwarnings("ignore:overflow encountered in cast")  # JAX's, for 1e39
def test_floats_of_another_width_are_rounded_as_jax_does_with_one_warning(monkeypatch):
    """One rule for NumPy's float64 and every other width (issue 26, item 4): arrays and NumPy
    scalars become the parameter's float dtype, rounded to nearest, as jax.numpy makes
    float64 inputs float32; the first conversion of each pair of dtypes says so."""
    monkeypatch.setattr(annotations, "_ROUNDING_WARNED", set())
    x = np.array([0.1, 1e-8, 3.3e38, 1e39])
    with pytest.warns(UserWarning, match=r"float64 arguments are converted to the float32 "
                                         r"parameters .*shown once"):
        out = check(Tensor[Float, 4], x)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, np.asarray(jnp.asarray(x, jnp.float32)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once: no second warning
        assert check(Tensor[Float, ()], np.float64(2.5)).dtype == np.float32
        assert check(Tensor[Float, 2], [0.5, 1.5]).dtype == np.float32  # Python: no warning
    with pytest.warns(UserWarning, match="float16 arguments are converted to the float32"):
        assert check(Tensor[Float, 2], np.ones(2, np.float16)).dtype == np.float32


def test_rank_and_static_dims():
    with pytest.raises(TypeError) as info:
        check(Tensor[Float, (2, 3)], np.ones(6, np.float32), name="w")
    assert str(info.value) == ("argument 'w': expected Tensor[(2, 3), float32], "
                               "got a float32 array of shape (6,)")
    with pytest.raises(TypeError, match=r"expected Tensor\[\(2, 3\), float32\], got a float32 "
                                        r"array of shape \(2, 4\)"):
        check(Tensor[Float, (2, 3)], np.ones((2, 4), np.float32))
    with pytest.raises(TypeError, match=r"expected Tensor\[\(\), float32\], got a float32 array "
                                        r"of shape \(1,\)"):
        check(Float, np.ones(1, np.float32))


def test_symbolic_dims_bind_across_the_arguments_of_one_call():
    symbols: dict[str, TypeVar] = {}
    tx = to_type(Tensor[Float, ("n", 784)], symbols)
    ty = to_type(Tensor[Float, ("n", 10)], symbols)
    bindings: dict = {}
    check_argument("x", tx, np.zeros((64, 784), np.float32), bindings)
    assert bindings == {symbols["n"]: 64}
    check_argument("y", ty, np.zeros((64, 10), np.float32), bindings)
    with pytest.raises(TypeError) as info:
        check_argument("y", ty, np.zeros((32, 10), np.float32), bindings)
    assert str(info.value) == (
        "argument 'y': expected Tensor[(n, 10), float32], got a float32 array of shape (32, 10); "
        "n is 32 at axis 0, but argument 'x' (axis 0) has n = 64")


def test_symbolic_dims_agree_within_one_argument_and_with_given_bindings():
    t = to_type(Tensor[Float, ("n", "n")])
    assert check_argument("m", t, np.eye(3, dtype=np.float32), {}).shape == (3, 3)
    with pytest.raises(TypeError, match=r"argument 'm': expected Tensor\[\(n, n\), float32\], "
                                        r"got a float32 array of shape \(3, 4\); "
                                        r"n is 4 at axis 1, but 3 at axis 0"):
        check_argument("m", t, np.ones((3, 4), np.float32), {})
    with pytest.raises(TypeError, match=r"n is 3 at axis 0, but n = 5 was fixed earlier"):
        check_argument("m", t, np.eye(3, dtype=np.float32), {t.shape[0]: 5})


def test_dtype_variables_bind_like_dims():
    d = TypeVar("d", Kind.BaseType)
    t = TensorType((2,), d)
    bindings: dict = {}
    assert check_argument("a", t, np.ones(2, np.int8), bindings).dtype == np.int8
    assert check_argument("b", t, [1, 2], {}).dtype == np.int32  # Python ints: int32
    with pytest.raises(TypeError, match=r"argument 'c': .*got a float32 array of shape \(2,\); "
                                        r"d is int8 elsewhere"):
        check_argument("c", t, np.ones(2, np.float32), bindings)


def test_tuples_are_checked_field_by_field():
    symbols: dict[str, TypeVar] = {}
    t = to_type(tuple[Tensor[Float, "n"], tuple[Int, Tensor[Float, "n"]]], symbols)
    out = check_argument("p", t, (np.ones(2, np.float32), (3, [1.0, 2.0])), {})
    assert isinstance(out, tuple) and out[1][0].dtype == np.int32 and out[1][1].shape == (2,)
    with pytest.raises(TypeError) as info:
        check_argument("p", t, (np.ones(2, np.float32), (3, np.ones(3, np.int64))), {})
    assert str(info.value) == (
        "argument 'p'[1][1]: expected Tensor[(n,), float32], got an int64 array of shape (3,); "
        "cast it with p[1][1].astype(np.float32)")
    with pytest.raises(TypeError, match=r"argument 'p'\[1\]\[1\]: .*n is 3 at axis 0, but "
                                        r"argument 'p'\[0\] \(axis 0\) has n = 2"):
        check_argument("p", t, (np.ones(2, np.float32), (3, np.ones(3, np.float32))), {})
    with pytest.raises(TypeError, match=r"argument 'p': expected \(Tensor.*\), got a tuple of "
                                        r"length 1"):
        check_argument("p", t, (np.ones(2, np.float32),), {})
    with pytest.raises(TypeError, match=r"got a list of shape \(2,\); pass a tuple"):
        check_argument("q", to_type(tuple[Int, Int]), [1, 2], {})


def test_functions_and_adts_pass_after_a_kind_check():
    fn_t = to_type(Fn[[Float], Float])
    with pytest.raises(TypeError, match="got a builtin_function_or_method; pass a @relay "
                                        "function or a relay operator"):
        check_argument("f", fn_t, abs, {})  # Python code cannot run inside a program
    with pytest.raises(TypeError, match=r"argument 'f': expected fn\(Tensor\[\(\), float32\]\) "
                                        r"-> Tensor\[\(\), float32\], got a float32 array"):
        check_argument("f", fn_t, np.ones(2, np.float32), {})

    mod = IRModule()
    list_t = to_type(List[Float])
    cons = dataclasses.make_dataclass("Value", ["constructor", "fields"])
    xs = cons(mod.get_constructor("Nil"), ())
    assert check_argument("xs", list_t, xs, {}) is xs
    with pytest.raises(TypeError, match=r"argument 'xs': expected List\[Tensor\[\(\), float32\]\]"
                                        r", got an Option value \(Some\)"):
        check_argument("xs", list_t, cons(mod.get_constructor("Some"), (1,)), {})
    with pytest.raises(TypeError, match=r"got a Python float \(1.0\)"):
        check_argument("xs", list_t, 1.0, {})


@settings(max_examples=60, deadline=None)
@given(shape=st.lists(st.integers(0, 4), max_size=4),
       dtype=st.sampled_from(["float16", "float32", "float64", "int8", "int32", "uint8", "bool"]),
       axis=st.integers(0, 3))
def test_property_fitting_arrays_pass_and_a_wrong_dim_fails(shape, dtype, axis):
    expected = TensorType(tuple(shape), dtype)
    value = np.zeros(shape, dtype)
    assert check_argument("x", expected, value, {}) is value
    if shape:
        wrong = list(shape)
        wrong[axis % len(shape)] += 1
        with pytest.raises(TypeError, match=re.escape(
                f"expected {type_to_str(expected)}, got {'an' if dtype[0] == 'i' else 'a'} "
                f"{dtype} array of shape {tuple(wrong)}")):
            check_argument("x", expected, np.zeros(wrong, dtype), {})


# ---- typeguard ----------------------------------------------------------------------------

@typechecked
def norm(x: Tensor[Float, (3,)]) -> Float:
    return np.float32(np.sqrt((x * x).sum()))


@typechecked
def head(x: Tensor[Float, ("n", 2)], y: Tensor[Float, "n"], k: Int) -> Tensor[Float, "n"]:
    return y[: int(k)]


@typechecked
def apply(f: Fn[[Float], Float], pair: tuple[Float, Tensor[Int, 2]]) -> Float:
    return f(pair[0])


@typechecked
def double(x: relaydsl.Tensor[relaydsl.Float, "n"]) -> relaydsl.Tensor[relaydsl.Float, "n"]:
    return x + x


def test_typeguard_reads_symbolic_dims_as_names_not_forward_references():
    # typeguard turns strings inside annotations into names ("n" -> n) except under Tensor.
    assert double(np.ones(4, np.float32)).shape == (4,)
    with pytest.raises(TypeCheckError, match=r"got a float64 array of shape \(4,\)"):
        double(np.ones(4))


def test_typeguard_accepts_and_rejects_tensors():
    assert norm(np.array([3, 4, 0], np.float32)) == 5
    with pytest.raises(TypeCheckError, match=r'argument "x" \(numpy.ndarray\) is not compatible '
                                             r"with Tensor\[Float, \(3,\)\]: got a float64 array "
                                             r"of shape \(3,\); cast it with .astype"):
        norm(np.ones(3))
    with pytest.raises(TypeCheckError, match=r"got a float32 array of shape \(4,\)"):
        norm(np.ones(4, np.float32))
    with pytest.raises(TypeCheckError, match=r"got a list of shape \(3,\); pass a NumPy array"):
        norm([1.0, 2.0, 3.0])


def test_typeguard_symbolic_dims_agree_within_a_call():
    x3, y3 = np.ones((3, 2), np.float32), np.ones(3, np.float32)
    assert head(x3, y3, 3).shape == (3,)
    assert head(np.ones((5, 2), np.float32), np.ones(5, np.float32), 5).shape == (5,)  # new call
    with pytest.raises(TypeCheckError, match=r'argument "y" .* n is 4 at axis 0, but an earlier '
                                             r"argument \(axis 0\) has n = 3"):
        head(x3, np.ones(4, np.float32), 3)
    with pytest.raises(TypeCheckError, match=r"the return value .* n is 1 at axis 0"):
        head(x3, y3, 1)


def test_typeguard_check_type_binds_within_one_value():
    for n in (1, 2, 3):
        check_type(np.ones(n, np.float32), Tensor[Float, "n"])
    check_type(np.ones((2, 2), np.float32), Tensor[Float, ("n", "n")])
    with pytest.raises(TypeCheckError, match=r"n is 3 at axis 1, but 2 at axis 0"):
        check_type(np.ones((2, 3), np.float32), Tensor[Float, ("n", "n")])
    check_type(2.0, Float)
    with pytest.raises(TypeCheckError, match="a bool cannot become float32"):
        check_type(True, Float)


def test_typeguard_functions_tuples_and_adts():
    assert apply(abs, (-2.0, np.zeros(2, np.int32))) == 2.0
    with pytest.raises(TypeCheckError, match=r'argument "f" \(int\) is not callable'):
        apply(1, (-2.0, np.zeros(2, np.int32)))
    with pytest.raises(TypeCheckError, match=r'item 1 of argument "pair" .* got an int64 array'):
        apply(abs, (-2.0, np.zeros(2, np.int64)))
    with pytest.raises(TypeCheckError, match=r"got a float32 array"):
        check_type(np.ones(2, np.float32), List[Float])


def test_typeguard_registration_is_idempotent():
    def ours():
        return [f for f in typeguard.checker_lookup_functions
                if getattr(f, "__name__", "") == "_typeguard_lookup"]

    assert len(ours()) == 1 and typeguard.checker_lookup_functions[0] is ours()[0]
    annotations._register_typeguard_checker()
    annotations._keep_tensor_strings_in_typeguard()
    assert len(ours()) == 1
    names = typeguard._transformer.literal_names
    assert names.count("relaydsl.Tensor") == 1


def test_registration_replaces_a_stale_checker_from_an_earlier_import():
    def _typeguard_lookup(origin_type, args, extras):  # what a reload leaves behind
        return None

    _typeguard_lookup.__module__ = annotations.__name__
    typeguard.checker_lookup_functions.append(_typeguard_lookup)
    annotations._register_typeguard_checker()
    lookups = [f for f in typeguard.checker_lookup_functions
               if getattr(f, "__name__", "") == "_typeguard_lookup"]
    assert lookups == [annotations._typeguard_lookup]
