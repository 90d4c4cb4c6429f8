"""Common-subexpression elimination: each pure op call once, effects and scopes respected,
values unchanged (checked against JAX on both targets). The structural cases follow TVM's
tests/python/relay/test_pass_eliminate_common_subexpr.py."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from relaydsl.backend.interpreter import evaluate, to_value
from relaydsl.backend.target import get_target
from relaydsl.ir.expr import Call, Function, GlobalVar, Op, Tuple, Var
from relaydsl.ir.module import IRModule
from relaydsl.ir.parser import parse
from relaydsl.ir.structural import structural_equal
from relaydsl.ir.visitor import post_order
from relaydsl.testing.oracle import assert_matches_jax
from relaydsl.testing.random_programs import random_programs
from relaydsl.transform import pipeline
from relaydsl.transform.eliminate_common_subexpr import eliminate_common_subexpr
from relaydsl.transform.graph_normal_form import to_graph_normal_form
from relaydsl.transform.inline import inline_globals
from relaydsl.typing import infer_types


def run(mod: IRModule, target: str, *args):
    program = get_target(target).build(mod, "main", {})
    return program(*[to_value(a, p.checked_type) for a, p in zip(args, mod["main"].params)])


def cse(text: str, **options) -> IRModule:
    return eliminate_common_subexpr(infer_types(parse(text)), **options)


def same(got: IRModule, expected_text: str) -> bool:
    return structural_equal(got["main"], infer_types(parse(expected_text))["main"])


def op_calls(mod: IRModule, entry: str = "main") -> list[str]:
    names: list[str] = []
    post_order(mod[entry], lambda e: names.append(e.op.name)
               if isinstance(e, Call) and isinstance(e.op, Op) else None)
    return sorted(names)


def test_equal_calls_become_one_node():
    out = cse('''
    def @main(%x: Tensor[(1, 16), float32]) {
      add(add(relu(%x), 1f), add(relu(%x), 1f))
    }''')
    assert same(out, '''
    def @main(%x: Tensor[(1, 16), float32]) {
      %0 = add(relu(%x), 1f);
      add(%0, %0)
    }''')
    assert op_calls(out) == ["add", "add", "relu"]


def test_equal_collectives_stay_two_exchanges():
    # two psums are two exchanges with the other ranks, which run them too
    out = cse('''
    def @main(%x: Tensor[(4), float32]) {
      add(psum(%x), psum(%x))
    }''')
    assert op_calls(out) == ["add", "psum", "psum"]


def test_skip_keeps_the_calls_it_names():
    out = cse('''
    def @main(%x: Tensor[(1, 16), float32]) {
      add(add(relu(%x), 1f), add(relu(%x), 1f))
    }''', skip=lambda e: isinstance(e, Call) and e.op.name == "add")
    assert same(out, '''
    def @main(%x: Tensor[(1, 16), float32]) {
      %0 = relu(%x);
      add(add(%0, 1f), add(%0, 1f))
    }''')


def test_equal_projections_of_one_tuple_merge():
    out = cse('''
    def @main(%x: Tensor[(1, 16, 1, 1), float32], %g: Tensor[(16), float32],
              %b: Tensor[(16), float32], %m: Tensor[(16), float32], %v: Tensor[(16), float32]) {
      %0 = batch_norm(%x, %g, %b, %m, %v);
      add(%0.0, %0.0)
    }''')
    assert same(out, '''
    def @main(%x: Tensor[(1, 16, 1, 1), float32], %g: Tensor[(16), float32],
              %b: Tensor[(16), float32], %m: Tensor[(16), float32], %v: Tensor[(16), float32]) {
      %0 = batch_norm(%x, %g, %b, %m, %v).0;
      add(%0, %0)
    }''')


def test_small_constants_compare_by_value():
    out = cse('''
    def @main(%x: Tensor[(2), float32]) {
      add(multiply(%x, 2f), multiply(%x, 2f))
    }''')
    assert op_calls(out) == ["add", "multiply"]


def test_different_attributes_are_different_computations():
    out = cse('''
    def @main(%x: Tensor[(2, 2), float32]) {
      add(sum(%x, axis=[0]), sum(%x, axis=[1]))
    }''')
    assert op_calls(out) == ["add", "sum", "sum"]


def test_a_let_computing_what_an_earlier_let_did_is_dropped():
    out = cse('''
    def @main(%x: Tensor[(2), float32]) {
      let %a = tanh(%x);
      let %b = tanh(%x);
      let %c = exp(%b);
      add(%a, add(%c, exp(%a)))
    }''')
    assert same(out, '''
    def @main(%x: Tensor[(2), float32]) {
      let %a = tanh(%x);
      let %c = exp(%a);
      add(%a, add(%c, %c))
    }''')


def test_a_binding_is_not_reused_outside_its_scope():
    text = '''
    def @main(%x: Tensor[(2), float32], %c: bool) {
      let %r = if (%c) { let %a = tanh(%x); add(%a, 1f) } else { tanh(%x) };
      let %f = fn (%y: Tensor[(2), float32]) { let %e = exp(%x); add(%e, %y) };
      (%r, exp(%x), %f(%x))
    }'''
    mod = infer_types(parse(text))
    out = eliminate_common_subexpr(mod)
    x = np.array([0.5, -1.5], np.float32)
    for c in (True, False):
        want = (jnp.tanh(x) + 1 if c else jnp.tanh(x), jnp.exp(x), jnp.exp(x) + x)
        for target in ("interp", "llvm"):
            got = run(out, target, x, np.array(c))
            for g, w in zip(got, want):
                np.testing.assert_allclose(g, w, rtol=1e-6)
    # the else branch and the tuple's exp(%x) cannot use %a and %e, out of scope there; they
    # share the let-bound nodes instead, which the lowering computes where both see them
    assert op_calls(out) == ["add", "add", "exp", "tanh"]
    assert structural_equal(infer_types(parse(out.astext()))["main"], out["main"])


def test_a_node_shared_by_both_branches_and_let_bound_in_one():
    mod = infer_types(parse('''
    def @main(%x: Tensor[(2), float32], %c: bool) {
      %0 = tanh(%x);
      if (%c) { let %a = tanh(%x); add(%a, %0) } else { %0 }
    }'''))
    out = eliminate_common_subexpr(mod)
    v = np.array([0.5, -1.5], np.float32)
    for c in (True, False):
        np.testing.assert_allclose(evaluate(out, v, np.array(c)),
                                   2 * np.tanh(v) if c else np.tanh(v), rtol=1e-6)
        assert_matches_jax(out, [v, np.array(c)], target="llvm")


def test_calls_of_functions_are_never_merged():
    # each call of @bump writes the reference: merging them would count once
    mod = infer_types(parse('''
    def @bump(%r: Ref[Tensor[(), float32]]) -> Tensor[(), float32] {
      let %u = ref_write(%r, add(ref_read(%r), 1f));
      ref_read(%r)
    }
    def @main(%x: Tensor[(), float32]) {
      let %r = ref(%x);
      add(@bump(%r), @bump(%r))
    }'''))
    out = eliminate_common_subexpr(mod)
    calls = []
    post_order(out["main"], lambda e: calls.append(e)
               if isinstance(e, Call) and isinstance(e.op, GlobalVar) else None)
    assert len(calls) == 2
    np.testing.assert_allclose(evaluate(out, np.float32(0.0)), 3.0)  # 1 + 2


def test_the_pass_runs_in_the_pipeline_at_level_3():
    assert "EliminateCommonSubexpr" in pipeline.pass_names("llvm", 3)
    assert "EliminateCommonSubexpr" not in pipeline.pass_names("llvm", 2)


def twice(fn) -> IRModule:
    """@main(params) = (@g(params), @g(params)) with @g the random program, @g inlined: two
    copies of every computation, distinct nodes with distinct variables."""
    mod = IRModule()
    g = GlobalVar("g")
    mod.add(g, fn)
    params = [Var(p.name_hint, p.type_annotation) for p in fn.params]
    mod.add(GlobalVar("main"), Function(params, Tuple([Call(g, params), Call(g, params)])))
    return inline_globals(infer_types(mod))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_programs(max_ops=8, control_flow=False))
def test_random_programs_computed_twice_are_computed_once(program_and_inputs):
    # in graph form (let-bound dataflow inlined): the inlined copies are sibling let blocks,
    # whose variables are out of each other's scope
    fn, inputs = program_and_inputs
    out = eliminate_common_subexpr(to_graph_normal_form(twice(fn)))
    once = eliminate_common_subexpr(to_graph_normal_form(infer_types(IRModule.from_expr(fn))))
    assert op_calls(out) == op_calls(once)  # the second copy is entirely the first's
    for target in ("interp", "llvm"):
        assert_matches_jax(out, inputs, target=target, rtol=1e-4, atol=1e-5)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_programs(max_ops=10))
def test_random_programs_keep_their_values(program_and_inputs):
    fn, inputs = program_and_inputs
    out = eliminate_common_subexpr(twice(fn))
    for target in ("interp", "llvm"):
        assert_matches_jax(out, inputs, target=target, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("target", ["interp", "llvm"])
def test_a_program_gives_the_same_values_with_and_without_the_pass(target):
    mod = infer_types(parse('''
    def @main(%x: Tensor[(3, 4), float32], %w: Tensor[(5, 4), float32]) {
      let %h = dense(%x, %w);
      let %k = dense(%x, %w);
      let %s = softmax(%h);
      (add(%s, softmax(%k)), sum(%h, axis=[1]))
    }'''))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 4)).astype(np.float32)
    w = rng.standard_normal((5, 4)).astype(np.float32)
    out = eliminate_common_subexpr(mod)
    assert op_calls(out) == ["add", "dense", "softmax", "sum"]
    got = assert_matches_jax(out, [x, w], target=target)
    h = jnp.dot(x, w.T)
    np.testing.assert_allclose(got[0], 2 * jax.nn.softmax(h, axis=-1), rtol=1e-5)


def jax_softmax(h):
    import jax
    return jax.softmax(h, axis=-1)
