"""The benchmark rows, one module per workload group; ``GROUPS`` maps a --rows name to its cases."""
from __future__ import annotations

from collections.abc import Callable

from benchmarks.harness import Case


def _gemm() -> list[Case]:
    from benchmarks.workloads import gemm
    return gemm.cases()


def _mlp() -> list[Case]:
    from benchmarks.workloads import mlp
    return mlp.cases()


def _lenet() -> list[Case]:
    from benchmarks.workloads import cnn
    return [cnn.lenet_case(1), cnn.lenet_case(64)]


def _lenet_train() -> list[Case]:
    from benchmarks.workloads import lenet_train
    return lenet_train.cases()


def _resnet() -> list[Case]:
    from benchmarks.workloads import cnn
    return [cnn.resnet_case()]


def _lstm() -> list[Case]:
    from benchmarks.workloads import lstm
    return lstm.cases()


def _elementwise() -> list[Case]:
    from benchmarks.workloads import elementwise
    return elementwise.cases()


def _compile() -> list[Case]:
    from benchmarks.workloads import compile_time
    return compile_time.cases()


def _batch_sizes() -> list[Case]:
    from benchmarks.workloads import batch_sizes
    return batch_sizes.cases()


def _treelstm() -> list[Case]:
    from benchmarks.workloads import tree_lstm
    return [tree_lstm.inference_case(tree_lstm.sst_trees())]


def _treelstm_train() -> list[Case]:
    from benchmarks.workloads import tree_lstm
    return [tree_lstm.train_case(tree_lstm.sst_trees(tree_lstm.TRAIN_TREES))]


def _charrnn_score() -> list[Case]:
    from benchmarks.workloads import char_rnn
    return [char_rnn.score_case()]


def _charrnn_generate() -> list[Case]:
    from benchmarks.workloads import char_rnn
    return [char_rnn.generate_case()]


# in the order of the table
GROUPS: dict[str, Callable[[], list[Case]]] = {
    "gemm": _gemm, "mlp": _mlp, "lenet": _lenet, "lenet-train": _lenet_train,
    "resnet": _resnet, "lstm": _lstm,
    "elementwise": _elementwise, "compile": _compile, "batch-sizes": _batch_sizes,
    "treelstm": _treelstm,
    "treelstm-train": _treelstm_train, "charrnn-score": _charrnn_score,
    "charrnn-generate": _charrnn_generate,
}
