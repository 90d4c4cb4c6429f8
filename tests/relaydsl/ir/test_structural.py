"""Structural (alpha-) equality and hashing: positive and negative cases, DAGs, modules."""
import time

import pytest
from hypothesis import given, settings

from relaydsl.ir import (
    Call,
    Clause,
    ExprMutator,
    Function,
    FuncType,
    GlobalTypeVar,
    IRModule,
    Kind,
    Let,
    Match,
    PatternConstructor,
    PatternVar,
    PatternWildcard,
    TensorType,
    Tuple,
    TupleGetItem,
    TypeCall,
    TypeVar,
    Var,
    const,
)
from relaydsl.ir.structural import assert_structural_equal, structural_equal, structural_hash
from tests.relaydsl.ir.programs import (
    ALL_PROGRAMS,
    F32,
    I32,
    diamond,
    let_chain,
    op,
    random_exprs,
)


def same(a, b, **kw):
    """Equal both ways, and hashing alike."""
    assert structural_equal(a, b, **kw)
    assert structural_equal(b, a, **kw)
    assert structural_hash(a, **kw) == structural_hash(b, **kw)


def differ(a, b, **kw):
    assert not structural_equal(a, b, **kw)
    assert not structural_equal(b, a, **kw)


class Rename(ExprMutator):
    """Gives every variable (bound or free) a fresh Var: an alpha-renamed copy."""

    def visit_var(self, v):
        return Var(v.name_hint + "_renamed", v.type_annotation)


def renamed_module(mod: IRModule) -> IRModule:
    out = mod.copy()
    for gv, fn in mod.functions.items():
        out.functions[gv] = Rename().visit(fn)
    return out


# ---- alpha-equivalence --------------------------------------------------------------------------
def test_functions_equal_up_to_parameter_names():
    x, y, a, b = Var("x", F32), Var("y", F32), Var("a", F32), Var("b", F32)
    same(Function([x, y], op("add", x, y)), Function([a, b], op("add", a, b)))
    differ(Function([x, y], op("add", y, x)), Function([a, b], op("add", a, b)))


def test_lets_equal_up_to_bound_names():
    x, y = Var("x"), Var("y")
    same(Let(x, const(1.0), op("exp", x)), Let(y, const(1.0), op("exp", y)))
    z = Var("z")
    differ(Let(x, const(1.0), Let(z, x, x)), Let(y, const(1.0), Let(z, y, z)))


def test_recursive_let_binds_its_variable_in_its_value():
    f, g, n, m = Var("f"), Var("g"), Var("n"), Var("m")
    same(Let(f, Function([n], Call(f, [n])), f), Let(g, Function([m], Call(g, [m])), g))


def test_pattern_variables_are_binders():
    mod = IRModule()
    cons = mod.get_constructor("Cons")
    xs = Var("xs")

    def head(h, t):
        return Match(xs, [Clause(PatternConstructor(cons, [PatternVar(h), PatternVar(t)]), h),
                          Clause(PatternWildcard(), const(0.0))])

    same(head(Var("h"), Var("t")), head(Var("a"), Var("b")))
    h, t = Var("h"), Var("t")
    swapped = Match(xs, [Clause(PatternConstructor(cons, [PatternVar(h), PatternVar(t)]), t),
                         Clause(PatternWildcard(), const(0.0))])
    differ(head(Var("a"), Var("b")), swapped)


def test_type_parameters_are_binders():
    a, b = TypeVar("a"), TypeVar("b")
    x, y = Var("x", a), Var("y", b)
    same(Function([x], x, a, [a]), Function([y], y, b, [b]))
    same(FuncType([a], a, [a]), FuncType([b], b, [b]))
    differ(FuncType([a], a), FuncType([b], b))  # free: identity only
    same(FuncType([a], a), FuncType([b], b), map_free_vars=True)
    differ(FuncType([a, b], a, [a, b]), FuncType([a, b], b, [a, b]))


def test_kinds_must_agree():
    n, t = TypeVar("n", Kind.Shape), TypeVar("n", Kind.Type)
    differ(FuncType([n], F32, [n]), FuncType([t], F32, [t]))
    differ(n, t, map_free_vars=True)


def test_free_symbolic_dims_map_consistently_only_when_asked():
    n, m = TypeVar("n", Kind.Shape), TypeVar("m", Kind.Shape)
    pair_n = TensorType((n, n))
    differ(pair_n, TensorType((m, m)))
    same(pair_n, TensorType((m, m)), map_free_vars=True)
    differ(pair_n, TensorType((m, n)), map_free_vars=True)


# ---- free variables -----------------------------------------------------------------------------
def test_free_variables_equal_only_to_themselves_unless_mapped():
    x, y, z = Var("x"), Var("y"), Var("z")
    same(Tuple([x, x]), Tuple([x, x]))
    differ(Tuple([x, x]), Tuple([y, y]))
    same(Tuple([x, x]), Tuple([y, y]), map_free_vars=True)
    differ(Tuple([x, x]), Tuple([y, z]), map_free_vars=True)
    differ(Tuple([x, y]), Tuple([z, z]), map_free_vars=True)


def test_a_bound_variable_never_equals_a_free_one():
    x, y, p = Var("x"), Var("y"), Var("p")
    differ(Function([p], p), Function([x], y), map_free_vars=True)


def test_annotations_are_compared():
    x, y, z = Var("x", F32), Var("y", I32), Var("z")
    differ(Function([x], x), Function([y], y))
    differ(Function([x], x), Function([z], z))
    differ(x, y, map_free_vars=True)


# ---- leaves: constants, attributes, operators ---------------------------------------------------
def test_constants_compare_dtype_shape_and_bits():
    same(const([1.0, 2.0]), const([1.0, 2.0]))
    differ(const([1.0, 2.0]), const([1.0, 3.0]))
    differ(const([1.0, 2.0]), const([1.0, 2.0], "float64"))
    differ(const([1.0, 2.0]), const([[1.0, 2.0]]))
    same(const(float("nan")), const(float("nan")))
    differ(const(0.0), const(-0.0))


def test_attributes_and_operators_are_compared():
    x = Var("x")
    same(op("sum", x, axis=[1]), op("sum", x, axis=(1,)))
    differ(op("sum", x, axis=[1]), op("sum", x, axis=[0]))
    differ(op("sum", x, axis=[1]), op("sum", x, axis=[1], keepdims=True))
    differ(op("add", x, x), op("subtract", x, x))
    differ(TupleGetItem(x, 0), TupleGetItem(x, 1))


def test_match_completeness_is_compared():
    x = Var("x")
    clause = [Clause(PatternWildcard(), x)]
    differ(Match(x, clause), Match(x, clause, complete=False))


def test_a_bare_adt_name_is_the_nullary_type_call():
    unit = GlobalTypeVar("Unit")
    same(unit, TypeCall(unit, ()))
    differ(TypeCall(unit, ()), TypeCall(GlobalTypeVar("Other"), ()))


def test_kinds_of_terms_must_agree_and_others_are_rejected():
    assert not structural_equal(Var("x"), F32)
    with pytest.raises(TypeError, match="structural equality is defined on"):
        structural_equal(1, 2)


# ---- sharing ------------------------------------------------------------------------------------
def test_sharing_is_not_observable():
    x = Var("x", F32)
    s = op("exp", x)
    same(op("add", s, s), op("add", op("exp", x), op("exp", x)))
    p, q, r = Var("p"), Var("q"), Var("r")
    shared_fn = Function([p], p)
    same(Tuple([shared_fn, shared_fn]), Tuple([Function([q], q), Function([r], r)]))


def _diamond_over(a, b) -> Call:
    e = op("add", a, b)
    for _ in range(29):
        e = op("add", e, e)
    return e


def test_dag_comparison_and_hash_are_linear():
    start = time.perf_counter()
    same(diamond(30), diamond(30), map_free_vars=True)
    x, y = Var("x", F32), Var("y", F32)
    differ(_diamond_over(x, x), _diamond_over(x, y), map_free_vars=True)
    assert time.perf_counter() - start < 2.0  # 2**30 paths would never finish


def test_long_let_chains_do_not_recurse():
    a, b = let_chain(20000), let_chain(20000)
    same(a, b, map_free_vars=True)


# ---- failure reports ----------------------------------------------------------------------------
def test_assert_structural_equal_shows_path_and_both_texts():
    x = Var("x", F32)
    lhs = Function([x], op("add", x, const(1.0)))
    y = Var("y", F32)
    rhs = Function([y], op("add", y, const(2.0)))
    with pytest.raises(AssertionError) as info:
        assert_structural_equal(lhs, rhs)
    message = str(info.value)
    assert "not structurally equal at .body.args[1]: constants differ" in message
    assert "add(%x, 1f)" in message and "add(%y, 2f)" in message
    assert_structural_equal(lhs, Function([y], op("add", y, const(1.0))))


def test_assert_compresses_long_paths():
    vs = [Var(f"x{i}") for i in range(51)]
    changed = vs[-1]
    for i in range(50, 0, -1):
        changed = Let(vs[i], op("add", vs[i - 1], const(9.0 if i == 50 else 1.0)), changed)
    with pytest.raises(AssertionError, match=r"at \.body\{x49\}\.value\.args\[1\]"):
        assert_structural_equal(let_chain(50), changed, map_free_vars=True)


# ---- modules ------------------------------------------------------------------------------------
@pytest.mark.parametrize("name,build", ALL_PROGRAMS, ids=[n for n, _ in ALL_PROGRAMS])
def test_programs_equal_their_rebuild_and_alpha_renaming(name, build):
    mod = build()
    same(mod, build())
    same(mod, renamed_module(mod))


def test_modules_compare_globals_and_types_by_name():
    def build(constant: float, ctor: str = "Red") -> IRModule:
        from relaydsl.ir import define_adt

        mod = IRModule()
        mod.add_type(define_adt("Color", [], [(ctor, []), ("Blue", [])]))
        x = Var("x", F32)
        mod.add("main", Function([x], op("add", x, const(constant))))
        return mod

    same(build(1.0), build(1.0))
    with pytest.raises(AssertionError, match=r"@main\.body\.args\[1\]: constants differ"):
        assert_structural_equal(build(1.0), build(2.0))
    with pytest.raises(AssertionError, match=r"type Color\.constructors\[0\]"):
        assert_structural_equal(build(1.0), build(1.0, "Green"))
    extra = build(1.0)
    extra.add("helper", Function([], const(0.0)))
    with pytest.raises(AssertionError, match="global helper only in the rhs"):
        assert_structural_equal(build(1.0), extra)


def test_free_type_variables_of_a_global_map_per_function():
    def build() -> IRModule:
        n = TypeVar("n", Kind.Shape)  # the same variable, free in two globals
        mod = IRModule()
        x, y = Var("x", TensorType((n,))), Var("y", TensorType((n, n)))
        mod.add("f", Function([x], x))
        mod.add("g", Function([y], y))
        return mod

    same(build(), build())


# ---- property: random programs equal their renaming, and hash alike -----------------------------
@settings(max_examples=60, deadline=None)
@given(random_exprs())
def test_random_programs_equal_their_renaming(e):
    same(e, Rename().visit(e))
    same(e, e)


@settings(max_examples=100, deadline=None)
@given(random_exprs(depth=1), random_exprs(depth=1))
def test_hash_is_consistent_with_equality(a, b):
    if structural_equal(a, b):
        assert structural_hash(a) == structural_hash(b)
