"""RemoveUnusedFunctions: what the entry reaches stays (by calls, by recursion, by globals
passed as values, by the prelude functions it calls), the rest goes; the entry computes the
same before and after, and a build's pipeline no longer carries what its entry never runs."""
import jax.numpy as jnp
import numpy as np
import pytest

from relaydsl import Float, Tensor, relay
from relaydsl.backend.interpreter import evaluate
from relaydsl.errors import IRError
from relaydsl.ir.module import installed_prelude
from relaydsl.ir.parser import parse
from relaydsl.transform import pipeline
from relaydsl.transform.pass_infra import PassContext
from relaydsl.transform.remove_unused_functions import RemoveUnusedFunctions
from relaydsl.typing import infer_types

SOURCE = '''
def @square(%x: Tensor[(3), float32]) { multiply(%x, %x) }
def @twice(%f: fn (Tensor[(3), float32]) -> Tensor[(3), float32], %x: Tensor[(3), float32]) {
  %f(%f(%x))
}
def @countdown(%n: int32, %x: Tensor[(3), float32]) -> Tensor[(3), float32] {
  if (equal(%n, 0)) { %x } else { @countdown(subtract(%n, 1), add(%x, 1f)) }
}
def @unused(%x: Tensor[(3), float32]) { @square(%x) }
def @also_unused(%x: Tensor[(3), float32]) { @unused(%x) }
def @main(%x: Tensor[(3), float32]) {
  let %l = Cons(%x, Nil);
  add(@twice(@square, %x), @countdown(2, @hd(%l)))
}
'''


def names(mod):
    return {gv.name_hint for gv in mod.functions}


def test_the_entry_keeps_what_it_calls_passes_and_recurses_into_and_drops_the_rest():
    mod = infer_types(parse(SOURCE))
    out = RemoveUnusedFunctions(entries=("main",))(mod)
    prelude_hd = next(gv for gv in installed_prelude()[1] if gv.name_hint == "hd")
    assert {"main", "twice", "square", "countdown"} <= names(out)
    assert prelude_hd in out.functions  # the prelude's, which main calls
    assert not {"unused", "also_unused"} & names(out)
    assert len(out.functions) < len(mod.functions) - 20  # most of the prelude went too
    assert out.type_definitions == mod.type_definitions  # List and the others stay
    x = np.array([1.0, -2.0, 0.5], np.float32)
    expected = jnp.asarray(x) ** 4 + (x + 2.0)
    for m in (mod, out):
        np.testing.assert_allclose(evaluate(m, x, entry="main"), expected, rtol=1e-6)


def test_several_entries_and_a_module_with_nothing_to_drop():
    mod = infer_types(parse(SOURCE))
    out = RemoveUnusedFunctions(entries=("main", "also_unused"))(mod)
    assert {"unused", "also_unused", "main"} <= names(out)
    again = RemoveUnusedFunctions(entries=("main",))(RemoveUnusedFunctions(entries=("main",))(mod))
    assert names(again) == names(RemoveUnusedFunctions(entries=("main",))(mod))


def test_an_unknown_entry_is_an_error_naming_it():
    mod = infer_types(parse(SOURCE))
    with pytest.raises(IRError, match="'mian'"):
        RemoveUnusedFunctions(entries=("mian",))(mod)


@pytest.mark.parametrize("level", [0, 3])
def test_a_build_pipeline_keeps_only_what_the_entry_runs(level):
    @relay
    def helper(x: Tensor[Float, (3,)]) -> Tensor[Float, (3,)]:
        return relay.tanh(x) * 2.0

    @relay
    def entry(x: Tensor[Float, (3,)]) -> Tensor[Float, (3,)]:
        return helper(x) + x

    with PassContext(opt_level=level):
        lowered = pipeline.run(entry.mod, "llvm", PassContext(opt_level=level),
                               entry.global_var.name_hint)
    kept = {gv for gv in lowered.functions if not gv.name_hint.startswith("fused")}
    # at level 3 InlineGlobals puts helper into entry, and the prune after it drops helper
    assert kept == ({entry.global_var} if level == 3 else {entry.global_var, helper.global_var})
    x = np.array([0.3, -1.0, 2.0], np.float32)
    np.testing.assert_allclose(entry.build("llvm")(x), np.tanh(x) * 2.0 + x, rtol=1e-6)
