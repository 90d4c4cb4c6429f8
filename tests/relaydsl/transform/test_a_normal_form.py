"""to_a_normal_form: each computation bound once, in order, in the right scope; tail calls
stay in tail position; meaning is preserved."""
import doctest

import numpy as np
from hypothesis import HealthCheck, given, settings

from relaydsl.backend.interpreter import evaluate
from relaydsl.ir import (
    Call, Constant, Function, GlobalVar, If, IRModule, Let, Match, Op, Tuple, TupleGetItem, Var,
)
from relaydsl.ir.adt import Constructor
from relaydsl.ir.visitor import children
from relaydsl.op import lookup
from relaydsl.testing.patching import patch_op
from relaydsl.testing.random_programs import random_programs
from relaydsl.transform import a_normal_form
from relaydsl.transform._util import is_primitive
from relaydsl.transform.a_normal_form import to_a_normal_form
from relaydsl.typing.infer import infer_types
from tests.relaydsl.transform.fusion_helpers import assert_same_values, pipeline, rand, typed

ATOMS = (Var, Constant, GlobalVar, Op, Constructor)


def check_anf(expr) -> None:
    """Arguments of calls, fields of tuples, projected tuples and conditions are atoms."""
    stack, seen = [expr], set()
    while stack:
        e = stack.pop()
        if id(e) in seen or is_primitive(e):
            continue
        seen.add(id(e))
        match e:
            case Call(args=args):
                operands = list(args)
            case Tuple(fields=fields):
                operands = list(fields)
            case TupleGetItem(tuple_value=t):
                operands = [t]
            case If(cond=c):
                operands = [c]
            case Match(data=d):
                operands = [d]
            case _:
                operands = []
        for o in operands:
            assert isinstance(o, (*ATOMS, Function)), f"not an atom: {o!r:.80}"
        stack += children(e)


def count_calls(monkeypatch, op_name: str) -> list[int]:
    definition = lookup(op_name)
    original, counter = definition.numpy_ref, [0]

    def counting(*args, **attrs):
        counter[0] += 1
        return original(*args, **attrs)

    patch_op(monkeypatch, op_name, numpy_ref=counting)
    return counter


SHARED = """def @main(%x: Tensor[(3,), float32]) {
  %0 = exp(%x);
  %1 = add(%0, %0);
  %2 = multiply(%1, %0);
  (%2, %1, %0)
}"""


def test_a_shared_node_is_evaluated_once(monkeypatch):
    mod = typed(SHARED)
    exps = count_calls(monkeypatch, "exp")
    expected = evaluate(mod, rand(3))
    assert exps[0] == 1  # graph form: the interpreter evaluates a shared pure node once
    out = to_a_normal_form(mod)
    exps[0] = 0
    assert_same_values(expected, evaluate(out, rand(3)))
    assert exps[0] == 1
    check_anf(out["main"])


def test_each_primitive_call_is_evaluated_once_after_fusion(monkeypatch):
    mod = typed("""def @main(%x: Tensor[(3,), float32]) {
      %0 = sum(exp(%x)); %1 = add(%0, %0); %2 = multiply(%1, %0); (%2, %1)
    }""")
    sums = count_calls(monkeypatch, "sum")
    _, fused, anf = pipeline(mod)
    evaluate(fused, rand(3))
    assert sums[0] == 1  # as the interpreter shares a pure node of graph form
    sums[0] = 0
    evaluate(anf, rand(3))
    assert sums[0] == 1


def test_bindings_follow_evaluation_order():
    mod = typed("""def @main(%x: Tensor[(3,), float32]) {
      %0 = exp(%x); %1 = tanh(%x); add(%0, %1)
    }""")
    body = to_a_normal_form(mod)["main"].body
    assert [body.value.op.name, body.body.value.op.name, body.body.body.value.op.name] == \
        ["exp", "tanh", "add"]
    assert body.body.body.body is body.body.body.var  # the block ends with a variable


def test_a_node_used_only_in_a_branch_is_bound_in_that_branch():
    mod = typed("""def @main(%x: Tensor[(3,), float32], %c: bool) {
      %0 = exp(%x); %1 = tanh(%x);
      if (%c) { add(%0, %1) } else { %1 }
    }""")
    body = to_a_normal_form(mod)["main"].body
    assert isinstance(body, Let) and body.value.op.name == "tanh"  # used in both branches
    branch = body.body
    assert isinstance(branch, If)
    inner = branch.true_branch
    assert isinstance(inner, Let) and inner.value.op.name == "exp"  # only in the true branch
    for c in (True, False):
        assert_same_values(evaluate(mod, rand(3), c), evaluate(to_a_normal_form(mod), rand(3), c))


def test_a_node_inside_a_closure_stays_inside_unless_shared_with_the_outside():
    mod = typed("""def @main(%x: Tensor[(3,), float32]) {
      %0 = exp(%x);
      let %f = fn (%y: Tensor[(3,), float32]) { %1 = tanh(%x); add(%y, multiply(%1, %0)) };
      %f(%0)
    }""")
    out = to_a_normal_form(mod)
    body = out["main"].body
    assert body.value.op.name == "exp"  # used inside and outside the closure: bound before it
    f = body.body.value
    assert isinstance(f, Function) and f.body.value.op.name == "tanh"  # stays in the closure
    assert_same_values(evaluate(mod, rand(3)), evaluate(out, rand(3)))


def test_tail_calls_stay_in_tail_position_and_long_loops_run():
    mod = typed("""
    def @loop(%i: int32, %x: Tensor[(2,), float32]) -> Tensor[(2,), float32] {
      if (less(%i, 3000)) { @loop(add(%i, 1), multiply(%x, 1f)) } else { %x }
    }
    def @main(%x: Tensor[(2,), float32]) { @loop(0, %x) }
    """)
    out = to_a_normal_form(mod)
    branch = out["loop"].body
    while isinstance(branch, Let):
        branch = branch.body
    tail = branch.true_branch
    while isinstance(tail, Let):
        tail = tail.body
    assert isinstance(tail, Call) and isinstance(tail.op, GlobalVar)
    np.testing.assert_allclose(evaluate(out, rand(2)), rand(2))


def test_recursive_closures_and_matches_survive():
    mod = typed("""def @main(%x: Tensor[(2,), float32]) {
      let %count = fn (%l: List[Tensor[(2,), float32]]) -> Tensor[(2,), float32] {
        match (%l) {
          Cons(%h, %t) => add(exp(%h), %count(%t)),
          Nil => zeros_like(%x)
        }
      };
      %count(Cons(%x, Cons(negative(%x), Nil)))
    }""")
    out = to_a_normal_form(mod)
    check_anf(out["main"])
    assert a_normal_form.outside_a_normal_form(out["main"]) is None
    assert_same_values(evaluate(mod, rand(2)), evaluate(out, rand(2)))


def test_references_keep_their_order():
    mod = typed("""def @main(%x: Tensor[(2,), float32]) {
      let %r = ref(%x);
      let %a = ref_read(%r);
      let %u = ref_write(%r, exp(%a));
      add(%a, ref_read(%r))
    }""")
    out = to_a_normal_form(mod)
    check_anf(out["main"])
    assert a_normal_form.outside_a_normal_form(out["main"]) is None
    assert_same_values(evaluate(mod, rand(2)), evaluate(out, rand(2)))


def test_module_docstring_example_holds():
    assert doctest.testmod(a_normal_form).failed == 0


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_programs(max_ops=12))
def test_random_programs_keep_their_values(program_and_inputs):
    fn, inputs = program_and_inputs
    mod = infer_types(IRModule.from_expr(fn))
    out = to_a_normal_form(mod)
    check_anf(out["main"])
    assert a_normal_form.outside_a_normal_form(out["main"]) is None
    assert_same_values(evaluate(mod, *inputs), evaluate(out, *inputs))


def _types_after_anf_and_after_inference(mod):
    """(type ANF gave, type inference gives) for every node of the A-normal form of `mod`."""
    from relaydsl.ir.visitor import post_order, type_vars_of

    out = to_a_normal_form(mod)
    nodes = []
    for fn in out.functions.values():
        post_order(fn, nodes.append)
    kept = [(e, e.checked_type if e.has_type else None) for e in nodes]
    infer_types(out)
    return [(str(t), str(e.checked_type)) for e, t in kept  # what inference types, ANF did
            if e.has_type and not type_vars_of(e.checked_type)]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_programs(max_ops=12))
def test_a_typed_input_gives_a_typed_output_without_inference(program_and_inputs):
    fn, _ = program_and_inputs
    pairs = _types_after_anf_and_after_inference(infer_types(IRModule.from_expr(fn)))
    assert pairs and all(kept == inferred for kept, inferred in pairs)


def test_types_kept_through_closures_branches_and_matches():
    from relaydsl.ir.parser import parse

    for source in (SHARED, """def @main(%c: bool, %x: Tensor[(3,), float32]) {
      %0 = exp(%x);
      let %f = fn (%y: Tensor[(3,), float32]) { multiply(%y, %0) };
      if (%c) { %f(add(%0, %0)) } else { %0 }
    }"""):
        pairs = _types_after_anf_and_after_inference(infer_types(parse(source)))
        assert pairs and all(kept == inferred for kept, inferred in pairs)


def test_the_check_finds_a_shared_node_and_a_nested_computation_and_names_the_function():
    import pytest

    from relaydsl.errors import IRError

    assert a_normal_form.outside_a_normal_form(typed(SHARED)["main"]) is not None
    assert a_normal_form.outside_a_normal_form(to_a_normal_form(typed(SHARED))["main"]) is None
    x, a, b = Var("x"), Var("a"), Var("b")
    e = Call(Op.get("exp"), [x])
    twice = Function([x], Let(a, e, Let(b, e, Tuple([a, b]))))  # one node bound twice
    assert a_normal_form.outside_a_normal_form(twice) is e
    nested = Function([x], Call(Op.get("negative"), [Call(Op.get("exp"), [x])]))
    assert a_normal_form.outside_a_normal_form(nested) == nested.body.args[0]
    lam = Function([x], Tuple([Function([], nested.body)]))  # inside a function literal
    assert a_normal_form.outside_a_normal_form(lam) is nested.body.args[0]
    with pytest.raises(IRError, match=r"the lowering takes.*@f has a Call"):
        a_normal_form.check_a_normal_form(nested, "f", "the lowering")


def test_the_check_walks_a_chain_of_lets_deeper_than_pythons_stack():
    import sys

    x = Var("x")
    body: Var | Let = x
    lets = []
    for i in range(3 * sys.getrecursionlimit()):
        v = Var(f"t{i}")
        lets.append((v, Call(Op.get("negative"), [body])))
        body = v
    for v, value in reversed(lets):
        body = Let(v, value, body)
    assert a_normal_form.outside_a_normal_form(Function([x], body)) is None
