"""MNIST from the original IDX files (LeCun et al.), gzipped or not.

The four files are looked for in the directory given as `path`, else in
``$RELAYDSL_DATA`` (a directory holding them, or holding an ``mnist/`` folder),
else in ``~/.cache/relaydsl/mnist``.

>>> (train_x, train_y), (test_x, test_y) = mnist()   # doctest: +SKIP
>>> train_x.shape, train_x.dtype, train_y[:3]         # doctest: +SKIP
((60000, 1, 28, 28), dtype('float32'), array([5, 0, 4], dtype=int32))
"""
from __future__ import annotations

import gzip
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from relaydsl.datasets.files import DatasetError, candidates

FILES = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}
_IDX_DTYPES = {0x08: np.uint8, 0x09: np.int8, 0x0B: np.dtype(">i2"), 0x0C: np.dtype(">i4"),
               0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8")}


def read_idx(path: str | Path) -> np.ndarray:
    """Read one IDX file (optionally gzipped): magic 0x0000TTNN, then NN big-endian dims, data."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rb") as f:
            raw = f.read()
    except (OSError, EOFError) as e:
        raise DatasetError(f"cannot read {path}: {e}") from None
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in _IDX_DTYPES:
        raise DatasetError(f"{path} is not an IDX file (bad magic number {raw[:4].hex()})")
    dtype, ndim = np.dtype(_IDX_DTYPES[raw[2]]), raw[3]
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DatasetError(f"{path} is truncated: its header needs {header} bytes")
    shape = tuple(int.from_bytes(raw[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    expected = header + int(np.prod(shape)) * dtype.itemsize
    if len(raw) != expected:
        raise DatasetError(f"{path} is truncated or padded: {len(raw)} bytes, its header "
                           f"{shape} needs {expected}")
    return np.frombuffer(raw, dtype, offset=header).reshape(shape).astype(dtype.newbyteorder("="))


# Where the four files can be fetched (the original site is often unavailable: this mirror
# holds the same gzipped files), and a command that puts them where mnist() looks.
DOWNLOAD_URL = "https://storage.googleapis.com/cvdf-datasets/mnist/"
DOWNLOAD_COMMAND = (
    "mkdir -p ~/.cache/relaydsl/mnist && cd ~/.cache/relaydsl/mnist && for f in "
    + " ".join(FILES.values()) + f"; do curl -fO {DOWNLOAD_URL}$f.gz; done")


def _find(directory: Path, stem: str) -> Path | None:
    for name in (stem, stem + ".gz"):
        if (directory / name).is_file():
            return directory / name
    return None


def mnist(path: str | Path | None = None, *, fallbacks: Sequence[str | Path] = ()
          ) -> tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """((train_images, train_labels), (test_images, test_labels)).

    Images are float32 in [0, 1] with shape (N, 1, 28, 28); labels are int32. Without `path`,
    the directories of the module docstring are searched, then `fallbacks` (a program's own
    places). When no directory holds the four files, the DatasetError lists every directory
    searched and how to download MNIST.
    """
    tried = candidates("mnist", path, fallbacks)
    for directory in tried:
        found = {k: _find(directory, stem) for k, stem in FILES.items()}
        if all(found.values()):
            images = {k: read_idx(found[k]) for k in ("train_images", "test_images")}
            labels = {k: read_idx(found[k]) for k in ("train_labels", "test_labels")}
            for split in ("train", "test"):
                n_img, n_lab = len(images[f"{split}_images"]), len(labels[f"{split}_labels"])
                if n_img != n_lab:
                    raise DatasetError(f"MNIST {split}: {n_img} images but {n_lab} labels in "
                                       f"{directory}")
            return tuple(  # type: ignore[return-value]
                (images[f"{s}_images"].astype(np.float32)[:, None] / 255.0,
                 labels[f"{s}_labels"].astype(np.int32))
                for s in ("train", "test"))
    names = ", ".join(f"{stem}[.gz]" for stem in FILES.values())
    where = "\n  ".join(str(d) for d in tried)
    raise DatasetError(
        f"MNIST not found. Looked for the four files ({names}) in:\n  {where}\n"
        f"Put them in one of these directories, or in a directory passed as mnist(path) or "
        f"named by RELAYDSL_DATA. They can be downloaded from {DOWNLOAD_URL}, e.g.:\n"
        f"  {DOWNLOAD_COMMAND}")
