"""A binary constituency TreeLSTM (Tai, Socher and Manning, ACL 2015: the N-ary TreeLSTM with
N = 2) classifying the sentiment of Stanford Sentiment Treebank sentences (5 classes).

A sentence is a `ParseTree`: a leaf holds a word's index in a vocabulary, a node its two
halves. Each leaf's input vector comes from an embedding layer learned with the model: no
pretrained vectors (the paper's GloVe) are available offline, and a leaf holding an index
keeps the tree a program receives small (the table is a parameter, not part of every tree).
The cell at a leaf, from its word vector x::

    i, o, u = split(W x + b);   c = σ(i)·tanh(u);   h = σ(o)·tanh(c)

and at a node, from its children's states (h_l, c_l) and (h_r, c_r), the N-ary equations
(one forget gate per child)::

    i, f_l, f_r, o, u = split(U [h_l; h_r] + b)
    c = σ(i)·tanh(u) + σ(f_l)·c_l + σ(f_r)·c_r;   h = σ(o)·tanh(c)

The root's h goes through a linear layer to the 5 class scores; the loss is the softmax
cross-entropy at the root (the paper also supervises every phrase).

>>> from relaydsl.datasets.sst import parse_tree, vocabulary
>>> sentence = parse_tree("(3 (2 a) (4 (3 lovely) (2 film)))")
>>> vocab = vocabulary([sentence])
>>> net = tree_lstm(len(vocab), hidden=4, dim=3)
>>> model = relay.create_model(net.model, seed=0, init="glorot")
>>> model(to_adt(sentence, vocab)).shape
(1, 5)
"""

from typing import NamedTuple

import numpy as np

from relaydsl import Float, Int, Tensor, relay, relay_model
from relaydsl.backend.interpreter import ConstructorValue
from relaydsl.datasets.sst import NUM_CLASSES, Leaf, Node, Tree, Vocabulary
from relaydsl.frontend.decorators import RelayFunction

CLASSES = NUM_CLASSES


@relay.adt
class ParseTree:
    """A binary tree of word indices."""

    Leaf: Tensor[Int, (1,)]
    Node: ("ParseTree", "ParseTree")


class TreeLSTM(NamedTuple):
    """The decorated functions of one TreeLSTM."""

    model: RelayFunction  # tree -> the root's class scores, (1, 5)
    loss: RelayFunction  # (tree, one-hot label (1, 5)) -> softmax cross-entropy
    predict: RelayFunction  # tree -> the root's class, (1,) int32


def tree_lstm(vocab: int, hidden: int = 150, dim: int = 100) -> TreeLSTM:
    """A TreeLSTM over trees of indices below `vocab`, with `hidden` units (the paper's 150)
    and word vectors of `dim` (learned)."""

    @relay_model
    def tree_lstm(tree: ParseTree) -> Tensor[Float, (1, CLASSES)]:
        def cell(t: ParseTree) -> tuple[Tensor[Float, (1, hidden)], Tensor[Float, (1, hidden)]]:
            match t:
                case ParseTree.Leaf(word):
                    x = relay.embedding(word, vocab=vocab, dim=dim)
                    i, o, u = relay.split(relay.linear(x, num_hidden=3 * hidden), 3, axis=1)
                    c = relay.sigmoid(i) * relay.tanh(u)
                    return relay.sigmoid(o) * relay.tanh(c), c
                case ParseTree.Node(left, right):
                    h_l, c_l = cell(left)
                    h_r, c_r = cell(right)
                    gates = relay.linear(relay.concatenate((h_l, h_r), axis=1),
                                         num_hidden=5 * hidden)
                    i, f_l, f_r, o, u = relay.split(gates, 5, axis=1)
                    c = (relay.sigmoid(i) * relay.tanh(u) + relay.sigmoid(f_l) * c_l
                         + relay.sigmoid(f_r) * c_r)
                    return relay.sigmoid(o) * relay.tanh(c), c

        h, _ = cell(tree)
        return relay.linear(h, num_hidden=CLASSES)

    @relay
    def loss(tree: ParseTree, label: Tensor[Float, (1, CLASSES)]) -> Float:
        return relay.softmax_cross_entropy(tree_lstm(tree), label)

    @relay
    def predict(tree: ParseTree) -> Tensor[Int, (1,)]:
        return relay.argmax(tree_lstm(tree), axis=1)

    return TreeLSTM(tree_lstm, loss, predict)


def to_adt(tree: Tree, vocab: Vocabulary) -> ConstructorValue:
    """`tree` as a `ParseTree`, each word its index in `vocab` (0 when unknown)."""
    match tree:
        case Leaf(word=word):
            return ParseTree.Leaf(np.array([vocab[word]], np.int32))
        case Node(left=left, right=right):
            return ParseTree.Node(to_adt(left, vocab), to_adt(right, vocab))
    raise TypeError(f"not an SST tree: {tree!r}")


def one_hot_label(tree: Tree) -> np.ndarray:
    """The root's label as the (1, 5) one-hot row `loss` takes."""
    return np.eye(CLASSES, dtype=np.float32)[[tree.label]]
