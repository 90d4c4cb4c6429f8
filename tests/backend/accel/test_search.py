"""The schedule search's pruning never changes what it finds: a plan stopped early at a
buffer that overflows would have overflowed after all its steps, and a layer planned by
the recipe of a like one costs what its own search finds."""
import itertools

import pytest

from relaydsl.backend.accel import schedule as search
from relaydsl.backend.accel.config import KIB, AcceleratorConfig
from tests.backend.accel.test_streaming import _args, _build, head, wide

CONFIGS = {"64KiB": AcceleratorConfig.deep_fusion(onchip_bytes=64 * KIB),
           "vta4": AcceleratorConfig.vta(batch=4, block_in=8, block_out=8, dtype="float32",
                                         input_buffer_bytes=4 * KIB,
                                         onchip_bytes=(4 + 256 + 128) * KIB)}


@pytest.mark.parametrize("fn", [wide, head], ids=lambda f: f.__name__)
@pytest.mark.parametrize("name", list(CONFIGS))
def test_stopping_a_plan_early_never_drops_one_that_fits(fn, name, monkeypatch):
    config = CONFIGS[name]
    graph = _build(fn, _args(fn), config, "none").graph
    consumers = graph.consumers()
    cases = []
    for k in range(len(graph.layers)):
        layers = graph.layers[k:k + 1]
        ctx = search._GroupContext(graph, consumers, layers)
        rows = layers[0].output.shape[2] if len(layers[0].output.shape) == 4 else 1
        for tiles, blocks, strips, order, double_io in itertools.product(
                search._tile_counts(rows)[::2], (1, 8), (1, 2), (
                    search.ACTIVATIONS_STATIONARY, search.WEIGHTS_STATIONARY), (True, False)):
            cases.append((ctx, tiles, blocks, order, strips, double_io))

    def plans():
        found = []
        for ctx, tiles, blocks, order, strips, double_io in cases:
            plan = search.plan_group(ctx, config, True, tiles, blocks, order, keep=False,
                                     strips=strips, double_io=double_io)
            found.append(None if plan is None else plan.cost)
        return found

    pruned = plans()
    monkeypatch.setattr(search, "_may_fit", lambda *args, **kwargs: True)
    assert pruned == plans()
    assert any(cost is not None for cost in pruned) and None in pruned


def test_a_layer_like_another_gets_the_plan_its_own_search_finds():
    config = CONFIGS["64KiB"]
    graph = _build(wide, _args(wide), config, "none").graph
    consumers = graph.consumers()
    planned = search.schedule(graph, config, "none")
    for layer, plan in zip(graph.layers, planned):
        own = search.best_plan(graph, consumers, [layer], config, False)
        assert own is not None and plan.cost == own.cost
