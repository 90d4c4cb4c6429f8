"""FuseOps: the grouping (chains, diamonds, anchors with epilogues, reductions, tuples,
opaque ops, control flow) and that fused programs compute the same values."""
from hypothesis import HealthCheck, given, settings

from relaydsl.ir import Constant, If, IRModule, Tuple, TupleGetItem
from relaydsl.testing.random_programs import random_programs
from relaydsl.transform._util import is_primitive
from relaydsl.transform.fuse_ops import fuse_ops, primitive_functions
from relaydsl.transform.graph_normal_form import to_graph_normal_form
from relaydsl.typing.infer import infer_types
from tests.relaydsl.transform.fusion_helpers import (
    check_fused, check_pipeline, groups, pipeline, rand, typed,
)

X23 = "%x: Tensor[(2, 3), float32]"


def fused_groups(src: str, *args, **options) -> list[list[str]]:
    mod = typed(src)
    return groups(check_pipeline(mod, *args, **options))


# ---- chains and diamonds ---------------------------------------------------------------------

def test_an_elementwise_chain_is_one_group():
    src = f"def @main({X23}) {{ relu(tanh(exp(negative(%x)))) }}"
    assert fused_groups(src, rand(2, 3)) == [["exp", "negative", "relu", "tanh"]]


def test_a_let_chain_fuses_after_graph_normal_form():
    src = f"""def @main({X23}, %y: Tensor[(3,), float32]) {{
      let %a = exp(%x); let %b = add(%a, %y); let %c = sigmoid(%b); %c
    }}"""
    assert fused_groups(src, rand(2, 3), rand(3)) == [["add", "exp", "sigmoid"]]


def test_a_diamond_rejoins_into_one_group():
    src = f"def @main({X23}) {{ %0 = exp(%x); %1 = tanh(%x); add(%0, %1) }}"
    assert fused_groups(src, rand(2, 3)) == [["add", "exp", "tanh"]]


def test_a_diamond_over_a_shared_intermediate_is_one_group():
    src = f"""def @main({X23}) {{
      %0 = exp(%x); %1 = tanh(%0); %2 = sigmoid(%0); %3 = multiply(%1, %2); relu(%3)
    }}"""
    assert fused_groups(src, rand(2, 3)) == [["exp", "multiply", "relu", "sigmoid", "tanh"]]


def test_a_value_used_by_the_result_and_by_a_consumer_ends_a_group():
    # %0 is used by tanh and returned: it has no post-dominator, so it is a group's output.
    src = f"def @main({X23}) {{ %0 = exp(negative(%x)); (%0, tanh(%0)) }}"
    assert fused_groups(src, rand(2, 3)) == [["exp", "negative"], ["tanh"]]


def test_broadcasting_and_injective_ops_fuse_with_elementwise_ones():
    src = """def @main(%x: Tensor[(2, 3), float32], %y: Tensor[(3,), float32]) {
      %0 = add(%x, %y); %1 = transpose(%0); %2 = reshape(%1, newshape=[6]); exp(%2)
    }"""
    assert fused_groups(src, rand(2, 3), rand(3)) == [["add", "exp", "reshape", "transpose"]]


# ---- anchors: dense, matmul, conv2d, pools -----------------------------------------------------

def test_dense_bias_add_relu_is_one_group():
    src = """def @main(%x: Tensor[(2, 8), float32], %w: Tensor[(4, 8), float32],
                      %b: Tensor[(4,), float32]) {
      relu(bias_add(dense(%x, %w), %b))
    }"""
    assert fused_groups(src, rand(2, 8), rand(4, 8), rand(4)) == [["bias_add", "dense", "relu"]]


CONV_BLOCK = """def @main(%x: Tensor[(1, 4, 6, 6), float32], %w: Tensor[(4, 4, 3, 3), float32],
                  %b: Tensor[(4,), float32]) {
  %0 = conv2d(%x, %w, padding=[1, 1]);
  %1 = bias_add(%0, %b, axis=1);
  %2 = relu(%1);
  add(%2, %x)
}"""


def test_a_residual_conv_block_is_one_group():
    args = rand(1, 4, 6, 6), rand(4, 4, 3, 3), rand(4)
    assert fused_groups(CONV_BLOCK, *args) == [["add", "bias_add", "conv2d", "relu"]]


def test_two_anchors_never_share_a_group():
    src = """def @main(%x: Tensor[(1, 4, 6, 6), float32], %w: Tensor[(4, 4, 3, 3), float32]) {
      %0 = conv2d(%x, %w, padding=[1, 1]); %1 = relu(%0);
      %2 = conv2d(%1, %w, padding=[1, 1]); %3 = conv2d(%x, %w, padding=[1, 1]);
      add(%2, %3)
    }"""
    got = fused_groups(src, rand(1, 4, 6, 6), rand(4, 4, 3, 3))
    assert got == [["add", "conv2d"], ["conv2d"], ["conv2d", "relu"]]


def test_a_matmul_epilogue_and_a_pool_after_it():
    src = """def @main(%x: Tensor[(1, 2, 4, 4), float32], %a: Tensor[(3, 4), float32],
                      %b: Tensor[(4, 5), float32]) {
      %0 = max_pool2d(%x, pool_size=[2, 2], strides=[2, 2]); %1 = sigmoid(%0);
      %2 = matmul(%a, %b); %3 = tanh(%2);
      (%1, %3)
    }"""
    got = fused_groups(src, rand(1, 2, 4, 4), rand(3, 4), rand(4, 5))
    assert got == [["matmul", "tanh"], ["max_pool2d", "sigmoid"]]


def test_a_transpose_feeding_a_contraction_joins_its_group():
    # the gradient of dense w.r.t. its weight: matmul(transpose(g), x)
    src = """def @main(%g: Tensor[(4, 3), float32], %x: Tensor[(4, 5), float32],
                    %w: Tensor[(5, 6), float32]) {
      (matmul(transpose(%g), %x), dense(%x, transpose(%w, axes=[1, 0])))
    }"""
    assert fused_groups(src, rand(4, 3), rand(4, 5), rand(5, 6)) == [
        ["dense", "transpose"], ["matmul", "transpose"]]


def test_a_transpose_with_another_consumer_or_of_rank_three_stays_alone():
    shared = """def @main(%g: Tensor[(4, 3), float32], %x: Tensor[(4, 5), float32]) {
      %0 = transpose(%g); (matmul(%0, %x), exp(%0))
    }"""
    assert fused_groups(shared, rand(4, 3), rand(4, 5)) == [["exp"], ["matmul"], ["transpose"]]
    rank3 = """def @main(%g: Tensor[(2, 4, 3), float32], %x: Tensor[(2, 4, 5), float32]) {
      matmul(transpose(%g, axes=[0, 2, 1]), %x)
    }"""
    assert fused_groups(rank3, rand(2, 4, 3), rand(2, 4, 5)) == [["matmul"], ["transpose"]]


def test_an_anchor_does_not_take_a_reduction_epilogue():
    src = """def @main(%x: Tensor[(2, 8), float32], %w: Tensor[(4, 8), float32]) {
      sum(dense(%x, %w), axis=[1])
    }"""
    assert fused_groups(src, rand(2, 8), rand(4, 8)) == [["dense"], ["sum"]]


# ---- reductions ------------------------------------------------------------------------------

def test_exp_then_sum_is_one_group_ending_at_the_reduction():
    src = f"def @main({X23}) {{ %0 = sum(exp(%x), axis=[1]); negative(%0) }}"
    assert fused_groups(src, rand(2, 3)) == [["exp", "sum"], ["negative"]]


def test_sum_then_exp_is_two_groups():
    src = f"def @main({X23}) {{ exp(sum(%x, axis=[1])) }}"
    assert fused_groups(src, rand(2, 3)) == [["exp"], ["sum"]]


def test_an_injective_producer_stays_out_of_a_reduction_as_in_tvm():
    src = f"def @main({X23}) {{ sum(transpose(%x)) }}"
    assert fused_groups(src, rand(2, 3)) == [["sum"], ["transpose"]]


def test_a_softmax_written_out_fuses_as_tvm_does():
    src = f"""def @main({X23}) {{
      %m = max(%x, axis=[1], keepdims=True);
      %e = exp(subtract(%x, %m));
      %s = sum(%e, axis=[1], keepdims=True);
      divide(%e, %s)
    }}"""
    # max and sum end their groups; exp feeds both sum and divide, so it is a group output.
    assert fused_groups(src, rand(2, 3)) == [["divide"], ["exp", "subtract"], ["max"], ["sum"]]


def test_opaque_ops_stay_alone():
    src = """def @main(%x: Tensor[(2, 6), float32], %g: Tensor[(6,), float32]) {
      %0 = softmax(exp(%x)); %1 = layer_norm(%0, %g, %g); relu(%1)
    }"""
    got = fused_groups(src, rand(2, 6), rand(6))
    assert got == [["exp"], ["layer_norm"], ["relu"], ["softmax"]]


# ---- tuples and multiple outputs -------------------------------------------------------------

def test_split_with_its_projections_fuses_into_the_consumer():
    src = """def @main(%x: Tensor[(2, 4), float32]) {
      %s = split(%x, indices_or_sections=2, axis=1); add(%s.0, tanh(%s.1))
    }"""
    assert fused_groups(src, rand(2, 4)) == [["add", "split", "tanh"]]


def test_a_group_ending_at_split_returns_a_tuple_projected_outside():
    src = """def @main(%x: Tensor[(2, 4), float32]) {
      %s = split(exp(%x), indices_or_sections=2, axis=1); (relu(%s.0), tanh(%s.1))
    }"""
    fused = typed(src)
    got = check_pipeline(fused, rand(2, 4))
    assert groups(got) == [["exp", "split"], ["relu"], ["tanh"]]
    split_fn = next(f for f in primitive_functions(got["main"]) if "split" in repr(f))
    assert len(split_fn.checked_type.ret_type.fields) == 2
    body = got["main"].body
    assert isinstance(body, Tuple)  # the result tuple stays a plain tuple
    relu_call = body.fields[0]
    assert isinstance(relu_call.args[0], TupleGetItem)  # the field is projected outside


def test_tuple_results_are_separate_groups_and_a_plain_tuple():
    src = f"def @main({X23}) {{ (exp(%x), tanh(%x), %x) }}"
    fused = check_pipeline(typed(src), rand(2, 3))
    assert groups(fused) == [["exp"], ["tanh"]]
    assert isinstance(fused["main"].body, Tuple)


def test_injective_producers_fuse_through_a_tuple_into_concatenate():
    src = """def @main(%x: Tensor[(2, 3), float32], %y: Tensor[(4, 3), float32]) {
      %0 = exp(%x); %1 = relu(%y); %2 = (%0, %1); %3 = concatenate(%2, axis=0); sigmoid(%3)
    }"""
    assert fused_groups(src, rand(2, 3), rand(4, 3)) == [["concatenate", "exp", "relu", "sigmoid"]]


def test_a_tuple_input_is_passed_field_by_field():
    # concatenate of a parameter tuple: the primitive function takes two tensors.
    src = """def @main(%t: (Tensor[(2, 3), float32], Tensor[(1, 3), float32])) {
      exp(concatenate(%t, axis=0))
    }"""
    fused = check_pipeline(typed(src), (rand(2, 3), rand(1, 3)))
    (fn,) = primitive_functions(fused["main"])
    assert len(fn.params) == 2


def test_constants_stay_inside_the_primitive_function():
    src = f"def @main({X23}) {{ multiply(add(exp(%x), 1f), 2f) }}"
    fused = check_pipeline(typed(src), rand(2, 3))
    (fn,) = primitive_functions(fused["main"])
    assert len(fn.params) == 1
    constants = []
    from relaydsl.ir import post_order
    post_order(fn.body, lambda e: constants.append(e) if isinstance(e, Constant) else None)
    assert len(constants) == 2


# ---- control flow, loops, closures -----------------------------------------------------------

def test_fusion_happens_inside_if_branches_and_not_across_them():
    src = f"""def @main({X23}) {{
      %0 = exp(%x);
      if (greater(sum(%0), 0f)) {{ relu(tanh(%0)) }} else {{ negative(sigmoid(%0)) }}
    }}"""
    fused = check_pipeline(typed(src), rand(2, 3))
    assert groups(fused) == [["exp"], ["greater"], ["negative", "sigmoid"], ["relu", "tanh"],
                             ["sum"]]
    branch = fused["main"].body
    while not isinstance(branch, If):
        branch = branch.body
    assert is_primitive(branch.true_branch.op)
    check_pipeline(typed(src), -rand(2, 3) - 2)  # the other branch


def test_a_shared_node_used_inside_a_branch_is_computed_by_one_group_outside():
    src = f"""def @main({X23}) {{
      %0 = add(exp(%x), tanh(%x));
      if (greater(sum(%0), 0f)) {{ %0 }} else {{ negative(%0) }}
    }}"""
    fused = check_pipeline(typed(src), rand(2, 3))
    assert groups(fused) == [["add", "exp", "tanh"], ["greater"], ["negative"], ["sum"]]


def test_a_loop_body_is_fused():
    src = """
    def @loop(%i: int32, %x: Tensor[(2, 3), float32]) -> Tensor[(2, 3), float32] {
      if (less(%i, 3)) { @loop(add(%i, 1), sigmoid(multiply(%x, 2f))) } else { %x }
    }
    def @main(%x: Tensor[(2, 3), float32]) { @loop(0, exp(%x)) }
    """
    fused = check_pipeline(typed(src), rand(2, 3))
    assert groups(fused["loop"]) == [["add"], ["less"], ["multiply", "sigmoid"]]
    assert groups(fused["main"]) == [["exp"]]


def test_closures_are_fused_inside_and_stay_closures():
    src = f"""def @main({X23}) {{
      let %a = exp(%x);
      let %f = fn (%y: Tensor[(2, 3), float32]) {{ tanh(add(%y, %a)) }};
      %f(relu(%f(%x)))
    }}"""
    fused = check_pipeline(typed(src), rand(2, 3))
    assert groups(fused) == [["add", "tanh"], ["exp"], ["relu"]]


def test_refs_and_matches_are_opaque_boundaries():
    src = """def @main(%x: Tensor[(2,), float32]) {
      let %r = ref(exp(%x));
      let %u = ref_write(%r, tanh(ref_read(%r)));
      match (Cons(%x, Nil)) {
        Cons(%h, _) => add(ref_read(%r), relu(%h)),
        Nil => ref_read(%r)
      }
    }"""
    fused = check_pipeline(typed(src), rand(2))
    assert groups(fused) == [["add", "relu"], ["exp"], ["tanh"]]


# ---- options and invariants ------------------------------------------------------------------

def test_fuse_opt_level_zero_puts_each_op_alone():
    src = f"def @main({X23}) {{ relu(tanh(exp(%x))) }}"
    assert fused_groups(src, rand(2, 3), fuse_opt_level=0) == [["exp"], ["relu"], ["tanh"]]


def test_groups_are_capped_at_max_fuse_depth():
    body = "%x"
    for i in range(10):
        body = f"{'tanh' if i % 2 else 'sigmoid'}({body})"
    got = fused_groups(f"def @main({X23}) {{ {body} }}", rand(2, 3), max_fuse_depth=4)
    assert sorted(len(g) for g in got) == [2, 4, 4]


def test_fusion_is_idempotent():
    mod = fuse_ops(to_graph_normal_form(typed(CONV_BLOCK)))
    again = fuse_ops(mod)
    assert groups(again) == groups(mod)
    assert again["main"] is mod["main"]


def test_shape_polymorphic_functions_fuse():
    src = "def @main(%x: Tensor[(n, 3), float32]) { sum(exp(tanh(%x)), axis=[1]) }"
    fused = check_pipeline(typed(src), rand(5, 3))
    assert groups(fused) == [["exp", "sum", "tanh"]]


def test_lenet_fuses_each_conv_and_dense_with_its_bias_and_activation():
    from tests.frontend.models import loss

    fused = fuse_ops(to_graph_normal_form(loss.mod))
    check_fused(fused)
    assert groups(fused) == [
        ["bias_add", "conv2d", "tanh"], ["bias_add", "conv2d", "tanh"], ["bias_add", "dense"],
        ["bias_add", "dense", "tanh"], ["max_pool2d"], ["max_pool2d"], ["reshape"],
        ["softmax_cross_entropy"],
    ]


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_programs(max_ops=12))
def test_random_programs_compute_the_same_values_after_fusion(program_and_inputs):
    fn, inputs = program_and_inputs
    mod = infer_types(IRModule.from_expr(fn))
    check_pipeline(mod, *inputs)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_programs(max_ops=8, control_flow=False))
def test_random_straight_line_programs_fuse_into_fewer_calls(program_and_inputs):
    fn, _ = program_and_inputs
    mod = infer_types(IRModule.from_expr(fn))
    graph, fused, _ = pipeline(mod)
    n_ops = sum(len(g) for g in groups(fused))
    assert len(groups(fused)) <= n_ops
    assert len(groups(fuse_ops(graph, fuse_opt_level=0))) == n_ops
