"""The names corpus: ASCII as the PyTorch tutorial makes it, the real corpus's counts, and
the checksums on damaged copies."""
import shutil
from collections import Counter

import numpy as np
import pytest

from relaydsl.datasets import DatasetError, names
from relaydsl.datasets.names import (
    ALPHABET, END, LANGUAGES, NUM_CHARS, decode, encode, unicode_to_ascii,
)

from tests.relaydsl.datasets.shared_data import SHARED_DATA

SHARED_NAMES = SHARED_DATA / "names" if SHARED_DATA else None
needs_names = pytest.mark.skipif(SHARED_NAMES is None or not SHARED_NAMES.is_dir(),
                                 reason="the shared names copy is not present")


def test_ascii_as_the_tutorial_makes_it():
    assert unicode_to_ascii("Ślusàrski") == "Slusarski"  # the tutorial's own example
    assert unicode_to_ascii("Müller-Lüdenscheidt") == "Muller-Ludenscheidt"
    assert unicode_to_ascii("O'Néal\u00a0ß") == "O'Neal"  # no-break space, ß: not letters here
    assert len(ALPHABET) == 58 and NUM_CHARS == 59 and END == 58


def test_encode_and_decode():
    indices = encode("Abe")
    assert indices.dtype == np.int32 and indices.tolist() == [26, 1, 4]
    assert decode([*indices, END, 0]) == "Abe"  # up to the end marker
    with pytest.raises(ValueError, match="'é' in 'Zoé' is not in the alphabet"):
        encode("Zoé")


@needs_names
def test_the_real_corpus():
    pairs = names(SHARED_NAMES)
    assert len(pairs) == 20074
    per_language = Counter(language for _, language in pairs)
    assert set(per_language) == set(LANGUAGES) and len(LANGUAGES) == 18
    assert per_language["Russian"] == 9408 and per_language["English"] == 3668
    assert per_language["Vietnamese"] == 73
    assert pairs[0] == ("Khoury", "Arabic")
    assert all(all(c in ALPHABET for c in name) for name, _ in pairs)
    assert ("Slusarski", "Polish") in pairs


@needs_names
@pytest.mark.parametrize("damage", ["truncated", "missing"])
def test_a_damaged_copy_is_an_error_naming_the_file(tmp_path, damage):
    copy = tmp_path / "names"
    shutil.copytree(SHARED_NAMES, copy)
    korean = copy / "Korean.txt"
    if damage == "truncated":
        korean.write_bytes(korean.read_bytes()[:-7])
        expected = f"{korean} is corrupted"
    else:
        korean.unlink()
        expected = f"{copy} lacks Korean.txt"
    with pytest.raises(DatasetError, match=expected):
        names(copy)


def test_nowhere_to_be_found(tmp_path, monkeypatch):
    monkeypatch.delenv("RELAYDSL_DATA", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(DatasetError, match=r"(?s)names corpus not found.*Arabic.txt.*"
                                           r"\.cache/relaydsl/names.*RELAYDSL_DATA"):
        names(fallbacks=[tmp_path / "elsewhere"])
