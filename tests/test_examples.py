"""The examples a user copies from run as scripts."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_MNIST = ROOT.parent / "shared" / "data" / "mnist"


def run(script: str, *args: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, str(ROOT / "examples" / script), *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_quickstart():
    out = run("quickstart.py")
    assert "main() = while_loop(1, 1, 5) = [1, 1, 5]" in out
    assert "while_loop(1, 1, 1) = [8, 7, 4]" in out  # the loop of Figure 2, run in Python
    assert "layer at batch 5: output shape (5, 3)" in out


@pytest.mark.slow
@pytest.mark.skipif(not SHARED_MNIST.is_dir(), reason="the shared MNIST copy is not present")
def test_lenet_mnist_quick():
    out = run("lenet_mnist.py", "--quick", "--data", str(SHARED_MNIST))
    accuracy = float(re.search(r"test accuracy ([\d.]+)%", out).group(1))
    assert accuracy > 70.0  # one epoch on 2,000 images
    assert "confusion matrix" in out
