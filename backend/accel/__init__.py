"""The simulated DNN accelerator target (``relay.build(f, target="accel")``).

    config.py     AcceleratorConfig: buffer, bandwidth, clock, units; presets
    graph.py      the program as layers over tensors (what runs on the host instead)
    layers.py     per op kind: shape deduction, tile compute, work
    memory.py     on-chip addresses: lifetime sharing and deep reuse
    schedule.py   Deep Fusion: groups, tiles, costs; the paper's greedy loop and a search
    isa.py        the instructions and the code generator
    simulator.py  runs the instructions, counting bytes and cycles
    report.py     AccelReport: per network and per group
    program.py    the target's program: pipeline, schedule, code, simulation
"""
from relaydsl.backend.accel.config import AcceleratorConfig
from relaydsl.backend.accel.report import AccelReport, GroupReport

__all__ = ["AcceleratorConfig", "AccelReport", "GroupReport"]
