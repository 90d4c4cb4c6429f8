"""Sentiment of movie-review sentences with a binary TreeLSTM (Tai et al. 2015), in relaydsl.

The model (relaydsl.frontend.zoo.tree_lstm) reads a sentence's parse tree from the Stanford
Sentiment Treebank bottom-up: an ADT value whose leaves hold word indices, matched and
recursed on in decorated code, hidden 150 as in the paper, word vectors learned with the
model (no GloVe offline). It trains with relay.grad(model, loss, (tree,)) on one tree per
step, with Adam; as in the paper, the loss is the cross-entropy at every node of the tree
(SST labels every phrase: 5 classes, very negative to very positive). It reports the root
accuracy on the dev trees after each epoch; always predicting the most frequent dev class
scores 26.2%.

With the default settings (one epoch over the 8,544 training trees, hidden 150, word vectors
of 100) it reaches 43.8% dev root accuracy (measured: 6 minutes, 42 ms a training step on a
busy 2-core machine); the paper's TreeLSTM, with GloVe vectors and more epochs, reaches 51%.
--quick trains on 200 trees and evaluates 100 dev trees (under a minute).
"""
import argparse
import sys
import time
from pathlib import Path

import numpy as np

from relaydsl import relay
from relaydsl.frontend.zoo.tree_lstm import to_adt, tree_lstm

SHARED_SST = Path(__file__).resolve().parents[2] / "shared" / "data" / "sst"


def accuracy(model, net, trees, labels) -> float:
    """The fraction of `trees` whose root class the model predicts."""
    hits = sum(int(model.apply(net.predict, t)[0]) == y for t, y in zip(trees, labels))
    return hits / len(trees)


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="train on 200 trees, evaluate on 100 dev trees")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--hidden", type=int, default=150)
    parser.add_argument("--dim", type=int, default=100, help="the word vectors' size")
    parser.add_argument("--lr", type=float, default=0.002)
    parser.add_argument("--data", default=None, help="the directory of train.txt, dev.txt, "
                                                     "test.txt")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    from relaydsl.datasets import DatasetError, sst
    from relaydsl.datasets.sst import vocabulary
    try:
        train, dev = (sst(split, args.data, fallbacks=[SHARED_SST]) for split in ("train", "dev"))
    except DatasetError as e:
        sys.exit(f"tree_lstm_sst.py: {e}")
    # Words seen once are left out, so the unknown word's vector learns from them too.
    vocab = vocabulary(train, min_count=2)
    if args.quick:
        train, dev = train[:200], dev[:100]
    train_trees = [to_adt(t, vocab) for t in train]
    nodes = [2 * len(t.words()) - 1 for t in train]  # binary trees
    dev_trees, dev_labels = [to_adt(t, vocab) for t in dev], [t.label for t in dev]
    print(f"{len(train)} training trees, {len(dev)} dev trees, {len(vocab)} words")

    net = tree_lstm(len(vocab), hidden=args.hidden, dim=args.dim)
    model = relay.create_model(net.model, seed=args.seed, init="glorot")
    step = relay.grad(model, net.loss)
    optimizer = relay.Adam(lr=args.lr)
    rng = np.random.default_rng(args.seed)
    result = accuracy(model, net, dev_trees, dev_labels)
    print(f"before training: dev root accuracy {result:.1%}")
    for epoch in range(1, args.epochs + 1):
        start, running = time.perf_counter(), []
        every = max(1, len(train_trees) // 10)
        for s, i in enumerate(rng.permutation(len(train_trees)), start=1):
            grads = step(train_trees[i])
            relay.update_model_params(model, grads, optimizer=optimizer)
            running.append(float(step.last_loss) / nodes[i])
            if s % every == 0:
                print(f"  {s} trees: mean loss {np.mean(running[-every:]):.3f} a node "
                      f"({(time.perf_counter() - start) / s * 1e3:.1f} ms a tree)")
        result = accuracy(model, net, dev_trees, dev_labels)
        print(f"epoch {epoch}: {time.perf_counter() - start:.1f} s, "
              f"dev root accuracy {result:.1%}")
    return result


if __name__ == "__main__":
    main()
