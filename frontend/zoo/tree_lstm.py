"""A binary constituency TreeLSTM (Tai, Socher and Manning, ACL 2015: the N-ary TreeLSTM with
N = 2) classifying the sentiment of Stanford Sentiment Treebank phrases (5 classes).

A sentence is a `ParseTree`: a leaf holds a word's index in a vocabulary, a node its two
halves, and each holds its phrase's label (one-hot; SST labels every node). Each leaf's input
vector comes from an embedding layer learned with the model: no pretrained vectors (the
paper's GloVe) are available offline, and a leaf holding an index keeps the tree a program
receives small (the table is a parameter, not part of every tree). The cell at a leaf, from
its word vector x::

    i, o, u = split(W x + b);   c = σ(i)·tanh(u);   h = σ(o)·tanh(c)

and at a node, from its children's states (h_l, c_l) and (h_r, c_r), the N-ary equations
(one forget gate per child)::

    i, f_l, f_r, o, u = split(U [h_l; h_r] + b)
    c = σ(i)·tanh(u) + σ(f_l)·c_l + σ(f_r)·c_r;   h = σ(o)·tanh(c)

One linear layer classifies every node's h. As in the paper, the loss is the sum over the
nodes of the softmax cross-entropy against their labels (every phrase supervises the
model); the prediction is the root's class.

>>> from relaydsl.datasets.sst import parse_tree, vocabulary
>>> sentence = parse_tree("(3 (2 a) (4 (3 lovely) (2 film)))")
>>> vocab = vocabulary([sentence])
>>> net = tree_lstm(len(vocab), hidden=4, dim=3)
>>> model = relay.create_model(net.model, seed=0, init="glorot")
>>> scores, loss = model(to_adt(sentence, vocab))
>>> scores.shape, bool(loss > 0)
((1, 5), True)
"""

from typing import NamedTuple

import numpy as np

from relaydsl import Float, Int, Tensor, relay, relay_model
from relaydsl.backend.interpreter import ConstructorValue
from relaydsl.datasets.sst import NUM_CLASSES, Leaf, Node, Tree, Vocabulary
from relaydsl.frontend.function import RelayFunction

CLASSES = NUM_CLASSES
_ONE_HOT = np.eye(CLASSES, dtype=np.float32)


@relay.adt
class ParseTree:
    """A binary tree of word indices, with a one-hot sentiment label at every node."""

    Leaf: (Tensor[Int, (1,)], Tensor[Float, (1, CLASSES)])
    Node: ("ParseTree", "ParseTree", Tensor[Float, (1, CLASSES)])


class TreeLSTM(NamedTuple):
    """The decorated functions of one TreeLSTM."""

    model: RelayFunction  # tree -> (the root's class scores (1, 5), the loss at every node)
    loss: RelayFunction  # tree -> the sum of the nodes' softmax cross-entropies
    predict: RelayFunction  # tree -> the root's class, (1,) int32


def tree_lstm(vocab: int, hidden: int = 150, dim: int = 100) -> TreeLSTM:
    """A TreeLSTM over trees of indices below `vocab`, with `hidden` units (the paper's 150)
    and word vectors of `dim` (learned)."""

    @relay_model
    def tree_lstm(tree: ParseTree) -> tuple[Tensor[Float, (1, CLASSES)], Float]:
        def classify(h: Tensor[Float, (1, hidden)]) -> Tensor[Float, (1, CLASSES)]:
            return relay.linear(h, num_hidden=CLASSES)  # one classifier for every node

        def cell(t: ParseTree) -> tuple[Tensor[Float, (1, hidden)], Tensor[Float, (1, hidden)],
                                        Float]:
            """The node's state (h, c) and the loss of its subtree."""
            match t:
                case ParseTree.Leaf(word, label):
                    x = relay.embedding(word, vocab=vocab, dim=dim)
                    i, o, u = relay.split(relay.linear(x, num_hidden=3 * hidden), 3, axis=1)
                    c = relay.sigmoid(i) * relay.tanh(u)
                    h = relay.sigmoid(o) * relay.tanh(c)
                    return h, c, relay.softmax_cross_entropy(classify(h), label)
                case ParseTree.Node(left, right, label):
                    h_l, c_l, loss_l = cell(left)
                    h_r, c_r, loss_r = cell(right)
                    gates = relay.linear(relay.concatenate((h_l, h_r), axis=1),
                                         num_hidden=5 * hidden)
                    i, f_l, f_r, o, u = relay.split(gates, 5, axis=1)
                    c = (relay.sigmoid(i) * relay.tanh(u) + relay.sigmoid(f_l) * c_l
                         + relay.sigmoid(f_r) * c_r)
                    h = relay.sigmoid(o) * relay.tanh(c)
                    loss = relay.softmax_cross_entropy(classify(h), label)
                    return h, c, loss_l + loss_r + loss

        h, _, loss = cell(tree)
        return classify(h), loss

    @relay
    def loss(tree: ParseTree) -> Float:
        _, node_losses = tree_lstm(tree)
        return node_losses

    @relay
    def predict(tree: ParseTree) -> Tensor[Int, (1,)]:
        scores, _ = tree_lstm(tree)
        return relay.argmax(scores, axis=1)

    return TreeLSTM(tree_lstm, loss, predict)


def to_adt(tree: Tree, vocab: Vocabulary) -> ConstructorValue:
    """`tree` as a `ParseTree`: each word its index in `vocab` (0 when unknown), each label
    one-hot."""
    label = _ONE_HOT[[tree.label]]
    match tree:
        case Leaf(word=word):
            return ParseTree.Leaf(np.array([vocab[word]], np.int32), label)
        case Node(left=left, right=right):
            return ParseTree.Node(to_adt(left, vocab), to_adt(right, vocab), label)
    raise TypeError(f"not an SST tree: {tree!r}")
