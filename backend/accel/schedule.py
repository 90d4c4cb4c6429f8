"""Deep Fusion scheduling: fused groups of layers, their tiles, buffers and costs.

A *group* is a run of consecutive layers computed tile by tile with everything between
its layers on chip: only its inputs are loaded from DRAM and only the values needed after
it (or returned) are stored. A tile is a band of rows of the group's last layers' outputs
(its *sinks*); *shape transfer* (the paper's Fig. 3) walks the group backwards, asking each
layer's rule which region of its inputs the tile needs (layers.py), so every layer of the
group computes just that region -- with the overlapping halo of a window computed again
by the next tile, as in the paper. An output the group also stores is stored row by row as
the tiles reach it.

Where a group's weights do not fit on chip, the large ones *stream*: each band of rows
keeps its activations on chip and passes a streamed layer's weight through in blocks of
output channels, double-buffered, one step a block (activations-stationary: the weight is
read again for each band). A layer alone may instead run in blocks of output channels,
each stored as computed, with whichever loop order moves fewer bytes: bands outermost
(activations-stationary: the weight again for each band) or blocks outermost
(weights-stationary: the input again for each block). A group whose weights all stay on
chip is weights-stationary. A layer whose input and weight both do not fit (a 1x1
convolution over 1024 channels at 14x14, fp32, on 768 KiB) may run output-stationary
instead: its whole output stays on chip while the input passes in blocks of input channels,
each with its slice of the weight, and the block's products are added to the output
(``reducible``, ``_plan_reduction``): each read once. The fusion searches try it; the
baseline ("none") and the paper's loop do not.

``plan_group`` costs one group at one tile count: the DRAM bytes each tile loads and stores
(weights once where they stay on chip), the buffers and their addresses (memory.py, with
or without reuse), the cycles of the MAC array and the ALU, and the time with loads,
computation and stores overlapping across tiles (double buffering) or not. ``schedule``
chooses the groups:

- ``none``: every layer alone (the paper's baseline);
- ``fusion`` / ``fusion+reuse``: groups chosen by dynamic programming over the layer
  order, the DRAM traffic (then the time) of the whole network as the cost, without /
  with on-chip reuse. Each group's tiling and streaming is the cheapest the same way, so
  adding reuse or on-chip bytes never adds traffic, and neither schedule moves more than
  "none";
- ``fusion:greedy`` / ``fusion+reuse:greedy``: the paper's loop (Fig. 6): grow a group
  while some tile size still fits on chip with its weights, then start the next.

The search is what makes a build slow, so it costs a plan without building its steps
(``keep=False``; ``GroupPlan.build`` makes the chosen ones), memoises shape deduction
across groups, stops a plan at its first band where that alone cannot fit
(``memory.span_lower_bound``) and again two steps in and one step into the second band
with the widest tile counted (where its buffering is known), plans a layer like one
planned before (the same op, attributes and shapes: a network's repeated blocks) by that
one's recipe, skips tile counts and groups whose traffic lower bound
(weights, streamed weights once per band, stored outputs) exceeds the best found, and
stops growing a group to the front once one starting at a convolution or dense layer fits
in no way.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass, field
from typing import NamedTuple

from relaydsl.backend.accel.config import INPUT, OUTPUT, WEIGHT, AcceleratorConfig
from relaydsl.backend.accel.graph import Graph, Layer, TensorInfo
from relaydsl.backend.accel.layers import (
    BIAS_ADD, CONV2D, ELEMENTWISE, WINDOWED, Region, region_shape, region_size, samples, window,
)
from relaydsl.backend.accel.memory import (
    Buffer, allocate, deep_reuse_offset, span_lower_bound,
)
from relaydsl.backend.accel.report import GroupReport

SCHEDULES = ("none", "fusion", "fusion+reuse", "fusion:greedy", "fusion+reuse:greedy")
MAX_GROUP_LAYERS = 24  # the search's longest group: longer ones never fit 768 KiB anyway
# Tile counts a group is costed at from the fewest that fit: with line buffers the traffic
# hardly depends on the count, and more tiles than a few beyond it only add halos.
TILE_COUNTS_TRIED = 3
# A streamed weight passes in blocks of at most this fraction of the weight buffer (two of
# them, double-buffered): small enough to leave the rest to the activations, large enough
# that a block keeps the MAC array busy.
STREAM_BLOCK_FRACTION = 16
# A group streaming its weights reads them once per band: where the double-buffered bands
# do not fit, up to this many single-buffered ones are tried (their loads wait).
SERIAL_BANDS = 4
WEIGHTS_STATIONARY, ACTIVATIONS_STATIONARY = "weights-stationary", "activations-stationary"
OUTPUT_STATIONARY = "output-stationary"


class Tile(NamedTuple):  # a tuple: the search makes millions of them
    """One step of a group: what it loads, computes and stores (regions per tensor). A load
    is (tensor, the region read from DRAM, the region its buffer holds afterwards): a line
    buffer keeps the rows the previous tile loaded that this one reads again, and loads only
    the rows after them. A compute is (layer, the region computed, the region its output
    buffer holds): a streamed layer computes one block of output channels a step."""

    loads: tuple[tuple[TensorInfo, Region, Region], ...]
    computes: tuple[tuple[Layer, Region, Region], ...]
    stores: tuple[tuple[TensorInfo, Region], ...]
    load_bytes: int
    store_bytes: int
    mac_ops: int
    alu_ops: int
    cycles: int
    serial: bool = False  # its loads wait for the last step (single-buffered inputs)
    # the input channels the group's last layer sums over in this step (input-channel
    # blocks, output-stationary: it adds to the output it holds); None: all of them
    reduce: tuple[int, int] | None = None


@dataclass
class GroupPlan:
    """A group's schedule and costs (see the module docstring). The search costs plans
    without their steps (`tiles` empty); ``build`` makes the steps of a chosen one."""

    layers: list[Layer]
    tiles: list[Tile]
    addresses: dict[TensorInfo, tuple[int, int]]  # tensor -> (on-chip address, bytes)
    onchip_bytes: int
    seconds: float
    channel_blocks: int = 1
    loop_order: str = WEIGHTS_STATIONARY
    read_bytes: dict[str, int] = field(default_factory=dict)
    write_bytes: dict[str, int] = field(default_factory=dict)
    bands: int = 1  # bands of rows
    streamed: tuple[Layer, ...] = ()  # the layers whose weights stream through
    steps: int = 0
    macs: int = 0
    alu_ops: int = 0
    recipe: dict = field(default_factory=dict, repr=False)  # plan_group's arguments

    @property
    def dram_read(self) -> int:
        return sum(self.read_bytes.values())

    @property
    def dram_write(self) -> int:
        return sum(self.write_bytes.values())

    @property
    def cost(self) -> tuple[int, float]:
        """What the schedules minimise: DRAM bytes, then time (the paper's aim is the
        traffic; on a machine this short of bandwidth the time mostly follows it)."""
        return self.dram_read + self.dram_write, self.seconds

    def build(self) -> "GroupPlan":
        """This plan with its steps."""
        if self.tiles or not self.steps:
            return self
        built = plan_group(**self.recipe, keep=True)
        assert built is not None and built.cost == self.cost
        return built

    def report(self, calls: int = 1, prefix: str = "") -> GroupReport:
        """The group's report over `calls` runs, its layers' names after `prefix`."""
        return GroupReport(tuple(prefix + layer.name for layer in self.layers),
                           self.steps * calls, self.tile_rows, self.channel_blocks,
                           self.loop_order, {t.name: a for t, a in self.addresses.items()},
                           self.onchip_bytes, self.dram_read * calls, self.dram_write * calls,
                           self.macs * calls, self.alu_ops * calls, self.seconds * calls,
                           tuple(prefix + layer.name for layer in self.streamed))

    @property
    def tile_rows(self) -> int:
        """Rows of the last layer's output in the first band; 0 where the group is not cut
        in bands of rows."""
        sink = self.layers[-1].output
        if self.bands == 1 or len(sink.shape) != 4:
            return 0
        return _bands(sink.shape[2], self.bands)[0][1]


def _union(a: Region | None, b: Region) -> Region:
    if a is None:
        return b
    return tuple((min(x[0], y[0]), max(x[1], y[1])) for x, y in zip(a, b))


class _GroupContext:
    """What planning one group needs of the graph: which tensors come from outside, which
    leave it, and where each is read."""

    def __init__(self, graph: Graph, consumers: dict[TensorInfo, list[Layer]],
                 layers: list[Layer]):
        self.layers = layers
        produced = {layer.output for layer in layers}
        inside = set(map(id, layers))
        self.weights = list(dict.fromkeys(t for layer in layers for t in layer.inputs
                                          if t.is_constant))
        self.loads = list(dict.fromkeys(t for layer in layers for t in layer.inputs
                                        if not t.is_constant and t not in produced))
        self.stored = [layer.output for layer in layers
                       if layer.output is graph.output or
                       any(id(c) not in inside for c in consumers.get(layer.output, []))]
        self.readers = {t: [k for k, layer in enumerate(layers) if t in layer.inputs]
                        for t in [*self.loads, *produced]}
        self.sinks = [layer.output for layer in layers if not self.readers[layer.output]]
        self.row_tiled = all(layer.rule.row_tiles for layer in layers) and \
            all(len(s.shape) == 4 for s in self.sinks)


@functools.lru_cache(maxsize=1 << 12)
def _bands(size: int, count: int) -> list[tuple[int, int]]:
    return [(i * size // count, (i + 1) * size // count) for i in range(count)]


def _channel_bounds(layer: Layer, blocks: int) -> list[tuple[int, int]] | None:
    """`blocks` blocks of output channels, whole groups of a grouped conv2d each."""
    channels = layer.output.shape[1] if len(layer.output.shape) == 4 else layer.output.shape[-1]
    groups = layer.attrs.get("groups", 1)
    unit = channels // groups if groups > 1 else 1
    units = channels // unit
    if blocks > units:
        return None
    return [(lo * unit, hi * unit) for lo, hi in _bands(units, blocks)]


def _transfer(ctx: _GroupContext, sink_regions: dict[TensorInfo, Region]
              ) -> tuple[dict[TensorInfo, Region], list[tuple[Layer, Region]]]:
    """Shape transfer: the region of every tensor of the group one tile needs, and the
    output region each layer computes, from the regions of the sinks."""
    regions: dict[TensorInfo, Region] = dict(sink_regions)
    computes = []
    for layer in reversed(ctx.layers):
        out = regions[layer.output]
        computes.append((layer, out))
        for t, r in zip(layer.inputs, _deduce(layer, out)):
            regions[t] = _union(regions.get(t), r)
    computes.reverse()
    return regions, computes


@functools.lru_cache(maxsize=1 << 18)  # groups sharing their last layers share these
def _deduce(layer: Layer, out: Region) -> list[Region]:
    return layer.rule.deduce(layer, out)


@functools.lru_cache(maxsize=1 << 12)
def _stream_bounds(layer: Layer, block_bytes: int) -> list[tuple[int, int]] | None:
    """The output-channel blocks a streamed layer's weight passes through on chip in: the
    fewest whose every block holds at most `block_bytes` of it, or None where not even one
    channel (one group) fits."""
    weight = layer.inputs[1]
    channels = layer.output.shape[1 if len(layer.output.shape) == 4 else -1]
    per_channel = weight.size // channels * weight.itemsize
    blocks = max(1, -(-per_channel * channels // block_bytes))
    while blocks <= channels:
        bounds = _channel_bounds(layer, blocks)
        if bounds is None:
            return None
        if max(hi - lo for lo, hi in bounds) * per_channel <= block_bytes:
            return bounds
        blocks += 1
    return None


def streamable(layer: Layer, ctx: "_GroupContext") -> bool:
    """Whether `layer`'s weight can stream through the group in output-channel blocks: a
    conv2d or dense layer whose weight no other layer of the group reads."""
    return layer.rule.unit == "mac" and layer.rule.channel_blocks and len(layer.inputs) > 1 and \
        layer.inputs[1].is_constant and \
        sum(layer.inputs[1] in other.inputs for other in ctx.layers) == 1


def plan_group(ctx: _GroupContext, config: AcceleratorConfig, reuse: bool, tiles: int,
               channel_blocks: int = 1, loop_order: str = ACTIVATIONS_STATIONARY,
               streamed: tuple[Layer, ...] = (),
               transfers: dict[tuple[int, int | None, tuple[int, int] | None,
                                     tuple[int, int] | None],
                               tuple[dict[TensorInfo, Region], list[tuple[Layer, Region]]]]
               | None = None, keep: bool = True, double_io: bool = True, strips: int = 1,
               reduce_blocks: int = 1) -> GroupPlan | None:
    """The plan of the group `ctx` cut in `tiles` bands of rows, or None where that does
    not fit on chip or does not cover its outputs. Two ways past weights that do not fit:

    - a single layer: `channel_blocks` blocks of output channels, each stored as it is
      computed, with `loop_order` ACTIVATIONS_STATIONARY (bands outermost: the weight read
      once per band) or WEIGHTS_STATIONARY (blocks outermost: the input once per block);
    - any group: the weights of the `streamed` layers pass through on chip in blocks of
      output channels (double-buffered: the next block loads while one computes), once per
      band, while the band's activations stay on chip (activations-stationary); the other
      weights stay on chip for the whole group (weights-stationary when none streams).

    Without `double_io`, the group's inputs and outputs have one buffer each: a band's
    loads wait for the last band's computation and stores (where two do not fit). With
    `strips`, each band is cut in that many strips of columns too (where one band of a
    batch of images' rows does not fit; no line buffers then, and only a group storing
    just its sinks, whose strips do not overlap).
    With `reduce_blocks`, the group runs output-stationary instead (_plan_reduction).
    `transfers` keeps the shape transfers of the tiles between calls for the same group;
    without `keep`, the plan is costed without its steps (GroupPlan.build makes them)."""
    if reduce_blocks > 1:
        return _plan_reduction(ctx, config, reuse, reduce_blocks, keep)
    layers = ctx.layers
    transfers = {} if transfers is None else transfers
    if tiles > 1 and not ctx.row_tiled:
        return None
    if tiles > 1 and tiles > min(s.shape[2] for s in ctx.sinks):
        return None
    if strips > 1 and (not ctx.row_tiled or streamed or
                       strips > min(s.shape[3] for s in ctx.sinks) or
                       not set(ctx.stored) <= set(ctx.sinks)):
        return None
    strip_list: list[int | None] = list(range(strips)) if strips > 1 else [None]
    blocks: list[tuple[int, int] | None] = [None]
    if channel_blocks > 1:
        if len(layers) != 1 or not layers[0].rule.channel_blocks or streamed:
            return None
        bounds = _channel_bounds(layers[0], channel_blocks)
        if bounds is None:
            return None
        blocks = list(bounds)
    if tiles > 1:
        bands: list[int | None] = list(range(tiles))
        steps = [(b, c) for b in bands for c in blocks] if loop_order == ACTIVATIONS_STATIONARY \
            else [(b, c) for c in blocks for b in bands]
    else:
        steps = [(None, c) for c in blocks]
    steps3 = [(b, c, strip) for b, c in steps for strip in strip_list]

    capacity = config.buffers()
    stream: dict[Layer, list[tuple[int, int]]] = {}
    for layer in streamed:
        bounds = _stream_bounds(
            layer, capacity[config.buffer_for(WEIGHT)] // STREAM_BLOCK_FRACTION)
        if bounds is None:
            return None
        stream[layer] = bounds
    streamed_weights = {layer.inputs[1] for layer in stream}
    peak_region: dict[TensorInfo, int] = {  # a streamed weight's widest block
        layer.inputs[1]: max(hi - lo for lo, hi in bounds) *
        (layer.inputs[1].nbytes // layer.inputs[1].shape[0])
        for layer, bounds in stream.items()}
    resident = [t for t in ctx.weights if t not in streamed_weights]
    if blocks == [None] and sum(t.nbytes for t in resident) > capacity[config.buffer_for(WEIGHT)]:
        return None  # the resident weights stay on chip all along: they alone do not fit
    stored_upto = {(t, strip): 0 for t in ctx.stored for strip in strip_list}
    loaded_before: dict[TensorInfo, Region] = {}
    kept = set(resident)  # loaded once and read by later tiles: on chip all along
    line_buffers: set[TensorInfo] = set()  # rows kept from one tile for the next
    deep_offsets: dict[TensorInfo, tuple[TensorInfo, int]] = {}
    made = _Steps(config, keep)
    read: dict[str, int] = {}
    written: dict[str, int] = {}
    once = len(steps) == 1 or not double_io
    # two steps in, and one step into the second band, whether a load stays on chip, in a
    # line buffer or double-buffered is known, and buffers only grow from there: most plans
    # that overflow stop at these checks rather than after all their steps
    checks = {2, len(blocks) * len(strip_list) + 1 if loop_order == ACTIVATIONS_STATIONARY
              else len(strip_list) * (tiles if tiles > 1 else 1) + 1}
    if len(steps3) > 2:
        # the widest step, in the middle of the image (the edges' are clipped by padding):
        # its buffers count from the first check on
        probe = (tiles // 2 if tiles > 1 else None,
                 max(blocks, key=lambda b: 0 if b is None else b[1] - b[0]),
                 strips // 2 if strips > 1 else None)
        for t, r in _tile_transfer(ctx, transfers, tiles, strips, *probe)[0].items():
            if t not in streamed_weights:
                peak_region[t] = max(peak_region.get(t, 0), region_size(r) * t.itemsize)
    for index, (band, block, strip) in enumerate(steps3):
        made.serial = not double_io  # the band's first step
        if index in checks and not _may_fit(ctx, peak_region, deep_offsets, kept | line_buffers,
                                            stream, config, reuse, line_buffers, once):
            return None
        regions, computes = _tile_transfer(ctx, transfers, tiles, strips, band, block, strip)
        for t, r in regions.items():
            if t not in streamed_weights:
                peak_region[t] = max(peak_region.get(t, 0), region_size(r) * t.itemsize)
        if reuse:
            _deep_reuse(ctx, regions, computes, deep_offsets, stream)
        if band in (0, None) and block in (None, blocks[0]) and strip in (0, None) and \
                not _may_fit(ctx, peak_region, deep_offsets, kept, stream, config, reuse):
            return None  # the first tile alone overflows: so would all of them
        loads: list[tuple[TensorInfo, Region, Region]] = []
        for t in [*resident, *ctx.loads]:
            r = regions[t]
            before = loaded_before.get(t)
            if before == r:
                kept.add(t)
                continue
            new = r
            if before is not None and _continues(before, r):
                new = (*r[:2], (max(before[2][1], r[2][0]), r[2][1]), *r[3:])
                line_buffers.add(t)
            loads.append((t, new, r))
            loaded_before[t] = r
            read[t.name] = read.get(t.name, 0) + region_size(new) * t.itemsize
        stores = []
        for t in ctx.stored:
            r = regions[t]
            if len(t.shape) == 4 and block is None:
                lo, hi = r[2]
                if lo > stored_upto[t, strip]:
                    return None  # rows no tile computes
                if hi > stored_upto[t, strip]:
                    stores.append((t, (*r[:2], (stored_upto[t, strip], hi), *r[3:])))
                    stored_upto[t, strip] = hi
            else:
                stores.append((t, r))
                stored_upto[t, strip] = t.shape[2] if len(t.shape) == 4 else 1
        for t, r in stores:
            written[t.name] = written.get(t.name, 0) + region_size(r) * t.itemsize
        # the band's steps: a streamed layer's every weight block is a step of its own
        pending: list[tuple[Layer, Region, Region]] = []
        for layer, whole in computes:
            if layer not in stream:
                pending.append((layer, whole, whole))
                continue
            if pending or loads:
                _step(made, loads, pending, ())
                loads, pending = [], []
            axis = 1 if len(whole) == 4 else len(whole) - 1
            weight = layer.inputs[1]
            # work and weight bytes are linear in a block's channels
            work = _work(layer, whole) // (whole[axis][1] - whole[axis][0])
            per_channel = weight.nbytes // weight.shape[0]
            rest = tuple((0, n) for n in weight.shape[1:])
            before, after = whole[:axis], whole[axis + 1:]
            rows = samples(whole)
            for lo, hi in stream[layer]:
                w = ((lo, hi), *rest)  # what the rule deduces
                macs = work * (hi - lo)
                made.add((hi - lo) * per_channel, 0, macs, 0,
                         config.cycles("mac", macs, rows),
                          ((weight, w, w),), ((layer, (*before, (lo, hi), *after), whole),))
            read[weight.name] = read.get(weight.name, 0) + weight.nbytes
        _step(made, loads, pending, stores)
    if any(upto < (t.shape[2] if len(t.shape) == 4 else 1) for (t, _), upto in stored_upto.items()):
        return None
    addresses, spans = _place(ctx, peak_region, deep_offsets, kept | line_buffers,
                              line_buffers, stream, config, reuse, once=once)
    if any(spans[kind] > capacity[kind] for kind in spans):
        return None
    order = loop_order if channel_blocks > 1 else \
        ACTIVATIONS_STATIONARY if stream else WEIGHTS_STATIONARY
    return GroupPlan(layers, made.tiles, addresses, sum(spans.values()), made.finish(),
                     channel_blocks, order, read, written, tiles, tuple(stream), made.count,
                     made.macs, made.alu,
                     dict(ctx=ctx, config=config, reuse=reuse, tiles=tiles,
                          channel_blocks=channel_blocks, loop_order=loop_order,
                          streamed=streamed, double_io=double_io, strips=strips))


def reducible(ctx: _GroupContext) -> bool:
    """Whether the group can run output-stationary (_plan_reduction): its last layer a
    conv2d (one group) or dense layer, the group's one sink and only stored tensor, fed
    through its data input by a chain of layers that keep to their channels (elementwise
    ops, bias adds, pools), which store nothing."""
    *front, last = ctx.layers
    if ctx.stored != [last.output] or ctx.sinks != [last.output] or \
            last.rule.unit != "mac" or len(last.inputs) != 2 or \
            not last.inputs[1].is_constant or last.attrs.get("groups", 1) != 1:
        return False
    if not front:
        return True
    if len(last.output.shape) != 4 or ctx.readers[last.inputs[0]] != [len(front)]:
        return False
    for layer in front:
        if layer.rule not in (ELEMENTWISE, BIAS_ADD, WINDOWED) or \
                len(layer.output.shape) != 4 or ctx.readers[layer.output] == [] or \
                any(len(t.shape) == 4 and t.shape[1] != layer.output.shape[1]
                    for t in layer.inputs):
            return False
    return True


def reduction_reads(layer: Layer, out: Region, block: tuple[int, int] | None
                    ) -> list[Region]:
    """The regions of its data and weight a conv2d or dense layer's output region `out`
    reads, summed over the input channels `block` only (all of them where None)."""
    data, weight = _deduce(layer, out)
    if block is None:
        return [data, weight]
    axis = 1 if len(data) == 4 else len(data) - 1
    return [(*data[:axis], block, *data[axis + 1:]), (weight[0], block, *weight[2:])]


def _plan_reduction(ctx: _GroupContext, config: AcceleratorConfig, reuse: bool, blocks: int,
                    keep: bool) -> GroupPlan | None:
    """The group `ctx` (reducible) output-stationary: its last layer's whole output stays on
    chip while its data input passes through in `blocks` blocks of input channels, each
    with its slice of the weight (double-buffered) and computed by the layers in front from
    the same channels of theirs; each block's products are added to the output, stored once
    at the end. Every input and weight is read once: the way past a layer whose input and
    weight both do not fit on chip, where bands would read the weight again for each band
    and channel blocks the input again for each block."""
    *front, last = ctx.layers
    data, weight = last.inputs
    channels = data.shape[1] if len(data.shape) == 4 else data.shape[-1]
    if blocks > channels:
        return None
    whole = tuple((0, n) for n in last.output.shape)
    full_work = _work(last, whole)
    sizes: dict[TensorInfo, int] = {last.output: last.output.nbytes}
    made = _Steps(config, keep)
    read: dict[str, int] = {}
    bounds = _bands(channels, blocks)
    steps = []
    for lo, hi in bounds:
        regions: dict[TensorInfo, Region] = dict(zip(last.inputs,
                                                     reduction_reads(last, whole, (lo, hi))))
        computes: list[tuple[Layer, Region, Region]] = []
        for layer in reversed(front):
            out = regions[layer.output]
            computes.append((layer, out, out))
            for t, r in zip(layer.inputs, _deduce(layer, out)):
                regions[t] = _union(regions.get(t), r)
        computes.reverse()
        computes.append((last, whole, whole))
        for t, r in regions.items():
            sizes[t] = max(sizes.get(t, 0), region_size(r) * t.itemsize)
        steps.append((lo, hi, regions, computes))
    # the weight's slices load as the data's do, double-buffered; the output is held all along
    kept = {last.output, *(t for t in ctx.weights if t is not weight)}  # and small biases
    addresses, spans = _place(ctx, sizes, {}, kept, set(), {}, config, reuse, once=False,
                              blocked={weight})
    capacity = config.buffers()
    if any(spans[kind] > capacity[kind] for kind in spans):
        return None
    loaded = [*ctx.weights, *ctx.loads]
    for index, (lo, hi, regions, computes) in enumerate(steps):
        loads = tuple((t, regions[t], regions[t]) for t in loaded if t in regions)
        for t, r, _ in loads:
            read[t.name] = read.get(t.name, 0) + region_size(r) * t.itemsize
        stores = ((last.output, whole),) if index == len(steps) - 1 else ()
        mac = full_work // channels * (hi - lo)
        alu = cycles = 0
        for layer, r, _ in computes[:-1]:
            work = _work(layer, r)
            alu += work
            cycles += config.cycles("alu", work, samples(r))
        cycles += config.cycles("mac", mac, samples(whole))
        made.add(sum(region_size(r) * t.itemsize for t, r, _ in loads),
                 last.output.nbytes if stores else 0, mac, alu, cycles, loads,
                 tuple(computes), stores, (lo, hi))
    return GroupPlan(ctx.layers, made.tiles, addresses, sum(spans.values()), made.finish(),
                     1, OUTPUT_STATIONARY, read, {last.output.name: last.output.nbytes}, 1,
                     (), made.count, made.macs, made.alu,
                     dict(ctx=ctx, config=config, reuse=reuse, tiles=1,
                          reduce_blocks=blocks))


def _tile_transfer(ctx: _GroupContext, transfers: dict, tiles: int, strips: int,
                   band: int | None, block: tuple[int, int] | None, strip: int | None
                   ) -> tuple[dict[TensorInfo, Region], list[tuple[Layer, Region]]]:
    """The shape transfer (_transfer) of one step of a plan: band `band` of `tiles`, the
    output channels `block`, strip `strip` of `strips`; kept in `transfers`."""
    key = (tiles, band, block, None if strip is None else (strip, strips))
    known = transfers.get(key)
    if known is None:
        sink_regions = {}
        for s in ctx.sinks:
            region = [(0, n) for n in s.shape]
            if band is not None:
                region[2] = _bands(s.shape[2], tiles)[band]
            if block is not None:
                region[1 if len(s.shape) == 4 else len(s.shape) - 1] = block
            if strip is not None:
                region[3] = _bands(s.shape[3], strips)[strip]
            sink_regions[s] = tuple(region)
        known = transfers[key] = _transfer(ctx, sink_regions)
    return known


def _may_fit(ctx: _GroupContext, sizes: dict[TensorInfo, int],
             offsets: dict[TensorInfo, tuple[TensorInfo, int]], kept: set[TensorInfo],
             streamed: dict[Layer, list[tuple[int, int]]], config: AcceleratorConfig,
             reuse: bool, line_buffers: set[TensorInfo] | frozenset = frozenset(),
             once: bool = True) -> bool:
    """Whether buffers of `sizes` (the first steps': later ones only grow them) leave room
    for an allocation in every on-chip buffer; each held once unless `once` is False."""
    buffers, kinds = _buffers(ctx, sizes, offsets, kept, set(line_buffers), streamed, config,
                              once=once)
    return all(span_lower_bound([b for t, b in buffers.items() if kinds[t] == kind], reuse)
               <= capacity for kind, capacity in config.buffers().items())


@functools.lru_cache(maxsize=1 << 16)  # the same tiles recur across options and groups
def _work(layer: Layer, region: Region) -> int:
    return layer.rule.work(layer, region)


def _step(steps: "_Steps", loads: list[tuple[TensorInfo, Region, Region]],
          computes: list[tuple[Layer, Region, Region]],
          stores: tuple[tuple[TensorInfo, Region], ...] | list[tuple[TensorInfo, Region]]
          ) -> None:
    """Add a step (one SYNC) of a group to `steps`, its work and cycles counted."""
    config = steps.config
    mac = alu = cycles = 0
    for layer, r, _ in computes:
        work = _work(layer, r)
        cycles += config.cycles(layer.rule.unit, work, samples(r))
        if layer.rule.unit == "mac":
            mac += work
        else:
            alu += work
    steps.add(sum(region_size(r) * t.itemsize for t, r, _ in loads),
              sum(region_size(r) * t.itemsize for t, r in stores), mac, alu, cycles,
              tuple(loads), tuple(computes), tuple(stores))


class _Steps:
    """A group's steps as they are planned: their totals, their time (tiles_seconds,
    summed as they come) and, where `keep`, the steps themselves -- the search costs
    millions of steps and keeps those of the groups it chooses."""

    def __init__(self, config: AcceleratorConfig, keep: bool):
        self.config, self.keep = config, keep
        self.tiles: list[Tile] = []
        self.count = self.macs = self.alu = 0
        self.seconds = 0.0
        self._last: tuple[int, int] | None = None  # the last step's cycles and stores
        self._stored_before = 0  # the stores of the step before it
        self.serial = False  # the next step's loads wait for the last one's compute, stores

    def add(self, load_bytes: int, store_bytes: int, macs: int, alu: int, cycles: int,
            loads: tuple = (), computes: tuple = (), stores: tuple = (),
            reduce: tuple[int, int] | None = None) -> None:
        bw, clock = self.config.dram_bandwidth, self.config.clock_hz
        serial, self.serial = self.serial, False
        if self.keep:
            self.tiles.append(Tile(loads, computes, stores, load_bytes, store_bytes, macs, alu,
                                   cycles, serial, reduce))
        self.count += 1
        self.macs += macs
        self.alu += alu
        if not self.config.double_buffering:
            self.seconds += (load_bytes + store_bytes) / bw + cycles / clock
            return
        if self._last is None:
            self.seconds += load_bytes / bw
        elif serial:  # single buffers: the loads wait for the last step's compute, stores
            self.seconds += self._last[0] / clock + \
                (load_bytes + self._stored_before + self._last[1]) / bw
            self._stored_before = 0
        else:  # the last step computes while this one loads and the one before it stores
            self.seconds += max(self._last[0] / clock,
                                (load_bytes + self._stored_before) / bw)
            self._stored_before = self._last[1]
        self._last = (cycles, store_bytes)

    def finish(self) -> float:
        """The time of the steps added."""
        if self._last is None or not self.config.double_buffering:
            return self.seconds
        bw, clock = self.config.dram_bandwidth, self.config.clock_hz
        return self.seconds + max(self._last[0] / clock, self._stored_before / bw) + \
            self._last[1] / bw


def _continues(before: Region, after: Region) -> bool:
    """Whether a band of rows `after` starts within the band `before` of the same tensor,
    the same in every other axis (a line buffer can keep the rows in between)."""
    return len(after) == 4 and before[:2] == after[:2] and before[3:] == after[3:] and \
        before[2][0] <= after[2][0] < before[2][1] and after[2][1] >= before[2][1]


def _deep_reuse(ctx: _GroupContext, regions: dict[TensorInfo, Region],
                computes: list[tuple[Layer, Region]],
                offsets: dict[TensorInfo, tuple[TensorInfo, int]],
                streamed: dict[Layer, list[tuple[int, int]]]) -> None:
    """Record, for each layer whose output can overlap an input dying at it, the smallest
    deep-reuse offset over the tiles seen so far. A streamed layer writes every position
    once per block of channels, so its output may not overlap its input."""
    for k, (layer, out) in enumerate(computes):
        if layer.output in ctx.stored or len(out) != 4 or not layer.rule.row_tiles or \
                layer in streamed:
            continue
        for t in layer.inputs:
            if t.is_constant or t in ctx.stored or ctx.readers[t][-1] != k or len(t.shape) != 4 \
                    or (len(layer.inputs) > 1 and t is not layer.inputs[0]):
                continue
            d = _offset(layer, t, regions[t], out)
            if d is None:
                continue
            known = offsets.get(layer.output)
            if known is None or known[0] is t:
                offsets[layer.output] = (t, d if known is None else min(d, known[1]))
            break


@functools.lru_cache(maxsize=1 << 16)  # the search plans a layer's tiles in many groups
def _offset(layer: Layer, t: TensorInfo, t_region: Region, out: Region) -> int | None:
    """The deep-reuse offset of `layer`'s output tile over input `t`'s tile, or None where
    the layer reads it other than window by window (a broadcast operand, a concatenation),
    where the two differ in element size (an int8 input's int32 accumulators) or where the
    tile holds more than one sample (deep reuse walks one image's positions)."""
    if t.itemsize != layer.output.itemsize or out[0] != (0, 1):
        return None
    (h_lo, _), (w_lo, _) = t_region[2], t_region[3]
    rows, cols = range(*out[2]), range(*out[3])
    if layer.rule is ELEMENTWISE:
        if region_shape(t_region)[1:] != region_shape(out)[1:] and \
                (t.shape[2:] != layer.output.shape[2:] or t.shape[1] != layer.output.shape[1]):
            return None
        row_starts = [r - h_lo for r in rows]
        col_starts = [c - w_lo for c in cols]
    elif layer.rule in (WINDOWED, CONV2D) and t is layer.inputs[0]:
        _, strides, _, pads = window(layer)
        row_starts = [max(r * strides[0] - pads[0], 0) - h_lo for r in rows]
        col_starts = [max(c * strides[1] - pads[1], 0) - w_lo for c in cols]
    else:
        return None
    in_shape = region_shape(t_region)
    out_shape = region_shape(out)
    return deep_reuse_offset((in_shape[2], in_shape[3], in_shape[1]),
                             (out_shape[2], out_shape[3], out_shape[1]),
                             row_starts, col_starts, t.itemsize)


def _buffers(ctx: _GroupContext, sizes: dict[TensorInfo, int],
             offsets: dict[TensorInfo, tuple[TensorInfo, int]], kept: set[TensorInfo],
             line_buffers: set[TensorInfo], streamed: dict[Layer, list[tuple[int, int]]],
             config: AcceleratorConfig, once: bool = False,
             blocked: set[TensorInfo] | frozenset = frozenset()
             ) -> tuple[dict[TensorInfo, Buffer], dict[TensorInfo, str]]:
    """The group's buffers, and the on-chip buffer (its config field) each goes to:
    resident weights (and any input a later tile reads again without loading it)
    live for the whole group, a streamed weight's blocks over its layer (and the step
    before, which loads the first block while it computes), a loaded input from the tile's
    start to its last reader, a layer's output from its layer to its last reader (to the
    last layer where the group stores it: a tile stores after it computes); a tensor
    loaded or stored while another step computes (double buffering) has two buffers. Where
    the config splits its memory (VTA), inputs, weights and outputs each go to their own
    buffer. `once`: the group's inputs and outputs are loaded and stored in one step (one
    tile), so nothing overlaps their moves and each is held once -- which is also the least
    room a plan of more tiles may take."""
    last = len(ctx.layers) - 1
    double = 2 if config.double_buffering else 1
    stream_at = {layer.inputs[1]: k for k, layer in enumerate(ctx.layers) if layer in streamed}
    buffers: dict[TensorInfo, Buffer] = {}
    kinds: dict[TensorInfo, str] = {}
    order = [*ctx.weights, *ctx.loads, *(layer.output for layer in ctx.layers)]
    for t in order:
        if t in buffers:
            continue
        if t in stream_at:
            k = stream_at[t]
            start, end, copies = max(0, k - double + 1), k, double
        elif t in kept:  # a line buffer loads its next rows while a tile computes
            start, end, copies = 0, last, double if t in line_buffers and not once else 1
        elif t in ctx.loads or t in blocked:  # a weight loaded a slice a step (blocked)
            start = 0
            end = ctx.readers[t][-1] if t in ctx.readers else \
                max(k for k, layer in enumerate(ctx.layers) if t in layer.inputs)
            copies = 1 if once else double
        else:
            start = next(k for k, layer in enumerate(ctx.layers) if layer.output is t)
            # a tile stores after its last layer (isa.generate): an output the group
            # stores lives until then, or a later layer's buffer may take its place
            end = last if t in ctx.stored else max([start, *ctx.readers[t]])
            copies = double if t in ctx.stored and not once else 1
        kinds[t] = config.buffer_for(WEIGHT if t.is_constant else
                                     INPUT if t in ctx.loads else OUTPUT)
        partner = offsets.get(t)
        reuses = None
        if partner is not None and copies == 1 and partner[0] in buffers and \
                partner[0] not in kept and kinds[partner[0]] == kinds[t] and \
                buffers[partner[0]].size == sizes[partner[0]]:  # not a double buffer
            reuses = (buffers[partner[0]], partner[1])
        buffers[t] = Buffer(t.name, sizes[t] * copies, start, end, reuses)
    return buffers, kinds


def _place(ctx: _GroupContext, sizes: dict[TensorInfo, int],
           offsets: dict[TensorInfo, tuple[TensorInfo, int]], kept: set[TensorInfo],
           line_buffers: set[TensorInfo], streamed: dict[Layer, list[tuple[int, int]]],
           config: AcceleratorConfig, reuse: bool, once: bool = False,
           blocked: set[TensorInfo] | frozenset = frozenset()
           ) -> tuple[dict[TensorInfo, tuple[int, int]], dict[str, int]]:
    """Addresses for the group's buffers (_buffers), and the bytes each on-chip buffer of
    `config` spans. Where the config splits its memory (VTA), its buffers lie one after
    the other in the address space."""
    buffers, kinds = _buffers(ctx, sizes, offsets, kept, line_buffers, streamed, config,
                              once=once, blocked=blocked)
    addresses: dict[TensorInfo, tuple[int, int]] = {}
    spans: dict[str, int] = {}
    base = 0
    for kind, capacity in config.buffers().items():
        mine = [t for t in buffers if kinds[t] == kind]
        placed, spans[kind] = allocate([buffers[t] for t in mine], reuse)
        addresses.update((t, (base + placed[buffers[t]], buffers[t].size)) for t in mine)
        base += capacity
    return addresses, spans


def tiles_seconds(tiles: list[Tile], config: AcceleratorConfig) -> float:
    """The group's time: with double buffering, a tile's computation overlaps the next
    tile's loads and the previous one's stores (one DRAM channel for both); without, each
    tile loads, computes and stores in turn."""
    steps = _Steps(config, keep=False)
    for t in tiles:
        steps.serial = t.serial
        steps.add(t.load_bytes, t.store_bytes, t.mac_ops, t.alu_ops, t.cycles)
    return steps.finish()


def _tile_counts(rows: int) -> list[int]:
    counts, n = {1, rows}, 1
    while n < rows:
        counts.update((n, n + n // 2))
        n *= 2
    return sorted(c for c in counts if 1 <= c <= rows)


def _stream_options(ctx: _GroupContext, config: AcceleratorConfig) -> list[tuple[Layer, ...]]:
    """The sets of layers whose weights a multi-layer group streams, the most first: all
    whose streaming saves room (a weight over two blocks), the largest until the rest take
    at most half of the weight buffer, and none (where all fit the weight buffer)."""
    capacity = config.buffers()[config.buffer_for(WEIGHT)]
    resident = sum(t.nbytes for t in ctx.weights)
    if len(ctx.layers) == 1:  # a single layer streams by its channel blocks (plan_group)
        return [()] if resident <= capacity else []
    block = capacity // STREAM_BLOCK_FRACTION
    can = sorted((layer for layer in ctx.layers if streamable(layer, ctx) and
                  layer.inputs[1].nbytes > 2 * block),
                 key=lambda layer: -layer.inputs[1].size)
    some: list[Layer] = []
    for layer in can:
        if resident <= capacity // 2:
            break
        some.append(layer)
        resident -= layer.inputs[1].nbytes
    options: list[tuple[Layer, ...]] = []
    for option in (tuple(can), tuple(some)):
        if option and option not in options:
            options.append(option)
    if sum(t.nbytes for t in ctx.weights) <= capacity:
        options.append(())
    return options


def best_plan(graph: Graph, consumers: dict[TensorInfo, list[Layer]], layers: list[Layer],
              config: AcceleratorConfig, reuse: bool, stream: bool = True,
              reduce: bool = False) -> GroupPlan | None:
    """The cheapest plan (GroupPlan.cost) of `layers` as one group over the tile counts,
    the weights kept on chip or (where `stream`) streamed, and for a single layer with
    weights channel blocks and loop orders; or None where none fits. With `reuse`, the
    plans without deep reuse compete too: a group that fits whole thanks to reuse may move
    more than strips of columns would without it, and "fusion+reuse" must never move more
    than "fusion"."""
    plans = [_best_plan(graph, consumers, layers, config, r, stream, reduce)
             for r in ((True, False) if reuse else (False,))]
    return min((p for p in plans if p is not None), key=lambda p: p.cost, default=None)


def _best_plan(graph: Graph, consumers: dict[TensorInfo, list[Layer]], layers: list[Layer],
               config: AcceleratorConfig, reuse: bool, stream: bool,
               reduce: bool) -> GroupPlan | None:
    ctx = _GroupContext(graph, consumers, layers)
    rows = min((s.shape[2] for s in ctx.sinks if len(s.shape) == 4), default=1)
    counts = _tile_counts(rows) if ctx.row_tiled else [1]
    transfers: dict = {}
    best: GroupPlan | None = None
    stored = sum(t.nbytes for t in ctx.stored)
    first = 0  # streaming fewer weights needs more room: no fewer tiles than with more
    options = _stream_options(ctx, config)
    for streamed in options if stream else [o for o in options if not o]:
        tried = 0
        streamed_bytes = sum(layer.inputs[1].nbytes for layer in streamed)
        fixed = sum(t.nbytes for t in ctx.weights) - streamed_bytes + stored
        for k in range(first, len(counts)):  # the fewest that fit, and a few more
            if best is not None and fixed + counts[k] * streamed_bytes > best.cost[0]:
                break  # moves more than the best already: each band reads the streamed again
            plan = plan_group(ctx, config, reuse, counts[k], streamed=streamed,
                              transfers=transfers, keep=False)
            if plan is None and streamed and config.double_buffering and \
                    counts[k] <= SERIAL_BANDS:
                plan = plan_group(ctx, config, reuse, counts[k], streamed=streamed,
                                  transfers=transfers, keep=False, double_io=False)
            if plan is not None and tried == 0:
                first = k
            if plan is not None and (best is None or plan.cost < best.cost):
                best = plan
            tried += plan is not None or tried > 0
            if tried == TILE_COUNTS_TRIED:
                break
        if tried == 0:
            break
    if best is None and len(layers) == 1 and layers[0].rule.channel_blocks:
        channels = layers[0].output.shape[1 if len(layers[0].output.shape) == 4 else -1]
        for blocks in _tile_counts(channels)[1:]:
            for count in counts:
                for order in (ACTIVATIONS_STATIONARY, WEIGHTS_STATIONARY) if count > 1 \
                        else (ACTIVATIONS_STATIONARY,):
                    plan = plan_group(ctx, config, reuse, count, blocks, order,
                                      transfers=transfers, keep=False)
                    if plan is not None and (best is None or plan.cost < best.cost):
                        best = plan
            if best is not None:
                break
    if reduce and reducible(ctx):
        best = _best_reduction(ctx, config, reuse, best)
    if best is None and ctx.row_tiled and (len(layers) == 1 or ctx.sinks[0].shape[0] > 1):
        best = _strips_plan(ctx, config, reuse, counts, transfers)
    if best is None and len(layers) == 1 and config.double_buffering:
        # the last resort of a layer of which one band fits only once (a batch of images'
        # rows on VTA's 32 KiB input buffer): each band's loads wait for the last band
        for count in counts:
            best = plan_group(ctx, config, reuse, count, transfers=transfers, keep=False,
                              double_io=False)
            if best is not None:
                break
    return best


def _best_reduction(ctx: _GroupContext, config: AcceleratorConfig, reuse: bool,
                    best: GroupPlan | None) -> GroupPlan | None:
    """The cheaper of `best` and the output-stationary plans of `ctx` with the fewest
    input-channel blocks that fit, and a few more (they move the same bytes: the time
    decides). It moves each input, weight and output once: nothing does less, so it is
    tried only where `best` moves more."""
    last = ctx.layers[-1]
    minimum = sum(t.nbytes for t in [*ctx.weights, *ctx.loads]) + last.output.nbytes
    if best is not None and best.cost[0] <= minimum:
        return best
    data = last.inputs[0]
    tried = 0
    for blocks in _tile_counts(data.shape[1] if len(data.shape) == 4 else data.shape[-1])[1:]:
        plan = _plan_reduction(ctx, config, reuse, blocks, keep=False)
        if plan is not None and (best is None or plan.cost < best.cost):
            best = plan
        tried += plan is not None or tried > 0
        if tried == TILE_COUNTS_TRIED:
            break
    return best


def _strips_plan(ctx: _GroupContext, config: AcceleratorConfig, reuse: bool,
                 counts: list[int], transfers: dict) -> GroupPlan | None:
    """The cheapest plan of `ctx` cutting its bands in strips of columns too, the fewest
    strips that fit: where a band of a batch of images' rows does not fit (VTA's 32 KiB input
    buffer holds three rows of four 56x56x64 int8 images less than once). Tried for a batch,
    and for a layer that fits no other way; a single layer whose weight does not fit either
    in channel blocks too, and as the last resort with single-buffered inputs and outputs
    (a band's loads wait for the last band's computation)."""
    layers = ctx.layers
    blocked = len(layers) == 1 and layers[0].rule.channel_blocks
    columns = min(s.shape[3] for s in ctx.sinks)
    strip_counts = sorted({k for k in (2, 4, 8) if k < columns} | {columns})
    best: GroupPlan | None = None
    for double_io in (True, False) if config.double_buffering and len(layers) == 1 \
            else (True,):
        for strips in strip_counts:
            for blocks in [1, *_tile_counts(layers[0].output.shape[1])[1:]] if blocked \
                    else [1]:
                tried = 0
                for count in counts:
                    plan = plan_group(ctx, config, reuse, count, blocks, transfers=transfers,
                                      keep=False, strips=strips, double_io=double_io)
                    if plan is not None and (best is None or plan.cost < best.cost):
                        best = plan
                    tried += plan is not None or tried > 0
                    if tried == TILE_COUNTS_TRIED:
                        break
                if best is not None:
                    return best
    return None


class ScheduleError(ValueError):
    """A layer that fits on chip in no way: the config's buffer is too small for it."""


def _short_buffer(graph: Graph, consumers: dict[TensorInfo, list[Layer]], layer: Layer,
                  config: AcceleratorConfig, reuse: bool) -> str:
    """The buffer (its field's name) that keeps `layer` off the chip: the first whose
    growing alone lets it fit (onchip_bytes for one buffer, or where none does alone)."""
    buffers = config.buffers()
    if len(buffers) > 1:
        for field, size in buffers.items():
            grown = dataclasses.replace(config, **{field: size * 1024,
                                                   "onchip_bytes": config.onchip_bytes +
                                                   size * 1023})
            if best_plan(graph, consumers, [layer], grown, reuse) is not None:
                return field
    return "onchip_bytes"


def _signature(ctx: _GroupContext) -> tuple:
    """What a one-layer group's plan depends on: its op, attributes, the shapes and types
    of its tensors (which of its inputs are the same, which are weights) and whether it
    stores its output -- not the names nor the weights' values."""
    layer, = ctx.layers
    inputs = tuple((t.shape, t.dtype, t.is_constant, layer.inputs.index(t))
                   for t in layer.inputs)
    return (layer.opdef.name, repr(sorted(layer.attrs.items())), inputs,
            layer.output.shape, layer.output.dtype, bool(ctx.stored))


def schedule(graph: Graph, config: AcceleratorConfig, kind: str) -> list[GroupPlan]:
    """The groups of `graph` under the schedule `kind` (one of SCHEDULES)."""
    if kind not in SCHEDULES:
        raise ValueError(f"unknown schedule {kind!r}; choose one of {', '.join(SCHEDULES)}")
    consumers = graph.consumers()
    layers = graph.layers
    reuse = kind.startswith("fusion+reuse")
    # the paper's loop keeps a group's weights on chip: it grows a group while they fit
    stream = not kind.endswith(":greedy")
    # output-stationary groups are our search's: the baseline and the paper's loop tile
    # by rows and output channels only
    reduce = kind in ("fusion", "fusion+reuse")
    cache: dict[tuple[int, int], GroupPlan | None] = {}
    alike: dict[tuple, GroupPlan | None] = {}  # single layers' plans by their _signature

    def plan(i: int, j: int) -> GroupPlan | None:
        if (i, j) in cache:
            return cache[(i, j)]
        if j > i + 1:
            cache[(i, j)] = best_plan(graph, consumers, layers[i:j], config, reuse, stream, reduce)
            return cache[(i, j)]
        ctx = _GroupContext(graph, consumers, layers[i:j])
        key = _signature(ctx)
        if key not in alike:
            alike[key] = best_plan(graph, consumers, layers[i:j], config, reuse, stream, reduce)
            cache[(i, j)] = alike[key]
        else:  # a layer like one planned before (a network's repeated blocks): its plan
            known = alike[key]
            again = None if known is None else \
                plan_group(**{**known.recipe, "ctx": ctx}, keep=False)
            cache[(i, j)] = again if again is not None and known is not None and \
                again.cost == known.cost else \
                best_plan(graph, consumers, layers[i:j], config, reuse, stream, reduce)
        return cache[(i, j)]

    def single(i: int) -> GroupPlan:
        p = plan(i, i + 1)
        if p is None:
            layer = layers[i]
            field = _short_buffer(graph, consumers, layer, config, reuse)
            raise ScheduleError(
                f"AcceleratorConfig.{field}: {getattr(config, field)} bytes hold no tile of "
                f"layer {layer.name} ({layer.opdef.name} to {layer.output.shape}), not even one "
                "row or one channel block")
        return p

    if kind == "none":
        return [single(i).build() for i in range(len(layers))]
    if kind.endswith(":greedy"):
        groups, i = [], 0
        while i < len(layers):
            j, chosen = i + 1, single(i)
            while j < len(layers) and j - i < MAX_GROUP_LAYERS:
                grown = plan(i, j + 1)
                if grown is None:
                    break
                chosen, j = grown, j + 1
            groups.append(chosen.build())
            i = j
        return groups
    # dynamic programming: best[j] is the cheapest schedule of layers[:j] (GroupPlan.cost)
    Cost = tuple[float, float]
    best: list[tuple[Cost, int]] = [((0, 0.0), 0)] + [((math.inf, math.inf), 0)] * len(layers)
    weight_bytes = [sum(t.nbytes for t in dict.fromkeys(
        t for t in layer.inputs if t.is_constant)) for layer in layers]
    for j in range(1, len(layers) + 1):
        weights = 0
        for i in range(j - 1, max(-1, j - 1 - MAX_GROUP_LAYERS), -1):
            weights += weight_bytes[i]
            if j > i + 1 and best[i][0][0] + weights > best[j][0][0]:
                continue  # dominated: its weights alone cost more than the best way to j
            p = single(i) if j == i + 1 else plan(i, j)
            if p is None:
                if layers[i].rule.unit == "mac":
                    # it loads the input of a convolution or dense layer, which a layer
                    # more in front only adds to: the longer groups do not fit either
                    break
                continue  # it loads an elementwise layer's input: a producer in front may fit
            if best[i][0][0] == math.inf:
                continue
            cost = (best[i][0][0] + p.cost[0], best[i][0][1] + p.cost[1])
            if cost < best[j][0]:
                best[j] = (cost, i)
    groups, j = [], len(layers)
    while j > 0:
        i = best[j][1]
        groups.append(single(i) if j == i + 1 else plan(i, j))
        j = i
    return [g.build() for g in reversed(groups) if g is not None]
