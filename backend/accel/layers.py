"""What the accelerator knows of each op it runs: shape deduction, tile compute and work.

Deep Fusion (§3.1) splits fusion into an op-specific *shape deduction* -- which input
region an output region reads -- and an op-independent *shape transfer* (schedule.py).
Here is the first half, one ``LayerRule`` per kind of op, chosen by the op's identity or
its fusion pattern (never its name):

- windowed (conv2d, max_pool2d, avg_pool2d on NCHW): an output row band reads the rows its
  windows cover, ``[h0 * s - pad_top, (h1 - 1) * s + (k - 1) * d + 1 - pad_top)``, clipped
  to the image (the paper's cvpl_kernel, exact at the last row). A tile is computed by the
  op's own NumPy reference on the clipped input with the padding that the clip removed
  put back, so the tile equals the op's result on its region;
- elementwise and broadcast ops: the same region (a broadcast axis reads its one element;
  bias_add's bias the channels of the region);
- pad: the region shifted by the padding before it, clipped to the input (one element
  next to it where the region is all padding), the padding put back around the tile;
- channel concatenation: the same rows of every input, all its channels;
- dense: its output units in blocks (each block reads its rows of the weight); global
  pooling in blocks of channels; the others (softmax, flatten, reshape, reductions) read
  their whole input.

A region is a tuple of half-open ``(lo, hi)`` per axis of a tensor.

>>> region_shape(((0, 1), (0, 8), (2, 5), (0, 7)))
(1, 8, 3, 7)
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any as AnyValue, Callable

import numpy as np

from relaydsl.op import ops
from relaydsl.op.registry import OpDef, OpPattern

if TYPE_CHECKING:
    from relaydsl.backend.accel.graph import Layer

Region = tuple[tuple[int, int], ...]


def full_region(shape: tuple[int, ...]) -> Region:
    return tuple((0, n) for n in shape)


def region_shape(region: Region) -> tuple[int, ...]:
    return tuple(hi - lo for lo, hi in region)


def region_size(region: Region) -> int:
    size = 1
    for lo, hi in region:
        size *= hi - lo
    return size


def samples(region: Region) -> int:
    """The samples a region of a layer's output spans: its extent along the batch axis, the
    first of a tensor of two or more axes (one for a vector or a scalar)."""
    return region[0][1] - region[0][0] if len(region) >= 2 else 1


def take(array: np.ndarray, region: Region) -> np.ndarray:
    return array[tuple(slice(lo, hi) for lo, hi in region)]


@dataclass(frozen=True)
class LayerRule:
    """How the accelerator runs one kind of op (see the module docstring).

    - ``unit``: "mac" (the MAC array) or "alu" (the vector ALU);
    - ``deduce(layer, out_region)``: the region of each input the output region reads;
    - ``compute(layer, input_tiles, out_region)``: the output region's values from the
      input regions ``deduce`` gave;
    - ``work(layer, out_region)``: multiply-accumulates (mac) or element operations (alu);
    - ``channel_blocks``: the output's channels (axis 1) may be computed in blocks, each
      reading its slice of the weight (input 1) or of its inputs: how a layer whose weights,
      or whose one row, do not fit on chip runs;
    - ``row_tiles``: output row bands (axis 2 of NCHW) may be computed separately.
    """

    unit: str
    deduce: Callable[["Layer", Region], list[Region]]
    compute: Callable[["Layer", list[np.ndarray], Region], np.ndarray]
    work: Callable[["Layer", Region], int]
    channel_blocks: bool = False
    row_tiles: bool = True


# ---- windowed ops ----------------------------------------------------------------------


@functools.lru_cache(maxsize=1 << 14)  # the schedule's search asks for it millions of times
def window(layer: "Layer") -> tuple[tuple[int, int], tuple[int, int], tuple[int, int],
                                     tuple[int, int, int, int]]:
    """(kernel, strides, dilation, pads) of a conv2d or pool layer."""
    a = layer.attrs
    if layer.opdef is ops.conv2d:
        kernel = layer.inputs[1].shape[2:]
        return (kernel[0], kernel[1]), a["strides"], a["dilation"], a["padding"]
    return a["pool_size"], a["strides"], (1, 1), a["padding"]


def _window_rows(layer: "Layer", out: Region) -> tuple[list[tuple[int, int]],
                                                       list[tuple[int, int]]]:
    """The clipped input (lo, hi) along H and W of the output region, and the padding
    (before, after) the clip removed along each."""
    kernel, strides, dilation, pads = window(layer)
    size = layer.inputs[0].shape[2:]
    spans, pad_pairs = [], []
    for axis in (0, 1):
        lo_out, hi_out = out[2 + axis]
        lo = lo_out * strides[axis] - pads[axis]
        hi = (hi_out - 1) * strides[axis] + dilation[axis] * (kernel[axis] - 1) + 1 - pads[axis]
        spans.append((max(lo, 0), min(hi, size[axis])))
        pad_pairs.append((max(0, -lo), max(0, hi - size[axis])))
    return spans, pad_pairs


def _windowed_channels(layer: "Layer", out: Region) -> tuple[int, int]:
    """The data channels an output channel range reads (its groups' for conv2d)."""
    c0, c1 = out[1]
    if layer.opdef is not ops.conv2d:
        return c0, c1
    groups = layer.attrs["groups"]
    cout_g = layer.output.shape[1] // groups
    cin_g = layer.inputs[0].shape[1] // groups
    return (c0 // cout_g) * cin_g, ((c1 - 1) // cout_g + 1) * cin_g


def _windowed_deduce(layer: "Layer", out: Region) -> list[Region]:
    spans, _ = _window_rows(layer, out)
    data = (out[0], _windowed_channels(layer, out), spans[0], spans[1])
    if layer.opdef is not ops.conv2d:
        return [data]
    weight = layer.inputs[1].shape
    return [data, (out[1], *full_region(weight[1:]))]


def _windowed_compute(layer: "Layer", tiles: list[np.ndarray], out: Region) -> np.ndarray:
    _, ((top, bottom), (left, right)) = _window_rows(layer, out)
    attrs = {**layer.attrs, "padding": (top, left, bottom, right)}
    if layer.opdef is ops.conv2d:
        c0, c1 = out[1]
        groups = layer.attrs["groups"]  # a block holds whole groups (schedule.py)
        attrs["groups"] = max(1, groups * (c1 - c0) // layer.output.shape[1])
    else:
        attrs["ceil_mode"] = False  # the clip's padding already covers ceil_mode's windows
    return layer.opdef.numpy_ref(*tiles, **attrs)


def _windowed_work(layer: "Layer", out: Region) -> int:
    kernel, _, _, _ = window(layer)
    per_output = kernel[0] * kernel[1]
    if layer.opdef is ops.conv2d:
        per_output *= layer.inputs[1].shape[1]  # input channels per group
    return region_size(out) * per_output


WINDOWED = LayerRule("alu", _windowed_deduce, _windowed_compute, _windowed_work,
                     channel_blocks=True)  # a pool reads its own channels only
CONV2D = LayerRule("mac", _windowed_deduce, _windowed_compute, _windowed_work,
                   channel_blocks=True)


# ---- elementwise and broadcast ops -------------------------------------------------------


def _broadcast_deduce(layer: "Layer", out: Region) -> list[Region]:
    regions = []
    for t in layer.inputs:
        skip = len(out) - len(t.shape)
        regions.append(tuple((0, 1) if n == 1 and out[skip + i] != (0, 1) else out[skip + i]
                             for i, n in enumerate(t.shape)))
    return regions


def _broadcast_compute(layer: "Layer", tiles: list[np.ndarray], out: Region) -> np.ndarray:
    return np.broadcast_to(layer.opdef.numpy_ref(*tiles, **layer.attrs), region_shape(out))


# in blocks of channels too: one row of a wide layer's int32 accumulators (VTA's 112x64 at
# 28 KiB) may not fit an input buffer twice
ELEMENTWISE = LayerRule("alu", _broadcast_deduce, _broadcast_compute,
                        lambda layer, out: region_size(out), channel_blocks=True)


def _bias_add_deduce(layer: "Layer", out: Region) -> list[Region]:
    axis = layer.attrs["axis"] % len(out)
    return [out, (out[axis],)]


BIAS_ADD = LayerRule("alu", _bias_add_deduce, _broadcast_compute,
                     lambda layer, out: region_size(out))


# ---- pad -----------------------------------------------------------------------------


def _pad_spans(layer: "Layer", out: Region) -> list[tuple[int, int, int]]:
    """Per axis of an output region of pad: the (lo, hi) of the input it copies (lo == hi
    where the region is all padding) and the padding before that."""
    widths = layer.attrs["pad_width"]
    spans = []
    for axis, ((lo, hi), size) in enumerate(zip(out, layer.inputs[0].shape)):
        before = widths[2 * axis]
        a, b = min(max(lo - before, 0), size), max(min(hi - before, size), 0)
        spans.append((a, b, a - (lo - before)) if a < b else (a, a, hi - lo))
    return spans


def _pad_deduce(layer: "Layer", out: Region) -> list[Region]:
    # a region all padding still reads an element next to it: no tile is empty
    size = layer.inputs[0].shape
    return [tuple((a, b) if b > a else (min(a, n - 1), min(a, n - 1) + 1)
                  for (a, b, _), n in zip(_pad_spans(layer, out), size))]


def _pad_compute(layer: "Layer", tiles: list[np.ndarray], out: Region) -> np.ndarray:
    spans = _pad_spans(layer, out)
    read = _pad_deduce(layer, out)[0]
    copied = tiles[0][tuple(slice(a - r, b - r) for (a, b, _), (r, _) in zip(spans, read))]
    pads = [(before, (hi - lo) - before - (b - a))
            for (a, b, before), (lo, hi) in zip(spans, out)]
    return np.pad(copied, pads, constant_values=layer.attrs["pad_value"])


# rows and channels alike: each tile copies what it covers of the input and pads the rest
PAD = LayerRule("alu", _pad_deduce, _pad_compute, lambda layer, out: region_size(out),
                channel_blocks=True)


# ---- channel concatenation ---------------------------------------------------------------


def _concat_deduce(layer: "Layer", out: Region) -> list[Region]:
    return [(out[0], (0, t.shape[1]), *out[2:]) for t in layer.inputs]


def _concat_compute(layer: "Layer", tiles: list[np.ndarray], out: Region) -> np.ndarray:
    return np.concatenate(tiles, axis=1)


CONCAT_CHANNELS = LayerRule("alu", _concat_deduce, _concat_compute,
                            lambda layer, out: region_size(out))


# ---- dense and the ops that read their whole input ---------------------------------------


def _whole_deduce(layer: "Layer", out: Region) -> list[Region]:
    return [full_region(t.shape) for t in layer.inputs]


def _whole_compute(layer: "Layer", tiles: list[np.ndarray], out: Region) -> np.ndarray:
    result = np.asarray(layer.opdef.numpy_ref(*tiles, **layer.attrs))
    return take(result.reshape(layer.output.shape), out)


def _dense_deduce(layer: "Layer", out: Region) -> list[Region]:
    data, weight = layer.inputs
    return [full_region(data.shape), (out[-1], (0, weight.shape[1]))]


def _dense_compute(layer: "Layer", tiles: list[np.ndarray], out: Region) -> np.ndarray:
    return take(layer.opdef.numpy_ref(*tiles, **{**layer.attrs, "units": None}),
                (*out[:-1], (0, out[-1][1] - out[-1][0])))


def _global_pool_deduce(layer: "Layer", out: Region) -> list[Region]:
    return [(out[0], out[1], *full_region(layer.inputs[0].shape[2:]))]


def _global_pool_compute(layer: "Layer", tiles: list[np.ndarray], out: Region) -> np.ndarray:
    return layer.opdef.numpy_ref(*tiles, **layer.attrs)


# a channel's mean or maximum over the whole image: blocks of channels fit where all do not
GLOBAL_POOL = LayerRule("alu", _global_pool_deduce, _global_pool_compute,
                        lambda layer, out: region_size(_global_pool_deduce(layer, out)[0]),
                        channel_blocks=True, row_tiles=False)
DENSE = LayerRule("mac", _dense_deduce, _dense_compute,
                  lambda layer, out: region_size(out) * layer.inputs[1].shape[1],
                  channel_blocks=True, row_tiles=False)
WHOLE = LayerRule("alu", _whole_deduce, _whole_compute,
                  lambda layer, out: sum(t.size for t in layer.inputs), row_tiles=False)

CONCAT = LayerRule("alu", _whole_deduce,
                   lambda layer, tiles, out: take(np.concatenate(tiles, layer.attrs["axis"]), out),
                   lambda layer, out: region_size(out), row_tiles=False)

_RULES: dict[OpDef, LayerRule] = {
    ops.conv2d: CONV2D, ops.max_pool2d: WINDOWED, ops.avg_pool2d: WINDOWED,
    ops.dense: DENSE, ops.bias_add: BIAS_ADD, ops.pad: PAD,
    ops.softmax: WHOLE, ops.log_softmax: WHOLE, ops.flatten: WHOLE, ops.reshape: WHOLE,
    ops.global_avg_pool2d: GLOBAL_POOL, ops.global_max_pool2d: GLOBAL_POOL, ops.mean: WHOLE,
    ops.sum: WHOLE, ops.max: WHOLE, ops.squeeze: WHOLE, ops.expand_dims: WHOLE,
}


def rule_for(opdef: OpDef, attrs: dict[str, AnyValue], input_shapes: list[tuple[int, ...]],
             output_shape: tuple[int, ...]) -> LayerRule | None:
    """The rule the accelerator runs a call of `opdef` with, or None where it has none (the
    call then runs on the host)."""
    nchw = len(output_shape) == 4 and all(len(s) == 4 for s in input_shapes[:1])
    if opdef is ops.concatenate:
        return CONCAT_CHANNELS if nchw and attrs["axis"] in (1, -3) else CONCAT
    rule = _RULES.get(opdef)
    if rule is None:
        return ELEMENTWISE if opdef.pattern in (OpPattern.ELEMWISE, OpPattern.BROADCAST) \
            else None
    if rule is WINDOWED and attrs.get("count_include_pad") and attrs.get("ceil_mode"):
        return WHOLE  # ceil_mode's padding is not counted, which a clipped tile cannot tell
    if rule in (WINDOWED, CONV2D) and not nchw:
        return WHOLE
    return rule
