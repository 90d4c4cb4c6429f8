"""Shape deduction against brute force (which input rows an output row band really reads:
the rows whose poisoning with NaN reaches the band), and tiles computed from the deduced
regions equal to the op's whole result on the band."""
import numpy as np
import pytest

from relaydsl.backend.accel.graph import extract
from relaydsl.backend.accel.layers import region_shape, take
from relaydsl.ir import Call, Function, Op, TensorType, Var
from relaydsl.ir.module import IRModule
from relaydsl.op import ops
from relaydsl.typing import infer_types

CASES = [
    ("conv2d", dict(strides=(1, 1), padding=(1, 1, 1, 1)), 3),
    ("conv2d", dict(strides=(2, 2), padding=(3, 3, 3, 3)), 7),
    ("conv2d", dict(strides=(2, 1), padding=(0, 1, 2, 1), dilation=(2, 1)), 3),
    ("conv2d", dict(strides=(1, 1), padding=(1, 1, 1, 1), groups=4), 3),
    ("max_pool2d", dict(pool_size=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1)), None),
    ("max_pool2d", dict(pool_size=(2, 2), strides=(2, 2), ceil_mode=True), None),
    ("avg_pool2d", dict(pool_size=(3, 3), strides=(1, 1), padding=(1, 1, 1, 1)), None),
    ("avg_pool2d", dict(pool_size=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1),
                        count_include_pad=True), None),
]


def _layer(op: str, attrs: dict, kernel: int | None, hw=(13, 11)):
    x = Var("x", TensorType((1, 4, *hw)))
    args = [x]
    params = [x]
    if kernel is not None:
        w = Var("w", TensorType((8, 4 // attrs.get("groups", 1), kernel, kernel)))
        args.append(w)
        params.append(w)
    mod = infer_types(IRModule.from_expr(Function(params, Call(Op.get(op), args,
                                                                  _attrs(op, attrs)))))
    return extract(mod["main"]).layers[0]


def _attrs(op, attrs):
    return ops.__getattr__(op)(Var("d", TensorType((1, 4, 8, 8))), *(
        [Var("w", TensorType((8, 4 // attrs.get("groups", 1), 3, 3)))]
        if op == "conv2d" else []), **attrs).attrs


def _inputs(layer, rng):
    return [rng.standard_normal(t.shape).astype(np.float32) for t in layer.inputs]


@pytest.mark.parametrize("op, attrs, kernel", CASES)
def test_deduced_rows_are_exactly_the_rows_read(op, attrs, kernel):
    layer = _layer(op, attrs, kernel)
    rng = np.random.default_rng(0)
    inputs = _inputs(layer, rng)
    height = layer.output.shape[2]
    rows_in = layer.inputs[0].shape[2]
    for lo in range(height):
        for hi in range(lo + 1, height + 1):
            band = ((0, 1), (0, layer.output.shape[1]), (lo, hi), (0, layer.output.shape[3]))
            deduced = layer.rule.deduce(layer, band)[0][2]
            read = []
            for r in range(rows_in):
                poisoned = inputs[0].copy()
                poisoned[:, :, r] = np.nan
                out = layer.opdef.numpy_ref(poisoned, *inputs[1:], **layer.attrs)
                if np.isnan(take(out, band)).any():
                    read.append(r)
            assert read, "a band reads some input row"
            assert deduced[0] == read[0] and deduced[1] == read[-1] + 1, (lo, hi, read)


@pytest.mark.parametrize("op, attrs, kernel", CASES)
def test_a_tile_from_its_deduced_regions_is_the_band_of_the_whole_result(op, attrs, kernel):
    layer = _layer(op, attrs, kernel)
    rng = np.random.default_rng(1)
    inputs = _inputs(layer, rng)
    whole = layer.opdef.numpy_ref(*inputs, **layer.attrs)
    channels = layer.output.shape[1]
    blocks = [(0, channels)] + ([(0, 2), (2, 8)] if op == "conv2d" and
                                attrs.get("groups", 1) == 1 else
                                [(4, 8)] if op == "conv2d" else [])
    for c0, c1 in blocks:
        for lo, hi in [(0, 1), (1, 3), (2, layer.output.shape[2])]:
            band = ((0, 1), (c0, c1), (lo, hi), (0, layer.output.shape[3]))
            tiles = [take(x, r) for x, r in zip(inputs, layer.rule.deduce(layer, band))]
            tile = layer.rule.compute(layer, tiles, band)
            assert tile.shape == region_shape(band)
            np.testing.assert_allclose(tile, take(whole, band), rtol=1e-5, atol=1e-5)


def test_pad_tiles_from_their_deduced_regions_are_the_whole_result_on_every_region():
    # pad had no accelerator rule: a random network with a pad ran on the host (issue 23,
    # item 3 lists it among the layers with shape deduction)
    x = Var("x", TensorType((1, 3, 4, 5)))
    pad = ops.pad(x, pad_width=(0, 0, 1, 0, 2, 1, 0, 3), pad_value=0.5)
    layer = extract(infer_types(IRModule.from_expr(Function([x], pad)))["main"]).layers[0]
    value = np.random.default_rng(2).standard_normal((1, 3, 4, 5)).astype(np.float32)
    whole = np.pad(value, ((0, 0), (1, 0), (2, 1), (0, 3)), constant_values=0.5)
    assert layer.output.shape == whole.shape
    for c in [(0, 4), (0, 1), (1, 3)]:
        for rows in [(0, 7), (0, 1), (0, 2), (1, 4), (6, 7), (2, 6)]:
            for cols in [(0, 8), (5, 8), (6, 7), (3, 6)]:
                band = ((0, 1), c, rows, cols)
                (region,) = layer.rule.deduce(layer, band)
                assert all(lo < hi for lo, hi in region), "a tile reads something"
                tile = layer.rule.compute(layer, [take(value, region)], band)
                np.testing.assert_array_equal(tile, take(whole, band), err_msg=str(band))
