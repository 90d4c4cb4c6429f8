"""Models: optimisers against their update equations, export, and save/load without pickle."""
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from relaydsl import Float, Tensor, relay, relay_model
from relaydsl.frontend import model as model_file
from relaydsl.frontend.model import SGD, Adam, Momentum, load_model, save_model, update_model_params


@relay_model
def small(x: Tensor[Float, (2, 3)]) -> Tensor[Float, (2, 2)]:
    return relay.linear(x, num_hidden=2)


def fresh():
    return relay.create_model(small, seed=0)


def grads_for(model, scale=1.0):
    return {k: np.full(v.shape, scale, v.dtype) for k, v in model.params.items()}


def test_sgd_default():
    m = fresh()
    before = {k: v.copy() for k, v in m.params.items()}
    update_model_params(m, grads_for(m, 2.0), lr=0.1)
    for k in before:
        np.testing.assert_allclose(m.params[k], before[k] - 0.2, rtol=1e-6)


def test_momentum_and_adam_follow_their_equations():
    m = fresh()
    w0 = m.params["linear_0.weight"].copy()
    opt = Momentum(lr=0.1, momentum=0.5)
    g1, g2 = grads_for(m, 1.0), grads_for(m, 3.0)
    update_model_params(m, g1, optimizer=opt)
    update_model_params(m, g2, optimizer=opt)
    # v1 = 1; v2 = 0.5 * 1 + 3 = 3.5; total step 0.1 * (1 + 3.5)
    np.testing.assert_allclose(m.params["linear_0.weight"], w0 - 0.45, rtol=1e-6)

    m = fresh()
    w0 = m.params["linear_0.weight"].copy()
    adam = Adam(lr=0.01)
    update_model_params(m, grads_for(m, 4.0), optimizer=adam)
    # first step of Adam moves each weight by lr * sign(g) (bias-corrected moments)
    np.testing.assert_allclose(m.params["linear_0.weight"], w0 - 0.01, rtol=1e-5)
    update_model_params(m, grads_for(m, 4.0), optimizer="adam", lr=0.01)
    np.testing.assert_allclose(m.params["linear_0.weight"], w0 - 0.02, rtol=1e-5)


def test_update_errors():
    m = fresh()
    with pytest.raises(KeyError, match="does not have"):
        update_model_params(m, {"nope": np.zeros(2)})
    with pytest.raises(ValueError, match="has shape"):
        update_model_params(m, {"linear_0.bias": np.zeros(3, np.float32)})
    with pytest.raises(ValueError, match="optimizer must be one of"):
        update_model_params(m, grads_for(m), optimizer="rmsprop")


def test_export_is_a_snapshot():
    m = fresh()
    predict = relay.export_model(m)
    x = np.ones((2, 3), np.float32)
    before = predict(x)
    update_model_params(m, grads_for(m), lr=1.0)
    np.testing.assert_array_equal(predict(x), before)
    assert not np.allclose(m(x), before)


def test_save_and_load_round_trip(tmp_path):
    m = fresh()
    update_model_params(m, grads_for(m, 0.3), lr=1.0)
    path = save_model(m, tmp_path / "small")
    assert path.endswith(".npz")
    loaded = load_model(path)  # the model function is found by name: nothing is imported
    assert loaded.fn is small
    for k in m.params:
        np.testing.assert_array_equal(loaded.params[k], m.params[k])
    with np.load(path, allow_pickle=False) as data:  # plain arrays and a JSON manifest
        manifest = json.loads(data["__relaydsl_manifest__"].tobytes())
    assert manifest["model"] == "small"
    assert [p["name"] for p in manifest["params"]] == ["linear_0.weight", "linear_0.bias"]


def test_loading_a_file_of_another_model_is_a_clear_error(tmp_path):
    @relay_model
    def other(x: Tensor[Float, (2, 3)]) -> Tensor[Float, (2, 4)]:
        return relay.linear(x, num_hidden=4)

    path = save_model(relay.create_model(other), tmp_path / "other")
    with pytest.raises(ValueError, match=r"does not match the model small: linear_0.weight is "
                                         r"float32\[4, 3\], the model needs float32\[2, 3\]"):
        load_model(path, small)
    (tmp_path / "junk.npz").write_bytes(b"not a zip file")
    with pytest.raises(ValueError, match="cannot read the model file"):
        load_model(tmp_path / "junk.npz", small)


def test_an_interrupted_save_leaves_the_old_file(tmp_path, monkeypatch):
    m = fresh()
    path = Path(save_model(m, tmp_path / "model.npz"))
    original = path.read_bytes()

    def crash(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(np, "savez", crash)
    with pytest.raises(KeyboardInterrupt):
        save_model(m, path)
    assert path.read_bytes() == original
    assert [f for f in os.listdir(tmp_path) if f != "model.npz"] == []  # no temp file left


def test_optimizer_objects_are_exported():
    assert relay.SGD is SGD and relay.Adam is Adam and relay.Momentum is Momentum


_KILLED_SAVE = """
import os, signal, sys
import numpy as np
from relaydsl.frontend import model as model_file

def killed(*args):  # the save is killed after writing its temp file, before renaming it
    os.kill(os.getpid(), signal.SIGKILL)

os.replace = killed
params = {"w": np.zeros((256, 1024), np.float32)}
fn = type("Fn", (), {"__qualname__": "big"})
model_file.save_model(model_file.Model(fn, params), sys.argv[1])
"""


def test_a_save_removes_the_temp_files_of_killed_saves(tmp_path):
    for _ in range(3):  # each save removes what the killed one before it left
        run = subprocess.run([sys.executable, "-c", _KILLED_SAVE, str(tmp_path / "big.npz")])
        assert run.returncode == -signal.SIGKILL
        [left] = tmp_path.iterdir()
        assert left.name.startswith(".relaydsl-") and left.stat().st_size > 1_000_000

    save_model(fresh(), tmp_path / "model.npz")
    assert [f.name for f in tmp_path.iterdir()] == ["model.npz"]


def test_stale_temp_files_are_removed_and_live_ones_kept(tmp_path, monkeypatch):
    host = socket.gethostname()
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    dead_pid = int(gone.stdout)
    hour_ago = time.time() - 2 * model_file.STALE_TEMP_AGE
    planted = {
        f".relaydsl-{host}-{dead_pid}-abc123.npz": (None, False),  # its writer is gone
        f".relaydsl-{host}-{os.getpid()}-def456.npz": (hour_ago, True),  # a live writer
        f".relaydsl-elsewhere-{os.getpid()}-aaa111.npz": (hour_ago, False),  # old, other host
        f".relaydsl-elsewhere-{dead_pid}-bbb222.npz": (None, True),  # recent, other host
        ".relaydsl-k2_j9x1q.npz": (hour_ago, False),  # the old naming, long untouched
        ".relaydsl-zz81ab_c.npz": (None, True),  # the old naming, recently written
        ".relaydsl-notes.txt": (hour_ago, True),  # not a temp file of ours
        "weights.npz": (hour_ago, True),
    }
    for name, (mtime, _) in planted.items():
        (tmp_path / name).write_bytes(b"partial")
        if mtime is not None:
            os.utime(tmp_path / name, (mtime, mtime))
    save_model(fresh(), tmp_path / "model.npz")
    kept = {name for name, (_, keep) in planted.items() if keep}
    assert {f.name for f in tmp_path.iterdir()} == kept | {"model.npz"}
