"""The whole flow of §4.2 on a module: prepare (transform/pipeline.py's ``quantize_prepare``),
annotate, calibrate, realize, finish (``QUANTIZE_FINISH``). ``relay.quantize`` calls
``quantize_module`` with its runner (the core runs no program itself).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from relaydsl.ir.module import IRModule
from relaydsl.quantize.annotate import Annotate
from relaydsl.quantize.calibrate import Calibrated, Runner, calibrate
from relaydsl.quantize.config import QConfig
from relaydsl.quantize.realize import Realize
from relaydsl.transform import pipeline
from relaydsl.transform.pass_infra import Sequential


def annotate_module(mod: IRModule, config: QConfig) -> IRModule:
    """`mod` prepared and annotated: simQ with placeholder steps where op rules ask."""
    return Sequential([], name="quantize: annotate", always=(
        *pipeline.quantize_prepare().always, Annotate(config)))(mod)


def realize_module(calibrated: IRModule, config: QConfig) -> IRModule:
    """A calibrated module realized as integer arithmetic, then folded and cleaned."""
    return Sequential([], name="quantize: realize", always=(
        Realize(config), *pipeline.QUANTIZE_FINISH))(calibrated)


def quantize_module(mod: IRModule, entry: str, batches: Sequence[tuple[np.ndarray, ...]],
                    config: QConfig, run: Runner) -> tuple[IRModule, Calibrated]:
    """(the realized module, what calibration chose) of `mod`'s `entry`."""
    calibrated = calibrate(annotate_module(mod, config), entry, batches, config, run)
    return realize_module(calibrated.mod, config), calibrated
