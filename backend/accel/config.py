"""What a simulated accelerator is: its on-chip buffer, DRAM bandwidth, clock and units.

The machine model is the one of the Deep Fusion paper (../shared/papers, §4.1) and of VTA:
a MAC array for convolutions and dense layers, a vector ALU for everything elementwise, one
on-chip buffer the compiler manages by address, and a DRAM channel that loads and stores
share. Its time is counted in cycles of ``clock_hz``; its bytes in each tensor's own
element size (``dtype``'s on a float32 accelerator; an int8 one's int8 activations and
weights take a byte, its int32 accumulators four where they leave the chip).

>>> cfg = AcceleratorConfig.deep_fusion()
>>> cfg.peak_flops, cfg.onchip_bytes, cfg.dram_bandwidth
(200000000000.0, 786432, 1500000000.0)
>>> multi = AcceleratorConfig.vta(batch=4, block_in=8, block_out=8)
>>> multi.macs_per_cycle, multi.dtype
(256, 'int8')
>>> multi.cycles("mac", work=256 * 4, rows=4), multi.cycles("mac", work=256, rows=1)
(4, 4)
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np

KIB = 1024
_DTYPES = ("float32", "int8")
# What an int8 accelerator's units take: the MAC array int8 (or uint8) operands summed in
# int32 (VTA's GEMM core); the ALU the integers of the requantisation epilogue and the
# float32 its multiply and rounding are written in by relay.quantize (realize.py), which
# VTA does as a fixed-point multiply and shift
INT8_OPERANDS = ("int8", "uint8")
INT8_ACCUMULATOR = "int32"
INT8_ALU = ("int8", "uint8", "int16", "int32", "float32")
# What an on-chip buffer holds, where the config splits its memory as VTA does: layers'
# inputs loaded from DRAM, weights, and the outputs the units compute (VTA's accumulators)
INPUT, WEIGHT, OUTPUT = "input", "weight", "output"
_SPLIT = {INPUT: "input_buffer_bytes", WEIGHT: "weight_buffer_bytes",
          OUTPUT: "acc_buffer_bytes"}


@dataclass(frozen=True)
class AcceleratorConfig:
    """A simulated accelerator (see the module docstring). Checked when built: a bad field is
    a ValueError naming it.

    - ``onchip_bytes``: the on-chip buffer every tile, weight and intermediate lives in;
    - ``dram_bandwidth``: bytes per second between DRAM and the buffer, loads and stores
      together;
    - ``clock_hz`` and ``mac_array`` (rows, columns): the MAC array does
      ``rows * columns`` multiply-accumulates a cycle; ``peak_flops`` is twice that a second;
    - ``alu_lanes``: elements the vector ALU handles a cycle (pooling, activations, adds);
    - ``dtype``: the MAC array's element type: "float32", or "int8" (int8 x int8 summed in
      int32, VTA's GEMM core), which runs the integer layers of a program realized by
      ``relay.quantize`` and its requantisation epilogue on the ALU;
    - ``batch``: the MAC array's batch dimension (VTA's BATCH): its ``rows`` are ``batch``
      samples of ``rows // batch`` inputs each, so a layer over fewer samples than a
      multiple of ``batch`` leaves the rest of the array (and of the ALU's lanes) idle;
    - ``double_buffering``: loads and stores of one tile overlap the computation of the
      previous one (each tile's buffers are then held twice);
    - ``input_buffer_bytes``, ``weight_buffer_bytes``, ``acc_buffer_bytes``: None for one
      buffer of ``onchip_bytes`` holding everything; else three separate buffers, as VTA's
      (their sum is ``onchip_bytes``): inputs loaded from DRAM, weights, and the outputs the
      units compute, each in its own.

    >>> AcceleratorConfig.vta().buffers()
    {'input_buffer_bytes': 32768, 'weight_buffer_bytes': 262144, 'acc_buffer_bytes': 131072}
    """

    name: str
    onchip_bytes: int
    dram_bandwidth: float
    clock_hz: float
    mac_array: tuple[int, int]
    alu_lanes: int
    dtype: str = "float32"
    batch: int = 1
    double_buffering: bool = True
    input_buffer_bytes: int | None = None
    weight_buffer_bytes: int | None = None
    acc_buffer_bytes: int | None = None

    def __post_init__(self) -> None:
        def bad(field: str, why: str) -> ValueError:
            return ValueError(f"AcceleratorConfig.{field} {why}, got {getattr(self, field)!r}")

        for field in ("onchip_bytes", "alu_lanes"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise bad(field, "must be a positive int")
        for field in ("dram_bandwidth", "clock_hz"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                    not math.isfinite(value) or value <= 0:
                raise bad(field, "must be a positive number")
        rows_cols = self.mac_array
        if not (isinstance(rows_cols, tuple) and len(rows_cols) == 2 and
                all(isinstance(n, int) and not isinstance(n, bool) and n > 0
                    for n in rows_cols)):
            raise bad("mac_array", "must be two positive ints (rows, columns)")
        if self.dtype not in _DTYPES:
            raise bad("dtype", f"must be one of {', '.join(_DTYPES)}")
        if isinstance(self.batch, bool) or not isinstance(self.batch, int) or \
                self.batch <= 0 or rows_cols[0] % self.batch:
            raise bad("batch", f"must be a positive int dividing the MAC array's rows "
                               f"({rows_cols[0]})")
        if self.alu_lanes > 2 * self.macs_per_cycle:
            # the roofline counts an ALU operation as a flop: the ALU may not beat peak_flops
            raise bad("alu_lanes", f"must be at most twice the MAC count "
                                   f"({2 * self.macs_per_cycle})")
        if not isinstance(self.double_buffering, bool):
            raise bad("double_buffering", "must be a bool")
        split = [getattr(self, f) for f in _SPLIT.values()]
        if any(v is not None for v in split):
            for field in _SPLIT.values():
                value = getattr(self, field)
                if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                    raise bad(field, "must be a positive int (the three buffers are given "
                                     "together, or none)")
            if sum(split) != self.onchip_bytes:
                raise bad("onchip_bytes", f"must be the sum of the three buffers "
                                          f"({sum(split)})")

    def buffers(self) -> dict[str, int]:
        """The on-chip buffers, by the name of the field giving their bytes, in address
        order."""
        if self.input_buffer_bytes is None:
            return {"onchip_bytes": self.onchip_bytes}
        return {field: getattr(self, field) for field in _SPLIT.values()}

    def buffer_for(self, kind: str) -> str:
        """The buffer (its field's name) that holds tensors of `kind` (INPUT, WEIGHT or
        OUTPUT)."""
        return "onchip_bytes" if self.input_buffer_bytes is None else _SPLIT[kind]

    @property
    def macs_per_cycle(self) -> int:
        return self.mac_array[0] * self.mac_array[1]

    def cycles(self, unit: str, work: int, rows: int) -> int:
        """The cycles of `work` operations on `unit` ("mac" or "alu") over a region of
        `rows` samples (its extent along the batch axis): the units take ``batch`` samples
        a cycle, so a last partial batch costs a whole one."""
        lanes = self.macs_per_cycle if unit == "mac" else self.alu_lanes
        if self.batch == 1 or rows <= 0:
            return -(-work // lanes)
        padded = -(-rows // self.batch) * self.batch
        return -(-work * padded // (rows * lanes))

    @property
    def peak_flops(self) -> float:
        return 2.0 * self.macs_per_cycle * self.clock_hz

    @property
    def element_bytes(self) -> int:
        """Bytes of an element of the MAC array's operands."""
        return np.dtype(self.dtype).itemsize

    @classmethod
    def deep_fusion(cls, **changes: object) -> "AcceleratorConfig":
        """The Deep Fusion paper's prototype (§4.1, after DaDianNao): 200 GFLOP/s, a 1.5 GB/s
        DRAM channel and 768 KiB on chip. The paper gives no clock: 1 GHz with a 10x10 MAC
        array makes its 200 GFLOP/s. Any field can be changed by keyword."""
        return cls._preset(dict(name="deep_fusion", onchip_bytes=768 * KIB,
                                dram_bandwidth=1.5e9, clock_hz=1e9, mac_array=(10, 10),
                                alu_lanes=64), changes)

    @classmethod
    def vta(cls, batch: int = 1, block_in: int = 16, block_out: int = 16,
            **changes: object) -> "AcceleratorConfig":
        """VTA's GEMM core (Moreau et al. 2019): a ``batch x block_in x block_out`` MAC
        tensor of int8 operands and int32 accumulators at 100 MHz (its PYNQ build), with
        its three buffers -- input (32 KiB), weight (256 KiB) and accumulator (128 KiB),
        each holding only its kind of tensor -- and a 1.6 GB/s DRAM port.
        ``vta(batch=4, block_in=8, block_out=8)`` is the multi-batch variant with the same
        MAC count. int8 is VTA's element type, so the preset's; ``dtype="float32"`` gives
        the same machine computing in float32 (float programs, unquantized)."""
        for name, value in (("batch", batch), ("block_in", block_in), ("block_out", block_out)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"AcceleratorConfig.vta: {name} must be a positive int, "
                                 f"got {value!r}")
        return cls._preset(dict(name=f"vta(batch={batch}, block_in={block_in}, "
                                     f"block_out={block_out})",
                                onchip_bytes=(32 + 256 + 128) * KIB, dram_bandwidth=1.6e9,
                                clock_hz=1e8, mac_array=(batch * block_in, block_out),
                                alu_lanes=block_out * batch, dtype="int8", batch=batch,
                                input_buffer_bytes=32 * KIB,
                                weight_buffer_bytes=256 * KIB, acc_buffer_bytes=128 * KIB),
                           changes)

    @classmethod
    def _preset(cls, values: dict[str, object], changes: dict[str, object]) -> "AcceleratorConfig":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise TypeError(f"AcceleratorConfig has no field {', '.join(unknown)} "
                            f"(fields: {', '.join(sorted(known))})")
        return cls(**{**values, **changes})  # type: ignore[arg-type]

    def describe(self) -> str:
        """One line: the figures a report is read against."""
        memory = f"{self.onchip_bytes // KIB} KiB on chip" if self.input_buffer_bytes is None \
            else "on chip " + " + ".join(f"{n // KIB} KiB" for n in self.buffers().values()) + \
            " (input, weight, accumulator)"
        return (f"{self.name}: {self.peak_flops / 1e9:g} GFLOP/s, "
                f"{self.dram_bandwidth / 1e9:g} GB/s DRAM, {memory}, "
                f"{self.dtype}{f', batch {self.batch}' if self.batch > 1 else ''}, "
                f"double buffering {'on' if self.double_buffering else 'off'}")
