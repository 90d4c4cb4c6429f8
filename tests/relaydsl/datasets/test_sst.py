"""The SST reader: the parser on small trees, located errors on malformed lines, the checksums
on damaged copies, and the real treebank's counts (the published SST-5 statistics)."""
import re
import shutil
from collections import Counter

import pytest

from relaydsl.datasets import DatasetError, sst
from relaydsl.datasets.sst import Leaf, Node, leaves, parse_tree, read_trees, vocabulary

from tests.relaydsl.datasets.shared_data import SHARED_DATA

SHARED_SST = SHARED_DATA / "sst" if SHARED_DATA else None
needs_sst = pytest.mark.skipif(SHARED_SST is None or not SHARED_SST.is_dir(),
                               reason="the shared SST copy is not present")


def test_parses_a_binary_tree_with_a_label_at_every_node():
    tree = parse_tree("(3 (2 The) (4 (3 lovely) (2 film)))")
    assert tree == Node(3, Leaf(2, "The"), Node(4, Leaf(3, "lovely"), Leaf(2, "film")))
    assert tree.words() == ["The", "lovely", "film"]
    assert [leaf.label for leaf in leaves(tree)] == [2, 3, 2]
    with pytest.raises(AttributeError):
        tree.label = 0  # immutable
    assert parse_tree("(2 8 1\\/2)") == Leaf(2, "8 1\\/2")  # a word with a space in it


@pytest.mark.parametrize(("line", "column", "message"), [
    ("(3 (2 a) (2 b)", 15, "expected ')', found the end of the line"),
    ("(7 (2 a) (2 b))", 2, "expected a label from 0 to 4"),
    ("(3 (2 a))", 9, "expected a second subtree"),
    ("(3 (2 a) (2 b)) (1 c)", 17, "text after the end of the tree"),
    ("2 a)", 1, "expected '(', found '2'"),
])
def test_a_malformed_line_names_the_file_line_and_column(tmp_path, line, column, message):
    path = tmp_path / "bad.txt"
    path.write_text("(1 (2 fine) (0 tree))\n" + line + "\n")
    with pytest.raises(DatasetError, match="^" + re.escape(f"{path}:2:{column}: {message}")):
        read_trees(path)


def test_vocabulary_counts_words_and_maps_unknown_ones_to_zero():
    trees = [parse_tree("(2 (2 a) (2 (2 b) (2 a)))"), parse_tree("(1 (1 c) (2 a))")]
    vocab = vocabulary(trees)
    assert vocab.words == ("<unk>", "a", "b", "c") and len(vocab) == 4
    assert vocab["a"] == 1 and vocab["never seen"] == 0 and "b" in vocab
    assert vocabulary(trees, min_count=2).words == ("<unk>", "a")


@needs_sst
def test_the_real_treebank_has_the_standard_split():
    trees = {split: sst(split, SHARED_SST) for split in ("train", "dev", "test")}
    assert {split: len(t) for split, t in trees.items()} == {"train": 8544, "dev": 1101,
                                                              "test": 2210}
    roots = Counter(t.label for t in trees["dev"])
    assert roots == {0: 139, 1: 289, 2: 229, 3: 279, 4: 165}
    first = trees["dev"][0]
    assert first.label == 3 and first.words()[:4] == ["It", "'s", "a", "lovely"]


@needs_sst
def test_found_through_relaydsl_data_and_fallbacks(tmp_path, monkeypatch):
    monkeypatch.setenv("RELAYDSL_DATA", str(SHARED_DATA))  # holds an sst/ folder
    assert len(sst("dev")) == 1101
    monkeypatch.delenv("RELAYDSL_DATA")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert len(sst("dev", fallbacks=[SHARED_SST])) == 1101
    with pytest.raises(ValueError, match="not 'valid'"):
        sst("valid", SHARED_SST)


@needs_sst
@pytest.mark.parametrize("damage", ["truncated", "edited", "missing"])
def test_a_damaged_copy_is_an_error_naming_the_file(tmp_path, damage):
    copy = tmp_path / "sst"
    shutil.copytree(SHARED_SST, copy)
    dev = copy / "dev.txt"
    if damage == "truncated":
        dev.write_bytes(dev.read_bytes()[:1000])  # cut mid-tree: no parse is tried
        expected = f"{dev} is corrupted"
    elif damage == "edited":
        dev.write_text(dev.read_text().replace("(3 lovely)", "(4 lovely)", 1))
        expected = f"{dev} is corrupted"
    else:
        dev.unlink()
        expected = f"{copy} lacks dev.txt"
    with pytest.raises(DatasetError, match=expected):
        sst("train", copy)  # every file is checked, whichever split is read
