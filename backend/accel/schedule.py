"""Deep Fusion scheduling: fused groups of layers, their tiles, buffers and costs.

A *group* is a run of consecutive layers computed tile by tile with everything between
its layers on chip: only its inputs are loaded from DRAM and only the values needed after
it (or returned) are stored. A tile is a band of rows of the group's last layers' outputs
(its *sinks*); *shape transfer* (the paper's Fig. 3) walks the group backwards, asking each
layer's rule which region of its inputs the tile needs (layers.py), so every layer of the
group computes just that region -- with the overlapping halo of a window computed again
by the next tile, as in the paper. An output the group also stores is stored row by row as
the tiles reach it.

A layer whose weights do not fit on chip runs alone, its output channels in blocks, with
whichever loop order moves fewer bytes (the weights again for each band of rows, or the
input again for each block of channels).

``plan_group`` costs one group at one tile count: the DRAM bytes each tile loads and stores
(weights once where they stay on chip), the buffers and their addresses (memory.py, with
or without reuse), the cycles of the MAC array and the ALU, and the time with loads,
computation and stores overlapping across tiles (double buffering) or not. ``schedule``
chooses the groups:

- ``none``: every layer alone (the paper's baseline);
- ``fusion`` / ``fusion+reuse``: groups chosen by dynamic programming over the layer
  order, the DRAM traffic (then the time) of the whole network as the cost, without /
  with on-chip reuse. Each group's tiling is the cheapest the same way, so adding reuse or
  on-chip bytes never adds traffic, and neither schedule moves more than "none";
- ``fusion:greedy`` / ``fusion+reuse:greedy``: the paper's loop (Fig. 6): grow a group
  while some tile size still fits on chip, then start the next.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

from relaydsl.backend.accel.config import AcceleratorConfig
from relaydsl.backend.accel.graph import Graph, Layer, TensorInfo
from relaydsl.backend.accel.layers import (
    CONV2D, ELEMENTWISE, WINDOWED, Region, region_shape, region_size, window,
)
from relaydsl.backend.accel.memory import Buffer, allocate, deep_reuse_offset
from relaydsl.backend.accel.report import GroupReport

SCHEDULES = ("none", "fusion", "fusion+reuse", "fusion:greedy", "fusion+reuse:greedy")
MAX_GROUP_LAYERS = 24  # the search's longest group: longer ones never fit 768 KiB anyway
# Tile counts a group is costed at from the fewest that fit: with line buffers the traffic
# hardly depends on the count, and more tiles than a few beyond it only add halos.
TILE_COUNTS_TRIED = 3


@dataclass(frozen=True)
class Tile:
    """One step of a group: what it loads, computes and stores (regions per tensor). A load
    is (tensor, the region read from DRAM, the region its buffer holds afterwards): a line
    buffer keeps the rows the previous tile loaded that this one reads again, and loads only
    the rows after them."""

    loads: tuple[tuple[TensorInfo, Region, Region], ...]
    computes: tuple[tuple[Layer, Region], ...]
    stores: tuple[tuple[TensorInfo, Region], ...]
    load_bytes: int
    store_bytes: int
    mac_ops: int
    alu_ops: int
    cycles: int


@dataclass
class GroupPlan:
    """A group's schedule and costs (see the module docstring)."""

    layers: list[Layer]
    tiles: list[Tile]
    addresses: dict[TensorInfo, tuple[int, int]]  # tensor -> (on-chip address, bytes)
    onchip_bytes: int
    seconds: float
    channel_blocks: int = 1
    loop_order: str = "rows"
    read_bytes: dict[str, int] = field(default_factory=dict)
    write_bytes: dict[str, int] = field(default_factory=dict)

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

    @property
    def macs(self) -> int:
        return sum(t.mac_ops for t in self.tiles)

    @property
    def alu_ops(self) -> int:
        return sum(t.alu_ops for t in self.tiles)

    @property
    def cycles(self) -> int:
        return sum(t.cycles for t in self.tiles)

    def report(self, calls: int = 1, prefix: str = "") -> GroupReport:
        """The group's report over `calls` runs, its layers' names after `prefix`."""
        return GroupReport(tuple(prefix + layer.name for layer in self.layers),
                           len(self.tiles) * calls, self.tile_rows, self.channel_blocks,
                           self.loop_order, {t.name: a for t, a in self.addresses.items()},
                           self.onchip_bytes, self.dram_read * calls, self.dram_write * calls,
                           self.macs * calls, self.alu_ops * calls, self.seconds * calls)

    @property
    def tile_rows(self) -> int:
        """Rows of the (first) sink in the first tile."""
        for _, region in self.tiles[0].stores:
            if len(region) == 4:
                return region[2][1] - region[2][0]
        return 0


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
        for t, r in zip(layer.inputs, layer.rule.deduce(layer, out)):
            regions[t] = _union(regions.get(t), r)
    computes.reverse()
    return regions, computes


def plan_group(ctx: _GroupContext, config: AcceleratorConfig, reuse: bool, tiles: int,
               channel_blocks: int = 1, loop_order: str = "rows") -> GroupPlan | None:
    """The plan of the group `ctx` cut in `tiles` bands of rows (and, for a single layer,
    `channel_blocks` blocks of output channels, `loop_order` "rows" or "channels"
    outermost), or None where that does not fit on chip or does not cover its outputs."""
    layers = ctx.layers
    if tiles > 1 and not ctx.row_tiled:
        return None
    if tiles > 1 and tiles > min(s.shape[2] for s in ctx.sinks):
        return None
    blocks: list[tuple[int, int] | None] = [None]
    if channel_blocks > 1:
        if len(layers) != 1 or not layers[0].rule.channel_blocks:
            return None
        bounds = _channel_bounds(layers[0], channel_blocks)
        if bounds is None:
            return None
        blocks = list(bounds)
    if tiles > 1:
        bands: list[int | None] = list(range(tiles))
        steps = [(b, c) for b in bands for c in blocks] if loop_order == "rows" else \
            [(b, c) for c in blocks for b in bands]
    else:
        steps = [(None, c) for c in blocks]

    e = config.element_bytes
    if blocks == [None] and sum(t.size for t in ctx.weights) * e > config.onchip_bytes:
        return None  # the weights stay on chip all along: they alone do not fit
    stored_upto = dict.fromkeys(ctx.stored, 0)
    loaded_before: dict[TensorInfo, Region] = {}
    kept = set(ctx.weights)  # loaded once and read by later tiles: on chip all along
    line_buffers: set[TensorInfo] = set()  # rows kept from one tile for the next
    peak_region: dict[TensorInfo, int] = {}
    deep_offsets: dict[TensorInfo, tuple[TensorInfo, int]] = {}
    out_tiles: list[Tile] = []
    read: dict[str, int] = {}
    written: dict[str, int] = {}
    for band, block in steps:
        sink_regions = {}
        for s in ctx.sinks:
            region = [(0, n) for n in s.shape]
            if band is not None:
                region[2] = _bands(s.shape[2], tiles)[band]
            if block is not None:
                region[1 if len(s.shape) == 4 else len(s.shape) - 1] = block
            sink_regions[s] = tuple(region)
        regions, computes = _transfer(ctx, sink_regions)
        loads = []
        for t in [*ctx.weights, *ctx.loads]:
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
            read[t.name] = read.get(t.name, 0) + region_size(new) * e
        stores = []
        for t in ctx.stored:
            r = regions[t]
            if len(t.shape) == 4 and block is None:
                lo, hi = r[2]
                if lo > stored_upto[t]:
                    return None  # rows no tile computes
                if hi > stored_upto[t]:
                    stores.append((t, (*r[:2], (stored_upto[t], hi), *r[3:])))
                    stored_upto[t] = hi
            else:
                stores.append((t, r))
                stored_upto[t] = t.shape[2] if len(t.shape) == 4 else 1
        for t, r in stores:
            written[t.name] = written.get(t.name, 0) + region_size(r) * e
        for t, r in regions.items():
            peak_region[t] = max(peak_region.get(t, 0), region_size(r) * e)
        if reuse:
            _deep_reuse(ctx, regions, computes, e, deep_offsets)
        mac = alu = cycles = 0
        for layer, r in computes:
            work = layer.rule.work(layer, r)
            if layer.rule.unit == "mac":
                mac, cycles = mac + work, cycles + math.ceil(work / config.macs_per_cycle)
            else:
                alu, cycles = alu + work, cycles + math.ceil(work / config.alu_lanes)
        out_tiles.append(Tile(tuple(loads), tuple(computes), tuple(stores),
                              sum(region_size(r) * e for _, r, _ in loads),
                              sum(region_size(r) * e for _, r in stores), mac, alu, cycles))
    if any(stored_upto[t] < (t.shape[2] if len(t.shape) == 4 else 1) for t in ctx.stored):
        return None
    addresses, span = _place(ctx, peak_region, deep_offsets, kept | line_buffers,
                             line_buffers, config, reuse)
    if span > config.onchip_bytes:
        return None
    return GroupPlan(layers, out_tiles, addresses, span, tiles_seconds(out_tiles, config),
                     channel_blocks, loop_order, read, written)


def _continues(before: Region, after: Region) -> bool:
    """Whether a band of rows `after` starts within the band `before` of the same tensor,
    the same in every other axis (a line buffer can keep the rows in between)."""
    return len(after) == 4 and before[:2] == after[:2] and before[3:] == after[3:] and \
        before[2][0] <= after[2][0] < before[2][1] and after[2][1] >= before[2][1]


def _deep_reuse(ctx: _GroupContext, regions: dict[TensorInfo, Region],
                computes: list[tuple[Layer, Region]], element_bytes: int,
                offsets: dict[TensorInfo, tuple[TensorInfo, int]]) -> None:
    """Record, for each layer whose output can overlap an input dying at it, the smallest
    deep-reuse offset over the tiles seen so far."""
    for k, (layer, out) in enumerate(computes):
        if layer.output in ctx.stored or len(out) != 4 or not layer.rule.row_tiles:
            continue
        for t in layer.inputs:
            if t.is_constant or t in ctx.stored or ctx.readers[t][-1] != k or len(t.shape) != 4 \
                    or (len(layer.inputs) > 1 and t is not layer.inputs[0]):
                continue
            d = _offset(layer, t, regions[t], out, element_bytes)
            if d is None:
                continue
            known = offsets.get(layer.output)
            if known is None or known[0] is t:
                offsets[layer.output] = (t, d if known is None else min(d, known[1]))
            break


@functools.lru_cache(maxsize=1 << 16)  # the search plans a layer's tiles in many groups
def _offset(layer: Layer, t: TensorInfo, t_region: Region, out: Region,
            element_bytes: int) -> int | None:
    """The deep-reuse offset of `layer`'s output tile over input `t`'s tile, or None where
    the layer reads it other than window by window (a broadcast operand, a concatenation)."""
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
                             row_starts, col_starts, element_bytes)


def _place(ctx: _GroupContext, sizes: dict[TensorInfo, int],
           offsets: dict[TensorInfo, tuple[TensorInfo, int]], kept: set[TensorInfo],
           line_buffers: set[TensorInfo], config: AcceleratorConfig, reuse: bool
           ) -> tuple[dict[TensorInfo, tuple[int, int]], int]:
    """Addresses for the group's buffers: weights (and any input a later tile reads again
    without loading it) live for the whole group, a loaded input
    from the tile's start to its last reader, a layer's output from its layer to its last
    reader; a tensor loaded or stored while another tile computes (double buffering) has
    two buffers."""
    last = len(ctx.layers) - 1
    double = 2 if config.double_buffering else 1
    buffers: dict[TensorInfo, Buffer] = {}
    order = [*ctx.weights, *ctx.loads, *(layer.output for layer in ctx.layers)]
    for t in order:
        if t in buffers:
            continue
        if t in kept:  # a line buffer loads its next rows while a tile computes
            start, end, copies = 0, last, double if t in line_buffers else 1
        elif t in ctx.loads:
            start, end, copies = 0, ctx.readers[t][-1], double
        else:
            start = next(k for k, layer in enumerate(ctx.layers) if layer.output is t)
            end = max([start, *ctx.readers[t]])
            copies = double if t in ctx.stored else 1
        partner = offsets.get(t)
        reuses = None
        if partner is not None and copies == 1 and partner[0] in buffers and \
                partner[0] not in kept and \
                buffers[partner[0]].size == sizes[partner[0]]:  # not a double buffer
            reuses = (buffers[partner[0]], partner[1])
        buffers[t] = Buffer(t.name, sizes[t] * copies, start, end, reuses)
    placed, span = allocate(list(buffers.values()), reuse)
    return {t: (placed[b], b.size) for t, b in buffers.items()}, span


def tiles_seconds(tiles: list[Tile], config: AcceleratorConfig) -> float:
    """The group's time: with double buffering, a tile's computation overlaps the next
    tile's loads and the previous one's stores (one DRAM channel for both); without, each
    tile loads, computes and stores in turn."""
    bw, clock = config.dram_bandwidth, config.clock_hz
    if not config.double_buffering or len(tiles) == 1:
        return sum(t.load_bytes / bw + t.cycles / clock + t.store_bytes / bw for t in tiles)
    total = tiles[0].load_bytes / bw
    for i, t in enumerate(tiles):
        moving = (tiles[i + 1].load_bytes if i + 1 < len(tiles) else 0) + \
            (tiles[i - 1].store_bytes if i > 0 else 0)
        total += max(t.cycles / clock, moving / bw)
    return total + tiles[-1].store_bytes / bw


def _tile_counts(rows: int) -> list[int]:
    counts, n = {1, rows}, 1
    while n < rows:
        counts.update((n, n + n // 2))
        n *= 2
    return sorted(c for c in counts if 1 <= c <= rows)


def best_plan(graph: Graph, consumers: dict[TensorInfo, list[Layer]], layers: list[Layer],
              config: AcceleratorConfig, reuse: bool) -> GroupPlan | None:
    """The cheapest plan (GroupPlan.cost) of `layers` as one group over the tile counts
    (and, for a single layer with weights, channel blocks and loop orders), or None where
    none fits."""
    ctx = _GroupContext(graph, consumers, layers)
    rows = min((s.shape[2] for s in ctx.sinks if len(s.shape) == 4), default=1)
    counts = _tile_counts(rows) if ctx.row_tiled else [1]
    best: GroupPlan | None = None
    tried = 0
    for count in counts:  # the fewest tiles that fit, and a few more for overlap
        plan = plan_group(ctx, config, reuse, count)
        if plan is not None and (best is None or plan.cost < best.cost):
            best = plan
        tried += best is not None
        if tried == TILE_COUNTS_TRIED:
            break
    if best is None and len(layers) == 1 and layers[0].rule.channel_blocks:
        channels = layers[0].output.shape[1 if len(layers[0].output.shape) == 4 else -1]
        for blocks in _tile_counts(channels)[1:]:
            for count in counts:
                for order in ("rows", "channels") if count > 1 else ("rows",):
                    plan = plan_group(ctx, config, reuse, count, blocks, order)
                    if plan is not None and (best is None or plan.cost < best.cost):
                        best = plan
            if best is not None:
                break
    return best


class ScheduleError(ValueError):
    """A layer that fits on chip in no way: the config's buffer is too small for it."""


def schedule(graph: Graph, config: AcceleratorConfig, kind: str) -> list[GroupPlan]:
    """The groups of `graph` under the schedule `kind` (one of SCHEDULES)."""
    if kind not in SCHEDULES:
        raise ValueError(f"unknown schedule {kind!r}; choose one of {', '.join(SCHEDULES)}")
    consumers = graph.consumers()
    layers = graph.layers
    reuse = kind.startswith("fusion+reuse")
    cache: dict[tuple[int, int], GroupPlan | None] = {}

    def plan(i: int, j: int) -> GroupPlan | None:
        if (i, j) not in cache:
            cache[(i, j)] = best_plan(graph, consumers, layers[i:j], config, reuse)
        return cache[(i, j)]

    def single(i: int) -> GroupPlan:
        p = plan(i, i + 1)
        if p is None:
            layer = layers[i]
            raise ScheduleError(
                f"AcceleratorConfig.onchip_bytes: {config.onchip_bytes} bytes hold no tile of "
                f"layer {layer.name} ({layer.opdef.name} to {layer.output.shape}), not even one "
                "row or one channel block")
        return p

    if kind == "none":
        return [single(i) for i in range(len(layers))]
    if kind.endswith(":greedy"):
        groups, i = [], 0
        while i < len(layers):
            j, chosen = i + 1, single(i)
            while j < len(layers) and j - i < MAX_GROUP_LAYERS:
                grown = plan(i, j + 1)
                if grown is None:
                    break
                chosen, j = grown, j + 1
            groups.append(chosen)
            i = j
        return groups
    # dynamic programming: best[j] is the cheapest schedule of layers[:j] (GroupPlan.cost)
    Cost = tuple[float, float]
    best: list[tuple[Cost, int]] = [((0, 0.0), 0)] + [((math.inf, math.inf), 0)] * len(layers)
    weight_bytes = [sum(t.size for t in dict.fromkeys(
        t for t in layer.inputs if t.is_constant)) * config.element_bytes for layer in layers]
    for j in range(1, len(layers) + 1):
        weights = 0
        for i in range(j - 1, max(-1, j - 1 - MAX_GROUP_LAYERS), -1):
            weights += weight_bytes[i]
            if j > i + 1 and weights > config.onchip_bytes:
                break  # a group keeps its weights on chip: longer ones cannot fit either
            p = single(i) if j == i + 1 else plan(i, j)
            if p is None or best[i][0][0] == math.inf:
                continue
            cost = (best[i][0][0] + p.cost[0], best[i][0][1] + p.cost[1])
            if cost < best[j][0]:
                best[j] = (cost, i)
    groups, j = [], len(layers)
    while j > 0:
        i = best[j][1]
        groups.append(single(i) if j == i + 1 else plan(i, j))
        j = i
    return [g for g in reversed(groups) if g is not None]
