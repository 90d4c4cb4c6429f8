"""On-chip memory distribution: addresses for a fused group's buffers (Deep Fusion §3.2).

A group computes a tile layer by layer; each buffer (a loaded input, an intermediate, an
output) lives from the step that writes it to the last step that reads it. ``allocate``
gives each an address:

- without reuse, every buffer has space of its own (the "fusion" schedule);
- with reuse, two buffers whose lifetimes do not overlap may share space (the paper's
  Fig. 4), and a layer's output may overlap the input that dies at that layer where it
  never overwrites input the layer still has to read (*deep reuse*, Fig. 5). On chip a
  tile lies position by position (height, width), all channels of a position together, and
  a layer writes its output positions in order: output position p may cover input
  addresses below the first input address any later position reads. ``deep_reuse_offset``
  is the highest placement of the output relative to the input that keeps this true.

>>> # Fig. 5: an 8x64x3 input, a 4x4 stride-2 convolution to 3x31x16, float32
>>> d = deep_reuse_offset((8, 64, 3), (3, 31, 16), row_starts=[0, 2, 4],
...                       col_starts=range(0, 62, 2), element_bytes=4)
>>> d
-2096
>>> x = Buffer("in", 8 * 64 * 3 * 4, 0, 0)
>>> y = Buffer("out", 3 * 31 * 16 * 4, 0, 1, reuses=(x, d))
>>> addresses, span = allocate([x, y], reuse=True)
>>> span, round(1 - span / (x.size + y.size), 2)
(8240, 0.32)
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, eq=False)
class Buffer:
    """`size` bytes live from step `start` to step `end` (inclusive). `reuses`: an input
    dying at `start` that this buffer may overlap when placed at most `offset` bytes above
    it (deep reuse)."""

    name: str
    size: int
    start: int
    end: int
    reuses: tuple["Buffer", int] | None = None


def deep_reuse_offset(in_tile: tuple[int, int, int], out_tile: tuple[int, int, int],
                      row_starts: Sequence[int], col_starts: Iterable[int],
                      element_bytes: int) -> int:
    """The highest ``out_address - in_address`` at which a layer writing its output tile
    ``(rows, cols, channels)`` position by position never overwrites input it still reads:
    output row r's windows start at input row ``row_starts[r]``, column c's at input
    column ``col_starts[c]`` (tile coordinates). An output position is written after the
    layer has read its window; positions after it read from the smallest start onward."""
    _, in_cols, in_ch = in_tile
    out_ch = out_tile[2]
    starts = (np.asarray(row_starts, np.int64)[:, None] * in_cols +
              np.asarray(list(col_starts), np.int64)[None, :]).ravel()
    if starts.size < 2:
        return 0
    # the first input position read by any output position from p on
    first_needed = np.minimum.accumulate(starts[::-1])[::-1]
    p = np.arange(1, starts.size, dtype=np.int64)  # positions already written: 0 .. p-1
    room = first_needed[1:] * in_ch - p * out_ch
    return int(room.min()) * element_bytes


def allocate(buffers: Sequence[Buffer], reuse: bool) -> tuple[dict[Buffer, int], int]:
    """Addresses for `buffers` and the bytes they span (see the module docstring)."""
    if not reuse:
        addresses, top = {}, 0
        for b in buffers:
            addresses[b] = top
            top += b.size
        return addresses, top
    placed: dict[Buffer, int] = {}
    low, high = 0, 0
    for b in sorted(buffers, key=lambda b: (b.start, -b.size)):
        live = [o for o in placed if o.start <= b.end and b.start <= o.end]
        candidates = {0, *(placed[o] + o.size for o in live)}
        partner = b.reuses
        if partner is not None and partner[0] in placed and partner[0].end == b.start:
            candidates.add(placed[partner[0]] + partner[1])
        best: tuple[int, int] | None = None
        live_spans = [(placed[o], placed[o] + o.size, o) for o in live]
        for address in sorted(candidates):
            if address < 0 and (partner is None or address != placed.get(partner[0], 0) +
                                partner[1]):
                continue
            end = address + b.size
            if any(lo < end and address < hi and _clash(b, address, o, lo)
                   for lo, hi, o in live_spans):
                continue
            span = max(high, end) - min(low, address)
            if best is None or span < best[0]:
                best = (span, address)
                if span == high - low:
                    break  # within the span so far: no address does better
        assert best is not None  # the end of every live buffer is a free candidate
        placed[b] = best[1]
        low, high = min(low, best[1]), max(high, best[1] + b.size)
    return {b: a - low for b, a in placed.items()}, high - low


def span_lower_bound(buffers: Sequence[Buffer], reuse: bool) -> int:
    """Bytes `allocate` spans at least: all of them without reuse; with reuse, the most
    bytes live at one step, less what deep reuse may overlap there."""
    if not reuse:
        return sum(b.size for b in buffers)
    steps = {b.start for b in buffers}
    best = 0
    for t in steps:
        live = [b for b in buffers if b.start <= t <= b.end]
        overlap = sum(min(b.size, b.reuses[0].size) for b in live
                      if b.reuses is not None and b.reuses[0].start <= t <= b.reuses[0].end)
        best = max(best, sum(b.size for b in live) - overlap)
    return best


def _clash(b: Buffer, address: int, other: Buffer, other_address: int) -> bool:
    if address >= other_address + other.size or other_address >= address + b.size:
        return False
    for x, xa, y, ya in ((b, address, other, other_address), (other, other_address, b, address)):
        if x.reuses is not None and x.reuses[0] is y and xa <= ya + x.reuses[1]:
            return False
    return True
