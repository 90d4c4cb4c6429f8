"""Seeing what the compiler does, as a user would (issue 13, item 6): logging under the
``relaydsl`` logger and RELAYDSL_LOG, RELAYDSL_DUMP_IR, ``f.astext(fused=True)``."""
from __future__ import annotations

import logging
import os
import pathlib
import re
import subprocess
import sys

import jax.numpy as jnp
import numpy as np
import pytest

from relaydsl import Float, Int, Tensor, relay, settings
from relaydsl.errors import SettingError
from relaydsl.transform import pipeline

ROOT = pathlib.Path(__file__).resolve().parents[2]
X = np.linspace(-1.0, 1.0, 6, dtype=np.float32).reshape(2, 3)


def make_layer():
    """A fresh decorated function: built programs are cached per function."""
    @relay
    def layer(x: Tensor[Float, (2, 3)]) -> Tensor[Float, (2, 3)]:
        return relay.tanh(x * 2.0) + relay.exp(x)

    return layer


def expected_layer(x):
    return np.asarray(jnp.tanh(x * 2.0) + jnp.exp(x))


@pytest.fixture
def relaydsl_log(caplog):
    caplog.set_level(logging.DEBUG, logger="relaydsl")
    return caplog


def messages(caplog, logger: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name.startswith(logger)]


def test_a_build_logs_its_passes_its_kernels_and_how_it_runs(relaydsl_log):
    layer = make_layer()
    np.testing.assert_allclose(layer(X), expected_layer(X), rtol=1e-6)
    passes = messages(relaydsl_log, "relaydsl.transform")
    summary = [m for m in passes if m.startswith("llvm pipeline (opt_level 3): ")]
    assert len(summary) == 1
    for name in pipeline.pass_names("llvm", 3):
        assert f"{name} " in summary[0]
        assert any(m.startswith(f"llvm pipeline: {name} in ") and m.endswith(" ms")
                   for m in passes)
    kernels = messages(relaydsl_log, "relaydsl.backend.llvm.kernel")
    assert len(kernels) == 1 and kernels[0].startswith("1 kernel(s): ")  # one fused kernel
    (path,) = messages(relaydsl_log, "relaydsl.backend.llvm.executor")
    assert path == "@layer runs as native code: 1 kernel(s) at 1 call site(s), native code " \
        "between them"
    relaydsl_log.clear()
    layer(X)  # a call of a built function logs nothing: calls are the hot path
    assert relaydsl_log.records == []


def test_the_same_kernel_again_comes_from_the_memory_cache(relaydsl_log):
    make_layer()(X)
    relaydsl_log.clear()
    make_layer()(X)  # an equal function: a new program, the kernel already compiled
    kernels = messages(relaydsl_log, "relaydsl.backend.llvm.kernel")
    assert kernels and kernels[0].startswith("1 kernel(s): 1 from the memory cache, 0 built")
    assert not messages(relaydsl_log, "relaydsl.backend.llvm.jit")


def test_compiled_or_loaded_from_the_disk_cache_is_logged(relaydsl_log, tmp_path, monkeypatch):
    monkeypatch.setenv("RELAYDSL_CACHE_DIR", str(tmp_path))
    script = ("import numpy as np\nfrom tests.frontend.test_inspection import make_layer, X\n"
              "make_layer()(X)\n")
    env = {**os.environ, "RELAYDSL_CACHE_DIR": str(tmp_path), "RELAYDSL_LOG": "info"}
    runs = [subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                           text=True, timeout=120, env=env) for _ in range(2)]
    for run in runs:
        assert run.returncode == 0, run.stderr[-2000:]
    # a user's view: RELAYDSL_LOG=info prints to standard error
    first, second = (run.stderr for run in runs)
    module = r"relaydsl\.backend\.llvm\.jit INFO: LLVM module of \d+ function\(s\) "
    assert re.search(module + "compiled in", first)
    assert re.search(module + "loaded from the disk cache in", second)
    assert "relaydsl.transform.pass_infra INFO: llvm pipeline (opt_level 3): " in second
    assert "relaydsl.transform.pass_infra DEBUG" not in second  # info, not debug


def test_each_execution_path_is_named(relaydsl_log):
    @relay
    def apply_twice(x: Tensor[Float, (3,)]) -> Tensor[Float, (3,)]:
        f = relay.tanh
        result = relay.map(f, relay.Cons(x, relay.Nil()))
        match result:
            case relay.Cons(h, _):
                return h
            case _:
                return x

    @relay
    def grow(x: Tensor[Float, (1, 3)], n: Int) -> Tensor[Float, (relay.Any, 3)]:
        acc: Tensor[Float, (relay.Any, 3)] = x  # a loop carries it at a growing size
        for _ in range(n):
            acc = relay.concatenate((acc, x), axis=0)
        return acc

    @relay
    def rows(x: Tensor[Float, ("n", 3)]) -> Tensor[Float, ("n", 3)]:
        return relay.exp(x)

    x = X[0]
    np.testing.assert_allclose(apply_twice(x), np.tanh(x), rtol=1e-6)
    np.testing.assert_allclose(grow(X[:1], 2), np.tile(X[:1], (3, 1)), rtol=1e-6)
    np.testing.assert_allclose(rows(X), np.exp(X), rtol=1e-6)
    executor = messages(relaydsl_log, "relaydsl.backend.llvm.executor")
    paths = [m for m in executor if m.startswith("@")]
    assert paths[0].startswith("@apply_twice runs as native code: ")
    # (another test module's decorated grow makes this one @grow_2 when both run)
    assert re.sub(r"^@grow(_\d+)? ", "@grow ", paths[1]) == (
        "@grow runs as native code: 3 kernel(s) at 3 call site(s), 1 of shapes known only at "
        "run time (a kernel per shape or one generic in the sizes, made on first use), "
        "native code between them")
    # at DEBUG, each kernel native code makes for the shapes it meets: the first of exact
    # shapes, then one generic in the growing size
    made = messages(relaydsl_log, "relaydsl.backend.llvm.native")
    assert any(m.startswith("native code: for (float32[1, 3], float32[1, 3]) Kernel(")
               for m in made)
    assert "native code: for (float32[2, 3], float32[1, 3]) a kernel generic in its sizes " \
        "[2]" in made
    assert paths[2] == ("@rows has symbolic shapes: it runs as native code for its first call "
                        "signature, then as native code of run-time shapes (and for a "
                        "signature called 100 times, native code for it)")
    assert paths[3].startswith("@rows for (float32[2, 3]): native code: 1 kernel(s) at 1 call")
    relaydsl_log.clear()
    rows.build("interp")(X)
    assert messages(relaydsl_log, "relaydsl.backend.target")[-1] == \
        "@rows runs on the interpreter"


def test_logging_is_off_and_unconfigured_by_default(monkeypatch):
    monkeypatch.delenv("RELAYDSL_LOG", raising=False)
    logger = logging.getLogger("relaydsl")
    before = list(logger.handlers)
    make_layer()(X)
    assert logger.handlers == before and logger.level == logging.NOTSET


def test_relaydsl_log_installs_one_stderr_handler_and_unset_removes_it(monkeypatch, capsys):
    logger = logging.getLogger("relaydsl")
    before = list(logger.handlers)
    try:
        monkeypatch.setenv("RELAYDSL_LOG", "DEBUG")
        make_layer()(X)
        make_layer()(X)
        assert len(logger.handlers) == len(before) + 1 and logger.level == logging.DEBUG
        err = capsys.readouterr().err
        assert "relaydsl.transform.pass_infra DEBUG: llvm pipeline: FuseOps in " in err
        monkeypatch.setenv("RELAYDSL_LOG", "info")
        make_layer()(X)
        err = capsys.readouterr().err
        assert "INFO" in err and "DEBUG" not in err
    finally:
        monkeypatch.delenv("RELAYDSL_LOG")
        make_layer()(X)
    assert logger.handlers == before and logger.level == logging.NOTSET
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("value", ["verbose", "1", "warning"])
def test_a_bad_log_setting_is_refused_naming_it(monkeypatch, value):
    monkeypatch.setenv("RELAYDSL_LOG", value)
    with pytest.raises(SettingError, match=rf"RELAYDSL_LOG={value!r}: expected one of "
                                           r"'info', 'debug'"):
        make_layer()(X)
    monkeypatch.setenv("RELAYDSL_LOG", " ")
    assert settings.log_level() is None


def test_dump_ir_writes_the_ir_after_each_pass_per_build(tmp_path, monkeypatch):
    monkeypatch.setenv("RELAYDSL_DUMP_IR", str(tmp_path / "ir"))
    layer = make_layer()
    np.testing.assert_allclose(layer(X), expected_layer(X), rtol=1e-6)
    layer.build("interp")(X)
    relay.build(layer, opt_level=2)(X)  # another build of it: its own directory
    name = layer.global_var.name_hint
    assert sorted(p.name for p in (tmp_path / "ir").iterdir()) == \
        [f"{name}.interp", f"{name}.llvm", f"{name}.llvm.2"]
    dump = tmp_path / "ir" / f"{name}.llvm"
    files = sorted(p.name for p in dump.iterdir())
    passes = pipeline.pass_names("llvm", 3, entry=name)
    assert files == ["00_input.txt"] + [f"{i:02d}_{p}.txt" for i, p in enumerate(passes, 1)]
    assert (dump / files[-1]).read_text() == layer.astext(fused=True) + "\n"
    assert "Primitive" not in (dump / "00_input.txt").read_text()
    assert sorted(p.name for p in (tmp_path / "ir" / f"{name}.interp").iterdir()) == \
        ["00_input.txt", "01_RemoveUnusedFunctions.txt", "02_DeadCodeElimination.txt",
         "03_LowerGrads.txt"]


def test_a_dump_ir_path_that_is_a_file_is_refused(tmp_path, monkeypatch):
    (tmp_path / "f").write_text("")
    monkeypatch.setenv("RELAYDSL_DUMP_IR", str(tmp_path / "f"))
    with pytest.raises(SettingError, match=r"RELAYDSL_DUMP_IR='.*f': .* is not a directory"):
        make_layer()(X)


def test_astext_fused_shows_the_primitive_functions_the_backend_compiles():
    layer = make_layer()
    text = layer.astext(fused=True)
    assert text.count("Primitive=1") == 1  # one fused kernel: multiply, tanh, exp, add
    assert "Primitive" not in layer.astext()
    with relay.PassContext(opt_level=0):
        unfused = layer.astext(fused=True)
    # one primitive function per op (at level 0 the cast of the literal 2.0 is not folded)
    assert unfused.count("Primitive=1") == 5
    np.testing.assert_allclose(layer(X), expected_layer(X), rtol=1e-6)
