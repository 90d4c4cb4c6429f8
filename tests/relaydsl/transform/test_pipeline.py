"""The pass pipeline (relaydsl/transform/pipeline.py): the passes at each opt_level, the
CompileOptions a build compiles with, and relay.build honouring the PassContext (level,
required and disabled passes, instruments, caching) on both targets. Values are compared
with JAX."""
import dataclasses
import doctest
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from relaydsl import Float, Tensor, relay
from relaydsl.backend.target import default_target
from relaydsl.ir.expr import RefCreate
from relaydsl.ir.visitor import post_order
from relaydsl.transform import PassContext, PassTimingInstrument, PrintIR, pipeline
from relaydsl.transform.pass_infra import resolve
from relaydsl.transform.pipeline import CompileOptions

README = Path(__file__).resolve().parents[3] / "README.md"
RNG = np.random.default_rng(0)
LOWER_GRADS = ["DeadCodeElimination", "LowerGrads"]  # LowerGrads requires DCE
OPTIMIZE_2 = ["Inline", "InlineGlobals", *LOWER_GRADS, "InlineGlobals", "SimplifyInference",
              "DeadCodeElimination", "FoldConstant"]
OPTIMIZE_3 = ["Inline", "InlineGlobals", "DeadCodeElimination", "FirstOrderGradients",
              *LOWER_GRADS, "InlineGlobals", "SimplifyInference", "DeadCodeElimination",
              "FoldConstant", "FoldScaleAxis", "EliminateCommonSubexpr"]
LLVM_LOWERING = ["StaticShapes", "ToGraphNormalForm", "FuseOps", "ToANormalForm"]
LLVM_LEVEL_3 = ["AlterOpLayout", "FoldConstant"]  # lowering passes from opt_level 3
ON_DEMAND = ["InlineAll", "PartialEvaluate", "EtaExpand", "Defunctionalization", "LambdaLift",
             "InlineOnce", "CombineParallelConv2D"]


@relay
def mlp(x: Tensor[Float, (8, 16)], w1: Tensor[Float, (16, 32)],
        w2: Tensor[Float, (32, 4)]) -> Tensor[Float, (8, 4)]:
    h = relay.tanh(relay.matmul(x, w1) * (2.0 + 3.0))  # a constant to fold
    return relay.softmax(relay.matmul(h, w2))


ENTRY = mlp.global_var.name_hint  # a build's pipeline names its entry: RemoveUnusedFunctions


def mlp_jax(x, w1, w2):
    return jax.nn.softmax(jnp.tanh(x @ w1 * 5.0) @ w2, axis=-1)


@relay
def loss(x: Tensor[Float, (4, 3)]) -> Float:
    return relay.sum(relay.tanh(x) * relay.exp(x))


def mlp_args():
    return [RNG.standard_normal(s).astype(np.float32) for s in [(8, 16), (16, 32), (32, 4)]]


def timed_build(fn, context_options, **build_options):
    timing = PassTimingInstrument()
    with PassContext(instruments=[timing], **context_options):
        exe = relay.build(fn, **build_options)
    return exe, [name for name, _ in timing.timings]


def test_every_pass_has_a_name_and_a_description():
    passes = [p for target in pipeline.LOWERING
              for p in resolve(pipeline.for_target(target).passes)]
    assert {p.name for p in passes} == {*OPTIMIZE_3, *ON_DEMAND, *LLVM_LEVEL_3, *LLVM_LOWERING}
    for p in passes:
        assert re.fullmatch(r"[A-Z][A-Za-z0-9]+", p.name)  # TVM's names: CombineParallelConv2D
        assert p.description and "\n" not in p.description and len(p.description) <= 90


@pytest.mark.parametrize("level, llvm, interp", [
    (0, [*LOWER_GRADS, *LLVM_LOWERING], LOWER_GRADS),
    (1, [*LOWER_GRADS, *LLVM_LOWERING], LOWER_GRADS),
    # llvm's FoldConstant after AlterOpLayout is left out: it would follow FoldConstant
    (2, [*OPTIMIZE_2, *LLVM_LOWERING], OPTIMIZE_2),
    (3, [*OPTIMIZE_3, *LLVM_LEVEL_3, *LLVM_LOWERING], OPTIMIZE_3),
])
def test_the_passes_at_each_level(level, llvm, interp):
    assert pipeline.pass_names("llvm", level) == llvm
    assert pipeline.pass_names("interp", level) == interp


def test_compile_options_take_the_level_given_else_the_contexts_else_the_targets():
    assert CompileOptions.for_target("llvm") == CompileOptions(3)
    assert CompileOptions.for_target("interp") == CompileOptions(0)
    with PassContext(opt_level=1, disabled_pass=["FuseOps"]) as context:
        assert CompileOptions.for_target("llvm").opt_level == 1
        options = CompileOptions.for_target("interp", opt_level=2)
    assert options.opt_level == options.context.opt_level == 2  # the context at that level
    assert options.context.disabled_pass == context.disabled_pass == {"FuseOps"}
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.opt_level = 3  # type: ignore[misc]


@pytest.mark.parametrize("level", [-1, 4, 1.0, "3", True, None])
def test_compile_options_reject_a_bad_opt_level(level):
    with pytest.raises(ValueError, match=re.escape(
            f"opt_level must be an int from 0 to 3, got {level!r}")):
        CompileOptions(level)


def test_unknown_target_has_no_pipeline():
    with pytest.raises(ValueError, match="no pipeline for target 'gpu'"):
        pipeline.for_target("gpu")


def test_build_runs_the_targets_pipeline_at_their_default_levels():
    _, ran = timed_build(mlp, {}, target="llvm")
    assert ran == pipeline.pass_names("llvm", 3, entry=ENTRY)
    _, ran = timed_build(mlp, {}, target="interp")
    assert ran == ["RemoveUnusedFunctions", *LOWER_GRADS]  # the interpreter stays the reference
    _, ran = timed_build(mlp, {"opt_level": 2}, target="interp")
    assert ran == pipeline.pass_names("interp", 2, entry=ENTRY)


def test_the_opt_level_option_wins_over_the_context():
    exe, ran = timed_build(mlp, {"opt_level": 2}, target="llvm", opt_level=0)
    assert ran == pipeline.pass_names("llvm", 0, entry=ENTRY) and exe.program.options.opt_level == 0


@pytest.mark.parametrize("target", ["llvm", "interp"])
def test_a_disabled_pass_does_not_run_and_the_program_still_computes_the_same(target):
    exe, ran = timed_build(mlp, {"opt_level": 3, "disabled_pass": ["FoldConstant"]},
                           target=target)
    assert "FoldConstant" not in ran and "InlineGlobals" in ran
    args = mlp_args()
    np.testing.assert_allclose(exe(*args), mlp_jax(*args), rtol=1e-5, atol=1e-6)


def test_without_fuse_ops_llvm_still_runs_the_program():
    exe, ran = timed_build(mlp, {"disabled_pass": ["FuseOps"]}, target="llvm")
    assert "FuseOps" not in ran
    # no primitive functions: native code runs each op call as a kernel of its own
    assert exe.program.path == "native" and exe.program.native.kernel_calls == 5
    args = mlp_args()
    np.testing.assert_allclose(exe(*args), mlp_jax(*args), rtol=1e-5, atol=1e-6)


def test_a_required_pass_runs_below_its_level():
    exe, ran = timed_build(mlp, {"opt_level": 0, "required_pass": ["FoldConstant"]},
                           target="llvm")
    assert ran == ["RemoveUnusedFunctions", *LOWER_GRADS, "FoldConstant", *LLVM_LOWERING]
    args = mlp_args()
    np.testing.assert_allclose(exe(*args), mlp_jax(*args), rtol=1e-5, atol=1e-6)


def op_calls(exe) -> int:
    return exe.program.native.kernel_calls


def test_opt_level_0_runs_one_kernel_per_op_and_1_fuses():
    with PassContext(opt_level=0):
        unfused = relay.build(mlp, target="llvm")
    with PassContext(opt_level=1):
        fused = relay.build(mlp, target="llvm")
    assert unfused.program.path == fused.program.path == "native"
    # matmul, multiply (by the unfolded 2 + 3: add), tanh, matmul, softmax
    assert op_calls(unfused) == 6
    assert op_calls(fused) < op_calls(unfused)
    args = mlp_args()
    for exe in (unfused, fused):
        np.testing.assert_allclose(exe(*args), mlp_jax(*args), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("level, static", [(2, False), (3, True)])
def test_first_order_gradients_from_level_3(level, static):
    with PassContext(opt_level=level):
        grad = relay.grad(loss)
    program = grad._program[0]
    references: list = []
    post_order(program.mod[program.entry], lambda e: references.append(e)
               if isinstance(e, RefCreate) else None)
    assert program.path == "native"
    assert (not references) is static  # level 2: the higher-order gradient's references
    x = RNG.standard_normal((4, 3)).astype(np.float32)
    value, (dx,) = grad(x)
    f = lambda v: jnp.sum(jnp.tanh(v) * jnp.exp(v))  # noqa: E731
    np.testing.assert_allclose(value, f(x), rtol=1e-5)
    np.testing.assert_allclose(dx, jax.grad(f)(x), rtol=1e-5, atol=1e-6)


def test_instruments_through_relay_build(capsys):
    timing = relay.PassTimingInstrument()
    with relay.PassContext(opt_level=2, instruments=[timing, relay.PrintIR("FuseOps")]):
        relay.build(mlp)
    assert [name for name, _ in timing.timings] == pipeline.pass_names("llvm", 2, entry=ENTRY)
    assert "FoldConstant" in timing.render()
    printed = capsys.readouterr().out
    assert printed.count("// before FuseOps") == 1 and printed.count("// after FuseOps") == 1
    assert "// before FoldConstant" not in printed
    assert "Primitive" not in printed.split("// after FuseOps")[0]


def test_print_ir_of_every_pass(capsys):
    with PassContext(opt_level=0, instruments=[PrintIR()]):
        relay.build(mlp, target="interp")
    printed = capsys.readouterr().out
    assert "// before LowerGrads" in printed and "// after LowerGrads" in printed


def test_builds_are_cached_per_pass_context_settings():
    default = relay.build(mlp)
    assert relay.build(mlp) is default
    with PassContext(opt_level=3):  # the same settings as the default's
        assert relay.build(mlp) is default
    with PassContext(opt_level=1):
        level1 = relay.build(mlp)
    assert level1 is not default
    with PassContext(opt_level=1):
        assert relay.build(mlp) is level1
    with PassContext(opt_level=1, disabled_pass=["FuseOps"]):
        assert relay.build(mlp) is not level1
    with PassContext(opt_level=1, instruments=[PassTimingInstrument()]):
        assert relay.build(mlp) is not level1


def test_build_and_calls_use_the_same_default_target(monkeypatch):
    x = list(mlp_args())
    assert relay.build(mlp).target == default_target() == "llvm"
    mlp(*x)
    assert relay.build(mlp) is mlp.build()  # a call runs the executable relay.build returns
    monkeypatch.setenv("RELAYDSL_TARGET", "interp")
    assert relay.build(mlp).target == "interp" == mlp.build().target


def test_a_context_reaches_calls_too():
    timing = PassTimingInstrument()
    args = mlp_args()
    with PassContext(opt_level=0, instruments=[timing]):
        out = mlp(*args)
    assert [name for name, _ in timing.timings] == pipeline.pass_names("llvm", 0, entry=ENTRY)
    np.testing.assert_allclose(out, mlp_jax(*args), rtol=1e-5, atol=1e-6)


def test_the_readme_table_is_the_pipelines():
    text = README.read_text()
    table = re.search(r"<!-- pipeline table -->\n(.*?)\n<!-- end pipeline table -->", text,
                      re.S).group(1)
    assert table == pipeline.table()


def test_docstring_examples_run():
    assert doctest.testmod(pipeline).failed == 0
