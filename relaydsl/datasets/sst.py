"""The Stanford Sentiment Treebank (Socher et al., EMNLP 2013), PTB-format trees.

One tree a line, a label from 0 (very negative) to 4 (very positive) on every node:
``(3 (2 The) (4 (3 lovely) (2 film)))``. SST trees are binary, so a tree here is a `Leaf`
(label, word) or a `Node` (label, left, right), both immutable. The files are the standard
split, ``train.txt`` (8,544 trees), ``dev.txt`` (1,101) and ``test.txt`` (2,210), looked for
as `relaydsl.datasets.files` describes (folder name ``sst``) and checked against their SHA-256.

>>> trees = sst("dev")                                 # doctest: +SKIP
>>> len(trees), trees[0].label, " ".join(trees[0].words()[:4])   # doctest: +SKIP
(1101, 3, "It 's a lovely")
"""
from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from relaydsl.datasets.files import DatasetError, find_directory

# The published files (trainDevTestTrees_PTB/trees/) and their SHA-256.
SHA256 = {
    "train.txt": "e2f3f41b0b1e6d4dddc0effe3bfc2d27ed8928079aa9a03d652311614fc5feb7",
    "dev.txt": "0e9336aed6e4730e19f58d00a77b3f0297efdb755f7b5e598c98a05e3f97ea40",
    "test.txt": "6e54806dee95cf80cd918e7dfb3f6770f6df24bf826f289a4d1f709e1c8f6761",
}
SPLITS = ("train", "dev", "test")
NUM_CLASSES = 5


@dataclass(frozen=True, slots=True)
class Leaf:
    """A word and its sentiment label."""

    label: int
    word: str

    def words(self) -> list[str]:
        return [self.word]


@dataclass(frozen=True, slots=True)
class Node:
    """A phrase: its sentiment label and its two halves."""

    label: int
    left: Tree
    right: Tree

    def words(self) -> list[str]:
        """The phrase's words, left to right."""
        return [leaf.word for leaf in leaves(self)]


Tree = Leaf | Node


def leaves(tree: Tree) -> Iterator[Leaf]:
    """The tree's leaves, left to right (without recursion: any depth)."""
    stack = [tree]
    while stack:
        t = stack.pop()
        if isinstance(t, Leaf):
            yield t
        else:
            stack += (t.right, t.left)


_TOKEN = re.compile(r"\(|\)|[^\s()]+")


def parse_tree(text: str, where: str = "<string>") -> Tree:
    """The tree `text` writes; a DatasetError at `where`:column for anything else."""
    tokens = [(m.group(), m.start() + 1) for m in _TOKEN.finditer(text)]
    pos = 0

    def fail(message: str) -> DatasetError:
        column = tokens[pos][1] if pos < len(tokens) else len(text.rstrip()) + 1
        return DatasetError(f"{where}:{column}: {message}")

    def expect(token: str) -> None:
        nonlocal pos
        if pos >= len(tokens) or tokens[pos][0] != token:
            found = repr(tokens[pos][0]) if pos < len(tokens) else "the end of the line"
            raise fail(f"expected {token!r}, found {found}")
        pos += 1

    def tree() -> Tree:
        nonlocal pos
        expect("(")
        if pos >= len(tokens) or not tokens[pos][0].isdigit() or \
                int(tokens[pos][0]) >= NUM_CLASSES:
            raise fail(f"expected a label from 0 to {NUM_CLASSES - 1}")
        label = int(tokens[pos][0])
        pos += 1
        if pos < len(tokens) and tokens[pos][0] not in "()":
            # A word runs to the ")": a few hold a space (the film title "8 1\/2").
            first = pos
            while pos < len(tokens) and tokens[pos][0] not in "()":
                pos += 1
            word = " ".join(token for token, _ in tokens[first:pos])
            expect(")")
            return Leaf(label, word)
        left = tree()
        if pos < len(tokens) and tokens[pos][0] == ")":
            raise fail("expected a second subtree: SST trees are binary")
        right = tree()
        expect(")")
        return Node(label, left, right)

    result = tree()
    if pos != len(tokens):
        raise fail("text after the end of the tree")
    return result


def read_trees(path: str | Path) -> list[Tree]:
    """The trees of a PTB-format file, one a line; a malformed line is a DatasetError
    naming the file, line and column."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise DatasetError(f"cannot read {path}: {e}") from None
    return [parse_tree(line, f"{path}:{n}")
            for n, line in enumerate(text.splitlines(), start=1) if line.strip()]


def sst(split: str, path: str | Path | None = None, *,
        fallbacks: Sequence[str | Path] = ()) -> list[Tree]:
    """The trees of one split ("train", "dev" or "test"). All three files are checked, so a
    damaged copy is found whichever split is read first."""
    if split not in SPLITS:
        raise ValueError(f"SST has the splits {', '.join(SPLITS)}, not {split!r}")
    directory = find_directory("The Stanford Sentiment Treebank", "sst", SHA256, path,
                               fallbacks)
    return read_trees(directory / f"{split}.txt")


@dataclass(frozen=True)
class Vocabulary:
    """Words and their indices; index 0 stands for every word not in the vocabulary."""

    UNKNOWN: ClassVar[str] = "<unk>"
    words: tuple[str, ...]
    _index: dict[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_index", {w: i for i, w in enumerate(self.words)})

    def __len__(self) -> int:
        return len(self.words)

    def __getitem__(self, word: str) -> int:
        return self._index.get(word, 0)

    def __contains__(self, word: str) -> bool:
        return word in self._index


def vocabulary(trees: Iterable[Tree], min_count: int = 1) -> Vocabulary:
    """The words occurring at least `min_count` times in `trees`, most frequent first (ties
    in first-seen order), after `Vocabulary.UNKNOWN` at index 0."""
    counts = Counter(leaf.word for t in trees for leaf in leaves(t))
    kept = [w for w, n in counts.most_common() if n >= min_count]
    return Vocabulary((Vocabulary.UNKNOWN, *kept))
