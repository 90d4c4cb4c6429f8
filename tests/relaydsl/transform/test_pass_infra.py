"""Pass, module_pass, Sequential and PassContext: levels, disabled passes, required passes,
re-typing between passes, and the fusion pipeline run as a Sequential."""
import doctest

import pytest

from relaydsl.backend.interpreter import evaluate
from relaydsl.errors import IRError
from relaydsl.ir import Call, Function, Op, TensorType, Var
from relaydsl.transform import pass_infra
from relaydsl.transform.a_normal_form import ToANormalForm
from relaydsl.transform.fuse_ops import FuseOps
from relaydsl.transform.graph_normal_form import ToGraphNormalForm
from relaydsl.transform.pass_infra import Pass, PassContext, Sequential, module_pass
from tests.relaydsl.transform.fusion_helpers import (
    assert_same_values, check_fused, groups, rand, typed,
)

SRC = """def @main(%x: Tensor[(2, 3), float32]) {
  let %a = exp(%x); let %b = tanh(%a); add(%a, %b)
}"""


def recording(name: str, opt_level: int, log: list[str], required=()) -> Pass:
    @module_pass(opt_level=opt_level, name=name, required=required)
    def run(mod):
        log.append(name)
        return mod.copy()

    return run


def test_sequential_runs_the_passes_enabled_by_the_context():
    log: list[str] = []
    seq = Sequential([recording("A", 0, log), recording("B", 2, log), recording("C", 3, log)])
    seq(typed(SRC))  # default context: opt_level 2
    assert log == ["A", "B"] and seq.last_run == ("A", "B")
    log.clear()
    with PassContext(opt_level=3, disabled_pass=["B"]):
        seq(typed(SRC))
    assert log == ["A", "C"]


def test_contexts_nest_and_restore():
    assert PassContext.current().opt_level == 2
    with PassContext(opt_level=0):
        with PassContext(opt_level=3) as inner:
            assert PassContext.current() is inner
        assert PassContext.current().opt_level == 0
    assert PassContext.current().opt_level == 2


def test_required_passes_run_first_even_when_above_the_level():
    log: list[str] = []
    base = recording("Base", 3, log)
    seq = Sequential([recording("Uses", 1, log, required=[base])])
    seq(typed(SRC))
    assert log == ["Base", "Uses"]


def test_a_pass_called_alone_always_runs_and_retypes():
    x = Var("x", TensorType((2,)))

    @module_pass(opt_level=4)
    def replace_main(mod):
        out = mod.copy()
        out["main"] = Function([x], Call(Op.get("negative"), [x]))
        return out

    assert replace_main.name == "replace_main"
    out = replace_main(typed("def @main(%x: Tensor[(2,), float32]) { %x }"))
    assert out["main"].body.has_type  # typed by the pass


def test_bad_uses_are_reported():
    with pytest.raises(IRError, match="opt_level"):
        PassContext(opt_level=-1)
    with pytest.raises(IRError, match="list of pass names"):
        PassContext(disabled_pass="FuseOps")
    with pytest.raises(IRError, match="not an IRModule"):
        module_pass(lambda mod: None, opt_level=0, name="Broken")(typed(SRC))
    with pytest.raises(IRError, match="takes Passes"):
        Sequential([lambda mod: mod])


def test_the_fusion_pipeline_as_a_sequential():
    mod = typed(SRC)
    pipeline = Sequential([FuseOps, ToANormalForm], name="fusion")
    with PassContext(opt_level=2):
        out = pipeline(mod)
    assert pipeline.last_run == ("ToGraphNormalForm", "FuseOps", "ToANormalForm")
    check_fused(out)
    assert groups(out) == [["add", "exp", "tanh"]]
    assert_same_values(evaluate(mod, rand(2, 3)), evaluate(out, rand(2, 3)))


def test_fuse_ops_reads_its_level_from_the_context():
    mod = ToGraphNormalForm(typed(SRC))
    with PassContext(opt_level=0):
        assert groups(FuseOps(mod)) == [["add"], ["exp"], ["tanh"]]
    with PassContext(opt_level=0, disabled_pass=["FuseOps"]):
        out = Sequential([FuseOps])(mod)
    assert groups(out) == []


def test_docstring_example_runs():
    assert doctest.testmod(pass_infra).failed == 0
