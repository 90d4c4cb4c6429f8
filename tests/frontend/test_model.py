"""Models: optimisers against their update equations, export, and save/load without pickle."""
import io
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
import tracemalloc
import warnings
import zipfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

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
    with pytest.raises(TypeError, match=r"parameter lr: expected a number \(or an optimiser "
                                        r"object\), got str 'momentum'"):
        update_model_params(m, grads_for(m), "momentum")
    with pytest.raises(TypeError, match=r"parameter optimizer: expected 'sgd', 'momentum', "
                                        r"'adam' or an optimiser object, got float 0.1"):
        update_model_params(m, grads_for(m), 0.01, 0.1)
    with pytest.raises(TypeError, match="got an optimiser object for lr and also"):
        update_model_params(m, grads_for(m), relay.SGD(lr=0.1), optimizer="adam")


def test_an_optimiser_object_may_come_in_lr_s_place():
    """relay.update_model_params(model, g, relay.Momentum(lr=0.05)) (issue 26, item 5): the
    same steps as optimizer=, by the momentum equations."""
    a, b = fresh(), fresh()
    first, second = relay.Momentum(lr=0.05, momentum=0.9), relay.Momentum(lr=0.05, momentum=0.9)
    velocity = {k: np.zeros_like(v) for k, v in a.params.items()}
    expected = {k: v.copy() for k, v in a.params.items()}
    for step in range(3):
        g = {k: np.full_like(v, step + 1.0) for k, v in a.params.items()}
        update_model_params(a, g, first)
        update_model_params(b, g, optimizer=second)
        for k in expected:
            velocity[k] = 0.9 * velocity[k] + g[k]
            expected[k] = expected[k] - 0.05 * velocity[k]
    for k in expected:
        np.testing.assert_allclose(a.params[k], expected[k], rtol=1e-6)
        np.testing.assert_array_equal(a.params[k], b.params[k])


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


@pytest.fixture
def another_small():
    """A @relay_model `small` of another module, forgotten afterwards: the registry of model
    functions is the process's, and other tests load files of this module's `small`."""
    fn = relay.function_from_source(
        "@relay_model\n"
        "def small(x: Tensor[Float, (2, 3)]) -> Tensor[Float, (2, 5)]:\n"
        "    return relay.linear(x, num_hidden=5)\n")
    yield fn
    del model_file.MODEL_FUNCTIONS[fn.__module__, "small"]


def test_a_model_of_the_same_name_in_another_module_does_not_capture_its_files(
        tmp_path, another_small):
    """Model functions are found by module and name: a `small` defined elsewhere later (as a
    doctest's model once did in the full suite) must not load this module's file."""
    other_small = another_small
    assert other_small.__module__ != small.__module__
    path = save_model(fresh(), tmp_path / "mine")
    assert load_model(path).fn is small
    assert load_model(save_model(relay.create_model(other_small), tmp_path / "theirs")).fn \
        is other_small

    # a file written before files recorded the module names only `small`: two modules define
    # one, so which is meant must be said
    with np.load(path, allow_pickle=False) as data:
        arrays = dict(data)
    manifest = json.loads(arrays["__relaydsl_manifest__"].tobytes())
    del manifest["module"]
    arrays["__relaydsl_manifest__"] = np.frombuffer(json.dumps(manifest).encode(), np.uint8)
    np.savez(tmp_path / "old.npz", **arrays)
    with pytest.raises(ValueError, match=r"the model 'small', which several modules define "
                                         r"\(.*\): pass it, load_model\(path, fn\)"):
        load_model(tmp_path / "old.npz")
    assert load_model(tmp_path / "old.npz", small).fn is small


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


# ---- loading damaged or lying files: one error, naming the file ---------------------------------
def npy(array: np.ndarray | None = None, *, header: str | None = None, data: bytes = b"") -> bytes:
    """A .npy member: an array as NumPy writes it, or a hand-written header and data."""
    if header is None:
        buf = io.BytesIO()
        np.lib.format.write_array(buf, array, allow_pickle=False)
        return buf.getvalue()
    text = header.encode("latin1")
    text += b" " * (-(10 + len(text) + 1) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text + data


def manifest(params, **fields) -> bytes:
    content = {"format": "relaydsl-model", "version": 1, "model": "small", "params": params}
    return npy(np.frombuffer(json.dumps({**content, **fields}).encode(), np.uint8))


def entry(name, shape, dtype="float32"):
    return {"name": name, "shape": list(shape), "dtype": dtype}


WEIGHT = np.arange(6, dtype=np.float32).reshape(2, 3)
BIAS = np.array([0.5, -1.0], np.float32)
GOOD_MANIFEST = manifest([entry("linear_0.weight", (2, 3)), entry("linear_0.bias", (2,))])
GOOD_MEMBERS = [("param/linear_0.weight.npy", npy(WEIGHT)), ("param/linear_0.bias.npy", npy(BIAS)),
                ("__relaydsl_manifest__.npy", GOOD_MANIFEST)]


def archive(members) -> bytes:
    buf = io.BytesIO()
    with warnings.catch_warnings(), zipfile.ZipFile(buf, "w") as z:
        warnings.simplefilter("ignore")  # "Duplicate name"
        for name, data in members:
            z.writestr(name, data)
    return buf.getvalue()


def replaced(name, data):
    return [(n, data if n == name else d) for n, d in GOOD_MEMBERS]


def test_a_hand_built_file_loads(tmp_path):
    (tmp_path / "m.npz").write_bytes(archive(GOOD_MEMBERS))
    loaded = load_model(tmp_path / "m.npz")
    np.testing.assert_array_equal(loaded.params["linear_0.weight"], WEIGHT)
    np.testing.assert_array_equal(loaded.params["linear_0.bias"], BIAS)
    big_endian = replaced("param/linear_0.weight.npy", npy(WEIGHT.astype(">f4")))
    (tmp_path / "be.npz").write_bytes(archive(big_endian))
    weight = load_model(tmp_path / "be.npz").params["linear_0.weight"]
    assert weight.dtype == np.float32 and weight.dtype.isnative
    np.testing.assert_array_equal(weight, WEIGHT)
    with pytest.raises(FileNotFoundError):
        load_model(tmp_path / "missing.npz")


TIB4 = (2 ** 40, 1024)
MALFORMED = {
    "the manifest lies about a shape": (
        replaced("__relaydsl_manifest__.npy", manifest(
            [entry("linear_0.weight", (3, 2)), entry("linear_0.bias", (2,))])),
        "'param/linear_0.weight.npy' is float32[2, 3], but the manifest says float32[3, 2]"),
    "the manifest lies about a dtype": (
        replaced("__relaydsl_manifest__.npy", manifest(
            [entry("linear_0.weight", (2, 3), "float64"), entry("linear_0.bias", (2,))])),
        "is float32[2, 3], but the manifest says float64[2, 3]"),
    "the manifest lies about a name": (
        replaced("__relaydsl_manifest__.npy", manifest(
            [entry("linear_0.weight", (2, 3)), entry("linear_0.bais", (2,))])),
        "member 'param/linear_0.bias.npy' that the manifest does not list"),
    "the manifest lists a parameter the file lacks": (
        GOOD_MEMBERS[1:], "lists the parameter linear_0.weight, which the file lacks"),
    "the manifest lists a parameter twice": (
        replaced("__relaydsl_manifest__.npy", manifest(
            [entry("linear_0.weight", (2, 3)), entry("linear_0.weight", (2, 3))])),
        "lists the parameter linear_0.weight twice"),
    "a duplicated member": (
        [*GOOD_MEMBERS, ("param/linear_0.bias.npy", npy(BIAS * 2))],
        "two members named 'param/linear_0.bias.npy'"),
    "a 4 TiB header the manifest agrees with": (
        [("param/linear_0.weight.npy", npy(header=f"{{'descr': '<f4', 'fortran_order': False, "
                                                  f"'shape': {TIB4}, }}", data=b"\0" * 24)),
         GOOD_MEMBERS[1], ("__relaydsl_manifest__.npy", manifest(
             [entry("linear_0.weight", TIB4), entry("linear_0.bias", (2,))]))],
        "has 24 bytes of data, but its header describes 4503599627370496"),
    "a header with more data than it describes": (
        replaced("param/linear_0.bias.npy", npy(BIAS) + b"\0" * 8), "has 16 bytes of data"),
    "a header NumPy's tokenizer rejects": (
        replaced("param/linear_0.bias.npy", npy(header="{'descr': '<f4', 'shape': ((")),
        "cannot read the model file"),
    "a header that is not a dict": (
        replaced("param/linear_0.bias.npy", npy(header="[1, 2]")), "Header is not a dictionary"),
    "a manifest that is a list": (
        replaced("__relaydsl_manifest__.npy", npy(np.frombuffer(b"[1, 2]", np.uint8))),
        "not a relaydsl model file"),
    "a manifest without the model": (
        replaced("__relaydsl_manifest__.npy", manifest([], model=None)),
        "does not name the model"),
    "a manifest with params not a list": (
        replaced("__relaydsl_manifest__.npy", manifest(3)), "does not name the model"),
    "a manifest with a malformed entry": (
        replaced("__relaydsl_manifest__.npy", manifest([{"name": "w", "shape": "2"}])),
        "malformed parameter entry"),
    "a manifest with an object dtype": (
        replaced("__relaydsl_manifest__.npy", manifest([entry("w", (1,), "object")])),
        "malformed parameter entry"),
    "a manifest of another version": (
        replaced("__relaydsl_manifest__.npy", manifest([], version=2)),
        "format version is 2; this relaydsl reads version 1"),
    "a manifest nested too deep": (
        replaced("__relaydsl_manifest__.npy",
                 npy(np.frombuffer(b"[" * 100_000 + b"]" * 100_000, np.uint8))),
        "manifest is not valid JSON"),
    "a manifest not in UTF-8": (
        replaced("__relaydsl_manifest__.npy", npy(np.frombuffer(b'{"\xff": 1}', np.uint8))),
        "manifest is not valid JSON"),
    "a manifest of floats": (
        replaced("__relaydsl_manifest__.npy", npy(np.zeros(3, np.float32))),
        "not a byte vector"),
    "no manifest": (GOOD_MEMBERS[:2], "not a relaydsl model file (no manifest)"),
    "not a zip file": ([], "cannot read the model file"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_files_raise_one_error_naming_the_file(tmp_path, case):
    members, needle = MALFORMED[case]
    path = tmp_path / "bad.npz"
    path.write_bytes(archive(members) if members else b"PK\5\6 not a zip")
    tracemalloc.start()
    try:
        with pytest.raises(relay.ModelFileError) as info:
            load_model(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(path) in str(info.value) and needle in str(info.value), str(info.value)
    assert peak < 20_000_000  # nothing is allocated for what a header claims


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory):
    m = fresh()
    update_model_params(m, grads_for(m, 0.3), lr=1.0)
    path = save_model(m, tmp_path_factory.mktemp("saved") / "small.npz")
    return Path(path).read_bytes(), m.params


def test_every_truncation_is_the_clear_error(saved_model, tmp_path):
    data, _ = saved_model
    path = tmp_path / "truncated.npz"
    for end in range(len(data)):
        path.write_bytes(data[:end])
        with pytest.raises(relay.ModelFileError, match=f"cannot read the model file {path}"):
            load_model(path)


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_byte_mutations_raise_only_the_clear_error(saved_model, tmp_path_factory, data):
    raw, params = saved_model
    damaged = bytearray(raw)
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(damaged) - 1))
        kind = data.draw(st.sampled_from(["flip", "byte", "delete", "insert", "repeat"]))
        if kind == "flip":
            damaged[i] ^= 1 << data.draw(st.integers(0, 7))
        elif kind == "byte":
            damaged[i] = data.draw(st.integers(0, 255))
        elif kind == "delete":
            del damaged[i:i + data.draw(st.integers(1, 16))]
        elif kind == "insert":
            damaged[i:i] = data.draw(st.binary(min_size=1, max_size=16))
        else:
            damaged[i:i] = damaged[i:i + data.draw(st.integers(1, 64))]
    path = tmp_path_factory.mktemp("mutated") / "damaged.npz"
    path.write_bytes(bytes(damaged))
    assert_loads_exactly_or_is_the_clear_error(path, params)


def assert_loads_exactly_or_is_the_clear_error(path: Path, params: dict) -> None:
    """A damaged file is the ModelFileError naming it, or -- a change in a field nothing
    reads (a timestamp, say) leaves a valid file -- loads exactly."""
    try:
        loaded = load_model(path)
    except relay.ModelFileError as e:
        assert str(path) in str(e)
        return
    assert loaded.params.keys() == params.keys()
    for k in params:
        np.testing.assert_array_equal(loaded.params[k], params[k])


# ---- training and inference modes: batch_norm as in PyTorch ------------------------------------

@relay_model
def normed(x: Tensor[Float, ("n", 3)]) -> Tensor[Float, ("n", 2)]:
    return relay.linear(relay.tanh(relay.batch_norm(relay.linear(x, num_hidden=4),
                                                    momentum=0.2)), num_hidden=2)


@relay
def normed_loss(x: Tensor[Float, ("n", 3)], y: Tensor[Float, ("n", 2)]) -> Float:
    return relay.mean((normed(x) - y) ** 2.0)


def normed_reference(p, x, training, momentum=0.2, eps=1e-5):
    """`normed` with PyTorch's BatchNorm1d semantics in JAX: (output, new running mean, var)."""
    import jax.numpy as jnp

    h = x @ p["linear_0.weight"].T + p["linear_0.bias"]
    mean, var = p["batch_norm_0.moving_mean"], p["batch_norm_0.moving_var"]
    if training:  # normalise with the batch's biased variance, keep the unbiased one
        n = h.shape[0]
        bmean, bvar = h.mean(0), h.var(0)
        mean, var = (1 - momentum) * mean + momentum * bmean, \
            (1 - momentum) * var + momentum * bvar * n / (n - 1)
        use_mean, use_var = bmean, bvar
    else:
        use_mean, use_var = mean, var
    h = (h - use_mean) / jnp.sqrt(use_var + eps) * p["batch_norm_0.gamma"] + \
        p["batch_norm_0.beta"]
    return jnp.tanh(h) @ p["linear_1.weight"].T + p["linear_1.bias"], mean, var


def normed_batches(steps=3, n=4, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((n, 3)).astype(np.float32) * 2 + 1,
             rng.standard_normal((n, 2)).astype(np.float32)) for _ in range(steps)]


def test_training_steps_update_the_running_statistics_as_pytorch():
    import jax

    model = relay.create_model(normed, seed=1, sigma=0.5)
    assert model.state_names == ("batch_norm_0.moving_mean", "batch_norm_0.moving_var")
    ref = {k: jax.numpy.asarray(v) for k, v in model.params.items()}
    trainable = [k for k in ref if k not in model.state_names]
    step = relay.grad(model, normed_loss)
    for x, y in normed_batches():
        grads = step(x, y)
        assert sorted(grads) == sorted(trainable)  # no gradient for the state

        def ref_loss(q, x=x, y=y, ref=ref):
            out, mean, var = normed_reference({**ref, **q}, x, training=True)
            return jax.numpy.mean((out - y) ** 2), (mean, var)

        (value, (mean, var)), ref_grads = jax.value_and_grad(ref_loss, has_aux=True)(
            {k: ref[k] for k in trainable})
        np.testing.assert_allclose(step.last_loss, value, rtol=1e-5, atol=1e-6)
        for k in trainable:
            np.testing.assert_allclose(grads[k], ref_grads[k], rtol=1e-4, atol=1e-6)
        update_model_params(model, grads, lr=0.1)
        ref = {**ref, **{k: ref[k] - 0.1 * ref_grads[k] for k in trainable},
               "batch_norm_0.moving_mean": mean, "batch_norm_0.moving_var": var}
        for k in ref:
            np.testing.assert_allclose(model.params[k], ref[k], rtol=1e-5, atol=1e-6)
    x = normed_batches(1, n=5, seed=9)[0][0]
    want = normed_reference(ref, x, training=False)[0]
    np.testing.assert_allclose(model(x), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(relay.export_model(model)(x), want, rtol=1e-5, atol=1e-6)


def test_inference_of_one_example_does_not_depend_on_its_batch():
    model = relay.create_model(normed, seed=1, sigma=0.5)
    step = relay.grad(model, normed_loss)
    for x, y in normed_batches():
        update_model_params(model, step(x, y), lr=0.1)
    x = normed_batches(1, seed=5)[0][0]
    batch = model(x)
    for i in range(len(x)):
        np.testing.assert_allclose(model(x[i:i + 1]), batch[i:i + 1], rtol=1e-5, atol=1e-6)


def test_gradients_of_state_are_refused():
    model = relay.create_model(normed)
    with pytest.raises(KeyError, match="model state"):
        update_model_params(model, {"batch_norm_0.moving_mean": np.zeros(4, np.float32)})


# ---- training and inference modes: dropout, a new mask each step from the model's key -----------

RATE = 0.3


@relay_model
def dropped(x: Tensor[Float, ("n", 3)]) -> Tensor[Float, ("n", 2)]:
    return relay.linear(relay.dropout(relay.tanh(relay.linear(x, num_hidden=64)), rate=RATE),
                        num_hidden=2)


@relay_model
def undropped(x: Tensor[Float, ("n", 3)]) -> Tensor[Float, ("n", 2)]:
    return relay.linear(relay.tanh(relay.linear(x, num_hidden=64)), num_hidden=2)


@relay
def dropped_loss(x: Tensor[Float, ("n", 3)], y: Tensor[Float, ("n", 2)]) -> Float:
    return relay.mean((dropped(x) - y) ** 2.0)


def lowbias32(x):
    """The documented dropout hash on uint64 arrays holding uint32 values."""
    m = np.uint64(0xFFFFFFFF)
    x = x ^ (x >> np.uint64(16))
    x = (x * np.uint64(0x7FEB352D)) & m
    x = x ^ (x >> np.uint64(15))
    x = (x * np.uint64(0x846CA68B)) & m
    return x ^ (x >> np.uint64(16))


def dropout_mask(key, shape, rate=RATE):
    """keep[i] = mix(mix(i) ^ mix(mix(k0) ^ k1)) >= rate * 2**32, written independently."""
    k0, k1 = (np.uint64(int(k) % 2**32) for k in key)
    seed = lowbias32(lowbias32(np.array([k0]))[0] ^ k1)
    index = np.arange(int(np.prod(shape)), dtype=np.uint64)
    return (lowbias32(lowbias32(index) ^ seed) >= int(rate * 2**32)).reshape(shape)


def dropped_reference_grads(params, x, y, keep):
    """The loss's gradients in JAX, with dropout's mask `keep`."""
    import jax
    import jax.numpy as jnp

    def loss(q):
        h = jnp.tanh(x @ q["linear_0.weight"].T + q["linear_0.bias"])
        h = jnp.where(keep, h / (1 - RATE), 0.0)
        return jnp.mean((h @ q["linear_1.weight"].T + q["linear_1.bias"] - y) ** 2)

    trainable = {k: jnp.asarray(v) for k, v in params.items() if k != "dropout_0.key"}
    return jax.value_and_grad(loss)(trainable)


@pytest.mark.parametrize("target", ["llvm", "interp"])
def test_each_training_step_draws_a_new_dropout_mask_from_the_key(target, monkeypatch):
    monkeypatch.setenv("RELAYDSL_TARGET", target)
    model = relay.create_model(dropped, seed=3, sigma=0.5)
    assert model.state_names == ("dropout_0.key",)
    first = model.params["dropout_0.key"].copy()
    assert first.dtype == np.int64 and first[1] == 0
    step = relay.grad(model, dropped_loss)
    masks = []
    for i, (x, y) in enumerate(normed_batches(steps=3, n=8)):
        key = model.params["dropout_0.key"].copy()
        np.testing.assert_array_equal(key, [first[0], i])  # advanced once per step
        keep = dropout_mask(key, (8, 64))
        assert abs(keep.mean() - (1 - RATE)) < 0.07
        value, want = dropped_reference_grads(model.params, x, y, keep)
        grads = step(x, y)
        assert sorted(grads) == sorted(want)  # no gradient for the key
        np.testing.assert_allclose(step.last_loss, value, rtol=1e-5, atol=1e-6)
        for k in want:
            np.testing.assert_allclose(grads[k], want[k], rtol=1e-4, atol=1e-6)
        update_model_params(model, grads, lr=0.1)
        masks.append(keep)
    for a, b in [(0, 1), (1, 2), (0, 2)]:  # independent masks: they disagree often
        assert 0.25 < (masks[a] != masks[b]).mean() < 0.55


@relay_model
def looped_dropout(x: Tensor[Float, ("n", 3)]) -> Tensor[Float, ("n", 3)]:
    h = x
    for _ in range(3):
        h = relay.dropout(relay.tanh(relay.linear(h, num_hidden=3)), rate=RATE)
    return h


@relay
def looped_loss(x: Tensor[Float, ("n", 3)]) -> Float:
    return relay.sum(looped_dropout(x) ** 2.0)


@pytest.mark.parametrize("target", ["llvm", "interp"])
def test_a_dropout_layer_in_a_loop_draws_one_mask_per_step_and_its_key_advances_once(
        target, monkeypatch):
    """Variational dropout: each run of the layer in one step uses the step's mask, in the
    gradient and the update pass alike, and the step advances the key by one."""
    import jax
    import jax.numpy as jnp

    monkeypatch.setenv("RELAYDSL_TARGET", target)
    model = relay.create_model(looped_dropout, seed=5, sigma=0.8)
    k0 = model.params["dropout_0.key"][0]
    step = relay.grad(model, looped_loss)
    x = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    for i in range(2):
        np.testing.assert_array_equal(model.params["dropout_0.key"], [k0, i])
        keep = dropout_mask(model.params["dropout_0.key"], (4, 3))

        def loss(w, b, keep=keep):
            h = jnp.asarray(x)
            for _ in range(3):
                h = jnp.where(keep, jnp.tanh(h @ w.T + b) / (1 - RATE), 0.0)
            return jnp.sum(h ** 2)

        value, (gw, gb) = jax.value_and_grad(loss, argnums=(0, 1))(
            model.params["linear_0.weight"], model.params["linear_0.bias"])
        grads = step(x)
        np.testing.assert_allclose(step.last_loss, value, rtol=1e-5)
        np.testing.assert_allclose(grads["linear_0.weight"], gw, rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(grads["linear_0.bias"], gb, rtol=1e-4, atol=1e-6)
    np.testing.assert_array_equal(model.params["dropout_0.key"], [k0, 2])


def train_dropped(seed, steps=3):
    model = relay.create_model(dropped, seed=seed, sigma=0.5)
    step = relay.grad(model, dropped_loss)
    history = []
    for x, y in normed_batches(steps=steps, n=8):
        grads = step(x, y)
        history.append(grads["linear_0.weight"])
        update_model_params(model, grads, lr=0.1)
    return model, history


def test_the_same_seed_draws_the_same_masks_and_another_seed_others():
    a, history_a = train_dropped(seed=7)
    b, history_b = train_dropped(seed=7)
    for ga, gb in zip(history_a, history_b):
        np.testing.assert_array_equal(ga, gb)
    for k in a.params:
        np.testing.assert_array_equal(a.params[k], b.params[k])
    c = relay.create_model(dropped, seed=8, sigma=0.5)
    assert c.params["dropout_0.key"][0] != a.params["dropout_0.key"][0]


def test_the_key_is_saved_with_the_model_and_training_resumes_with_its_masks(tmp_path):
    model, _ = train_dropped(seed=2, steps=2)
    loaded = load_model(save_model(model, str(tmp_path / "m")), dropped)
    np.testing.assert_array_equal(loaded.params["dropout_0.key"], model.params["dropout_0.key"])
    x, y = normed_batches(steps=1, n=8, seed=4)[0]
    resumed, original = (relay.grad(m, dropped_loss, (x, y)) for m in (loaded, model))
    for name, g in resumed.items():
        np.testing.assert_array_equal(g, original[name])
    np.testing.assert_array_equal(loaded.params["dropout_0.key"], model.params["dropout_0.key"])


def test_at_inference_dropout_is_the_identity():
    model, _ = train_dropped(seed=1, steps=2)
    plain = relay.create_model(undropped, seed=1, sigma=0.5)
    assert plain.params.keys() == {k for k in model.params if k != "dropout_0.key"}
    plain.params.update({k: model.params[k] for k in plain.params})
    x = normed_batches(1, n=5, seed=9)[0][0]
    np.testing.assert_array_equal(model(x), plain(x))
    np.testing.assert_array_equal(relay.export_model(model)(x), plain(x))
    key = model.params["dropout_0.key"].copy()
    model(x)
    np.testing.assert_array_equal(model.params["dropout_0.key"], key)  # no step taken


def test_simplify_inference_removes_the_models_dropout():
    from relaydsl.ir.expr import Call, Op
    from relaydsl.ir.visitor import post_order
    from relaydsl.transform.simplify_inference import simplify_inference

    def op_names(mod):
        names = []
        post_order(mod[dropped.global_var], lambda e: names.append(e.op.name)
                   if isinstance(e, Call) and isinstance(e.op, Op) else None)
        return names

    assert "dropout" in op_names(dropped.mod)
    assert "dropout" not in op_names(simplify_inference(dropped.mod))


# ---- compressed members (issue 26, item 18) ----------------------------------------------------

def compressed(raw: bytes, method: int = zipfile.ZIP_DEFLATED) -> bytes:
    """The same archive with every member compressed, as np.savez_compressed writes them."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(raw)) as src, zipfile.ZipFile(out, "w", method) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info))
    return out.getvalue()


def test_a_file_with_deflated_members_loads(saved_model, tmp_path):
    raw, params = saved_model
    path = tmp_path / "deflated.npz"
    path.write_bytes(compressed(raw))
    loaded = load_model(path)
    for k in params:
        np.testing.assert_array_equal(loaded.params[k], params[k])
    # what np.savez_compressed itself writes, members named as save_model names them
    with zipfile.ZipFile(io.BytesIO(raw)) as z:
        arrays = {n[:-4]: np.load(io.BytesIO(z.read(n))) for n in z.namelist()}
    np.savez_compressed(tmp_path / "numpy.npz", **arrays)
    loaded = load_model(tmp_path / "numpy.npz")
    for k in params:
        np.testing.assert_array_equal(loaded.params[k], params[k])


def test_other_compression_methods_and_impossible_sizes_are_the_clear_error(saved_model,
                                                                            tmp_path):
    raw, _ = saved_model
    path = tmp_path / "bzip2.npz"
    path.write_bytes(compressed(raw, zipfile.ZIP_BZIP2))
    with pytest.raises(relay.ModelFileError, match=r"compressed with zip method 12 \(stored or "
                                                   r"deflated are read\)"):
        load_model(path)
    # a member claiming more than deflate can expand the file to (a zip bomb's header)
    data = bytearray(compressed(raw))
    central = data.rfind(b"PK\1\2")  # the last member's central directory entry
    data[central + 24:central + 28] = (2**32 - 1).to_bytes(4, "little")  # its file size
    path.write_bytes(bytes(data))
    with pytest.raises(relay.ModelFileError, match="claims 4294967295 bytes"):
        load_model(path)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_byte_mutations_of_a_deflated_file_raise_only_the_clear_error(saved_model,
                                                                      tmp_path_factory, data):
    raw, params = saved_model
    damaged = bytearray(compressed(raw))
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(damaged) - 1))
        damaged[i] ^= 1 << data.draw(st.integers(0, 7))
    path = tmp_path_factory.mktemp("deflated") / "damaged.npz"
    path.write_bytes(bytes(damaged))
    assert_loads_exactly_or_is_the_clear_error(path, params)
