"""The accelerator's instructions, and the code generator from a schedule to them.

Four queues' worth of instructions, as VTA's: LOAD moves a region of a DRAM tensor to an
on-chip address, STORE the other way, GEMM (the MAC array: convolutions, dense layers) and
ALU (the vector unit: pooling, activations, additions, the rest) compute a layer's output
region from on-chip operands into on-chip memory, SHIFT keeps the rows of a line buffer
that the next tile reads again (the rows it holds become the new band's first rows; a
circular buffer in hardware, which costs no cycles), and SYNC ends a tile: its loads, the
previous tile's computation and stores may overlap (double buffering), nothing crosses a
SYNC otherwise.

An on-chip operand names the tensor, its buffer's address, the region the buffer holds and
the region the instruction reads of it. Activations (NCHW, batch 1) lie position by
position on chip -- (H, W, C), the layout deep reuse assumes -- everything else in C order.

>>> Instr(Opcode.SYNC).opcode.name
'SYNC'
"""
from __future__ import annotations

import enum
from dataclasses import dataclass

from relaydsl.backend.accel.graph import Layer, TensorInfo
from relaydsl.backend.accel.layers import Region
from relaydsl.backend.accel.schedule import GroupPlan, reduction_reads


class Opcode(enum.Enum):
    LOAD = "load"
    STORE = "store"
    GEMM = "gemm"
    ALU = "alu"
    SHIFT = "shift"
    SYNC = "sync"


@dataclass(frozen=True)
class Operand:
    """`region` of `tensor` read from (or written to) the buffer at `address`, which holds
    `held` (a region of the same tensor containing it)."""

    tensor: TensorInfo
    address: int
    held: Region
    region: Region


@dataclass(frozen=True)
class Instr:
    opcode: Opcode
    layer: Layer | None = None
    inputs: tuple[Operand, ...] = ()
    output: Operand | None = None
    serial: bool = False  # a SYNC: the step's loads waited for the last step (timing only)
    # a GEMM over these input channels only, added to its output (output-stationary)
    part: tuple[int, int] | None = None

    def __str__(self) -> str:
        def where(o: Operand) -> str:
            span = "x".join(str(hi - lo) for lo, hi in o.region)
            return f"{o.tensor.name}[{span}]@{o.address}"

        if self.opcode is Opcode.SYNC:
            return "SYNC"
        if self.opcode in (Opcode.LOAD, Opcode.STORE, Opcode.SHIFT):
            assert self.output is not None
            return f"{self.opcode.name:5} {where(self.output)}"
        assert self.layer is not None and self.output is not None
        args = ", ".join(where(o) for o in self.inputs)
        return f"{self.opcode.name:5} {self.layer.name}({args}) -> {where(self.output)}"


def generate(groups: list[GroupPlan]) -> list[Instr]:
    """The instruction stream running `groups` in order."""
    code: list[Instr] = []
    for group in groups:
        held: dict[TensorInfo, Region] = {}
        for tile in group.tiles:
            for t, loaded, region in tile.loads:
                address = group.addresses[t][0]
                if loaded != region:  # a line buffer: its kept rows move to the front
                    code.append(Instr(Opcode.SHIFT, inputs=(Operand(t, address, held[t],
                                                                    held[t]),),
                                      output=Operand(t, address, region, region)))
                held[t] = region
                if all(lo < hi for lo, hi in loaded) or not loaded:
                    code.append(Instr(Opcode.LOAD, output=Operand(t, address, region, loaded)))
            for layer, out, whole in tile.computes:
                part = tile.reduce if layer is group.layers[-1] else None
                reads = layer.rule.deduce(layer, out) if part is None else \
                    reduction_reads(layer, out, part)
                operands = tuple(Operand(t, group.addresses[t][0], held[t], r)
                                 for t, r in zip(layer.inputs, reads))
                held[layer.output] = whole
                unit = Opcode.GEMM if layer.rule.unit == "mac" else Opcode.ALU
                code.append(Instr(unit, layer, operands,
                                  Operand(layer.output, group.addresses[layer.output][0], whole,
                                          out), part=part))
            for t, region in tile.stores:
                code.append(Instr(Opcode.STORE, output=Operand(
                    t, group.addresses[t][0], held[t], region)))
            code.append(Instr(Opcode.SYNC, serial=tile.serial))
    return code
