"""Figure 4 of the MAPL 2018 paper: LeNet trained on MNIST with relaydsl.

    python examples/lenet_mnist.py            # the full run: 60,000 training images per epoch
    python examples/lenet_mnist.py --quick    # a short run on a subset
    mpiexec -n 2 python examples/lenet_mnist.py --distributed --quick   # data-parallel, 2 ranks

MNIST is read from --data, $RELAYDSL_DATA, ~/.cache/relaydsl/mnist, or the project's
shared copy (../shared/data/mnist) when present. The model is the paper's, on mini-batches:
the images carry a leading batch dimension "n", so the same program trains on batches of 64
and evaluates on batches of 1,000.

At the end the model (and its optimiser's state) is saved to --out, reloaded from the file
and evaluated; with matplotlib installed (pip install -e ".[plots]") the training curve and
the confusion matrix are drawn into --out/lenet_mnist.png.

With --distributed, under `mpiexec -n N` (pip install -e ".[distributed]"), each of the N
ranks (relaydsl.distributed) takes its slice of every global batch of --batch images, the
ranks average their gradients, and every rank applies the same update: the same training as
one process at the same global batch and learning rate (PyTorch DDP's and Horovod's
convention), N times the compute. Rank 0 alone reports, plots and saves; the test set is
evaluated in slices whose confusion matrices are summed.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from relaydsl import Float, Int, Tensor, relay, relay_model
from relaydsl import distributed as dist


@relay_model
def lenet(x: Tensor[Float, ("n", 1, 28, 28)]) -> Tensor[Float, ("n", 10)]:
    conv1 = relay.conv2d(x, num_filter=20, ksize=[1, 5, 5, 1], no_bias=False)
    tanh1 = relay.tanh(conv1)
    pool1 = relay.max_pool(tanh1, ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1])
    conv2 = relay.conv2d(pool1, num_filter=50, ksize=[1, 5, 5, 1], no_bias=False)
    tanh2 = relay.tanh(conv2)
    pool2 = relay.max_pool(tanh2, ksize=[1, 2, 2, 1], strides=[1, 2, 2, 1])
    flatten = relay.flatten_layer(pool2)
    fc1 = relay.linear(flatten, num_hidden=500)
    tanh3 = relay.tanh(fc1)
    return relay.linear(tanh3, num_hidden=10)


@relay
def loss(x: Tensor[Float, ("n", 1, 28, 28)], y: Tensor[Float, ("n", 10)]) -> Float:
    return relay.softmax_cross_entropy(lenet(x), y)


@relay
def predict_labels(x: Tensor[Float, ("n", 1, 28, 28)]) -> Tensor[Int, ("n",)]:
    return relay.argmax(lenet(x), axis=1)


SHARED_MNIST = Path(__file__).resolve().parents[2] / "shared" / "data" / "mnist"


def find_mnist(path: str | None):
    """MNIST from `path`, else from relaydsl's places or the project's shared copy."""
    from relaydsl.datasets import mnist

    return mnist(path, fallbacks=[SHARED_MNIST])


def progress(epoch: int, step: int, steps: int, loss_value: float, images_per_s: float) -> None:
    width = 30
    done = int(width * step / steps)
    bar = "#" * done + "." * (width - done)
    sys.stdout.write(f"\repoch {epoch} [{bar}] {step}/{steps}  loss {loss_value:.4f}  "
                     f"{images_per_s:,.0f} images/s")
    sys.stdout.flush()


def accuracy_and_confusion(model, images, labels, batch=1000):
    confusion = np.zeros((10, 10), np.int64)
    for i in range(0, len(images), batch):
        predicted = model.apply(predict_labels, images[i:i + batch])
        np.add.at(confusion, (labels[i:i + batch], predicted), 1)
    return np.trace(confusion) / confusion.sum(), confusion


def evaluate_sharded(model, images, labels):
    """The test accuracy and confusion matrix, each rank evaluating its slice of the test set
    and the ranks' matrices summed (one rank: the whole set)."""
    [(x, y)] = dist.shard([(images, labels)])
    _, confusion = accuracy_and_confusion(model, x, y)
    confusion = dist.allreduce(confusion, op="sum")
    return np.trace(confusion) / confusion.sum(), confusion


def save_plots(losses: list[float], accuracies: list[float], confusion: np.ndarray,
               path: Path) -> Path | None:
    """The training curve and the confusion matrix side by side, as a PNG; None (and a note)
    when matplotlib is not installed."""
    try:
        import matplotlib
    except ImportError:
        print('matplotlib is not installed: skipped the plots (pip install -e ".[plots]")')
        return None
    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    fig, (curve, matrix) = plt.subplots(1, 2, figsize=(11, 4.5))
    steps = np.arange(1, len(losses) + 1)
    window = max(1, len(losses) // 20)  # a moving mean once there are enough steps
    curve.plot(steps, losses, color="tab:blue", alpha=0.35 if window > 1 else 1.0,
               linewidth=0.8, label="batch loss")
    if window > 1:
        smooth = np.convolve(losses, np.ones(window) / window, mode="valid")
        curve.plot(steps[window - 1:], smooth, color="tab:blue",
                   label=f"mean of {window} batches")
    curve.set(xlabel="training step", ylabel="cross-entropy loss", yscale="log",
              title="training curve")
    per_epoch = len(losses) // len(accuracies)
    for epoch, accuracy in enumerate(accuracies, start=1):
        curve.axvline(epoch * per_epoch, color="tab:gray", linestyle=":", linewidth=1)
        curve.annotate(f"epoch {epoch}\ntest accuracy {accuracy:.1%}", (epoch * per_epoch, 1),
                       xycoords=("data", "axes fraction"), textcoords="offset points",
                       xytext=(-4, -6), ha="right", va="top", fontsize=8)
    curve.legend(loc="lower left")
    image = matrix.imshow(confusion, cmap="Blues")
    matrix.set(xticks=range(10), yticks=range(10), xlabel="predicted digit",
               ylabel="true digit", title=f"confusion matrix (test accuracy {accuracies[-1]:.1%})")
    for (i, j), n in np.ndenumerate(confusion):
        if n:
            matrix.text(j, i, str(n), ha="center", va="center", fontsize=7,
                        color="white" if n > confusion.max() / 2 else "black")
    fig.colorbar(image, ax=matrix, fraction=0.046)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help="train on 30,000 images for one epoch")
    parser.add_argument("--epochs", type=int, default=None, help="default: 4 (1 with --quick)")
    parser.add_argument("--batch", type=int, default=64)
    # measured with --quick: 0.01 97.0%, 0.02 97.6%, 0.03 97.6%, 0.05 97.0%, 0.1 96.8%
    parser.add_argument("--lr", type=float, default=0.02)
    parser.add_argument("--data", default=None, help="directory holding the four MNIST files")
    parser.add_argument("--out", default="lenet_mnist_out",
                        help="directory for the saved model and the plots (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--distributed", action="store_true",
                        help="data-parallel over the ranks of `mpiexec -n N`: each rank takes\n"
                             "--batch / N images of every global batch of --batch")
    args = parser.parse_args(argv)
    # without --distributed every process trains alone, even under mpiexec
    dist.init(mpi=None if args.distributed else False)
    lead = dist.rank() == 0  # rank 0 alone reports, plots and saves

    from relaydsl.datasets.mnist import DatasetError
    try:
        (train_x, train_y), (test_x, test_y) = find_mnist(args.data)
    except DatasetError as e:
        sys.exit(f"lenet_mnist.py: {e}")
    epochs = args.epochs or (1 if args.quick else 4)
    if args.quick:  # one epoch over half the training set: 97.6% in ~10 s on 2 cores
        train_x, train_y = train_x[:30000], train_y[:30000]
    one_hot = np.eye(10, dtype=np.float32)
    out = Path(args.out)
    if lead:
        out.mkdir(parents=True, exist_ok=True)
    ranks = dist.world_size()
    if args.distributed and lead:
        print(f"data-parallel on {ranks} ranks: global batch {args.batch}, "
              f"{args.batch // ranks} images per rank, lr {args.lr}")

    model = relay.create_model(lenet, seed=args.seed, init="glorot")
    dist.broadcast_model(model)  # every rank starts from rank 0's weights
    step = relay.grad(model, loss)
    optimizer = relay.Momentum(lr=args.lr, momentum=0.9)
    losses: list[float] = []
    accuracies: list[float] = []
    for epoch in range(1, epochs + 1):
        # this rank's slice of each global batch; the epoch's order is the permutation a
        # default_rng(seed) draws for it, the same on every rank
        batches = dist.shard((train_x, train_y), batch_size=args.batch, seed=args.seed,
                             epoch=epoch - 1)
        steps = len(batches)
        start, running = time.perf_counter(), None
        for s, (x, y) in enumerate(batches):
            grads = step(x, one_hot[y])
            # the mean over the ranks of the gradients and of the loss, in one buffer
            grads, value = dist.allreduce((grads, step.last_loss), op="mean")
            relay.update_model_params(model, grads, optimizer=optimizer)
            value = float(value)
            losses.append(value)
            running = value if running is None else 0.95 * running + 0.05 * value
            if lead and (s % 10 == 0 or s == steps - 1):
                rate = (s + 1) * args.batch / (time.perf_counter() - start)
                progress(epoch, s + 1, steps, running, rate)
        seconds = time.perf_counter() - start
        accuracy, _ = evaluate_sharded(model, test_x, test_y)
        accuracies.append(accuracy)
        if lead:
            print(f"\nepoch {epoch}: {seconds:.1f} s, test accuracy {accuracy:.2%}")
    if not lead:
        return accuracy

    # Save the model with its optimiser (training could resume from the file), then evaluate
    # what a later program would load. The save writes a temporary file and renames it, so a
    # run killed mid-save leaves the previous file whole.
    saved = relay.save_model(model, out / "lenet", optimizer=optimizer)
    reloaded = relay.load_model(saved)
    accuracy, confusion = accuracy_and_confusion(reloaded, test_x, test_y)
    print(f"saved the model to {saved}; reloaded, its test accuracy is {accuracy:.2%}")
    print("confusion matrix (rows: true digit, columns: predicted):")
    print("     " + " ".join(f"{d:5d}" for d in range(10)))
    for d in range(10):
        print(f"{d:3d}  " + " ".join(f"{n:5d}" for n in confusion[d]))
    picture = save_plots(losses, accuracies, confusion, out / "lenet_mnist.png")
    if picture is not None:
        print(f"saved the training curve and the confusion matrix to {picture}")
    return accuracy


if __name__ == "__main__":
    main()
