"""The generic quantization flow of §4.2 of the 2019 Relay paper: annotate (annotate.py, driven
by op rules: rules.py), calibrate (calibrate.py), realize (realize.py), under a QConfig
(config.py). The passes run from transform/pipeline.py; ``relay.quantize`` (the frontend) runs
the whole flow on a model or decorated function.
"""
from relaydsl.quantize.config import QConfig, current, qconfig
from relaydsl.quantize.rules import register_rule, reset_rule, rule_of

__all__ = ["QConfig", "current", "qconfig", "register_rule", "reset_rule", "rule_of"]
