"""The text format: printing, parsing, round trips, hand-written variations and errors."""
import contextlib
import json
import random
import re
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from relaydsl.errors import ParseError
from relaydsl.ir import (
    Call,
    Constant,
    Function,
    FuncType,
    If,
    IRModule,
    Kind,
    Let,
    Match,
    TensorType,
    Tuple,
    TupleType,
    TypeVar,
    Var,
    const,
)
from relaydsl.ir import parser
from relaydsl.ir.parser import parse, parse_expr
from relaydsl.ir.printer import astext
from relaydsl.ir.structural import assert_structural_equal, structural_equal
from relaydsl.typing import infer_types
from tests.relaydsl.ir.programs import (
    ALL_PROGRAMS,
    F32,
    WELL_TYPED,
    constants_module,
    figure2_expected,
    figure2_while_loop_module,
    mlp_module,
    op,
    random_exprs,
)


def roundtrip(mod: IRModule) -> str:
    """Print, parse, compare; printing the parsed module gives the same text."""
    text = astext(mod)
    again = parse(text)
    assert_structural_equal(mod, again)
    assert astext(again) == text
    return text


# ---- round trips --------------------------------------------------------------------------------
@pytest.mark.parametrize("name,build", ALL_PROGRAMS, ids=[n for n, _ in ALL_PROGRAMS])
def test_every_program_round_trips(name, build):
    roundtrip(build())


@pytest.mark.parametrize("name,build", ALL_PROGRAMS, ids=[n for n, _ in ALL_PROGRAMS])
def test_every_program_round_trips_with_the_prelude_printed(name, build):
    mod = build()
    assert_structural_equal(mod, parse(astext(mod, include_prelude=True)))


def test_round_trip_covers_every_node_type():
    from relaydsl.ir.adt import PatternConstructor, PatternTuple, PatternVar, PatternWildcard
    from relaydsl.ir.visitor import _VISIT_NAME, ExprVisitor

    seen: set[type] = set()

    class Kinds(ExprVisitor):
        def visit(self, e):
            seen.add(type(e))
            super().visit(e)

        def visit_pattern(self, p):
            seen.add(type(p))
            super().visit_pattern(p)

    for _, build in ALL_PROGRAMS:
        mod = build()
        for fn in mod.user_functions().values():
            Kinds().visit(fn)
    patterns = {PatternConstructor, PatternTuple, PatternVar, PatternWildcard}
    assert set(_VISIT_NAME) | patterns <= seen


def test_figure2_prints_like_the_paper_and_round_trips():
    text = roundtrip(figure2_while_loop_module())
    expected = """
        %0 = add(%lvar0, %lvar1);
        %1 = less(%0, meta[Constant][0]);
        %2 = multiply(%lvar1, %lvar2);
        %3 = less(%2, meta[Constant][1]);
        %4 = not_equal(%1, %3);
        %5 = add(%lvar0, %lvar1);
        %6 = greater_equal(%lvar2, %5);
        %7 = equal(%4, %6);
        %8 = min(%7);
        if (%8) {
          %9 = add(%lvar0, %lvar1);
          %10 = add(%lvar1, %lvar2);
          %11 = add(%lvar2, meta[Constant][2]);
          %while_loop(%9, %10, %11)
        } else {
          (%lvar0, %lvar1, %lvar2)
        }
    """
    assert textwrap.indent(textwrap.dedent(expected).strip(), "    ") in text
    assert "%while_loop(meta[Constant][3], meta[Constant][4], meta[Constant][5])" in text
    assert '{"dtype": "int32", "shape": [1], "data": [100]}' in text


def test_figure2_as_the_paper_writes_it_parses_to_the_same_program():
    """The figure's own notation: nested calls in the condition, no semicolons."""
    text = """
    #[version = "0.0.5"]
    def @main() -> (Tensor[(1,), int32], Tensor[(1,), int32], Tensor[(1,), int32]) {
      let %while_loop: fn(Tensor[(1,), int32], Tensor[(1,), int32], Tensor[(1,), int32])
          -> (Tensor[(1,), int32], Tensor[(1,), int32], Tensor[(1,), int32]) =
        fn (%lvar0: Tensor[(1,), int32], %lvar1: Tensor[(1,), int32],
            %lvar2: Tensor[(1,), int32])
            -> (Tensor[(1,), int32], Tensor[(1,), int32], Tensor[(1,), int32]) {
        %0 = add(%lvar0, %lvar1)
        %1 = less(%0, meta[Constant][0])
        %2 = multiply(%lvar1, %lvar2)
        %3 = less(%2, meta[Constant][1])
        %4 = not_equal(%1, %3)   // the figure's `not equal`
        %5 = add(%lvar0, %lvar1)
        %6 = greater_equal(%lvar2, %5)
        if (min(equal(%4, %6))) {
          %9 = add(%lvar0, %lvar1)
          %10 = add(%lvar1, %lvar2)
          %11 = add(%lvar2, meta[Constant][2])
          %while_loop(%9, %10, %11)
        } else { (%lvar0, %lvar1, %lvar2) }
      };
      %while_loop(meta[Constant][3], meta[Constant][4], meta[Constant][5])
    }
    #[metadata]
    {"Constant": [{"dtype": "int32", "shape": [1], "data": [10]},
                  {"dtype": "int32", "shape": [1], "data": [100]},
                  {"dtype": "int32", "shape": [1], "data": [1]},
                  {"dtype": "int32", "shape": [1], "data": [1]},
                  {"dtype": "int32", "shape": [1], "data": [1]},
                  {"dtype": "int32", "shape": [1], "data": [5]}]}
    """
    assert_structural_equal(parse(text), figure2_while_loop_module())


def test_golden_text_of_a_small_module():
    assert astext(mlp_module()) == textwrap.dedent("""\
        #[version = "0.0.5"]
        def @main(%x: Tensor[(4, 8), float32], %w: Tensor[(8, 3), float32]) {
          %0 = matmul(%x, %w);
          %1 = add(%0, meta[Constant][0]);
          %2 = relu(%1);
          %3 = softmax(%2, axis=1);
          %4 = sum(%3, axis=[1], keepdims=True);
          (%3, %4)
        }
        #[metadata]
        {"Constant": [
          {"dtype": "float32", "shape": [3], "data": [-1.0, 0.0, 1.0]}
        ]}""")


def test_shared_subterm_is_printed_once_and_parsed_back_shared():
    x, y = Var("x", F32), Var("y", F32)
    s = op("add", x, y)
    text = astext(Function([x, y], op("multiply", s, s)))
    assert text.count("add(") == 1 and "multiply(%0, %0)" in text
    fn = parse_expr(text)
    assert fn.body.args[0] is fn.body.args[1]


def test_temporaries_are_scoped_to_their_block():
    x = Var("x", F32)
    s = op("exp", x)
    e = Function([x], If(op("less", x, const(0.0)), op("negative", s), s))
    text = astext(e)
    assert text.count("exp(%x)") == 2  # one per branch: hoisting would evaluate it eagerly
    assert_structural_equal(parse_expr(text), e)


def test_clashing_names_are_made_unique():
    a, b, c = Var("x", F32), Var("x", F32), Var("x.1")
    text = astext(Function([a, b, c], Tuple([a, b, c])))
    assert "fn (%x: Tensor[(), float32], %x_1: Tensor[(), float32], %x_1_1)" in text
    n1, n2 = TypeVar("n", Kind.Shape), TypeVar("n", Kind.Shape)
    assert astext(FuncType([n1, n2], F32, [n1, n2])) == "fn<n: Shape, n_1: Shape>(n, n_1) -> " \
                                                         "Tensor[(), float32]"


def test_scalar_literals_print_inline_with_suffixes():
    cases = {
        const(1.0): "1f", const(1.5, "float64"): "1.5f64", const(2, "int32"): "2i32",
        const(True): "True", const(0.1, "float16"): "0.1f16", const(-0.0): "-0.0f",
        const(-3, "int8"): "-3i8", const(200, "uint8"): "200u8", const(7, "int64"): "7i64",
    }
    for c, literal in cases.items():
        assert astext(c).endswith("\n" + literal)
        assert structural_equal(parse_expr(literal), c)
    assert "meta[Constant][0]" in astext(const(float("nan")))


@settings(max_examples=200, deadline=None)
@given(st.floats(width=32), st.floats(), st.floats(width=16))
def test_float_constants_round_trip_exactly(f32, f64, f16):
    c = Tuple([const(f32, "float32"), const(f64, "float64"), const(f16, "float16"),
               Constant(np.array([f32, -f32], dtype="float32")), Constant(np.array([f64]))])
    assert_structural_equal(parse_expr(astext(c)), c)


def test_show_types_annotates_typed_nodes_and_still_parses():
    mod = infer_types(mlp_module())
    text = astext(mod, show_types=True)
    assert "%0 = matmul(%x, %w) /* ty=Tensor[(4, 3), float32] */;" in text
    assert_structural_equal(parse(text), mod)


@pytest.mark.parametrize("name,build", [p for p in ALL_PROGRAMS if p[0] in WELL_TYPED],
                         ids=[n for n, _ in ALL_PROGRAMS if n in WELL_TYPED])
def test_typed_programs_print_with_types_and_round_trip(name, build):
    mod = infer_types(build())
    text = astext(mod, show_types=True)
    assert "/* ty=" in text
    again = parse(text)
    assert_structural_equal(again, mod)
    assert_structural_equal(infer_types(again), mod)


@pytest.mark.parametrize("start", [(1, 1, 5), (1, 1, 1), (1, 2, 1)])
def test_figure2_printed_parsed_typed_and_run_like_the_python_loop(start):
    from relaydsl.backend.interpreter import evaluate

    mod = infer_types(parse(astext(figure2_while_loop_module(start))))
    i32 = TensorType((1,), "int32")
    assert mod["main"].checked_type.ret_type == TupleType((i32, i32, i32))
    for got, want in zip(evaluate(mod), figure2_expected(*start)):
        np.testing.assert_array_equal(got, want)


@settings(max_examples=60, deadline=None)
@given(random_exprs())
def test_random_expressions_round_trip(e):
    text = astext(e)
    assert_structural_equal(parse_expr(text), e)
    assert astext(parse_expr(text)) == text


def test_free_variables_of_an_expression_round_trip_with_their_annotations():
    x, y = Var("x", F32), Var("y")
    e = op("add", op("exp", x), op("add", x, y))
    text = astext(e)
    assert "%x: Tensor[(), float32]" in text and text.count(": Tensor") == 1
    assert_structural_equal(parse_expr(text), e, map_free_vars=True)


# ---- hand-written variations --------------------------------------------------------------------
def test_hand_written_module_with_comments_forward_references_and_symbolic_dims():
    mod = parse("""
        // helpers first, in any order; `@double` is used before it is defined
        def @main(%x: Tensor[(3, n, ?), float32]) -> Tensor[(3, n, ?), float32] {
          %0 = @double(%x)   /* no semicolons needed */
          @id(%0)
        }
        def @double(%y: Tensor[(3, n, ?), float32]) { add(%y, %y) }
        def @id<a>(%z: a) -> a { %z }
        def @scalar(%s: float32) -> float32 { negative(%s) }
    """)
    main = mod["main"]
    n = main.params[0].type_annotation.shape[1]
    assert isinstance(n, TypeVar) and n.kind is Kind.Shape
    assert main.ret_type.shape[1] is n  # one name, one variable, per function
    assert mod["double"].params[0].type_annotation.shape[1] is not n
    assert mod["scalar"].params[0].type_annotation.shape == ()
    assert main.body.op is mod.get_global_var("id")


def test_hand_written_expression_forms():
    e = parse_expr("""
        let %t = (1f, (2i32,), ());
        %u = %t.1.0;
        let %f = fn (%a: float32, %b) -> float32 { add(%a, %b) };
        %r = ref(%f(1f, 2f));
        %ignored = ref_write(%r, 3f);
        if (True) { ref_read(%r) } else if (False) { 4f } else { (((%u))) }
    """)
    assert isinstance(e, Let) and isinstance(e.body.body, If)
    assert isinstance(e.body.body.false_branch, If)


def test_attribute_values_are_python_like_literals():
    e = parse_expr("%0 = clip(%x: float32, a_min=-inf, a_max=2.5); "
                   "take(%0, %0, axis=None, mode='wrap')")
    assert e.args[0].attrs["a_min"] == float("-inf") and e.args[0].attrs["a_max"] == 2.5
    assert e.attrs["mode"] == "wrap" and e.attrs["axis"] is None


def test_match_with_nested_patterns_and_incomplete_marker():
    e = parse_expr("""
        match? ((Some(1f), Cons(2f, Nil))) {
          (Some(%h), Cons(_, %rest: List[float32])) => %h,
          (None, _) => { %z = negative(1f); %z },
        }
    """)
    assert isinstance(e, Match) and not e.complete and len(e.clauses) == 2
    assert e.clauses[0].lhs.patterns[1].patterns[1].var.type_annotation is not None


def test_parse_expr_maps_free_names_to_one_variable_each():
    e = parse_expr("add(%x, multiply(%x, %y))")
    assert e.args[0] is e.args[1].args[0] and e.args[1].args[1] is not e.args[0]


# ---- errors -------------------------------------------------------------------------------------
def error_of(text: str, *, expr: bool = False) -> str:
    with pytest.raises(ParseError) as info:
        (parse_expr if expr else parse)(text, source_name="prog.relay")
    return str(info.value)


def assert_located(message: str, line: int, col: int, source: str, caret: str) -> None:
    assert message.startswith(f"prog.relay:{line}:{col}:"), message
    lines = message.split("\n")
    assert lines[1] == "    " + source
    assert lines[2] == "    " + " " * (col - 1) + caret


def test_unknown_operator_is_located_and_suggests():
    text = "def @main(%x: float32) {\n  %0 = ad(%x, %x);\n  %0\n}"
    message = error_of(text)
    assert_located(message, 2, 8, "  %0 = ad(%x, %x);", "^^")
    assert "unknown operator or constructor 'ad'" in message and "Did you mean" in message
    assert "add" in message


@pytest.mark.parametrize("text,line,col,needle", [
    ("def @main() {\n  add(1f)\n}", 2, 3, "add takes 2 argument(s)"),
    ("def @main() {\n  sum(1f, keepdims=3)\n}", 2, 3, "attribute 'keepdims' must be a bool"),
    ("def @main() { %y }", 1, 15, "unknown variable %y"),
    ("def @main() { @nope() }", 1, 15, "unknown global @nope"),
    ("def @main() { 1q }", 1, 15, "unknown literal suffix 'q'"),
    ("def @main() { 300i8 }", 1, 15, "300 is out of range for int8"),
    ("def @main() { 1.5i32 }", 1, 15, "1.5 is not an integer"),
    ("def @main() {\n  match (Nil) { Cns(%h, %t) => 1f }\n}", 2, 17, "unknown constructor 'Cns'"),
    ("def @main(%x: Tensor[(n,), float32]) {\n  fn (%y: n) { %y }\n}", 2, 11,
     "type variable n has kind Shape, but is used as a Type"),
    ("def @main() { meta[Constant][3] }", 1, 30, "meta[Constant][3] is not in the metadata"),
    ("def @main() { 1f }\ndef @main() { 2f }", 2, 5, "@main is defined twice"),
    ("def @main() { 1f }\n%x", 2, 1, "expected 'def' or 'type' at the top level"),
    ("def @main() {\n  (1f, 2f\n}", 3, 1, "expected ')'"),
    ("def @main() {\n  1f\n", 3, 1, "unbalanced braces"),
    ("def @main() { fn (%x, %x) { %x } }", 1, 23, "parameter %x is listed twice"),
    ("def @main() { let %x = 1f }", 1, 27, "expected an expression"),
    ("def @main() { (%a = 1f) }", 1, 23, "expected an expression, got ')'"),
    ("def @main(%x: Lisst[float32]) { %x }", 1, 15, "unknown type 'Lisst'"),
    ("type T[a] { C(b) }", 1, 15, "unknown type 'b'"),
    ("def @main(%x: Tensor[(3,), float33]) { %x }", 1, 28, "unknown dtype 'float33'"),
    # issue 11, item 15: `int` was a type variable named int, a constructor named like a
    # keyword or an operator could be declared but never used
    ("def @main(%z: int) { %z }", 1, 15, "unknown dtype 'int'; the int dtypes are int8, "
     "int16, int32, int64"),
    ("def @main<float>(%z: float) { %z }", 1, 11, "unknown dtype 'float'"),
    ("type T { constructor, B }", 1, 10, "a constructor cannot be named 'constructor'"),
    ("type T { B, add }", 1, 13, "a constructor cannot be named 'add': in an expression 'add' "
     "is an operator"),
    ("def @main() { $ }", 1, 15, "unexpected character '$'"),
    ("def @main() {\n  1f /* open", 2, 6, "unterminated comment"),
    ("def @main() { sum(1f, axis='0) }", 1, 28, "unterminated string"),
    ('#[version = "0.0.4"]\ndef @main() { 1f }', 1, 1, "unsupported text format version"),
    ('def @main() { 1f }\n#[metadata]\n{"Constant": [1}', 3, 16, "not valid JSON"),
    ('def @main() { 1f }\n#[metadata]\n{"Constant": [{"dtype": "f"}]}', 2, 1,
     "metadata constant 0"),
])
def test_errors_are_located(text, line, col, needle):
    message = error_of(text)
    assert message.startswith(f"prog.relay:{line}:{col}:"), message
    assert needle in message, message
    assert re.search(r"\n    .*\n    *\^", message), message


def test_damaged_texts_raise_only_parse_errors():
    rng = random.Random(0)
    texts = [astext(build()) for _, build in ALL_PROGRAMS]
    for _ in range(300):
        text = rng.choice(texts)
        i = rng.randrange(len(text))
        damaged = rng.choice([
            text[:i], text[:i] + text[i + rng.randrange(1, 12):],
            text[:i] + rng.choice("(){}[]<>,;:=.%@-?_\n\"'#/*x1") + text[i:],
        ])
        for read in (parse, parse_expr):
            with contextlib.suppress(ParseError):
                read(damaged)


def test_a_parse_error_is_a_syntax_error():
    with pytest.raises(SyntaxError):
        parse_expr("fn (")


def test_errors_in_expressions_too():
    message = error_of("%0 = add(%x, %y);\n%0 %1", expr=True)
    assert_located(message, 2, 4, "%0 %1", "^^")
    assert "expected the end of the expression" in message


# ---- bad input of every kind is a located ParseError --------------------------------------------
NESTINGS = {  # a construct nested n times
    "parentheses": lambda n: "(" * n + "1f" + ")" * n,
    "calls": lambda n: "negative(" * n + "1f" + ")" * n,
    "tuples": lambda n: "(" * n + "1f" + ",)" * n,
    "functions": lambda n: "fn () {" * n + "1f" + "}" * n,
    "else-if chains": lambda n: "if (True) { 1f } else " * n + "{ 2f }",
    "match clauses": lambda n: "match (1f) { _ => " * n + "1f" + " }" * n,
    "types": lambda n: "fn (%x: " + "(" * n + "float32" + ",)" * n + ") { %x }",
    "patterns": lambda n: "match (1f) { " + "(" * n + "_" + ")" * n + " => 1f }",
    "attribute lists": lambda n: "sum(1f, axis=" + "[" * n + "0" + "]" * n + ")",
}


def nesting_depth(e) -> int:
    depth = 0
    while isinstance(e, (Call, Function, Tuple)):
        e = e.args[0] if isinstance(e, Call) else e.body if isinstance(e, Function) else e.fields[0]
        depth += 1
    return depth


@pytest.mark.parametrize("make", [NESTINGS["calls"], NESTINGS["functions"], NESTINGS["tuples"]],
                         ids=["calls", "functions", "tuples"])
def test_deep_nesting_parses(make):
    e = parse_expr(make(3000))
    assert nesting_depth(e) == 3000
    assert isinstance(parse_expr(make(parser.MAX_NESTING - 2)), (Call, Function, Tuple))


# Blocks are indented a level per nesting, so their text grows as the square of the depth
# (8 MB for 1,000 nested match clauses): those are printed less deep.
_PRINT_DEPTH = {"functions": 1000, "else-if chains": 1000, "match clauses": 300}


@pytest.mark.parametrize("construct", [c for c in NESTINGS if c != "attribute lists"])
def test_deeply_nested_programs_print_and_read_back(construct):
    # issue 26, item 17: printing nested functions and types 1,000 deep was a RecursionError
    depth = _PRINT_DEPTH.get(construct, parser.MAX_NESTING - 3)
    e = parse_expr(NESTINGS[construct](depth))
    assert_structural_equal(parse_expr(astext(e)), e)
    # from a caller already deep in its own recursion, and as a module
    module = parse(f"def @main() {{ {NESTINGS[construct](depth)} }}")
    assert "def @main" in recurse_then(500, lambda: astext(module))


@pytest.mark.parametrize("construct", list(NESTINGS))
def test_nesting_beyond_the_limit_is_a_located_error(construct):
    text = NESTINGS[construct](parser.MAX_NESTING + 1)
    with pytest.raises(ParseError, match=r"nesting too deep \(limit 10000\)") as info:
        parse_expr(text, source_name="prog.relay")
    span = info.value.span
    assert span.line == 1 and 1 < span.col < len(text)
    # the module parser too, from a caller already deep in its own recursion
    program = f"def @main() {{ {text} }}"
    with pytest.raises(ParseError, match="nesting too deep"):
        recurse_then(500, lambda: parse(program))


def recurse_then(depth: int, f):
    return f() if depth == 0 else recurse_then(depth - 1, f)


@pytest.mark.parametrize("literal,dtype,limit", [
    ("3.40283e+38f32", "float32", "3.40282"), ("1e39f", "float32", "3.40282"),
    ("-1e39f", "float32", "3.40282"), ("65520f16", "float16", "65504"),
    ("1e400f64", "float64", "1.79769"),
])
def test_float_literals_out_of_range_are_errors(literal, dtype, limit):
    message = error_of(f"def @main() {{\n  add({literal}, 1f)\n}}")
    assert message.startswith("prog.relay:2:7:"), message
    assert f"{literal.split('f')[0]} is out of range for {dtype} (its largest value is {limit}" \
        in message, message


def test_float_literals_at_the_dtype_limits_parse_exactly():
    for text, value in [("3.4028235e+38f", np.finfo(np.float32).max), ("65504f16", 65504.0),
                        ("-65504f16", -65504.0), ("1.7976931348623157e308f64", np.finfo("f8").max),
                        ("1e-50f", 0.0)]:  # underflow rounds, as in NumPy and Python
        data = parse_expr(text).data
        assert data == value and np.isfinite(data)


@pytest.mark.parametrize("text,needle", [
    ("sum(1f, axis=" + "9" * 5000 + ")", "has too many digits"),
    ("9" * 5000 + "i64", "has too many digits"),
    ("fn (%x: Tensor[(" + "9" * 5000 + ",), float32]) { %x }", "has too many digits"),
    ("(1f, 2f)." + "9" * 5000, "has too many digits"),
    ("meta[Constant][" + "9" * 5000 + "]", "has too many digits"),
    ("clip(1f, a_min=1e400, a_max=1f)", "1e400 is out of range for a float"),
])
def test_numbers_too_large_for_python_are_errors(text, needle):
    message = error_of(text, expr=True)
    assert message.startswith("prog.relay:1:") and needle in message, message


def metadata_program(entry) -> str:
    return 'def @main() { meta[Constant][0] }\n#[metadata]\n' + json.dumps({"Constant": [entry]})


@pytest.mark.parametrize("dtype,data,needle", [
    ("int8", 300, "300 is out of range for int8"),
    ("uint8", -1, "-1 is out of range for uint8"),
    ("int64", 2 ** 70, "1180591620717411303424 is out of range for int64"),
    ("float32", 10 ** 400, "1000000000000000000000000000000000000... is out of range for float32"),
    ("float32", 1e39, "1e+39 is out of range for float32"),
    ("float16", 65520, "65520 is out of range for float16"),
    ("int32", {}, "bad int32 value {}"),
    ("int32", 1.5, "bad int32 value 1.5"),
    ("float32", [1.0], "bad float value [1.0]"),
    ("bool", 2, "bad bool value 2"),
    ("float32", "nan:0xfffffffffff", "bad NaN payload"),
    ("float32", "nan:0x3f800000", "nan:0x3f800000 is not a NaN of float32"),
], ids=lambda v: str(v)[:24])
def test_metadata_values_that_do_not_fit_their_dtype_are_errors(dtype, data, needle):
    message = error_of(metadata_program({"dtype": dtype, "shape": [], "data": [data]}))
    assert message.startswith("prog.relay:2:1: metadata constant 0: ") and needle in message, \
        message


@pytest.mark.parametrize("text,needle", [
    ('{"Constant": [{"dtype": "int32", "shape": [' + str(2 ** 70) + '], "data": []}]}',
     "needs 1180591620717411303424 values"),
    ('{"Constant": [{"dtype": "int32", "shape": [0, ' + str(2 ** 62) + ', 4], "data": []}]}',
     "metadata constant 0"),
    ('{"Constant": [' + "9" * 5000 + "]}", "the metadata section is not valid"),
    ("[" * 100_000 + "]" * 100_000, "the metadata section nests too deeply"),
])
def test_malformed_metadata_sections_are_errors(text, needle):
    message = error_of("def @main() { 1f }\n#[metadata]\n" + text)
    assert message.startswith("prog.relay:2:1:") and needle in message, message


# Fuzzing: whatever the text, the parser returns or raises ParseError, never anything else.
PRINTED = [astext(build()) for _, build in ALL_PROGRAMS]
FRAGMENTS = [
    *"(){}[]<>,;:=.%@-?_\n\"'#", "/*", "//", "x", "1", "fn", "match", "if", "else", "let",
    "ref", "meta", "Tensor", "float32", "Nil", "Cons", "type", "def", "@main", "%x", "Ref",
    "constructor", "grad", "Shape", "#[metadata]", "1e39f", "65520f16", "300i8", "-1u8",
    "9" * 30, "1e400", '"inf"', '"nan:0x1"', "null", "true", "{}", "\u00e9", "\x00", "\u0663",
    "(" * 50, "negative(" * 50,
]


@st.composite
def mutated_programs(draw) -> str:
    """A printed program with a few random deletions, insertions, repeats and replacements."""
    text = draw(st.sampled_from(PRINTED))
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(text)))
        j = min(len(text), i + draw(st.integers(0, 20)))
        fragment = draw(st.sampled_from(FRAGMENTS) | st.text(max_size=5))
        text = draw(st.sampled_from([
            text[:i] + text[j:], text[:i] + fragment + text[i:], text[:i] + fragment + text[j:],
            text[:i] + text[i:j] * draw(st.integers(2, 5)) + text[j:],
        ]))
    return text


def parses_or_raises_parse_error(text: str) -> None:
    for read in (parse, parse_expr):
        with contextlib.suppress(ParseError):
            read(text)


@settings(max_examples=300, deadline=None)
@given(mutated_programs())
def test_mutated_programs_raise_only_parse_errors(text):
    parses_or_raises_parse_error(text)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300).map(lambda b: b.decode("utf-8", "replace")) | st.text(max_size=300))
def test_random_texts_raise_only_parse_errors(text):
    parses_or_raises_parse_error(text)


JSON_VALUES = (st.integers() | st.floats() | st.booleans() | st.none() | st.text(max_size=12)
               | st.sampled_from([2 ** 70, 10 ** 400, -(10 ** 400), 1e39, 65520, "inf", "nan",
                                  "nan:0x7fc00001", "nan:0x0", "nan:0x1ffffffff", "nan:zz"]))


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_mutated_metadata_raises_only_parse_errors(data):
    head, pool = astext(constants_module()).split("#[metadata]\n")
    constants = json.loads(pool)["Constant"]
    entry = data.draw(st.sampled_from(constants))
    key = data.draw(st.sampled_from(["dtype", "shape", "data", "extra"]))
    if key == "data" and entry["data"]:
        entry["data"][data.draw(st.integers(0, len(entry["data"]) - 1))] = data.draw(JSON_VALUES)
    elif key == "shape":
        entry["shape"] = data.draw(st.lists(JSON_VALUES, max_size=3))
    else:
        entry[key] = data.draw(JSON_VALUES | st.sampled_from(["int8", "uint8", "bool", "float16"]))
    with contextlib.suppress(ParseError):
        parse(head + "#[metadata]\n" + json.dumps({"Constant": constants}))


def test_definitions_named_like_the_preludes_are_printed_and_read_back_as_their_own():
    # issue 11, item 15: the printer dropped a user's @length, type List or Tree, so print ->
    # parse silently gave the prelude's in their place
    text = textwrap.dedent("""\
        type List[a] { Cons(a, List[a]), Nil }
        type Tree { Leaf }
        def @length(%x: float32) -> float32 { negative(%x) }
        def @main(%y: float32) -> (List[float32], float32, Tree) {
          (Cons(%y, Nil), @length(%y), Leaf)
        }""")
    mod = infer_types(parse(text))
    printed = mod.astext()
    for definition in ("type List[a] {", "type Tree {", "def @length(%x: float32)"):
        assert definition in printed.replace("Tensor[(), float32]", "float32")
    again = infer_types(parse(printed))
    assert again.astext() == printed
    assert again["length"].checked_type == FuncType((F32,), F32)
    assert again.get_type("List") is not IRModule().get_type("List")
    assert again.get_type("Tree").constructors[0].name == "Leaf"
