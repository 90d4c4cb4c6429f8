"""Environment settings: each checked, with a message naming the variable, its value and
what is accepted (issue 11, item 12)."""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from relaydsl import Float, Tensor, relay, settings
from relaydsl.errors import SettingError

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("value", ["abc", "0", "-2", "2.5", "4 threads"])
def test_a_thread_count_that_is_not_a_positive_whole_number_is_refused(monkeypatch, value):
    monkeypatch.setenv("RELAYDSL_NUM_THREADS", value)
    with pytest.raises(SettingError, match=rf"RELAYDSL_NUM_THREADS={value!r}: expected a "
                                           rf"whole number of threads from 1 to \d+"):
        settings.num_threads()


def test_thread_counts_within_the_cores_are_taken_and_larger_ones_capped(monkeypatch):
    cores = settings.usable_cores()
    monkeypatch.setenv("RELAYDSL_NUM_THREADS", " 1 ")
    assert settings.num_threads() == 1
    monkeypatch.setenv("RELAYDSL_NUM_THREADS", str(cores))
    assert settings.num_threads() == cores
    monkeypatch.setenv("RELAYDSL_NUM_THREADS", "2000")
    with pytest.warns(RuntimeWarning, match=rf"RELAYDSL_NUM_THREADS='2000' exceeds the "
                                            rf"{cores} usable cores; using {cores} threads"):
        assert settings.num_threads() == cores
    monkeypatch.setenv("RELAYDSL_NUM_THREADS", "")  # empty: the default
    assert settings.num_threads() == cores


def run(script: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={**os.environ, **env})


def test_a_process_asked_for_2000_threads_starts_no_more_than_its_cores():
    out = run("import warnings; warnings.simplefilter('error')\n"
              "from relaydsl.backend.llvm import jit\n"
              "print(jit.runtime_threads())", RELAYDSL_NUM_THREADS="2000")
    assert "RELAYDSL_NUM_THREADS='2000' exceeds" in out.stderr  # the warning, as an error
    out = run("import warnings; warnings.simplefilter('ignore')\n"
              "from relaydsl.backend.llvm import jit\n"
              "print(jit.runtime_threads())", RELAYDSL_NUM_THREADS="2000")
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(out.stdout) == settings.usable_cores()


@relay
def double(x: Tensor[Float, (3,)]) -> Tensor[Float, (3,)]:
    return x + x


def test_a_bad_thread_count_is_reported_at_the_first_compiled_call():
    out = run("import numpy as np\n"
              "from tests.relaydsl.test_settings import double\n"
              "double(np.ones(3, 'float32'))", RELAYDSL_NUM_THREADS="abc")
    assert out.returncode == 1
    assert out.stderr.strip().splitlines()[-1].startswith(
        "relaydsl.errors.SettingError: RELAYDSL_NUM_THREADS='abc': expected a whole number")


def test_an_unknown_target_is_refused_naming_the_variable(monkeypatch):
    monkeypatch.setenv("RELAYDSL_TARGET", "cuda")
    with pytest.raises(SettingError, match=r"RELAYDSL_TARGET='cuda': expected one of "
                                           r"'accel', 'interp', 'llvm'"):
        relay.build(double)
    monkeypatch.setenv("RELAYDSL_TARGET", "interp")
    np.testing.assert_array_equal(double(np.arange(3, dtype=np.float32)), [0, 2, 4])


def test_a_cache_dir_that_is_a_file_is_refused(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("RELAYDSL_CACHE_DIR", str(tmp_path / "file"))
    with pytest.raises(SettingError, match=r"RELAYDSL_CACHE_DIR='.*file': .* is not a "
                                           r"directory; expected a directory, or a path"):
        settings.cache_dir()
    monkeypatch.setenv("RELAYDSL_CACHE_DIR", str(tmp_path / "new"))  # created when needed
    assert settings.cache_dir() == tmp_path / "new"


def test_a_data_dir_that_does_not_exist_is_refused(tmp_path, monkeypatch):
    from relaydsl.datasets import mnist

    monkeypatch.setenv("RELAYDSL_DATA", str(tmp_path / "nowhere"))
    with pytest.raises(SettingError, match=r"RELAYDSL_DATA='.*nowhere': .* does not exist; "
                                           r"expected an existing directory"):
        mnist()


@pytest.mark.parametrize("value", ["128", "1024", "wide", "512 bits"])
def test_a_vector_width_other_than_256_or_512_is_refused(monkeypatch, value):
    monkeypatch.setenv("RELAYDSL_VECTOR_WIDTH", value)
    with pytest.raises(SettingError, match=rf"RELAYDSL_VECTOR_WIDTH={value!r}: expected 256 "
                                           r"or 512 \(bits\)"):
        settings.vector_width()


def test_a_vector_width_of_256_runs_programs_with_256_bit_vectors():
    out = run("import numpy as np\n"
              "from relaydsl.backend.llvm import jit\n"
              "from tests.relaydsl.test_settings import double\n"
              "print(double(np.arange(3, dtype='float32')).tolist(),\n"
              "      jit.host_target().vector_bits, jit.register_bits(jit.host_target().features))",
              RELAYDSL_VECTOR_WIDTH="256")
    assert out.returncode == 0, out.stderr
    printed = out.stdout.split("]")
    assert printed[0] == "[0.0, 2.0, 4.0"
    bits, widest = map(int, printed[1].split())
    assert bits == min(256, widest)
