"""What a run on the accelerator cost: ``AccelReport``, per network and per fused group.

The schedule is static, so a build already knows every figure; a call fills them from the
simulator's own counts (equal to the schedule's, which the tests check). ``print(report)``
is a table per group, ``report.to_markdown()`` the same in Markdown and
``report.plot("x.png")`` a bar chart of each group's DRAM traffic and time (matplotlib).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from relaydsl.backend.accel.config import AcceleratorConfig


@dataclass(frozen=True)
class GroupReport:
    """One fused group: its layers, how it is tiled (``tiles`` counts its steps: a band of
    rows, a block of channels, a streamed weight's block), its loop order
    ("weights-stationary" or "activations-stationary"), where its buffers lie on chip, and
    what it moves and computes."""

    layers: tuple[str, ...]
    tiles: int
    tile_rows: int
    channel_blocks: int
    loop_order: str
    addresses: dict[str, tuple[int, int]]  # tensor -> (on-chip address, bytes)
    onchip_bytes: int
    dram_read_bytes: int
    dram_write_bytes: int
    macs: int
    alu_ops: int
    seconds: float
    streamed: tuple[str, ...] = ()  # layers whose weights stream through in blocks

    @property
    def tile_shape(self) -> str:
        rows = f"{self.tile_rows} rows" if self.tile_rows else "whole"
        if self.channel_blocks > 1:
            return f"{rows} x {self.channel_blocks} channel blocks ({self.loop_order})"
        if self.loop_order == "output-stationary":
            return f"{rows}, input-channel blocks (output-stationary)"
        if self.streamed:
            return f"{rows}, {len(self.streamed)} weights streamed"
        return rows


@dataclass(frozen=True)
class AccelReport:
    """A network's cost on the accelerator under one schedule (see the module docstring).

    ``compulsory_bytes`` is what any schedule moves: the inputs and weights read once and
    the result written once. ``host`` is None for a program that is one network; else it
    says why not, and the program ran on the host with its fused groups of op calls on the
    accelerator (hybrid.py): ``offloaded_calls`` of them there, ``host_calls`` on the host
    (no accelerator rule), ``transfer_bytes`` moved between the two."""

    schedule: str
    config: AcceleratorConfig
    groups: tuple[GroupReport, ...]
    read_bytes: dict[str, int] = field(default_factory=dict)
    write_bytes: dict[str, int] = field(default_factory=dict)
    compulsory_bytes: int = 0
    host: str | None = None
    host_calls: int = 0
    offloaded_calls: int = 0
    transfer_bytes: int = 0

    @property
    def dram_read_bytes(self) -> int:
        return sum(self.read_bytes.values())

    @property
    def dram_write_bytes(self) -> int:
        return sum(self.write_bytes.values())

    @property
    def dram_bytes(self) -> int:
        return self.dram_read_bytes + self.dram_write_bytes

    @property
    def seconds(self) -> float:
        return sum(g.seconds for g in self.groups)

    @property
    def cycles(self) -> int:
        return round(self.seconds * self.config.clock_hz)

    @property
    def macs(self) -> int:
        return sum(g.macs for g in self.groups)

    @property
    def alu_ops(self) -> int:
        return sum(g.alu_ops for g in self.groups)

    @property
    def flops(self) -> int:
        return 2 * self.macs + self.alu_ops

    @property
    def onchip_peak_bytes(self) -> int:
        return max((g.onchip_bytes for g in self.groups), default=0)

    @property
    def roofline_seconds(self) -> float:
        """No schedule is faster: every byte over the DRAM channel, every flop at peak."""
        return max(self.dram_bytes / self.config.dram_bandwidth,
                   self.flops / self.config.peak_flops)

    def rows(self) -> list[list[str]]:
        out = []
        for i, g in enumerate(self.groups):
            names = g.layers[0] if len(g.layers) == 1 else \
                f"{g.layers[0]} .. {g.layers[-1]} ({len(g.layers)})"
            out.append([str(i), names, f"{g.tiles}", g.tile_shape,
                        f"{g.onchip_bytes / 1024:.1f}", f"{g.dram_read_bytes / 1e6:.3f}",
                        f"{g.dram_write_bytes / 1e6:.3f}", f"{g.macs / 1e6:.2f}",
                        f"{g.seconds * 1e3:.3f}"])
        return out

    HEADER: ClassVar[list[str]] = ["group", "layers", "tiles", "tile", "on-chip KiB",
                                   "DRAM read MB", "DRAM write MB", "MMACs", "ms"]

    def summary(self) -> str:
        head = f"{self.schedule} on {self.config.describe()}\n"
        if self.host is not None:
            head += (f"not one network ({self.host}): the control ran on the host, "
                     f"{self.offloaded_calls} calls of fused op groups on the accelerator, "
                     f"{self.host_calls} on the host, {self.transfer_bytes / 1e6:.3f} MB moved "
                     "between them\n")
        return (head +
                f"{len(self.groups)} groups; DRAM {self.dram_bytes / 1e6:.3f} MB "
                f"(read {self.dram_read_bytes / 1e6:.3f}, write {self.dram_write_bytes / 1e6:.3f}; "
                f"compulsory {self.compulsory_bytes / 1e6:.3f}); {self.macs / 1e6:.2f} MMACs; "
                f"{self.seconds * 1e3:.3f} ms ({self.cycles} cycles; roofline "
                f"{self.roofline_seconds * 1e3:.3f} ms); on-chip peak "
                f"{self.onchip_peak_bytes / 1024:.1f} KiB")

    def __str__(self) -> str:
        rows = [self.HEADER, *self.rows()]
        widths = [max(len(r[i]) for r in rows) for i in range(len(self.HEADER))]
        lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
        lines.insert(1, "  ".join("-" * w for w in widths))
        return self.summary() + "\n\n" + "\n".join(lines)

    def to_markdown(self) -> str:
        lines = [self.summary().replace("\n", "  \n"), "",
                 "| " + " | ".join(self.HEADER) + " |",
                 "|" + "---|" * len(self.HEADER)]
        lines += ["| " + " | ".join(r) + " |" for r in self.rows()]
        return "\n".join(lines)

    def plot(self, path: str) -> None:
        """A bar chart of each group's DRAM megabytes and milliseconds, written to `path`
        (needs matplotlib: ``pip install matplotlib``)."""
        try:
            import matplotlib
            matplotlib.use("Agg")
            import matplotlib.pyplot as plt
        except ImportError:
            raise ImportError("AccelReport.plot needs matplotlib: pip install matplotlib") \
                from None
        fig, (top, bottom) = plt.subplots(2, 1, figsize=(max(6, len(self.groups) * 0.3), 5),
                                          sharex=True)
        xs = range(len(self.groups))
        top.bar(xs, [(g.dram_read_bytes + g.dram_write_bytes) / 1e6 for g in self.groups])
        top.set_ylabel("DRAM MB")
        bottom.bar(xs, [g.seconds * 1e3 for g in self.groups], color="tab:orange")
        bottom.set_ylabel("ms")
        bottom.set_xlabel("fused group")
        top.set_title(f"{self.schedule}: {self.dram_bytes / 1e6:.1f} MB, "
                      f"{self.seconds * 1e3:.2f} ms")
        fig.tight_layout()
        fig.savefig(path)
        plt.close(fig)
