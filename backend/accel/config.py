"""What a simulated accelerator is: its on-chip buffer, DRAM bandwidth, clock and units.

The machine model is the one of the Deep Fusion paper (../shared/papers, §4.1) and of VTA:
a MAC array for convolutions and dense layers, a vector ALU for everything elementwise, one
on-chip buffer the compiler manages by address, and a DRAM channel that loads and stores
share. Its time is counted in cycles of ``clock_hz``; its bytes in elements of ``dtype``.

>>> cfg = AcceleratorConfig.deep_fusion()
>>> cfg.peak_flops, cfg.onchip_bytes, cfg.dram_bandwidth
(200000000000.0, 786432, 1500000000.0)
>>> AcceleratorConfig.vta(batch=4, block_in=8, block_out=8).macs_per_cycle
256
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np

KIB = 1024
_DTYPES = ("float32", "int8")
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
    - ``dtype``: the element type in DRAM and on chip (float32; int8 with int32
      accumulation once quantization lands);
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
        if self.dtype != "float32":
            raise bad("dtype", "is float32 until quantization lands (issue 24)")
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

    @property
    def peak_flops(self) -> float:
        return 2.0 * self.macs_per_cycle * self.clock_hz

    @property
    def element_bytes(self) -> int:
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
        tensor at 100 MHz (its PYNQ build), with its three buffers -- input (32 KiB),
        weight (256 KiB) and accumulator (128 KiB), each holding only its kind of tensor --
        and a 1.6 GB/s DRAM port. ``vta(batch=4, block_in=8, block_out=8)`` is the
        multi-batch variant with the same MAC count."""
        for name, value in (("batch", batch), ("block_in", block_in), ("block_out", block_out)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"AcceleratorConfig.vta: {name} must be a positive int, "
                                 f"got {value!r}")
        return cls._preset(dict(name=f"vta(batch={batch}, block_in={block_in}, "
                                     f"block_out={block_out})",
                                onchip_bytes=(32 + 256 + 128) * KIB, dram_bandwidth=1.6e9,
                                clock_hz=1e8, mac_array=(batch * block_in, block_out),
                                alu_lanes=block_out * batch, input_buffer_bytes=32 * KIB,
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
                f"{self.dtype}, double buffering {'on' if self.double_buffering else 'off'}")
