"""to_graph_normal_form: pure lets become shared DAG nodes; effects, closures and values used
in nested scopes stay bound; meaning is preserved."""
import doctest

import numpy as np

from hypothesis import HealthCheck, given, settings

from relaydsl.backend.interpreter import evaluate
from relaydsl.ir import Call, Function, If, IRModule, Let, Op, TensorType, Tuple, TupleGetItem, Var
from relaydsl.ir.expr import op_call
from relaydsl.testing.random_programs import random_programs
from relaydsl.transform import graph_normal_form
from relaydsl.transform.graph_normal_form import is_dataflow, to_graph_normal_form
from relaydsl.typing.infer import infer_type, infer_types
from tests.relaydsl.transform.fusion_helpers import assert_same_values, rand, typed


def lets(expr) -> list[str]:
    names = []
    while isinstance(expr, Let):
        names.append(expr.var.name_hint)
        expr = expr.body
    return names


def test_a_pure_let_chain_becomes_a_dag_with_shared_nodes():
    mod = typed("""def @main(%x: Tensor[(3,), float32]) {
      let %a = exp(%x); let %b = add(%a, %a); let %c = (%b, %a); let %d = %c.0; %d
    }""")
    body = to_graph_normal_form(mod)["main"].body  # (add(%0, %0), %0).0 with %0 = exp(%x)
    assert isinstance(body, TupleGetItem) and isinstance(body.tuple_value, Tuple)
    add, exp = body.tuple_value.fields
    assert add.op.name == "add" and exp.op.name == "exp"
    assert add.args[0] is exp and add.args[1] is exp  # one node, referenced three times


def test_effects_closures_and_calls_of_functions_stay_bound():
    mod = typed("""
    def @g(%y: Tensor[(3,), float32]) { negative(%y) }
    def @main(%x: Tensor[(3,), float32]) {
      let %r = ref(exp(%x));
      let %v = ref_read(%r);
      let %f = fn (%z: Tensor[(3,), float32]) { tanh(%z) };
      let %w = @g(%v);
      let %u = add(%w, %f(%v));
      %u
    }""")
    out = to_graph_normal_form(mod)
    # %u's value calls a closure: not pure dataflow, so it stays too
    assert lets(out["main"].body) == ["r", "v", "f", "w", "u"]
    assert_same_values(evaluate(mod, rand(3)), evaluate(out, rand(3)))


def test_values_used_in_a_closure_or_a_branch_stay_bound_and_the_condition_inlines():
    mod = typed("""def @main(%x: Tensor[(3,), float32]) {
      let %a = exp(%x);
      let %b = tanh(%x);
      let %c = sum(%x);
      let %f = fn (%z: Tensor[(3,), float32]) { add(%z, %a) };
      if (greater(%c, 0f)) { %f(%b) } else { %x }
    }""")
    out = to_graph_normal_form(mod)
    body = out["main"].body
    assert lets(body) == ["a", "b", "f"]  # %c is used by the condition: same scope
    while isinstance(body, Let):
        body = body.body
    assert isinstance(body, If) and body.cond.args[0].op.name == "sum"
    for x in (rand(3), -rand(3) - 1):
        assert_same_values(evaluate(mod, x), evaluate(out, x))


def test_lets_of_atoms_are_inlined_everywhere_and_dead_pure_lets_disappear():
    mod = typed("""def @main(%x: Tensor[(3,), float32]) {
      let %a = %x; let %k = 2f; let %dead = exp(%x);
      let %f = fn (%z: Tensor[(3,), float32]) { multiply(%z, %k) };
      %f(%a)
    }""")
    out = to_graph_normal_form(mod)
    assert lets(out["main"].body) == ["f"]
    assert_same_values(evaluate(mod, rand(3)), evaluate(out, rand(3)))


def test_lets_ascribing_a_type_stay_so_the_result_still_type_checks():
    # %w is typed only by the ascription (a model's weight in a loss, after inlining); %y's
    # ascription makes a dimension dynamic. Lets whose value has that type of its own go.
    mod = typed("""def @main(%ids: Tensor[(5,), int32], %w) {
      let %w1: Tensor[(10, 4), float32] = %w;
      let %ids1: Tensor[(5,), int32] = %ids;
      let %y: Tensor[(?, 4), float32] = take(%w1, %ids1, axis=0);
      let %k: Tensor[(), float32] = 2f;
      multiply(%y, %k)
    }""")
    out = to_graph_normal_form(mod)  # re-typed: raises if the program became underconstrained
    assert lets(out["main"].body) == ["w1", "y"]
    assert str(out["main"].checked_type.ret_type) == "Tensor[(?, 4), float32]"
    ids = np.array([1, 3, 3, 7, 0], np.int32)
    w = rand(10, 4)
    assert_same_values(evaluate(mod, ids, w), evaluate(out, ids, w))


def test_calls_of_primitive_functions_are_dataflow():
    from relaydsl.ir import Attrs, TensorType, Var

    p = Var("p", TensorType((3,)))
    prim = Function([p], Call(Op.get("exp"), [p]), attrs=Attrs({"Primitive": 1}))
    x = Var("x", TensorType((3,)))
    assert is_dataflow(Call(prim, [x]))
    assert not is_dataflow(Call(Function([p], p), [x]))


def test_unchanged_functions_are_kept():
    mod = typed("def @main(%x: Tensor[(3,), float32]) { exp(%x) }")
    assert to_graph_normal_form(mod)["main"] is mod["main"]


def test_module_docstring_example_holds():
    assert doctest.testmod(graph_normal_form).failed == 0


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_programs(max_ops=12))
def test_random_programs_keep_their_values(program_and_inputs):
    fn, inputs = program_and_inputs
    mod = infer_types(IRModule.from_expr(fn))
    out = to_graph_normal_form(mod)
    assert_same_values(evaluate(mod, *inputs), evaluate(out, *inputs))


def test_a_let_chain_longer_than_max_depth_keeps_a_let_every_max_depth_values():
    from relaydsl.transform import graph_normal_form as gnf

    x = Var("x", TensorType((2,), "float32"))
    body, chain = x, []
    for i in range(2 * gnf.MAX_DEPTH + 10):
        v = Var(f"v{i}")
        chain.append((v, op_call("negative", body)))
        body = v
    for v, value in reversed(chain):
        body = Let(v, value, body)
    fn = infer_type(Function([x], body))
    out = gnf.graph_normal_form_function(fn)
    kept, e = 0, out.body
    while isinstance(e, Let):
        kept, e = kept + 1, e.body
    assert kept == 2  # the 1,000th and 2,000th values stay bound
    ones = np.ones(2, np.float32)
    np.testing.assert_array_equal(evaluate(IRModule.from_expr(out), ones), ones)


def test_a_collective_is_not_dataflow_and_stays_bound():
    x = Var("x", TensorType((3,), "float32"))
    total = Var("total")
    fn = Function([x], Let(total, op_call("psum", x), op_call("add", x, x)))
    infer_type(fn)
    assert not is_dataflow(fn.body.value)
    out = to_graph_normal_form(IRModule.from_expr(fn))["main"]
    assert lets(out.body) == ["total"]
