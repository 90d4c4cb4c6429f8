"""The accelerator simulator: runs an instruction stream on DRAM and on-chip memory.

DRAM is a NumPy array per tensor, of its dtype; the on-chip buffer is one array of the
config's bytes, addressed by byte, a tensor's region lying there in its own element type
(an int8 tile a byte an element, its int32 accumulators four). Each instruction does what
the hardware would: LOAD copies a region of a DRAM tensor into the buffer at its address
(in the on-chip layout, isa.py), GEMM and ALU read their operands from the buffer, compute
the output region with the layer's rule and write it back, STORE copies a region out,
SHIFT moves a line buffer's kept rows to its front, SYNC closes a step. A block of a
streamed layer's output channels is strided on chip (positions lie channels last): it is
written into its buffer among the others'. Values that the schedule did not put where an
instruction reads them come out wrong, which the tests would see.

While it runs, it counts what the report shows: DRAM bytes read and written per tensor,
MACs and ALU operations, each tile's cycles and the time (the schedule's model:
schedule.tiles_seconds).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from relaydsl.backend.accel.config import AcceleratorConfig
from relaydsl.backend.accel.graph import Graph, TensorInfo
from relaydsl.backend.accel.isa import Instr, Opcode, Operand
from relaydsl.backend.accel.layers import Region, region_shape, samples, take
from relaydsl.backend.accel.schedule import Tile


def _is_activation(t: TensorInfo) -> bool:
    return len(t.shape) == 4 and not t.is_constant


def to_chip(t: TensorInfo, values: np.ndarray) -> np.ndarray:
    """The on-chip layout of a region's values, flattened, as bytes."""
    if _is_activation(t):
        values = values.transpose(0, 2, 3, 1)
    return np.ascontiguousarray(values, t.dtype).ravel().view(np.uint8)


def from_chip(t: TensorInfo, raw: np.ndarray, region: Region) -> np.ndarray:
    flat = raw.view(t.dtype)
    shape = region_shape(region)
    if _is_activation(t):
        n, c, h, w = shape
        return flat.reshape(n, h, w, c).transpose(0, 3, 1, 2)
    return flat.reshape(shape)


def _unwritten(t: TensorInfo) -> np.ndarray:
    """A DRAM tensor before any store: NaN where it is float, so a row no store reached
    shows."""
    fill = np.nan if np.issubdtype(np.dtype(t.dtype), np.floating) else 0
    return np.full(t.shape, fill, t.dtype)


def _relative(inner: Region, outer: Region) -> Region:
    return tuple((lo - olo, hi - olo) for (lo, hi), (olo, _) in zip(inner, outer))


@dataclass
class Counters:
    read_bytes: dict[str, int] = field(default_factory=dict)
    write_bytes: dict[str, int] = field(default_factory=dict)
    tiles: list[Tile] = field(default_factory=list)  # what each tile moved and computed


def dram_of(graph: Graph, values: list[np.ndarray]) -> dict[TensorInfo, np.ndarray]:
    """The DRAM a run of `graph` starts from: its inputs' `values` and its constants."""
    dram = {p: np.asarray(v, p.dtype) for p, v in zip(graph.params, values)}
    dram.update({t: np.asarray(t.value, t.dtype) for t in graph.constants})
    return dram


class Simulator:
    def __init__(self, config: AcceleratorConfig):
        self.config = config
        # all ones: a float32 NaN, so that a value read before it is written shows
        self.bytes = np.full(config.onchip_bytes, 0xFF, np.uint8)

    def _read(self, o: Operand) -> np.ndarray:
        size = math.prod(region_shape(o.held)) * o.tensor.itemsize
        held = from_chip(o.tensor, self.bytes[o.address:o.address + size].copy(), o.held)
        return take(held, _relative(o.region, o.held))

    def _offset(self, o: Operand) -> int | None:
        """The byte where `o.region` starts in its buffer, where it is one contiguous run
        there: the whole buffer, or a band of one image's rows (positions lie row by row);
        None for any other part (a block of channels, a band of several images' rows)."""
        if o.region == o.held:
            return o.address
        if not _is_activation(o.tensor) or o.region[:2] != o.held[:2] or \
                o.region[3:] != o.held[3:] or o.held[0][1] - o.held[0][0] != 1:
            return None
        row = math.prod(region_shape(o.held)) // (o.held[2][1] - o.held[2][0])
        return o.address + (o.region[2][0] - o.held[2][0]) * row * o.tensor.itemsize

    def _write(self, o: Operand, values: np.ndarray) -> None:
        start = self._offset(o)
        if start is None:  # strided on chip: the buffer's other values are written back
            whole = Operand(o.tensor, o.address, o.held, o.held)
            held = self._read(whole).copy()
            held[tuple(slice(lo, hi) for lo, hi in _relative(o.region, o.held))] = values
            o, values, start = whole, held, o.address
        flat = to_chip(o.tensor, values)
        if start + flat.size > self.bytes.size:
            raise RuntimeError(f"the schedule put {o.tensor.name} past the on-chip buffer")
        self.bytes[start:start + flat.size] = flat

    def run(self, code: list[Instr], dram: dict[TensorInfo, np.ndarray]) -> Counters:
        """Execute `code` with `dram` holding the inputs and constants; the layers' stored
        outputs are added to `dram`."""
        c = Counters()
        loads = stores = macs = alu = cycles = 0
        for ins in code:
            op = ins.opcode
            if op is Opcode.LOAD:
                o = ins.output
                assert o is not None
                self._write(o, take(dram[o.tensor], o.region))
                n = math.prod(region_shape(o.region)) * o.tensor.itemsize
                c.read_bytes[o.tensor.name] = c.read_bytes.get(o.tensor.name, 0) + n
                loads += n
            elif op is Opcode.STORE:
                o = ins.output
                assert o is not None
                target = dram.setdefault(o.tensor, _unwritten(o.tensor))
                target[tuple(slice(lo, hi) for lo, hi in o.region)] = self._read(o)
                n = math.prod(region_shape(o.region)) * o.tensor.itemsize
                c.write_bytes[o.tensor.name] = c.write_bytes.get(o.tensor.name, 0) + n
                stores += n
            elif op is Opcode.SHIFT:  # keep the rows both bands share, at the new band's front
                before, after = ins.inputs[0], ins.output
                assert after is not None
                kept = (*after.region[:2], (after.region[2][0], before.region[2][1]),
                        *after.region[3:])
                self._write(Operand(after.tensor, after.address, after.region, kept),
                            self._read(Operand(before.tensor, before.address, before.held,
                                               kept)).copy())
            elif op is Opcode.SYNC:
                c.tiles.append(Tile((), (), (), loads, stores, macs, alu, cycles, ins.serial))
                loads = stores = macs = alu = cycles = 0
            else:
                layer, o = ins.layer, ins.output
                assert layer is not None and o is not None
                tiles = [self._read(i) for i in ins.inputs]
                out = np.asarray(layer.rule.compute(layer, tiles, o.region),
                                 layer.output.dtype)
                if out.shape != region_shape(o.region):
                    raise RuntimeError(f"{layer.name}: computed {out.shape} for the region "
                                       f"{region_shape(o.region)}")
                work = layer.rule.work(layer, o.region)
                if ins.part is not None:  # these input channels' products, added on chip
                    data = layer.inputs[0].shape
                    lo, hi = ins.part
                    work = work // data[1 if len(data) == 4 else -1] * (hi - lo)
                    if lo > 0:
                        out = self._read(o) + out
                self._write(o, out)
                cycles += self.config.cycles(layer.rule.unit, work, samples(o.region))
                if op is Opcode.GEMM:
                    macs += work
                else:
                    alu += work
        return c
