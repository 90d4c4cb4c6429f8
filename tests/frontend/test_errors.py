"""Errors of the @relay frontend: each at the user's file, line and column, with advice.

A line a test expects an error on carries a marker comment ``# <-- name``; `marked(name)`
finds it, so the expected line numbers follow the file when it is edited.
"""
from __future__ import annotations

import ast
import functools
import inspect
import textwrap
from pathlib import Path

import numpy as np
import pytest

from relaydsl import Bool, DSLSyntaxError, Float, Int, Tensor, relay
from relaydsl.errors import RelayError, RelayTypeError

THIS_FILE = str(Path(__file__).resolve())


@functools.cache
def _lines() -> list[str]:
    return Path(THIS_FILE).read_text().splitlines()


def marked(name: str) -> tuple[int, str]:
    """The 1-based line number and the text of the one line marked ``# <-- name``."""
    hits = [(i + 1, text) for i, text in enumerate(_lines()) if text.endswith(f"# <-- {name}")]
    assert len(hits) == 1, f"marker {name!r} found {len(hits)} times"
    return hits[0]


def assert_located(error: RelayError, name: str, construct: str) -> None:
    """`error` points at `construct` on the line marked `name`: file:line:col, the source line
    and a caret under the construct."""
    line, text = marked(name)
    col = text.index(construct) + 1
    assert error.span is not None
    assert (Path(error.span.file).resolve(), error.span.line, error.span.col) == (
        Path(THIS_FILE), line, col), str(error)
    message = str(error)
    assert message.startswith(f"{error.span.file}:{line}:{col}: ")
    assert f"\n    {text}\n    {' ' * (col - 1)}^" in message


def syntax_error(define) -> DSLSyntaxError:
    with pytest.raises(DSLSyntaxError) as info:
        define()
    assert isinstance(info.value, SyntaxError)  # what `except SyntaxError` catches
    return info.value


def test_the_errors_are_exported_where_users_look_for_them():
    assert relay.DSLSyntaxError is DSLSyntaxError and issubclass(DSLSyntaxError, SyntaxError)
    assert relay.RelayTypeError is RelayTypeError and issubclass(RelayTypeError, TypeError)


# ---- constructs outside the subset, one decorated function each ----------------------------


def uses_try():
    @relay
    def f(x: Float) -> Float:
        try:  # <-- try
            y = x
        except ValueError:
            y = x
        return y


def uses_with():
    @relay
    def f(x: Float) -> Float:
        with x:  # <-- with
            y = x
        return y


def uses_global():
    @relay
    def f(x: Float) -> Float:
        global y  # <-- global
        return x


def uses_nonlocal():
    y = 1.0

    @relay
    def f(x: Float) -> Float:
        nonlocal y  # <-- nonlocal
        return x

    return y


def uses_yield():
    @relay
    def f(x: Float) -> Float:
        yield x  # <-- yield
        return x


def uses_nested_async_def():
    @relay
    def f(x: Float) -> Float:
        async def g(y):  # <-- async
            return y

        return x


def uses_class():
    @relay
    def f(x: Float) -> Float:
        class Point:  # <-- class
            pass

        return x


def uses_starred_argument():
    @relay
    def f(x: Tensor[Float, 3]) -> Float:
        return relay.sum(*x)  # <-- starred


def uses_double_star_kwargs():
    options = {"axis": 0}

    @relay
    def f(x: Tensor[Float, 3]) -> Float:
        return relay.sum(x, **options)  # <-- kwargs


def uses_dict_comprehension():
    @relay
    def f(x: Tensor[Float, 3]) -> Float:
        d = {i: x for i in range(3)}  # <-- dictcomp
        return x


def uses_set_comprehension():
    @relay
    def f(x: Tensor[Float, 3]) -> Float:
        d = {x for i in range(3)}  # <-- setcomp
        return x


def uses_list_comprehension():
    @relay
    def f(x: Tensor[Float, 3]) -> Float:
        return [y * 2.0 for y in x]  # <-- listcomp


def uses_attribute_assignment():
    @relay
    def f(x: Tensor[Float, 3]) -> Tensor[Float, 3]:
        x.a = 1  # <-- attribute assignment
        return x


def uses_subscript_assignment():
    @relay
    def f(x: Tensor[Float, 3]) -> Tensor[Float, 3]:
        x[0] = 1.0  # <-- subscript assignment
        return x


def uses_del():
    @relay
    def f(x: Tensor[Float, 3]) -> Tensor[Float, 3]:
        y = x
        del y  # <-- del
        return x


def uses_raise():
    @relay
    def f(x: Tensor[Float, 3]) -> Tensor[Float, 3]:
        raise ValueError("no")  # <-- raise


def uses_assert():
    @relay
    def f(x: Tensor[Float, 3]) -> Tensor[Float, 3]:
        assert x  # <-- assert
        return x


def uses_import():
    @relay
    def f(x: Tensor[Float, 3]) -> Tensor[Float, 3]:
        import math  # <-- import
        return x


def uses_break():
    @relay
    def f(x: Tensor[Float, 3]) -> Tensor[Float, 3]:
        for i in range(3):
            break  # <-- break
        return x


def uses_continue():
    @relay
    def f(x: Tensor[Float, 3]) -> Tensor[Float, 3]:
        while relay.sum(x) < 10.0:
            x = x + 1.0
            continue  # <-- continue
        return x


def uses_lambda_with_defaults():
    @relay
    def f(x: Tensor[Float, 3]) -> Tensor[Float, 3]:
        g = lambda y=1.0: y  # <-- lambda default
        return x


def misses_a_parameter_annotation():
    @relay
    def f(x: Tensor[Float, 3], y) -> Tensor[Float, 3]:  # <-- annotation
        return x


def misses_a_return():
    @relay
    def f(x: Tensor[Float, 3], c: Bool) -> Tensor[Float, 3]:  # <-- missing return
        if c:
            return x
        y = x


def has_unreachable_code():
    @relay
    def f(x: Tensor[Float, 3]) -> Tensor[Float, 3]:
        return x
        x = x + 1.0  # <-- unreachable


def returns_inside_a_loop():
    @relay
    def f(x: Tensor[Float, 3]) -> Tensor[Float, 3]:
        for i in range(3):
            return x  # <-- return in loop
        return x


def misspells_an_operator():
    @relay
    def f(x: Tensor[Float, 3]) -> Tensor[Float, 3]:
        return relay.sofmax(x)  # <-- sofmax


def passes_a_non_constant_attribute():
    @relay
    def f(x: Tensor[Float, (2, 3)], axis: Int) -> Tensor[Float, 3]:
        return relay.sum(x, axis=axis)  # <-- attribute


def assigns_in_one_branch_only():
    @relay
    def f(x: Tensor[Float, 3], c: Bool) -> Tensor[Float, 3]:
        if c:
            y = x * 2.0
        return y  # <-- one branch


def uses_the_loop_variable_after_the_loop():
    @relay
    def f(x: Tensor[Float, 3]) -> Int:
        for i in range(3):
            x = x + 1.0
        return i  # <-- loop variable


def uses_a_name_first_assigned_in_a_loop_after_it():
    @relay
    def f(x: Tensor[Float, (2, 3)]) -> Tensor[Float, 3]:
        for row in x:
            last = row
        return last  # <-- loop local


def uses_a_local_before_assignment_in_a_closure():
    @relay
    def f(x: Tensor[Float, 3]) -> Tensor[Float, 3]:
        def g(y):
            return y + k  # <-- later local

        k = x * 2.0
        return g(x)


def rebinds_a_name_a_nested_def_captured():
    @relay
    def f(x: Tensor[Float, 3]) -> Tensor[Float, 3]:
        def add_x(y):
            return y + x

        x = x * 2.0  # <-- captured by def
        return add_x(x)


def rebinds_a_name_a_lambda_captured_in_a_loop():
    @relay
    def f(x: Float) -> Float:
        g = lambda: x
        for i in range(3):
            x = x + g()  # <-- captured by lambda
        return x


def reads_a_local_of_a_nested_def_before_assigning_it():
    @relay
    def f(x: Float) -> Float:
        def g(y):
            z = x + y  # <-- unbound local
            x = z
            return x

        return g(x)


def has_code_after_an_if_whose_branches_all_return():
    @relay
    def f(x: Float, c: Bool) -> Float:
        if c:
            return x
        else:
            return -x
        y = x  # <-- after returns
        return y


def reads_an_attribute_of_a_value():
    @relay
    def f(x: Tensor[Float, 3]) -> Tensor[Float, 3]:
        return x.shape  # <-- value attribute


def calls_a_method_of_a_value():
    @relay
    def f(x: Tensor[Float, 3]) -> Float:
        return x.sum()  # <-- method


def slices_with_a_tensor_bound():
    @relay
    def f(x: Tensor[Float, 3], i: Int) -> Tensor[Float, 3]:
        return x[i:]  # <-- dynamic slice


def ranges_over_a_float():
    @relay
    def f(x: Tensor[Float, 3]) -> Tensor[Float, 3]:
        for i in range(2.5):  # <-- float range
            x = x + 1.0
        return x


def assigns_in_a_chain():
    @relay
    def f(x: Tensor[Float, 3]) -> Tensor[Float, 3]:
        a = b = x  # <-- chained
        return a


def uses_the_walrus_operator():
    @relay
    def f(x: Tensor[Float, 3]) -> Tensor[Float, 3]:
        return (y := x)  # <-- walrus


def floor_divides_a_tensor():
    @relay
    def f(x: Tensor[Float, 3]) -> Tensor[Float, 3]:
        return x // 2.0  # <-- floordiv


def calls_a_python_builtin():
    @relay
    def f(x: Tensor[Float, 3]) -> Int:
        return len(x)  # <-- builtin


def calls_a_numpy_function():
    @relay
    def f(x: Tensor[Float, 3]) -> Float:
        return np.sum(x)  # <-- numpy


def passes_keywords_to_a_decorated_function():
    @relay
    def g(x: Tensor[Float, 3]) -> Tensor[Float, 3]:
        return x

    @relay
    def f(x: Tensor[Float, 3]) -> Tensor[Float, 3]:
        return g(x=x)  # <-- keyword call


def decorates_a_nested_function():
    @relay
    def f(x: Tensor[Float, 3]) -> Tensor[Float, 3]:
        @relay  # <-- nested decorator
        def g(y):
            return y

        return g(x)


def gives_a_parameter_a_default():
    @relay
    def f(x: Tensor[Float, 3], y: Float = 1.0) -> Tensor[Float, 3]:  # <-- default
        return x


def uses_star_args():
    @relay
    def f(x: Tensor[Float, 3], *rest: Float) -> Tensor[Float, 3]:  # <-- star args
        return x


def has_a_loop_else():
    @relay
    def f(x: Tensor[Float, 3]) -> Tensor[Float, 3]:
        for i in range(2):
            x = x + 1.0
        else:
            x = x * 2.0  # <-- loop else
        return x


def computes_a_huge_integer():
    @relay
    def f(x: Int) -> Int:
        big = 2 ** 40  # <-- int32 overflow
        return x + big


def divides_constants_by_zero():
    @relay
    def f(x: Float) -> Float:
        return x + 1.0 / 0  # <-- zero division


def computes_a_complex_constant():
    @relay
    def f(x: Float) -> Float:
        return x * (-8) ** 0.5  # <-- complex


def indexes_a_tuple_with_a_tensor():
    @relay
    def f(x: Tensor[Float, 3], i: Int) -> Tensor[Float, 3]:
        t = (x, x)
        return t[i]  # <-- tuple index


def indexes_a_tuple_out_of_range_from_the_end():
    @relay
    def f(x: Tensor[Float, 3]) -> Tensor[Float, 3]:
        t = (x, x)
        return t[-3]  # <-- negative tuple index


def unpacks_a_tensor():
    @relay
    def f(x: Tensor[Float, (2, 3)]) -> Tensor[Float, 3]:
        a, b = x  # <-- unpack tensor
        return a


def unpacks_the_wrong_number_of_names():
    @relay
    def f(x: Tensor[Float, 3]) -> Tensor[Float, 3]:
        a, b, c = x, x  # <-- unpack count
        return a


def unpacks_the_rows_of_a_tensor_in_a_loop():
    @relay
    def f(x: Tensor[Float, (2, 3)]) -> Tensor[Float, (2, 3)]:
        for a, b in x:  # <-- loop unpack
            x = x + 1.0
        return x


def gives_a_constructor_too_few_fields():
    @relay
    def f(x: Tensor[Float, 3]):
        return relay.Cons(x)  # <-- constructor arity


def calls_an_operator_with_too_few_arguments():
    @relay
    def f(x: Tensor[Float, 3]) -> Tensor[Float, 3]:
        return relay.add(x)  # <-- operator arity


def gives_an_unknown_attribute():
    @relay
    def f(x: Tensor[Float, 3]) -> Float:
        return relay.sum(x, keep_dims=True)  # <-- unknown attribute


def uses_a_string():
    @relay
    def f(x: Tensor[Float, 3]) -> Tensor[Float, 3]:
        return x + "one"  # <-- string


def annotates_a_local_badly():
    @relay
    def f(x: Tensor[Float, 3]) -> Tensor[Float, 3]:
        y: Tensor[Float, (-1,)] = x  # <-- bad annotation
        return y


def declares_without_a_value():
    @relay
    def f(x: Tensor[Float, 3]) -> Tensor[Float, 3]:
        y: Tensor[Float, 3]  # <-- declaration
        return x


def passes_an_operator_needing_attributes_as_a_value():
    @relay
    def f(xs: relay.List[Tensor[Float, 3]]):
        return relay.map(relay.reshape, xs)  # <-- operator value


CASES = [
    # (define, marker, construct at the caret, advice in the message)
    (uses_try, "try", "try", "check conditions with `if`"),
    (uses_with, "with", "with", "`with` is not supported"),
    (uses_global, "global", "global", "pass the value as an argument"),
    (uses_nonlocal, "nonlocal", "nonlocal", "return the new value instead"),
    (uses_yield, "yield", "yield", "generators are not supported"),
    (uses_nested_async_def, "async", "async", "use a plain nested `def`"),
    (uses_class, "class", "class", "define ADTs at module level"),
    (uses_starred_argument, "starred", "*x", "pass each argument"),
    (uses_double_star_kwargs, "kwargs", "**options", "`**kwargs` arguments are not supported"),
    (uses_dict_comprehension, "dictcomp", "{i: x", "dict comprehensions are not supported"),
    (uses_set_comprehension, "setcomp", "{x for", "set comprehensions are not supported"),
    (uses_list_comprehension, "listcomp", "[y * 2.0", "use a `for` loop or relay.map"),
    (uses_attribute_assignment, "attribute assignment", "x.a", "build a new value instead"),
    (uses_subscript_assignment, "subscript assignment", "x[0]", "build a new value instead"),
    (uses_del, "del", "del", "simply stop using the name"),
    (uses_raise, "raise", "raise", "exceptions are not part of the language"),
    (uses_assert, "assert", "assert", "check the inputs before calling the function"),
    (uses_import, "import", "import", "import at module level"),
    (uses_break, "break", "break", "put the exit test in a `while` condition"),
    (uses_continue, "continue", "continue", "use `if` around the rest of the body"),
    (uses_lambda_with_defaults, "lambda default", "lambda", "pass every argument explicitly"),
    (misses_a_parameter_annotation, "annotation", "y)", "parameter 'y' needs a type annotation"),
    (misses_a_return, "missing return", "def", "end every path with `return ...`"),
    (has_unreachable_code, "unreachable", "x = x", "unreachable code after `return`"),
    (returns_inside_a_loop, "return in loop", "return", "return it after the loop"),
    (misspells_an_operator, "sofmax", "relay.sofmax", "Did you mean softmax"),
    (passes_a_non_constant_attribute, "attribute", "axis)", "must be a constant"),
    (assigns_in_one_branch_only, "one branch", "y  #", "assign it before the `if` or in every"),
    (uses_the_loop_variable_after_the_loop, "loop variable", "i  #", "not defined after it"),
    (uses_a_name_first_assigned_in_a_loop_after_it, "loop local", "last  #",
     "initialise it before the loop"),
    (uses_a_local_before_assignment_in_a_closure, "later local", "k  #",
     "'k' is used before it is assigned"),
    (rebinds_a_name_a_nested_def_captured, "captured by def", "x =",
     "'x' is assigned after the function 'add_x' (line"),
    (rebinds_a_name_a_lambda_captured_in_a_loop, "captured by lambda", "x =",
     "a Relay closure keeps the value it captured"),
    (reads_a_local_of_a_nested_def_before_assigning_it, "unbound local", "x +",
     "'x' is used before it is assigned"),
    (has_code_after_an_if_whose_branches_all_return, "after returns", "y = x",
     "every branch above ends in `return`"),
    (reads_an_attribute_of_a_value, "value attribute", "x.shape", "use relay.shape_of(x)"),
    (calls_a_method_of_a_value, "method", "x.sum", "call an operator instead"),
    (slices_with_a_tensor_bound, "dynamic slice", "i:", "slice bounds are constant ints"),
    (ranges_over_a_float, "float range", "2.5", "the bounds of range are ints"),
    (assigns_in_a_chain, "chained", "a = b", "assign once"),
    (uses_the_walrus_operator, "walrus", "y :=", "assign in a separate statement"),
    (floor_divides_a_tensor, "floordiv", "x // 2.0", "FloorDiv is not supported on tensors"),
    (calls_a_python_builtin, "builtin", "len(x)", "use relay operators"),
    (calls_a_numpy_function, "numpy", "np.sum", "cannot be used as a value"),
    (passes_keywords_to_a_decorated_function, "keyword call", "x=x",
     "keyword arguments are only for relay operators"),
    (decorates_a_nested_function, "nested decorator", "relay", "cannot be decorated"),
    (gives_a_parameter_a_default, "default", "1.0", "default parameter values"),
    (uses_star_args, "star args", "rest", "list each parameter"),
    (has_a_loop_else, "loop else", "x = x", "`else` on a loop is not supported"),
    (computes_a_huge_integer, "int32 overflow", "2 ** 40", "does not fit in int32"),
    (divides_constants_by_zero, "zero division", "1.0 / 0", "division by zero"),
    (computes_a_complex_constant, "complex", "(-8) ** 0.5", "only real numbers"),
    (indexes_a_tuple_with_a_tensor, "tuple index", "i]", "indexed by a constant int"),
    (indexes_a_tuple_out_of_range_from_the_end, "negative tuple index", "-3",
     "tuple index -3 is out of range: the tuple has 2 fields"),
    (unpacks_a_tensor, "unpack tensor", "a, b", "index its rows"),
    (unpacks_the_wrong_number_of_names, "unpack count", "a, b, c",
     "cannot unpack a tuple of 2 fields into 3 names"),
    (unpacks_the_rows_of_a_tensor_in_a_loop, "loop unpack", "a, b", "`for row in x:`"),
    (gives_a_constructor_too_few_fields, "constructor arity", "relay.Cons(x)",
     "Cons takes 2 arguments, got 1"),
    (calls_an_operator_with_too_few_arguments, "operator arity", "relay.add(x)",
     "add: missing input 'rhs' (inputs lhs, rhs; given: lhs)"),
    (gives_an_unknown_attribute, "unknown attribute", "relay.sum", "unknown attribute(s)"),
    (uses_a_string, "string", '"one"', "only numbers and arrays can be values"),
    (annotates_a_local_badly, "bad annotation", "Tensor[Float, (-1,)]", "negative dimension"),
    (declares_without_a_value, "declaration", "y:", "assign a value"),
    (passes_an_operator_needing_attributes_as_a_value, "operator value", "relay.reshape",
     "wrap the call in a lambda"),
]


@pytest.mark.parametrize(("define", "marker", "construct", "advice"), CASES,
                         ids=[case[1] for case in CASES])
def test_constructs_outside_the_subset_are_located_with_advice(define, marker, construct,
                                                                advice):
    error = syntax_error(define)
    assert_located(error, marker, construct)
    assert advice in error.raw_message


def test_every_unsupported_statement_kind_has_a_case():
    """Each statement the translator refuses by kind is exercised above."""
    from relaydsl.frontend.translate.unsupported import UNSUPPORTED_STATEMENTS

    tested = {type(node) for define, *_ in CASES
              for node in ast.walk(ast.parse(textwrap.dedent(inspect.getsource(define))))}
    untested = {kind.__name__ for kind in UNSUPPORTED_STATEMENTS} - {
        kind.__name__ for kind in tested}
    assert untested <= {"ImportFrom", "AsyncFor", "AsyncWith"}


def write_module(tmp_path: Path, name: str, body_lines: list[str]) -> Path:
    """A module file defining `f` with `body_lines`, for functions too long to write here."""
    path = tmp_path / f"{name}.py"
    head = ["import numpy as np", "from relaydsl import Bool, Float, Tensor, relay", "",
            "def f(x: Tensor[Float, 3], c: Bool) -> Tensor[Float, 3]:"]
    path.write_text("\n".join(head + [f"    {line}" for line in body_lines]) + "\n")
    return path


def load_function(path: Path):
    import importlib.util

    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.f


def test_a_long_straight_line_function_translates(tmp_path):
    f = relay(load_function(write_module(tmp_path, "long", ["x = x + 1.0"] * 2000
                                         + ["return x"])))
    np.testing.assert_array_equal(f(np.zeros(3, np.float32), True), np.full(3, 2000.0))


# ---- unknown names are found when the module is built ----------------------------------------


def test_a_name_the_file_binds_nowhere_is_reported_when_the_function_is_decorated():
    def f(x: Tensor[Float, 3]) -> Tensor[Float, 3]:
        return helper_defined_nowhere(x)  # <-- unknown name

    # no statement of this file binds the name: no later definition can give it
    with pytest.raises(DSLSyntaxError) as info:
        relay(f)
    assert_located(info.value, "unknown name", "helper_defined_nowhere")
    assert "name 'helper_defined_nowhere' is not defined" in str(info.value)


def test_a_later_name_that_is_not_a_decorated_function_is_reported():
    @relay
    def f(x: Tensor[Float, 3]) -> Tensor[Float, 3]:
        return later(x)  # <-- not decorated

    def later(y):
        return y

    with pytest.raises(DSLSyntaxError) as info:
        f.checked_type
    assert_located(info.value, "not decorated", "later")
    assert "not a decorated function" in str(info.value)


# ---- type errors point at the user's line and show both types ---------------------------------


def test_a_broadcast_mismatch_points_at_the_operator_and_shows_both_types():
    def f(x: Tensor[Float, (2, 3)], y: Tensor[Float, (3, 3)]) -> Tensor[Float, (2, 3)]:
        z = x * 2.0
        return z + y  # <-- broadcast

    with pytest.raises(RelayTypeError) as info:
        relay(f).checked_type
    assert isinstance(info.value, TypeError)
    assert_located(info.value, "broadcast", "z + y")
    assert "Tensor[(2, 3), float32]" in str(info.value)
    assert "Tensor[(3, 3), float32]" in str(info.value)


def test_a_result_that_does_not_match_the_declared_type_points_at_the_return():
    def f(x: Tensor[Float, (2, 3)]) -> Tensor[Float, (3, 3)]:
        y = x * 2.0
        return y + 1.0  # <-- declared result

    with pytest.raises(RelayTypeError) as info:
        relay(f).checked_type
    assert_located(info.value, "declared result", "y + 1.0")
    assert "Tensor[(2, 3), float32]" in str(info.value)
    assert "Tensor[(3, 3), float32]" in str(info.value)


def test_branches_of_different_types_point_at_the_disagreeing_value():
    def f(x: Tensor[Float, (2, 3)], c: Bool) -> Tensor[Float, (2, 3)]:
        if c:
            y = x
        else:
            y = relay.sum(x)  # <-- branch type
        return y

    with pytest.raises(RelayTypeError) as info:
        relay(f).checked_type
    assert_located(info.value, "branch type", "relay.sum(x)")
    assert "Tensor[(), float32]" in str(info.value)
    assert "Tensor[(2, 3), float32]" in str(info.value)


def test_a_loop_that_changes_a_variables_type_points_at_the_assignment():
    def f(x: Tensor[Float, (2, 3)], n: Int) -> Tensor[Float, (2, 3)]:
        for i in range(n):
            x = relay.sum(x, axis=0)  # <-- loop type
        return x

    with pytest.raises(RelayTypeError) as info:
        relay(f).checked_type
    assert_located(info.value, "loop type", "relay.sum(x, axis=0)")
    assert "Tensor[(3,), float32]" in str(info.value)


def test_indexing_a_parameter_inference_finds_no_tuple_or_tensor_names_its_type():
    # what `p[i]` means for an unannotated parameter is decided by its type (issue 22, item 7)
    def f(xs: relay.List[Float]) -> Float:
        first = lambda p: p[0]  # <-- list index
        return first(xs)

    with pytest.raises(RelayTypeError) as info:
        relay(f).checked_type
    assert_located(info.value, "list index", "p[0]")
    assert "indexing with [0] needs a tuple or a tensor, got List[Tensor[(), float32]]" \
        in str(info.value)

    def g(t: tuple[Float, Float]) -> Float:
        third = lambda p: p[2]  # <-- tuple index past the end
        return third(t)

    with pytest.raises(RelayTypeError) as info:
        relay(g).checked_type
    assert_located(info.value, "tuple index past the end", "p[2]")
    assert "tuple index 2 is out of range: the tuple has 2 fields" in str(info.value)


def test_a_bad_attribute_value_points_at_the_call():
    def f(x: Tensor[Float, (2, 3)]) -> Tensor[Float, (4, 4)]:
        return relay.reshape(x, newshape=(4, 4))  # <-- reshape

    with pytest.raises(RelayTypeError) as info:
        relay(f).checked_type
    assert_located(info.value, "reshape", "relay.reshape")
    assert "(4, 4)" in str(info.value) and "Tensor[(2, 3), float32]" in str(info.value)


def test_a_wrongly_typed_argument_to_a_decorated_function_names_both_types():
    @relay
    def g(x: Tensor[Float, (2, 3)]) -> Tensor[Float, (2, 3)]:
        return x
    def f(x: Tensor[Float, (3, 3)]) -> Tensor[Float, (2, 3)]:
        return g(x * 1.0)  # <-- callee argument

    with pytest.raises(RelayTypeError) as info:
        relay(f).checked_type
    assert_located(info.value, "callee argument", "x * 1.0")
    assert "Tensor[(2, 3), float32]" in str(info.value)
    assert "Tensor[(3, 3), float32]" in str(info.value)


def test_an_error_on_a_bare_variable_points_at_the_expression_using_it():
    # A Var node is shared by all its uses (its own span is its binding), so the error
    # points at the construct using it: the `if`, the call.
    def f(x: Tensor[Float, (2, 3)], c: Float) -> Tensor[Float, (2, 3)]:
        if c:  # <-- bare condition
            return x
        return x

    with pytest.raises(RelayTypeError) as info:
        relay(f).checked_type
    assert_located(info.value, "bare condition", "if c")
    assert "Tensor[(), bool]" in str(info.value) and "Tensor[(), float32]" in str(info.value)

    @relay
    def g(v: Tensor[Float, 3]) -> Tensor[Float, 3]:
        return v
    def h(w: Tensor[Float, 4]) -> Tensor[Float, 3]:
        return g(w)  # <-- bare argument

    with pytest.raises(RelayTypeError) as info:
        relay(h).checked_type
    assert_located(info.value, "bare argument", "g(w)")


# ---- odd inputs never escape as internal errors -------------------------------------------------


def odd_programs():
    """Functions (not yet decorated) that the compiler must accept or reject cleanly."""

    def tuple_slice(x: Tensor[Float, 3]):
        t = (x, x)
        return t[0:1]

    def index_with_none(x: Tensor[Float, 3]):
        return x[None]

    def index_with_ellipsis(x: Tensor[Float, (2, 3)]):
        return x[...]

    def index_too_deep(x: Tensor[Float, (2, 3)]):
        return x[0][0][0]

    def zero_slice_step(x: Tensor[Float, 3]):
        return x[::0]

    def call_a_number(x: Float):
        return x(1.0)

    def shadowed_range(x: Float):
        range = 3
        for i in range(2):
            x = x + 1.0
        return x

    def range_as_value(x: Float):
        r = range(3)
        return x

    def range_with_keywords(x: Float):
        for i in range(stop=3):
            x = x + 1.0
        return x

    def range_unpacked(x: Float):
        for i, j in range(3):
            x = x + 1.0
        return x

    def relay_namespace_as_value(x: Float):
        return relay

    def annotation_as_value(x: Float):
        return Tensor

    def dtype_marker_called(x: Float):
        return Float(x)

    def empty_list(x: Float):
        return []

    def return_none(x: Float):
        return None

    def bare_return(x: Float):
        return

    def ellipsis_body(x: Float):
        ...

    def string_index(x: Tensor[Float, 3]):
        return x["a"]

    def condition_is_a_tensor(x: Tensor[Float, 3]):
        if x:
            return x
        return x

    def bitwise_on_tensors(x: Tensor[Int, 3]):
        return x & x

    def membership_test(x: Tensor[Float, 3]):
        return x in x

    def identity_test(x: Tensor[Float, 3]):
        return x is x

    def invert_a_tensor(x: Tensor[Bool, 3]):
        return ~x

    def fstring(x: Float):
        return f"{x}"

    def subscript_loop_target(x: Tensor[Float, (2, 3)]):
        for x[0] in x:
            pass
        return x

    def nested_loop_target(x: Tensor[Float, (2, 3)]):
        for (a, b), c in (x, x):
            pass
        return x

    def annotation_names_a_local(x: Float):
        T = x
        y: T = x
        return y

    def undefined_annotation(x: Float):
        y: not_defined_anywhere = x
        return y

    def attribute_of_an_expression(x: Tensor[Float, 3]):
        return (x + x).shape

    def attribute_of_a_module_value(x: Float):
        return np.pi_is_not_here

    def dict_literal(x: Float):
        return {"x": x}

    def set_literal(x: Float):
        return {x}

    def generator(x: Tensor[Float, 3]):
        return relay.sum(y for y in x)

    def match_with_guard(xs: relay.List[Float]) -> Float:
        match xs:
            case relay.Cons(h, _) if h:
                return h
            case _:
                return 0.0

    def match_on_a_non_constructor(xs: relay.List[Float]) -> Float:
        match xs:
            case np.ndarray():
                return 0.0
            case _:
                return 1.0

    def nested_def_with_star_args(x: Float):
        def g(*ys):
            return x

        return g(x)

    return [tuple_slice, index_with_none, index_with_ellipsis, index_too_deep, zero_slice_step,
            call_a_number, shadowed_range, range_as_value, range_with_keywords, range_unpacked,
            relay_namespace_as_value, annotation_as_value, dtype_marker_called, empty_list,
            return_none, bare_return, ellipsis_body, string_index, condition_is_a_tensor,
            bitwise_on_tensors, membership_test, identity_test, invert_a_tensor, fstring,
            subscript_loop_target, nested_loop_target, annotation_names_a_local,
            undefined_annotation, attribute_of_an_expression, attribute_of_a_module_value,
            dict_literal, set_literal, generator, match_with_guard, match_on_a_non_constructor,
            nested_def_with_star_args]


@pytest.mark.parametrize("pyfunc", odd_programs(), ids=lambda f: f.__name__)
def test_odd_programs_fail_with_a_located_user_error(pyfunc):
    with pytest.raises((DSLSyntaxError, RelayTypeError)) as info:
        relay(pyfunc).checked_type
    error = info.value
    assert error.span is not None and Path(error.span.file).resolve() == Path(THIS_FILE)
    assert error.span.source_line is not None and "^" in str(error)


def test_literal_conditions_and_operators_on_numbers_follow_python():
    @relay
    def f(x: Int) -> tuple[Int, Bool, Int]:
        if 1:
            y = x + ~5
        else:
            y = x
        while 0:
            y = y + 1
        return y, not 0, 7 // 2 + 7 % 4

    assert [int(v) for v in f(10)] == [10 + ~5, True, 3 + 3]


def test_a_wrong_return_annotation_on_a_loop_result_is_located_at_the_loop():
    # issue 11, item 16: the loop's result projections had no span, so the error came without
    # file:line:col (only "in: %loop_result1.0")
    def define_for():
        @relay
        def summed(x: Tensor[Float, 3]) -> Int:
            for _ in range(3):  # <-- for loop result
                x = x + 1.0
            return x
        return summed

    def define_while():
        @relay
        def grown(x: Tensor[Float, 3]) -> Int:
            while relay.sum(x) < 10.0:  # <-- while loop result
                x = x + 1.0
            return x
        return grown

    for define, name, construct in ((define_for, "for loop result", "for"),
                                    (define_while, "while loop result", "while")):
        with pytest.raises(RelayTypeError) as info:
            define()(np.ones(3, np.float32))
        assert_located(info.value, name, construct)
        assert ("the function returns Tensor[(3,), float32], but its return annotation is "
                "Tensor[(), int32]") in str(info.value)


def test_a_wrong_return_annotation_is_reported_as_such_with_both_types():
    # issue 11, item 16: the declared result was pushed into the operator computing it, which
    # then reported the mismatch as its own ("multiply: result type ...")
    def scaled(x: Tensor[Float, 3]) -> Int:
        return x * 2.0  # <-- wrong return annotation
    def outer(x: Tensor[Float, 3]) -> Tensor[Float, 3]:
        def inner(y: Tensor[Float, 3]) -> Float:
            return relay.tanh(y)  # <-- wrong nested return annotation

        return x * inner(x)

    for f, name, construct, types in (
            (scaled, "wrong return annotation", "x * 2.0",
             ("Tensor[(3,), float32]", "Tensor[(), int32]")),
            (outer, "wrong nested return annotation", "relay.tanh(y)",
             ("Tensor[(3,), float32]", "Tensor[(), float32]"))):
        with pytest.raises(RelayTypeError) as info:
            relay(f)(np.ones(3, np.float32))
        assert_located(info.value, name, construct)
        assert (f"the function returns {types[0]}, but its return annotation is {types[1]}"
                in str(info.value))


def test_an_operator_result_of_the_wrong_type_is_reported_by_the_context_expecting_it():
    # The same for a decorated function's parameter annotation and an if's condition: the
    # context that expects a type reports it, not the operator computing the value.
    @relay
    def takes_four(v: Tensor[Float, 4]) -> Tensor[Float, 4]:
        return v
    def passes(x: Tensor[Float, 3]) -> Tensor[Float, 4]:
        return takes_four(x * 2.0)  # <-- computed argument
    def tests(x: Tensor[Float, 3]) -> Tensor[Float, 3]:
        if relay.sum(x):  # <-- computed condition
            return x
        return x

    for f, name, construct, text in (
            (passes, "computed argument", "x * 2.0",
             "argument 0 of @takes_four: expected Tensor[(4,), float32], "
             "got Tensor[(3,), float32]"),
            (tests, "computed condition", "relay.sum(x)",
             "the condition of an if: expected Tensor[(), bool], got Tensor[(), float32]")):
        with pytest.raises(RelayTypeError) as info:
            relay(f)(np.ones(3, np.float32))
        assert_located(info.value, name, construct)
        assert text in str(info.value)


def test_a_local_function_whose_parameter_types_nothing_fixes_is_named_with_advice():
    # issue 11, item 16: used (so kept) but never called, its parameter's type is unknown; the
    # message named the internal operator of the literal (cast_like). Type errors are
    # reported when a function is decorated: relay(f) inside the raises block
    def f(x: Tensor[Float, 3]) -> Tensor[Float, 3]:
        def g(y):  # <-- uncalled def
            return y * 2.0

        pair = (g, x)
        return pair[1]
    def h(x: Tensor[Float, 3]) -> Tensor[Float, 3]:
        pair = (lambda y: y + 1.0, x)  # <-- uncalled lambda
        return pair[1]

    for fn, name, construct, text in (
            (f, "uncalled def", "def g", "parameter y of the function %g"),
            (h, "uncalled lambda", "lambda", "parameter y of a lambda")):
        with pytest.raises(RelayTypeError) as info:
            relay(fn)(np.ones(3, np.float32))
        assert_located(info.value, name, construct)
        message = str(info.value)
        assert text in message and "annotate the parameter" in message
        assert "cast_like" not in message and "underconstrained" not in message
