"""Constant folding: what is known at compile time becomes a constant; values are unchanged
(checked against JAX on both targets). The structural cases follow TVM's
tests/python/relay/test_pass_fold_constant.py."""
import json

import jax
import numpy as np
import pytest

from relaydsl.backend.interpreter import evaluate, to_value
from relaydsl.backend.target import get_target
from relaydsl.ir.expr import Call, Constant, Op
from relaydsl.ir.module import IRModule
from relaydsl.ir.parser import parse
from relaydsl.ir.structural import structural_equal
from relaydsl.ir.visitor import post_order
from relaydsl.testing.oracle import assert_matches_jax
from relaydsl.transform import pipeline
from relaydsl.transform.fold_constant import fold_constants
from relaydsl.typing import infer_types


def op_names(fn):
    names = []
    post_order(fn.body, lambda e: names.append(e.op.name)
               if isinstance(e, Call) and isinstance(e.op, Op) else None)
    return sorted(names)


def test_constant_subexpressions_fold_and_the_rest_stays():
    mod = infer_types(parse('''
    def @main(%x: Tensor[(4, 3), float32]) {
      %0 = exp(ones(shape=[3], dtype="float32"));
      %1 = multiply(%0, 2f);
      %2 = take(shape_of(%x), 1, axis=0);
      %3 = cast(%2, dtype="float32");
      add(multiply(%x, %1), %3)
    }'''))
    folded = fold_constants(mod)
    assert op_names(folded["main"]) == ["add", "multiply"]
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    np.testing.assert_allclose(evaluate(folded, x), x * 2 * np.e + 3, rtol=1e-6)
    np.testing.assert_allclose(evaluate(folded, x), evaluate(mod, x), rtol=1e-6)


def test_shape_of_a_symbolic_shape_is_left_for_run_time():
    mod = infer_types(parse('''
    def @main(%x: Tensor[(?, 3), float32]) {
      take(shape_of(%x), 0, axis=0)
    }'''))
    folded = fold_constants(mod)
    assert op_names(folded["main"]) == ["shape_of", "take"]
    assert evaluate(folded, np.zeros((7, 3), np.float32)) == 7


def test_a_literal_cast_like_a_tensor_folds_to_a_constant_of_its_dtype():
    # what the frontend makes of `x + 1.5` and `n * 2` (a Python number meets a tensor)
    mod = infer_types(parse('''
    def @main(%x: Tensor[(2, 3), float16], %n: Tensor[(2,), int32]) {
      (add(%x, cast_like(1.5f64, %x)), multiply(%n, cast_like(2i64, %n)))
    }'''))
    folded = fold_constants(mod)
    assert op_names(folded["main"]) == ["add", "multiply"]
    x, n = np.ones((2, 3), np.float16), np.array([3, -4], np.int32)
    got = evaluate(folded, x, n)
    assert got[0].dtype == np.float16 and got[1].dtype == np.int32
    np.testing.assert_array_equal(got[0], x + np.float16(1.5))
    np.testing.assert_array_equal(got[1], n * 2)


def test_nothing_to_fold_keeps_the_typed_functions_and_an_untyped_input_gets_typed(monkeypatch):
    import relaydsl.transform.pass_infra as infra  # where a pass's input and result are typed

    source = '''
    def @main(%x: Tensor[(4, 3), float32]) {
      add(%x, %x)
    }'''
    calls = []
    real = infra.infer_types
    monkeypatch.setattr(infra, "infer_types", lambda m: calls.append(m) or real(m))
    typed = real(parse(source))
    out = fold_constants(typed)
    assert out is not typed and out["main"] is typed["main"] and not calls  # not re-inferred
    untyped = parse(source)
    out = fold_constants(untyped)
    assert len(calls) == 1 and out["main"].checked_type == typed["main"].checked_type


# ---- TVM's FoldConstant behaviours --------------------------------------------------------

def module(text: str, *constants: np.ndarray) -> IRModule:
    """The typed module of `text`, whose ``meta[Constant][i]`` is ``constants[i]``."""
    if constants:
        table = [{"dtype": c.dtype.name, "shape": list(c.shape), "data": c.ravel().tolist()}
                 for c in constants]
        text += "\n#[metadata]\n" + json.dumps({"Constant": table})
    return infer_types(parse(text))


def same(got: IRModule, expected_text: str, *constants: np.ndarray) -> bool:
    return structural_equal(got["main"], module(expected_text, *constants)["main"])


def run(mod: IRModule, target: str, *args):
    program = get_target(target).build(mod, "main", {})
    return program(*[to_value(a, p.checked_type) for a, p in zip(args, mod["main"].params)])


def run_before_and_after(mod: IRModule, *args: np.ndarray) -> IRModule:
    """`mod` folded; the program before and after gives JAX's values on both targets."""
    folded = fold_constants(mod)
    for program in (mod, folded):
        for target in ("interp", "llvm"):
            assert_matches_jax(program, list(args), target=target)
    return folded


C = np.array([1, 2, 3], np.float32)


def test_constant_subtrees_fold_beside_a_variable():
    mod = module('''
    def @main(%x: Tensor[(1, 2, 3), float32]) {
      %0 = meta[Constant][0];
      add(add(%x, multiply(add(%0, %0), 2f)), %0)
    }''', C)
    out = run_before_and_after(mod, np.arange(6, dtype=np.float32).reshape(1, 2, 3))
    assert same(out, '''
    def @main(%x: Tensor[(1, 2, 3), float32]) {
      add(add(%x, meta[Constant][0]), meta[Constant][1])
    }''', (C + C) * 2, C)


def test_a_let_bound_constant_is_used_in_place_and_the_let_dropped():
    mod = module('''
    def @main(%x: Tensor[(1), float32]) {
      let %t1 = 1f;
      let %t2 = add(%t1, %t1);
      let %t3 = add(%t2, %x);
      %t3
    }''')
    out = run_before_and_after(mod, np.array([0.5], np.float32))
    assert same(out, '''
    def @main(%x: Tensor[(1), float32]) {
      let %t3 = add(2f, %x);
      %t3
    }''')


def test_a_let_bound_tuple_of_constants_is_propagated_too():
    mod = module('''
    def @main(%x: Tensor[(3), float32]) {
      let %t = (meta[Constant][0], 2f);
      multiply(add(%x, %t.0), %t.1)
    }''', C)
    out = run_before_and_after(mod, np.ones(3, np.float32))
    assert same(out, '''
    def @main(%x: Tensor[(3), float32]) {
      multiply(add(%x, meta[Constant][0]), 2f)
    }''', C)


def test_a_let_ascribing_a_type_to_its_constant_stays():
    text = '''
    def @main(%x: Tensor[(?), float32]) {
      let %c: Tensor[(?), float32] = meta[Constant][0];
      add(%x, %c)
    }'''
    mod = module(text, C)
    out = fold_constants(mod)
    assert out["main"].checked_type == mod["main"].checked_type
    assert same(out, text, C)


def test_a_projection_of_a_tuple_is_its_field():
    mod = module('''
    def @main(%x: Tensor[(1), float32]) {
      %0 = (%x, 1f);
      add(add(%0.1, 1f), %0.0)
    }''')
    out = run_before_and_after(mod, np.array([3.0], np.float32))
    assert same(out, '''
    def @main(%x: Tensor[(1), float32]) {
      add(2f, %x)
    }''')


@pytest.mark.parametrize("op", ["concatenate", "stack"])
def test_ops_taking_a_tuple_of_constants_fold(op):
    c = np.array([[1, 2, 3]], np.float32)
    mod = module(f'''
    def @main() {{
      {op}((meta[Constant][0], meta[Constant][0]), axis=0)
    }}''', c)
    out = run_before_and_after(mod)
    want = np.concatenate((c, c), 0) if op == "concatenate" else np.stack((c, c), 0)
    assert same(out, 'def @main() { meta[Constant][0] }', want)


def test_a_tuple_valued_op_becomes_a_tuple_of_constants():
    mod = module('''
    def @main(%x: Tensor[(2), float32]) {
      %0 = split(meta[Constant][0], indices_or_sections=[2]);
      (add(%x, %0.0), %0.1)
    }''', np.array([1, 2, 3, 4, 5], np.float32))
    out = run_before_and_after(mod, np.array([10, 20], np.float32))
    assert same(out, '''
    def @main(%x: Tensor[(2), float32]) {
      (add(%x, meta[Constant][0]), meta[Constant][1])
    }''', np.array([1, 2], np.float32), np.array([3, 4, 5], np.float32))
    out = run_before_and_after(module('''
    def @main() {
      split(meta[Constant][0], indices_or_sections=2, axis=1)
    }''', np.arange(4, dtype=np.int32).reshape(2, 2)))
    assert same(out, 'def @main() { (meta[Constant][0], meta[Constant][1]) }',
                np.array([[0], [2]], np.int32), np.array([[1], [3]], np.int32))


@pytest.mark.parametrize("cond", [True, False])
def test_if_on_a_constant_condition_is_the_branch_taken(cond):
    c = np.array([[1, 2, 3]], np.float32)
    mod = module(f'''
    def @main() {{
      %0 = meta[Constant][0];
      if ({cond}) {{ add(%0, %0) }} else {{ subtract(%0, %0) }}
    }}''', c)
    out = run_before_and_after(mod)
    assert same(out, 'def @main() { meta[Constant][0] }', c + c if cond else c - c)


def test_if_on_a_computed_constant_condition_folds_and_a_dynamic_one_stays():
    mod = module('''
    def @main(%x: Tensor[(3), float32], %b: bool) {
      %0 = if (less(sum(meta[Constant][0]), 10f)) { exp(%x) } else { %x };
      if (%b) { %0 } else { negative(%0) }
    }''', C)
    out = fold_constants(mod)
    assert same(out, '''
    def @main(%x: Tensor[(3), float32], %b: bool) {
      %0 = exp(%x);
      if (%b) { %0 } else { negative(%0) }
    }''')
    for b in (True, False):
        for target in ("interp", "llvm"):
            assert_matches_jax(out, [C, np.array(b)], target=target)


def test_shape_of_a_static_shape_is_a_constant():
    mod = module('''
    def @main(%x: Tensor[(8, 9, 10), float32], %y: Tensor[(8, 9, 10), float32]) {
      shape_of(add(%x, %y))
    }''')
    x = np.zeros((8, 9, 10), np.float32)
    out = run_before_and_after(mod, x, x)
    assert same(out, '''
    def @main(%x: Tensor[(8, 9, 10), float32], %y: Tensor[(8, 9, 10), float32]) {
      meta[Constant][0]
    }''', np.array([8, 9, 10], np.int32))


def test_dropout_of_constants_folds_to_the_mask_its_key_gives():
    # dropout is a pure function of its key: on constants it folds like any op, to the
    # value it has at run time
    text = '''
    def @main() {
      add(dropout(meta[Constant][0], meta[Constant][1], rate=0.5, training=True), 1f)
    }'''
    data, key = np.arange(10, dtype=np.float32), np.array([7, 3], np.int32)
    mod = module(text, data, key)
    folded = fold_constants(mod)
    body = folded["main"].body
    assert isinstance(body, Constant)
    np.testing.assert_array_equal(body.data, run(mod, "llvm"))
    np.testing.assert_array_equal(body.data, run(mod, "interp"))


EFFECTS = '''
def @bump(%r: Ref[Tensor[(3), float32]]) -> Tensor[(3), float32] {
  let %u = ref_write(%r, add(ref_read(%r), 1f));
  ref_read(%r)
}
'''


def test_folding_drops_no_effect():
    # each call of @bump writes the reference: a shape or a projection known at compile time
    # must not drop them (each adds 1 to what the last ref_read reads)
    text = EFFECTS + '''
    def @main(%x: Tensor[(3), float32]) {
      let %r = ref(%x);
      let %s = shape_of(@bump(%r));
      let %t = (@bump(%r), 1f).1;
      let %f = fn () { @bump(%r) };
      let %u = (%f(), 2f).1;
      (%s, %t, %u, ref_read(%r))
    }'''
    mod = module(text)
    out = fold_constants(mod)
    assert same(out, text)
    x = np.array([0, 1, 2], np.float32)
    for target in ("interp", "llvm"):
        for program in (mod, out):
            got = run(program, target, x)
            np.testing.assert_array_equal(got[0], [3])
            np.testing.assert_array_equal(got[3], x + 3)


def test_the_pass_is_in_the_pipeline_at_level_2():
    assert "FoldConstant" in pipeline.pass_names("llvm", 2)
    assert "FoldConstant" not in pipeline.pass_names("llvm", 1)


def test_a_collective_of_constants_is_left_for_run_time():
    # its value depends on the other ranks, whose exchange happens when the program runs
    mod = infer_types(parse('''
    def @main(%x: Tensor[(3), float32]) {
      add(%x, psum(ones(shape=[3], dtype="float32")))
    }'''))
    assert op_names(fold_constants(mod)["main"]) == ["add", "psum"]  # ones folds


def test_a_projection_through_a_let_chain_or_a_bound_tuple_is_its_field():
    # what a grad's (value, gradients) projected to its gradients is: the tuple, and then
    # the value if nothing else reads it, become dead code
    mod = module('''
    def @main(%x: Tensor[(3), float32]) {
      let %c = (let %a = exp(%x); let %b = negative(%x); (%a, %b)).1;
      let %t = (%x, %c);
      add(%t.1, %t.1)
    }''')
    out = run_before_and_after(mod, C)
    assert same(out, '''
    def @main(%x: Tensor[(3), float32]) {
      let %c = (let %a = exp(%x); let %b = negative(%x); %b);
      let %t = (%x, %c);
      add(%c, %c)
    }''')


def test_a_projection_of_a_bound_tuple_of_computations_stays():
    # replacing %t.1 by its field would compute negative(%x) twice
    text = '''
    def @main(%x: Tensor[(3), float32]) {
      let %t = (exp(%x), negative(%x));
      add(%t.1, %t.1)
    }'''
    assert same(fold_constants(module(text)), text)


def test_ones_and_zeros_like_a_small_static_tensor_fold_and_a_large_one_stays():
    mod = module('''
    def @main(%x: Tensor[(2, 3), float32], %n: Tensor[(4), int32],
              %big: Tensor[(64, 64), float32]) {
      (add(ones_like(%x), zeros_like(%x)), ones_like(%n), zeros_like(%big))
    }''')
    out = fold_constants(mod)
    assert op_names(out["main"]) == ["zeros_like"]
    got = evaluate(out, np.zeros((2, 3), np.float32), np.zeros(4, np.int32),
                   np.ones((64, 64), np.float32))
    np.testing.assert_array_equal(got[0], np.ones((2, 3), np.float32))
    assert got[1].dtype == np.int32
    np.testing.assert_array_equal(got[1], np.ones(4, np.int32))
    np.testing.assert_array_equal(got[2], np.zeros((64, 64), np.float32))


def test_collapse_sum_like_a_tensor_of_the_same_shape_is_the_data():
    mod = module('''
    def @main(%x: Tensor[(2, 3), float32], %y: Tensor[(2, 3), float32], %b: Tensor[(3), float32]) {
      (collapse_sum_like(exp(%x), %y), collapse_sum_like(%x, %b))
    }''')
    x = np.arange(6, dtype=np.float32).reshape(2, 3) / 6
    out = run_before_and_after(mod, x, x, C)
    assert same(out, '''
    def @main(%x: Tensor[(2, 3), float32], %y: Tensor[(2, 3), float32], %b: Tensor[(3), float32]) {
      (exp(%x), collapse_sum_like(%x, %b))
    }''')


def test_the_gradients_of_a_loss_alone_do_not_compute_the_loss():
    # grad(f)(w).1: the seed ones_like(loss) folds, the projection drops the value, and the
    # lowered program has no kernel computing the loss (softmax_cross_entropy)
    from relaydsl.ir import Call, Function, Grad, TupleGetItem, Var
    from relaydsl.transform.pass_infra import PassContext

    loss = module('''
    def @main(%x: Tensor[(4, 3), float32], %y: Tensor[(4, 2), float32],
              %w: Tensor[(2, 3), float32], %b: Tensor[(2), float32]) {
      softmax_cross_entropy(add(dense(%x, %w), %b), %y)
    }''')
    mod = IRModule()
    gv = mod.add("loss", loss["main"])
    params = [Var(p.name_hint, p.type_annotation) for p in loss["main"].params]
    mod["main"] = Function(params, TupleGetItem(Call(Grad(gv), params), 1))
    mod = infer_types(mod)
    lowered = pipeline.run(mod, "llvm", PassContext(opt_level=3), "main")
    names: list[str] = []
    post_order(lowered["main"], lambda e: names.append(e.op.name)
               if isinstance(e, Call) and isinstance(e.op, Op) else None)
    assert "softmax_cross_entropy" not in names and "ones_like" not in names
    assert "collapse_sum_like" in names  # the bias's, which sums over the batch
    r = np.random.default_rng(0)
    args = [r.standard_normal(s).astype(np.float32) for s in ((4, 3), (4, 2), (2, 3), (2,))]
    args[1] = np.eye(2, dtype=np.float32)[[0, 1, 1, 0]]
    got = run(mod, "llvm", *args)

    def jax_loss(w, b, x, y):
        logits = x @ w.T + b
        return -jax.numpy.mean(jax.numpy.sum(y * jax.nn.log_softmax(logits), axis=-1))

    want = jax.grad(jax_loss, argnums=(0, 1, 2, 3))(args[2], args[3], args[0], args[1])
    for g, w in zip(got, (want[2], want[3], want[0], want[1])):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
