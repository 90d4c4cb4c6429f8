"""The IR verifier (relaydsl/transform/verify.py): with RELAYDSL_VERIFY_IR=1 (as the whole
suite runs, tests/conftest.py) a pass that breaks scoping, uses an undefined global or keeps a
wrong type fails right after it runs, naming itself; the pipeline's own passes pass it."""
import numpy as np
import pytest

from relaydsl import Float, Tensor, relay, settings
from relaydsl.errors import IRError, SettingError
from relaydsl.ir.expr import Call, Function, GlobalVar, Let, Var
from relaydsl.ir.module import IRModule
from relaydsl.ir.parser import parse
from relaydsl.ir.types import TensorType
from relaydsl.transform import PassContext, pipeline
from relaydsl.transform.pass_infra import module_pass
from relaydsl.typing import infer_types

TEXT = '''
def @main(%x: Tensor[(4,), float32]) -> Tensor[(4,), float32] {
  let %y = add(%x, %x);
  multiply(%y, %x)
}'''


def typed() -> IRModule:
    return infer_types(parse(TEXT))


def rewriting(body):
    """A pass replacing @main's body with ``body(main)``."""
    def transform(mod: IRModule) -> IRModule:
        out = mod.copy()
        main = mod["main"]
        out["main"] = Function(main.params, body(main), main.ret_type)
        return out
    return module_pass(transform, opt_level=0, name="Broken", description="a test pass")


@pytest.fixture
def verifying(monkeypatch):
    monkeypatch.setenv("RELAYDSL_VERIFY_IR", "1")


def test_the_suite_runs_with_the_verifier_on():
    assert settings.verify_ir()


@pytest.mark.parametrize("body, message", [
    (lambda main: Var("z", TensorType((4,))), "after Broken, @main uses %z outside the scope"),
    (lambda main: Let(main.params[0], main.body.value, main.body.body),
     "after Broken, @main binds %x twice"),
    (lambda main: Call(GlobalVar("nowhere"), []), "uses @nowhere, which the module does not"),
])
def test_a_pass_breaking_the_ir_fails_naming_itself(verifying, body, message):
    with pytest.raises(IRError, match=message):
        rewriting(body)(typed())


def test_a_wrong_kept_type_is_found(verifying):
    def wrong(main):
        y = main.body.var
        call = Call(main.body.body.op, [y, main.params[0]])
        call.set_checked_type(TensorType((4,), "int32"))  # a pass keeping a wrong type
        return Let(y, main.body.value, call)

    def typed_everywhere(mod: IRModule) -> IRModule:
        out = rewriting(wrong).transform(mod)
        out["main"].set_checked_type(mod["main"].checked_type)
        return out

    broken = module_pass(typed_everywhere, opt_level=0, name="KeepsTypes", description="test")
    with pytest.raises(IRError, match=r"after KeepsTypes, a Call kept the type "
                                      r"Tensor\[\(4,\), int32\], but inference finds "
                                      r"Tensor\[\(4,\), float32\]"):
        broken(typed())


def test_without_the_flag_nothing_is_checked(monkeypatch):
    monkeypatch.setenv("RELAYDSL_VERIFY_IR", "0")
    out = rewriting(lambda main: main.body)(typed())  # fine, and not checked anyway
    assert isinstance(out, IRModule)
    monkeypatch.setenv("RELAYDSL_VERIFY_IR", "yes")
    with pytest.raises(SettingError, match="RELAYDSL_VERIFY_IR='yes': expected 0 or 1"):
        settings.verify_ir()


def test_every_pass_of_the_pipeline_passes_it_on_a_training_step(verifying):
    @relay
    def loss(w: Tensor[Float, (3, 2)], x: Tensor[Float, (4, 3)]) -> Float:
        return relay.sum(relay.tanh(relay.matmul(x, w)))

    @relay
    def step(w: Tensor[Float, (3, 2)], x: Tensor[Float, (4, 3)]) -> Tensor[Float, (3, 2)]:
        return w - 0.1 * relay.grad(loss)(w, x)[1][0]

    for level in (0, 3):  # every pass checked (the pipeline raises on the first failure)
        mod = pipeline.run(step.mod, "llvm", PassContext(opt_level=level))
        assert step.global_var in mod
    w = np.ones((3, 2), np.float32)
    x = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    t = np.tanh(x @ w)
    np.testing.assert_allclose(step(w, x), w - 0.1 * x.T @ (1 - t * t), rtol=1e-5)
