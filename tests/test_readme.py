"""The README's example program runs as written."""
import re

import numpy as np
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_first_program_in_the_readme_runs(tmp_path):
    text = README.read_text()
    block = re.search(r"## A first program\n\n```python\n(.*?)```", text, re.S).group(1)
    script = tmp_path / "first_program.py"  # decorated functions need a real source file
    script.write_text(block)
    namespace = {"__name__": "readme_example"}
    exec(compile(block, str(script), "exec"), namespace)
    assert namespace["model"].params["linear_0.weight"].shape == (128, 784)
    assert set(namespace["grads"]) == set(namespace["model"].params)
    assert namespace["predict"](np.ones((2, 784), np.float32)).shape == (2, 10)
    assert str(namespace["layer"].checked_type) == (
        "fn<n: Shape>(Tensor[(n, 784), float32], Tensor[(784, 10), float32]) "
        "-> Tensor[(n, 10), float32]")
