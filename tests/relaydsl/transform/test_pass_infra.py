"""Pass, module_pass, Sequential and PassContext: passes as frozen objects with their options
as fields, prerequisites resolved, levels, disabled and required passes, re-typing between
passes, the fusion passes run as a Sequential, and instruments."""
import dataclasses
import doctest
import io
from dataclasses import dataclass

import pytest

from relaydsl.backend.interpreter import evaluate
from relaydsl.errors import IRError
from relaydsl.ir import Call, Expr, Function, IRModule, Op, TensorType, Var
from relaydsl.transform import instrument, pass_infra
from relaydsl.transform.instrument import PassInstrument, PassTimingInstrument, PrintIR
from relaydsl.transform.combine_parallel_conv2d import CombineParallelConv2D
from relaydsl.transform.eliminate_common_subexpr import EliminateCommonSubexpr
from relaydsl.transform.fold_constant import FoldConstant
from relaydsl.transform.pass_infra import Pass, PassContext, Sequential, module_pass, resolve
from relaydsl.transform.pipeline import AlterOpLayout, FuseOps, ToANormalForm, ToGraphNormalForm
from relaydsl.typing import infer_types
from tests.relaydsl.transform.fusion_helpers import (
    assert_same_values, check_fused, groups, rand, typed,
)

SRC = """def @main(%x: Tensor[(2, 3), float32]) {
  let %a = exp(%x); let %b = tanh(%a); add(%a, %b)
}"""


def recording(name: str, opt_level: int, log: list[str], required=()) -> Pass:
    @module_pass(opt_level=opt_level, name=name, required=required, description=f"logs {name}")
    def run(mod):
        log.append(name)
        return mod.copy()

    return run


def test_sequential_runs_the_passes_enabled_by_the_context():
    log: list[str] = []
    seq = Sequential([recording("A", 0, log), recording("B", 2, log), recording("C", 3, log)])
    seq(typed(SRC))  # default context: no level set, every pass runs
    assert log == ["A", "B", "C"] and seq.last_run == ("A", "B", "C")
    log.clear()
    with PassContext(opt_level=2):
        seq(typed(SRC))
    assert log == ["A", "B"]
    assert [p.name for p in seq.plan(PassContext(opt_level=3, disabled_pass=["B"]))] == ["A", "C"]
    log.clear()
    with PassContext(opt_level=3, disabled_pass=["B"]):
        seq(typed(SRC))
    assert log == ["A", "C"]


def test_required_pass_runs_above_the_level_and_disabled_wins():
    log: list[str] = []
    seq = Sequential([recording("A", 0, log), recording("B", 2, log), recording("C", 3, log)])
    with PassContext(opt_level=0, required_pass=["C"]):
        seq(typed(SRC))
    assert log == ["A", "C"]
    log.clear()
    with PassContext(opt_level=0, required_pass=["C"], disabled_pass=["A", "C"]):
        seq(typed(SRC))
    assert log == []


def test_contexts_nest_and_restore():
    assert PassContext.current().opt_level is None
    with PassContext(opt_level=0):
        with PassContext(opt_level=3) as inner:
            assert PassContext.current() is inner
        assert PassContext.current().opt_level == 0
    assert PassContext.current().opt_level is None


def test_contexts_with_equal_settings_are_equal():
    a = PassContext(opt_level=1, disabled_pass=["X", "Y"])
    assert a == PassContext(opt_level=1, disabled_pass=("Y", "X")) and hash(a) == hash(
        PassContext(opt_level=1, disabled_pass=["Y", "X"]))
    timing = PassTimingInstrument()
    assert PassContext(instruments=[timing]) == PassContext(instruments=[timing])
    assert PassContext(instruments=[timing]) != PassContext(instruments=[PassTimingInstrument()])


def test_a_module_pass_requires_passes_or_pass_classes():
    log: list[str] = []
    base = recording("Base", 3, log)
    seq = Sequential([recording("Uses", 1, log, required=[base]),
                      recording("Fuses", 1, log, required=[ToGraphNormalForm])])
    seq(typed(SRC))
    assert log == ["Base", "Uses", "Fuses"]
    assert seq.last_run == ("Base", "Uses", "ToGraphNormalForm", "Fuses")


def test_a_pass_called_alone_always_runs_and_retypes():
    x = Var("x", TensorType((2,)))

    @module_pass(opt_level=4, description="replaces main")
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
    with pytest.raises(IRError, match="list of pass names"):
        PassContext(required_pass="FuseOps")
    with pytest.raises(IRError, match="PassInstruments"):
        PassContext(instruments=[print])
    with pytest.raises(IRError, match="not an IRModule"):
        module_pass(lambda mod: None, opt_level=0, name="Broken", description="-")(typed(SRC))
    with pytest.raises(IRError, match="takes Passes"):
        Sequential([lambda mod: mod])
    with pytest.raises(IRError, match=r"got the class FuseOps: FuseOps\(\) is the pass"):
        Sequential([FuseOps])


def test_bad_pass_declarations_are_reported():
    with pytest.raises(IRError, match="opt_level must be an int >= 0, got -1"):
        class Negative(Pass, opt_level=-1, description="-"):
            def transform(self, mod):
                return mod
    with pytest.raises(IRError, match="the description is one line"):
        class TwoLines(Pass, opt_level=0, description="first\nsecond"):
            def transform(self, mod):
                return mod
    with pytest.raises(IRError, match="requires takes pass classes, got FuseOps"):
        class Instance(Pass, opt_level=0, description="-", requires=(FuseOps(),)):
            def transform(self, mod):
                return mod
    with pytest.raises(TypeError, match="abstract method"):
        class NoTransform(Pass, opt_level=0, description="-"):
            pass

        NoTransform()


# ---- passes as objects, their prerequisites ----------------------------------------------------

def test_a_pass_is_a_frozen_object_its_options_fields_its_name_its_class():
    fuse = FuseOps(level=0)
    assert fuse == FuseOps(level=0) and hash(fuse) == hash(FuseOps(level=0))
    assert fuse != FuseOps(level=2) and fuse != FuseOps()
    assert repr(fuse) == "FuseOps(level=0, max_fuse_depth=256)"
    assert fuse.name == FuseOps.name == "FuseOps" and fuse.opt_level == 0
    assert FuseOps.requires == (ToGraphNormalForm,)
    with pytest.raises(dataclasses.FrozenInstanceError):
        fuse.level = 2  # type: ignore[misc]
    assert AlterOpLayout(everywhere=True) == AlterOpLayout(block=32, everywhere=True)
    with pytest.raises(ValueError, match="min_num_branches must be at least 2, got 1"):
        CombineParallelConv2D(min_num_branches=1)


def logging_pass(name: str, log: list[str], requires=(), opt_level: int = 0) -> type[Pass]:
    """A pass class `name` that logs its runs, with `requires`."""

    def transform(self, mod):
        log.append(name)
        return mod.copy()

    cls = type(name, (Pass,), {"transform": transform}, opt_level=opt_level,
               description=f"logs {name}", requires=requires)
    return dataclass(frozen=True)(cls)


def test_prerequisites_run_first_theirs_before_them_and_once_in_a_row():
    log: list[str] = []
    graph = logging_pass("Graph", log)
    fuse = logging_pass("Fuse", log, requires=(graph,))
    anf = logging_pass("Anf", log, requires=(fuse,))
    seq = Sequential([anf()])
    seq(typed(SRC))
    assert log == ["Graph", "Fuse", "Anf"] and seq.last_run == ("Graph", "Fuse", "Anf")
    # a listed prerequisite right before its pass runs once; one further away again
    assert [p.name for p in resolve([graph(), fuse()])] == ["Graph", "Fuse"]
    assert [p.name for p in resolve([graph(), anf(), fuse()])] == [
        "Graph", "Fuse", "Anf", "Graph", "Fuse"]
    # an equal pass right after another is left out; one with other options is not
    assert resolve([FoldConstant(), FoldConstant()]) == [FoldConstant()]
    assert resolve([FuseOps(level=0), FuseOps(level=2)]) == [
        ToGraphNormalForm(), FuseOps(level=0), ToGraphNormalForm(), FuseOps(level=2)]


def test_prerequisites_run_whatever_the_level_and_disabled_passes():
    log: list[str] = []
    base = logging_pass("Base", log, opt_level=3)
    uses = logging_pass("Uses", log, requires=(base,), opt_level=1)
    with PassContext(opt_level=1, disabled_pass=["Base"]):
        Sequential([uses()])(typed(SRC))
    assert log == ["Base", "Uses"]
    log.clear()
    with PassContext(opt_level=1, disabled_pass=["Uses"]):  # a disabled pass needs nothing
        Sequential([uses()])(typed(SRC))
    assert log == []


def test_a_pass_called_alone_runs_its_prerequisites_first():
    log: list[str] = []
    base = logging_pass("Base", log, opt_level=3)
    uses = logging_pass("Uses", log, requires=(base,))
    timing = PassTimingInstrument()
    with PassContext(instruments=[timing]):
        uses()(typed(SRC))
    assert log == ["Base", "Uses"]
    assert [name for name, _ in timing.timings] == ["Base", "Uses"]
    fused = FuseOps(level=2)(typed(SRC))  # in let form: ToGraphNormalForm runs first
    assert groups(fused) == [["add", "exp", "tanh"]]


def test_the_fusion_pipeline_as_a_sequential():
    mod = typed(SRC)
    pipeline = Sequential([FuseOps(), ToANormalForm()], name="fusion")
    with PassContext(opt_level=1):
        out = pipeline(mod)
    assert pipeline.last_run == ("ToGraphNormalForm", "FuseOps", "ToANormalForm")
    check_fused(out)
    assert groups(out) == [["add", "exp", "tanh"]]
    assert_same_values(evaluate(mod, rand(2, 3)), evaluate(out, rand(2, 3)))


def test_fuse_ops_takes_its_level_from_the_context_unless_given_one():
    mod = ToGraphNormalForm()(typed(SRC))
    with PassContext(opt_level=0):
        assert groups(FuseOps()(mod)) == [["add"], ["exp"], ["tanh"]]
        assert groups(FuseOps(level=2)(mod)) == [["add", "exp", "tanh"]]
    with PassContext(opt_level=1):
        assert groups(FuseOps()(mod)) == [["add", "exp", "tanh"]]
        assert groups(FuseOps(level=0)(mod)) == [["add"], ["exp"], ["tanh"]]
    with PassContext(opt_level=0, disabled_pass=["FuseOps"]):
        out = Sequential([FuseOps()])(mod)
    assert groups(out) == []


def test_docstring_examples_run():
    assert doctest.testmod(pass_infra).failed == 0
    assert doctest.testmod(instrument).failed == 0


# ---- instruments -------------------------------------------------------------------------------

class Recorder(PassInstrument):
    def __init__(self, veto=()):
        self.events, self.veto = [], set(veto)

    def enter_pass_ctx(self):
        self.events.append("enter")

    def exit_pass_ctx(self):
        self.events.append("exit")

    def should_run(self, mod, p):
        return p.name not in self.veto

    def run_before_pass(self, mod, p):
        self.events.append(f"before {p.name}")

    def run_after_pass(self, mod, p):
        assert all(fn.has_type for fn in mod.functions.values())  # after re-typing
        self.events.append(f"after {p.name}")


def test_instruments_see_every_pass_and_can_veto_one():
    log: list[str] = []
    seq = Sequential([recording("A", 0, log), recording("B", 0, log, required=[
        recording("Base", 3, log)])])
    recorder = Recorder(veto=["A"])
    with (PassContext(instruments=[recorder]),
          PassContext(opt_level=1, instruments=[recorder])):  # entered once, not twice
        seq(typed(SRC))
    assert log == ["Base", "B"]
    assert recorder.events == ["enter", "before Base", "after Base", "before B", "after B",
                               "exit"]


def test_timing_records_each_pass_and_renders_a_table():
    timing = PassTimingInstrument()
    seq = Sequential([FuseOps(), ToANormalForm()])
    with PassContext(instruments=[timing]):
        seq(typed(SRC))
    assert [name for name, _ in timing.timings] == ["ToGraphNormalForm", "FuseOps",
                                                    "ToANormalForm"]
    assert all(seconds >= 0 for _, seconds in timing.timings)
    table = timing.render().splitlines()
    assert table[0].split() == ["pass", "runs", "time", "(ms)"]
    assert [line.split()[:2] for line in table[1:4]] == [
        ["ToGraphNormalForm", "1"], ["FuseOps", "1"], ["ToANormalForm", "1"]]
    assert table[-1].startswith("total")


def test_print_ir_prints_before_and_after_the_named_pass():
    out = io.StringIO()
    with PassContext(instruments=[PrintIR("FuseOps", file=out)]):
        Sequential([FuseOps(), ToANormalForm()])(typed(SRC))
    text = out.getvalue()
    assert text.count("// before") == 1 and text.count("// after") == 1
    before, after = text.split("// after FuseOps")
    assert before.startswith("// before FuseOps") and "Primitive" not in before
    assert "Primitive" in after


def test_print_ir_without_a_name_prints_every_pass(capsys):
    with PassContext(instruments=[PrintIR()]):
        Sequential([FuseOps(), ToANormalForm()])(typed(SRC))
    printed = capsys.readouterr().out
    for name in ("ToGraphNormalForm", "FuseOps", "ToANormalForm"):
        assert f"// before {name}" in printed and f"// after {name}" in printed


def test_a_program_nested_past_the_recursion_limit_is_a_clear_error_not_a_recursion_error():
    # built through the IR API with no let (the frontend binds every statement); type
    # inference and the interpreter take it, a recursive rewrite of it does not
    x = Var("x", TensorType((3,)))
    e: Expr = x
    for _ in range(12_000):
        e = Call(Op.get("negative"), [e])
    mod = infer_types(IRModule.from_expr(Function([x], e)))
    with pytest.raises(IRError, match=r"pass EliminateCommonSubexpr: .* bind intermediate results"):
        EliminateCommonSubexpr()(mod)
