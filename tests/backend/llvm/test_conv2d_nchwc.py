"""The conv2d_nchwc template (backend/llvm/templates/conv2d_nchwc.py): direct convolution on
the micro-kernel against the op's NumPy reference (float64) and jax.lax.conv_general_dilated,
over the geometries its edge handling distinguishes: tiles inside the row, tiles whose
windows leave it (left, right, both), partial last tiles, rows wholly in the padding, strides,
in-channel blocks of 3 and 32, out-channel blocks of one and two vectors, batches; and the
units split any way across calls."""
from __future__ import annotations

import numpy as np
import pytest

from relaydsl.backend.llvm.templates import BlockedConvTemplate, template_for
from relaydsl.backend.llvm.templates.conv2d_nchwc import micro_tile
from relaydsl.ir.types import TensorType
from relaydsl.op.registry import lookup
from tests.backend.llvm.test_templates import build, check, full_attrs

OP = "conv2d_nchwc"
CASES = [  # (attrs, data (N, C/i, H, W, i), weight (O/o, C/i, KH, KW, i, o))
    ({"padding": 1}, (1, 2, 56, 56, 32), (2, 2, 3, 3, 32, 32)),     # ResNet stage 1: 4 tiles
    ({"padding": 3, "strides": 2}, (1, 1, 40, 40, 3), (2, 1, 7, 7, 3, 32)),  # a stem, NCHW3c
    ({"padding": 1}, (2, 1, 9, 13, 16), (3, 1, 3, 3, 16, 16)),      # batch 2, blocks of 16
    ({"padding": 1}, (1, 4, 7, 7, 8), (1, 4, 3, 3, 8, 32)),         # one tile, both edges
    ({}, (1, 1, 20, 31, 4), (1, 1, 3, 3, 4, 32)),                   # a partial last tile
    ({"padding": (0, 2, 1, 0), "strides": (1, 3)}, (1, 2, 11, 50, 4), (1, 2, 2, 5, 4, 16)),
    ({"padding": 4}, (1, 1, 3, 3, 8), (1, 1, 3, 3, 8, 16)),         # rows wholly in padding
    ({"strides": 2}, (1, 2, 16, 16, 32), (1, 2, 1, 1, 32, 32)),     # a 1x1 projection
    ({}, (1, 1, 1, 1, 1), (1, 1, 1, 1, 1, 16)),
]


def test_template_for_takes_whole_vector_blocks_and_dilation_1():
    def template(attrs, sa, sb):
        out = lookup(OP).numpy_ref(np.zeros(sa, np.float32), np.zeros(sb, np.float32),
                                   **full_attrs(OP, attrs)).shape
        return template_for(lookup(OP), full_attrs(OP, attrs), [TensorType(sa), TensorType(sb)],
                            TensorType(out))

    assert isinstance(template({}, (1, 1, 8, 8, 4), (1, 1, 3, 3, 4, 32)), BlockedConvTemplate)
    assert template({}, (1, 1, 8, 8, 4), (1, 1, 3, 3, 4, 8)) is None  # half a vector
    assert template({"dilation": 2}, (1, 1, 8, 8, 4), (1, 1, 3, 3, 4, 32)) is None


def test_the_micro_tile_fits_the_registers_and_the_row():
    assert micro_tile(32, 56, 512) == micro_tile(32, 100, 512)
    tile = micro_tile(32, 56, 512)
    assert tile is not None and (tile.vl, tile.nr) == (16, 32) and tile.mr * 2 <= 28
    narrow = micro_tile(32, 7, 512)
    assert narrow is not None and narrow.mr == 7  # no wider than the output row
    assert micro_tile(8, 56, 512) is None  # not a whole vector


def test_conv2d_nchwc_against_numpy():
    check(build([(OP, attrs, sa, sb) for attrs, sa, sb in CASES]))


def test_any_split_of_the_units_gives_the_same_result():
    (kern,) = build([(OP, *CASES[3])])
    rng = np.random.default_rng(1)
    a = rng.standard_normal(kern.sa).astype(np.float32)
    b = rng.standard_normal(kern.sb).astype(np.float32)
    whole = kern(a, b, parallel=False)
    units = kern.info.parallel_extent
    assert units == 7  # one unit per output row of the one out-channel block
    np.testing.assert_array_equal(kern(a, b, splits=[(0, 2), (5, units), (2, 5)]), whole)


@pytest.mark.parametrize("index", [0, 1, 5])
def test_conv2d_nchwc_against_jax(index):
    import jax

    attrs, sa, sb = CASES[index]
    (kern,) = build([(OP, attrs, sa, sb)])
    rng = np.random.default_rng(3)
    a = rng.standard_normal(sa).astype(np.float32)
    b = rng.standard_normal(sb).astype(np.float32)
    with jax.default_device(jax.devices("cpu")[0]):
        want = np.asarray(lookup(OP).jax_lower(a, b, **full_attrs(OP, attrs)))
    np.testing.assert_allclose(kern(a, b), want, rtol=1e-4, atol=1e-3)
