"""Errors a user can act on, at the right time (issue 13, item 5): type errors when a
function is decorated, tracebacks showing the user's frames, decorated functions from
source text."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from relaydsl import Float, Tensor, relay
from relaydsl.errors import DSLSyntaxError, RelayTypeError, SettingError
from relaydsl.frontend.tracebacks import user_frames


def test_a_shape_error_is_reported_when_the_function_is_decorated():
    with pytest.raises(RelayTypeError, match=r"test_user_errors.py:\d+:\d+: add: shapes cannot "
                                             r"be broadcast together: \(3,\) and \(4,\)"):
        @relay
        def mismatched(x: Tensor[Float, (3,)], y: Tensor[Float, (4,)]) -> Tensor[Float, (3,)]:
            return x + y


def test_a_function_calling_one_defined_later_is_checked_at_its_first_call_a_typo_at_once():
    @relay
    def caller(x: Tensor[Float, (3,)]) -> Tensor[Float, (3,)]:
        return helper_defined_below(x) * 2.0  # not defined yet: no error now

    np.testing.assert_allclose(caller(np.ones(3, np.float32)), np.full(3, 4.0))

    # a name the file binds nowhere can never be defined: reported at the `def`
    with pytest.raises(DSLSyntaxError, match=r"test_user_errors.py:\d+:\d+: name "
                                             r"'undefined_name' is not defined"):
        @relay
        def typo(x: Tensor[Float, (3,)]) -> Tensor[Float, (3,)]:
            return x + undefined_name

    with pytest.raises(DSLSyntaxError, match="Did you mean helper_defined_below"):
        @relay
        def misspelt(x: Tensor[Float, (3,)]) -> Tensor[Float, (3,)]:
            return helper_defined_belw(x)


@relay
def helper_defined_below(x: Tensor[Float, (3,)]) -> Tensor[Float, (3,)]:
    return x + 1.0


SCRIPT = textwrap.dedent("""
    import numpy as np
    from relaydsl import relay, Tensor, Float

    @relay
    def f(x: Tensor[Float, (2,)]) -> Tensor[Float, (2,)]:
        return x @ x
""")


def run_script(tmp_path, setting=None):
    path = tmp_path / "user_program.py"
    path.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "RELAYDSL_TRACEBACK"}
    if setting is not None:
        env["RELAYDSL_TRACEBACK"] = setting
    done = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, env=env,
                          timeout=120)
    assert done.returncode == 1
    return done.stderr


def test_a_user_errors_traceback_shows_the_users_frames_and_full_shows_everything(tmp_path):
    filtered = run_script(tmp_path)
    frames = [line for line in filtered.splitlines() if line.startswith('  File "')]
    assert 'user_program.py", line 5' in frames[0]
    assert len(frames) <= 2 and all("user_program.py" in f or "tracebacks.py" in f
                                    for f in frames), filtered
    assert "RelayTypeError: " in filtered and "user_program.py:7:" in filtered
    # the one relaydsl frame left says so (issue 26, item 8)
    assert "relaydsl's frames hidden: RELAYDSL_TRACEBACK=full shows them" in filtered
    full = run_script(tmp_path, "full")
    assert len([ln for ln in full.splitlines() if ln.startswith('  File "')]) > 10
    bad = run_script(tmp_path, "short")
    assert "SettingError: RELAYDSL_TRACEBACK='short': expected 'filtered' or 'full'" in bad


def test_only_relaydsl_frames_are_dropped():
    def user_code():
        raise ValueError("boom")

    try:
        user_code()
    except ValueError as e:
        kept = user_frames(e.__traceback__)
    names = []
    while kept is not None:
        names.append(kept.tb_frame.f_code.co_name)
        kept = kept.tb_next
    assert names == ["test_only_relaydsl_frames_are_dropped", "user_code"]


def test_function_from_source_for_code_without_a_file():
    double = relay.function_from_source("""
        @relay
        def double(x: Tensor[Float, (2,)]) -> Tensor[Float, (2,)]:
            return x * 2.0
    """)
    np.testing.assert_allclose(double(np.array([1.0, 2.5], np.float32)), [2.0, 5.0])
    with pytest.raises(RelayTypeError, match=r"<relay source \d+>:4:\d+: add: shapes") as e:
        relay.function_from_source("""
            @relay
            def bad(x: Tensor[Float, (2,)]) -> Tensor[Float, (2,)]:
                return x + relay.zeros((3,), "float32")
        """)
    assert 'relay.zeros((3,), "float32")' in str(e.value)
    with pytest.raises(ValueError, match="defines no @relay"):
        relay.function_from_source("x = 1")


def test_python_dash_c_points_to_function_from_source():
    code = ("from relaydsl import relay, Tensor, Float\n"
            "@relay\ndef f(x: Tensor[Float, (2,)]) -> Tensor[Float, (2,)]:\n    return x\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert "use relay.function_from_source(text)" in done.stderr


def test_the_traceback_setting_is_validated(monkeypatch):
    from relaydsl import settings

    monkeypatch.setenv("RELAYDSL_TRACEBACK", "verbose")
    with pytest.raises(SettingError, match="RELAYDSL_TRACEBACK"):
        settings.full_tracebacks()
