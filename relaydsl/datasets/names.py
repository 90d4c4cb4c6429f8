"""The names corpus of the PyTorch char-RNN tutorials (Sean Robertson): 20,074 surnames in 18
languages, one UTF-8 file per language (``Arabic.txt`` … ``Vietnamese.txt``), looked for as
`relaydsl.datasets.files` describes (folder name ``names``) and checked against their SHA-256.

As in the tutorial, a name is turned into ASCII (accents dropped: "Ślusarski" is
"Slusarski") over `ALPHABET`; a character-level model predicts one of `ALPHABET` or
`END` (index ``len(ALPHABET)``), the end-of-name marker, so it has `NUM_CHARS` outputs.

>>> pairs = names()                      # doctest: +SKIP
>>> len(pairs), pairs[0], LANGUAGES[:3]  # doctest: +SKIP
(20074, ('Khoury', 'Arabic'), ('Arabic', 'Chinese', 'Czech'))
"""
from __future__ import annotations

import string
import unicodedata
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from relaydsl.datasets.files import DatasetError, find_directory

# The tutorial-era files (spro/practical-pytorch data/names, 2017) and their SHA-256.
SHA256 = {
    "Arabic.txt": "6f424a8dbe51cbbbabab7a57d38b617210125e4e3991f3c657cb79b8f104bafc",
    "Chinese.txt": "49263ef55a8cb1740e841d65cad8214b2f9b5b869bc534c811746422496fa91e",
    "Czech.txt": "145bbbd6d0816578f03388e92c264d39ef1c60df920b081d371fa5c5cc055a8e",
    "Dutch.txt": "924f32b635170eae561f84538632138fc07d4c8bbd70ba3fb980de1ecc4d2af3",
    "English.txt": "9cca037066d3d5989e24bc01801416162de506b5e28e15b7c092a47905d29bf2",
    "French.txt": "81e65b36c60ed5b89a17422f6edcadbb89546f38ad69e960e64e7ba682012a95",
    "German.txt": "7449cd590b97a733e18d613a4155decd77ec35dc5f8aadd7a82204dce4f051db",
    "Greek.txt": "3555b5186de7f401e6d991b088e9e644ca3099116477818c25ab5793801389e6",
    "Irish.txt": "cf8c7013256252a88d2503127b87282a11f21b2ff6db1bded68834c19a1ec058",
    "Italian.txt": "f88414c27d0606a11a678b4859277828c2565d6cc4d9ee932deef6e94f3b35e4",
    "Japanese.txt": "e0e717e114fec3e7eade4d9dabe0067c475f43147e36a22b47902ee76ad9e67f",
    "Korean.txt": "cd54221ccb362a6cba4c78828838cf3268a0e59744767a37cf6ec4b74036b136",
    "Polish.txt": "45bab898af2f60ed3a728bbf6980e28821011a7caa53227553b5785903a40826",
    "Portuguese.txt": "50a8735f41f4f73757c8ce5b16cb0275cd86b2b214bcbc8c9805f508cb131c53",
    "Russian.txt": "43b3e64ce351f77f1ac9e0cdf7566012d127f4371875fd25208845b5c9d6f7c3",
    "Scottish.txt": "78d0252711d87d948ea86fe34826c51d2d794a8e52d15b5d6f7b6244d45d62dd",
    "Spanish.txt": "1bcb462ed3316756a85781d68232bddae04498fdddd5d9219c53fd1fbdeba7a7",
    "Vietnamese.txt": "f3f9e4164ab47601178a6e45b216464a64122f49d05541f24bf18a757253281d",
}
LANGUAGES = tuple(f.removesuffix(".txt") for f in SHA256)
ALPHABET = string.ascii_letters + " .,;'-"  # the generation tutorial's letters
END = len(ALPHABET)  # the index of the end-of-name marker
NUM_CHARS = len(ALPHABET) + 1


def unicode_to_ascii(text: str) -> str:
    """`text` in `ALPHABET`: accents stripped (NFD, combining marks dropped), as the tutorial
    does, and any other character left out."""
    return "".join(c for c in unicodedata.normalize("NFD", text)
                   if unicodedata.category(c) != "Mn" and c in ALPHABET)


def names(path: str | Path | None = None, *, fallbacks: Sequence[str | Path] = ()
          ) -> list[tuple[str, str]]:
    """Every (name, language) pair, in ASCII, language by language in `LANGUAGES` order and
    in file order within one (duplicates kept, as the tutorial does)."""
    directory = find_directory("The names corpus", "names", SHA256, path, fallbacks)
    pairs = []
    for language in LANGUAGES:
        file = directory / f"{language}.txt"
        try:
            lines = file.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as e:
            raise DatasetError(f"cannot read {file}: {e}") from None
        pairs += [(unicode_to_ascii(line), language) for line in lines if line.strip()]
    return pairs


def encode(name: str) -> np.ndarray:
    """The indices of `name`'s characters in `ALPHABET` (int32); a ValueError naming a
    character outside it."""
    try:
        return np.array([ALPHABET.index(c) for c in name], np.int32)
    except ValueError:
        bad = next(c for c in name if c not in ALPHABET)
        raise ValueError(f"{bad!r} in {name!r} is not in the alphabet; pass the name through "
                         f"unicode_to_ascii first") from None


def decode(indices: Sequence[int] | np.ndarray) -> str:
    """The characters of `indices`, up to the first `END`."""
    out = []
    for i in indices:
        if int(i) == END:
            break
        out.append(ALPHABET[int(i)])
    return "".join(out)
