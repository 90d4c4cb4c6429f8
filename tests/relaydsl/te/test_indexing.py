"""relaydsl/te/indexing.py: reindex (a reshape's index, run of axes by run) against NumPy."""
from __future__ import annotations

import itertools
import math

import numpy as np
from hypothesis import given, settings, strategies as st

from relaydsl import te
from relaydsl.te.evaluate import evaluate
from relaydsl.te.expr import post_order
from relaydsl.te.indexing import reindex, runs


@st.composite
def two_shapes(draw) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Two shapes of one size: factors of it, in two random groupings, with 1s anywhere."""
    factors = draw(st.lists(st.sampled_from([1, 2, 3, 4, 5]), min_size=0, max_size=6))

    def shape() -> tuple[int, ...]:
        cuts = sorted(draw(st.sets(st.integers(0, len(factors)), max_size=4)))
        bounds = [0, *cuts, len(factors)]
        dims = [math.prod(factors[a:b]) for a, b in itertools.pairwise(bounds)]
        for _ in range(draw(st.integers(0, 2))):
            dims.insert(draw(st.integers(0, len(dims))), 1)
        return tuple(dims)

    return shape(), shape()


@settings(max_examples=300, deadline=None)
@given(two_shapes())
def test_reindex_reads_what_numpy_s_reshape_does(shapes):
    shape, to = shapes
    x = te.placeholder(shape, "float32", "x")
    y = te.compute(to, lambda *o: x[reindex(o, to, shape)], "y")
    data = np.arange(math.prod(shape), dtype=np.float32).reshape(shape)
    np.testing.assert_array_equal(evaluate(y, {x: data}), data.reshape(to))


def test_a_reshape_that_adds_an_axis_divides_nothing():
    # LeNet's weight gradient: (64, 20, 24, 24) read as (64, 1, 20, 24, 24)
    axes = [te.IterVar(f"i{d}", e) for d, e in enumerate((64, 1, 20, 24, 24))]
    index = reindex(axes, (64, 1, 20, 24, 24), (64, 20, 24, 24))
    assert [str(i) for i in index] == ["i0", "i2", "i3", "i4"]
    assert not any(type(n).__name__ in ("FloorDiv", "FloorMod")
                   for i in index for n in post_order(i))


def test_runs_cover_both_shapes_with_equal_products():
    assert runs((2, 3, 4), (6, 4)) == [(0, 2, 0, 1), (2, 3, 1, 2)]
    assert runs((4, 6), (2, 12)) == [(0, 2, 0, 2)]
    assert runs((2, 1), (2,)) == [(0, 2, 0, 1)]
    assert runs((), (1, 1)) == [(0, 0, 0, 2)]
