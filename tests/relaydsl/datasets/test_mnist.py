"""The IDX reader, on files the test writes and on the real MNIST when it is present."""
import gzip
import hashlib
from pathlib import Path

import numpy as np
import pytest

from relaydsl.datasets import mnist, read_idx
from relaydsl.datasets.mnist import FILES, DatasetError

SHARED_MNIST = Path(__file__).resolve().parents[4] / "shared" / "data" / "mnist"


def write_idx(path: Path, array: np.ndarray, type_code: int, gz: bool) -> None:
    header = bytes([0, 0, type_code, array.ndim]) + b"".join(
        d.to_bytes(4, "big") for d in array.shape)
    data = header + array.astype(array.dtype.newbyteorder(">")).tobytes()
    (gzip.open if gz else open)(path, "wb").write(data)


def make_mnist(directory: Path, n_train=5, n_test=3, gz=True, seed=0):
    rng = np.random.default_rng(seed)
    arrays = {
        "train_images": rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
        "train_labels": rng.integers(0, 10, n_train, dtype=np.uint8),
        "test_images": rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
        "test_labels": rng.integers(0, 10, n_test, dtype=np.uint8),
    }
    for key, stem in FILES.items():
        write_idx(directory / (stem + (".gz" if gz else "")), arrays[key], 0x08, gz)
    return arrays


@pytest.mark.parametrize("gz", [True, False])
def test_reads_generated_idx_files(tmp_path, gz):
    arrays = make_mnist(tmp_path, gz=gz)
    (tx, ty), (vx, vy) = mnist(tmp_path)
    assert tx.shape == (5, 1, 28, 28) and tx.dtype == np.float32
    np.testing.assert_allclose(tx[:, 0], arrays["train_images"] / 255.0)
    np.testing.assert_array_equal(ty, arrays["train_labels"]) and ty.dtype == np.int32
    np.testing.assert_array_equal(vy, arrays["test_labels"])
    assert vx.shape == (3, 1, 28, 28)


def test_other_idx_types_round_trip(tmp_path):
    a = np.arange(24, dtype=np.int32).reshape(2, 3, 4) - 7
    write_idx(tmp_path / "a.idx", a, 0x0C, gz=False)
    np.testing.assert_array_equal(read_idx(tmp_path / "a.idx"), a)
    f = np.linspace(-1, 1, 6).astype(np.float32)
    write_idx(tmp_path / "f.idx.gz", f, 0x0D, gz=True)
    np.testing.assert_array_equal(read_idx(tmp_path / "f.idx.gz"), f)


def test_environment_variable_and_mnist_subfolder(tmp_path, monkeypatch):
    (tmp_path / "mnist").mkdir()
    make_mnist(tmp_path / "mnist")
    monkeypatch.setenv("RELAYDSL_DATA", str(tmp_path))
    (tx, _), _ = mnist()
    assert tx.shape[0] == 5


def test_missing_files_say_where_to_put_them(tmp_path, monkeypatch):
    monkeypatch.delenv("RELAYDSL_DATA", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(DatasetError, match=r"(?s)train-images-idx3-ubyte\[\.gz\].*RELAYDSL_DATA"
                                           r".*~/.cache/relaydsl/mnist"):
        mnist(tmp_path / "nowhere")


def test_the_error_lists_every_place_searched_and_how_to_download(tmp_path, monkeypatch):
    (tmp_path / "data").mkdir()
    monkeypatch.setenv("RELAYDSL_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    with pytest.raises(DatasetError) as info:
        mnist(fallbacks=[tmp_path / "shared"])
    message = str(info.value)
    for place in (tmp_path / "data", tmp_path / "data" / "mnist",
                  tmp_path / "home" / ".cache" / "relaydsl" / "mnist", tmp_path / "shared"):
        assert f"\n  {place}\n" in message, message
    assert "https://storage.googleapis.com/cvdf-datasets/mnist/" in message
    assert "curl -fO https://storage.googleapis.com/cvdf-datasets/mnist/$f.gz" in message
    (tmp_path / "shared").mkdir()
    make_mnist(tmp_path / "shared")  # a fallback is searched after the usual places
    (tx, _), _ = mnist(fallbacks=[tmp_path / "shared"])
    assert tx.shape == (5, 1, 28, 28)


def test_wrong_magic_and_truncated_files_are_clear_errors(tmp_path):
    bad = tmp_path / "bad.idx"
    bad.write_bytes(b"\x12\x34\x08\x01" + b"\x00" * 8)
    with pytest.raises(DatasetError, match="not an IDX file"):
        read_idx(bad)
    good = np.arange(10, dtype=np.uint8)
    write_idx(tmp_path / "t.idx", good, 0x08, gz=False)
    data = (tmp_path / "t.idx").read_bytes()
    (tmp_path / "t.idx").write_bytes(data[:-3])
    with pytest.raises(DatasetError, match="truncated"):
        read_idx(tmp_path / "t.idx")
    (tmp_path / "t.idx.gz").write_bytes(gzip.compress(data)[:-10])
    with pytest.raises(DatasetError, match="cannot read"):
        read_idx(tmp_path / "t.idx.gz")


def test_mismatched_image_and_label_counts(tmp_path):
    make_mnist(tmp_path)
    write_idx(tmp_path / (FILES["train_labels"] + ".gz"), np.zeros(4, np.uint8), 0x08, gz=True)
    with pytest.raises(DatasetError, match="5 images but 4 labels"):
        mnist(tmp_path)


@pytest.mark.skipif(not SHARED_MNIST.is_dir(), reason="the shared MNIST copy is not present")
def test_the_real_mnist():
    digest = hashlib.sha256((SHARED_MNIST / "t10k-labels-idx1-ubyte.gz").read_bytes()).hexdigest()
    assert digest == "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6"
    (tx, ty), (vx, vy) = mnist(SHARED_MNIST)
    assert tx.shape == (60000, 1, 28, 28) and vx.shape == (10000, 1, 28, 28)
    assert ty[:5].tolist() == [5, 0, 4, 1, 9] and vy[:5].tolist() == [7, 2, 1, 0, 4]
    assert np.bincount(ty).tolist()[:3] == [5923, 6742, 5958]  # the published class counts
    assert tx.min() >= 0.0 and tx.max() == 1.0
