"""Programs as deep as Python compiles: long expressions and long runs of statements.

Python compiles ``x + x + ... + x`` up to about 2,900 terms (3x its recursion limit) and any
number of statements in a row; every stage of relaydsl -- translation, inference, the passes,
the lowering, the interpreter -- must take what Python takes (issue 11, item 10).
"""
from __future__ import annotations

import functools
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import relaydsl.ir.visitor
from relaydsl import DSLSyntaxError, relay
from relaydsl.ir.parser import parse

TARGETS = ["llvm", "interp"]


def load(tmp_path: Path, name: str, source: str):
    """The decorated function `f` of a module file holding `source` (too long to write here)."""
    import importlib.util

    path = tmp_path / f"{name}.py"
    path.write_text("from relaydsl import Bool, Float, Tensor, relay\n\n" + source)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return relay(module.f), path


def long_sum(terms: int) -> str:
    return ("def f(x: Tensor[Float, (3,)]) -> Tensor[Float, (3,)]:\n"
            f"    return {' + '.join(['x'] * terms)}\n")


@pytest.fixture(scope="module")
def sum_2800(tmp_path_factory):
    return load(tmp_path_factory.mktemp("deep"), "sum2800", long_sum(2800))[0]


@pytest.mark.parametrize("target", TARGETS)
def test_an_expression_of_2800_terms_compiles_and_runs(sum_2800, target):
    x = np.array([0.5, -1.0, 2.0], np.float32)
    expected = functools.reduce(jnp.add, [jnp.asarray(x)] * 2800)
    np.testing.assert_allclose(sum_2800.build(target)(x), expected, rtol=1e-6)


def test_a_deep_expression_prints_and_parses_back(sum_2800):
    text = sum_2800.astext()
    assert parse(text).astext() == parse(parse(text).astext()).astext()
    assert text.count("add(") == 2799


@pytest.mark.parametrize("target", TARGETS)
def test_the_gradient_of_a_deep_expression(tmp_path, target, monkeypatch):
    monkeypatch.setenv("RELAYDSL_TARGET", target)  # relay.grad runs on the default target
    terms = 600
    loss, _ = load(tmp_path, "loss", "def f(x: Tensor[Float, (3,)]) -> Float:\n"
                                     f"    return relay.sum({' + '.join(['x * x'] * terms)})\n")
    x = np.array([0.5, -1.0, 2.0], np.float32)
    def reference(v):
        return jnp.sum(functools.reduce(jnp.add, [v * v] * terms))

    value, (dx,) = relay.grad(loss)(x)
    np.testing.assert_allclose(value, reference(x), rtol=1e-5)
    np.testing.assert_allclose(dx, jax.grad(reference)(x), rtol=1e-5)


@pytest.mark.parametrize("target", TARGETS)
def test_three_thousand_statements_in_a_row(tmp_path, target):
    body = "".join("    if c:\n        x = x + 1.0\n" for _ in range(3000))
    f, _ = load(tmp_path, "ifs", "def f(x: Tensor[Float, (3,)], c: Bool) -> Tensor[Float, (3,)]:\n"
                                 + body + "    return x\n")
    exe = f.build(target)
    zeros = np.zeros(3, np.float32)
    np.testing.assert_array_equal(exe(zeros, True), np.full(3, 3000.0, np.float32))
    np.testing.assert_array_equal(exe(zeros, False), zeros)


def test_beyond_the_compilers_depth_a_located_error_not_a_recursion_error(tmp_path, monkeypatch):
    monkeypatch.setattr(relaydsl.ir.visitor, "COMPILER_RECURSION_LIMIT", 1500)
    body = "".join("    if c:\n        x = x + 1.0\n" for _ in range(600))
    with pytest.raises(DSLSyntaxError, match="split it into smaller functions") as info:
        load(tmp_path, "ifs", "def f(x: Tensor[Float, (3,)], c: Bool) -> Tensor[Float, (3,)]:\n"
                              + body + "    return x\n")
    assert (Path(info.value.span.file).name, info.value.span.line) == ("ifs.py", 3)


@pytest.mark.slow
def test_twenty_thousand_statements_in_a_row_on_both_targets(tmp_path):
    # issue 26, item 17: graph normal form nested the 20,000 lets into one expression that
    # type inference could not recurse through; it keeps every 1,000th let now
    body = "".join("    x = x * 0.5 + 1.0\n" for _ in range(20_000))
    f, _ = load(tmp_path, "lets", "def f(x: Tensor[Float, (3,)]) -> Tensor[Float, (3,)]:\n"
                                  + body + "    return x\n")
    x = np.array([0.0, 2.0, -4.0], np.float32)
    expected = jax.lax.fori_loop(0, 20_000, lambda _, e: e * 0.5 + 1.0, jnp.asarray(x))
    for target in TARGETS:
        np.testing.assert_allclose(f.build(target)(x), expected, rtol=1e-6, err_msg=target)
