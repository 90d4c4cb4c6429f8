"""inline_globals: calls of non-recursive globals are replaced by their bodies."""
import numpy as np

from relaydsl.backend.interpreter import evaluate
from relaydsl.ir.expr import Call, GlobalVar
from relaydsl.ir.parser import parse
from relaydsl.ir.visitor import post_order
from relaydsl.transform.inline import inline_globals
from relaydsl.typing import infer_types

PROGRAM = """
def @sq(%x: Tensor[(3), float32]) { multiply(%x, %x) }
def @twice_sq(%x: Tensor[(3), float32]) { add(@sq(%x), @sq(%x)) }
def @count(%n: int32, %acc: Tensor[(3), float32]) -> Tensor[(3), float32] {
  if (less(%n, 1)) { %acc } else { @count(subtract(%n, 1), @sq(%acc)) }
}
def @main(%y: Tensor[(3), float32]) { add(@twice_sq(%y), @count(2, %y)) }
"""


def global_calls(fn):
    found = []
    post_order(fn.body, lambda e: found.append(e.op.name_hint)
               if isinstance(e, Call) and isinstance(e.op, GlobalVar) else None)
    return sorted(found)


def test_non_recursive_calls_disappear_and_recursive_ones_stay():
    mod = infer_types(parse(PROGRAM))
    inlined = inline_globals(mod)
    assert global_calls(inlined["main"]) == ["count"]
    assert global_calls(inlined["count"]) == ["count"]  # its call of @sq is inlined


def test_inlining_preserves_meaning_and_binds_fresh_variables():
    mod = infer_types(parse(PROGRAM))
    y = np.array([0.5, -1.0, 2.0], np.float32)
    before = evaluate(mod, y)
    after = evaluate(inline_globals(mod), y)
    np.testing.assert_allclose(after, 2 * y * y + y ** 4, rtol=1e-6)
    np.testing.assert_allclose(after, before, rtol=1e-6)
    # the two inlined copies of @sq bind different variables
    binders = []
    from relaydsl.ir.expr import Let
    post_order(inline_globals(mod)["twice_sq"].body,
               lambda e: binders.append(e.var) if isinstance(e, Let) else None)
    assert len(binders) == len(set(map(id, binders))) == 2
