"""The dynamic-model rows (benchmarks/workloads/tree_lstm.py and char_rnn.py, issue 14): on a
small instance (hidden 8, three parsed SST trees, a 7-letter name) every system of each row
computes what JAX computes, as the benchmark checks before timing, on both targets.
torch.compile is left out (its first compilation alone takes tens of seconds)."""
import pytest

from benchmarks.workloads import char_rnn, tree_lstm
from benchmarks.workloads.common import RELAY_TARGET
from relaydsl.datasets.sst import parse_tree
from tests.benchmarks.helpers import assert_systems_agree

TREES = ["(3 (2 It) (4 (3 lovely) (2 film)))",
         "(1 (2 (2 a) (1 dull)) (2 (2 long) (2 (2 ,) (1 movie))))",
         "(2 Nothing)"]
HIDDEN = 8


@pytest.fixture(params=["llvm", "interp"])
def target(request, monkeypatch):
    monkeypatch.setitem(RELAY_TARGET, "target", request.param)
    monkeypatch.setenv("RELAYDSL_TARGET", request.param)  # model calls and relay.grad
    return request.param


def test_tree_lstm_inference_agrees(target):
    assert_systems_agree(tree_lstm.inference_case([parse_tree(t) for t in TREES], HIDDEN))


@pytest.mark.slow  # compiling the gradient program, and JAX's, takes ~10 s
def test_tree_lstm_training_steps_agree():
    # on llvm only: relay.grad over trees on the interpreter is tests/frontend/test_tree_training
    assert_systems_agree(tree_lstm.train_case([parse_tree(t) for t in TREES], HIDDEN))


def test_the_tree_lstm_runs_natively_on_llvm():
    net, loss = tree_lstm.relay_tree_lstm(HIDDEN)
    assert net.build("llvm").program.path == "native"
    assert loss.build("llvm").program.path == "native"


def test_char_rnn_scoring_and_both_generators_agree(target):
    assert_systems_agree(char_rnn.score_case(HIDDEN, name="Abagyan"))
    assert_systems_agree(char_rnn.generate_case(HIDDEN, start="A"))
