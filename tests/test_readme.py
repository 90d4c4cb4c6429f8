"""The README as a user reads it: the example runs, CI runs its commands, its links resolve."""
import re
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


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
    # relay.grad of the batch-generic layer, at the batch size of x (issue 11, item 1)
    x, w = namespace["x"], np.ones((784, 10), np.float32)
    expected = jax.grad(lambda a, b: jnp.sum(jax.nn.softmax(a @ b)), argnums=(0, 1))(x, w)
    np.testing.assert_allclose(namespace["value"], np.full((8, 10), 0.1), rtol=1e-6)
    np.testing.assert_allclose(namespace["dx"], expected[0], atol=1e-6)
    np.testing.assert_allclose(namespace["dw"], expected[1], atol=1e-6)


def test_the_readme_s_data_type_declaration_runs(tmp_path):
    block = re.search(r"```python\n(@relay\.adt\nclass Tree:.*?)```", README.read_text(),
                      re.S).group(1)
    source = ("import numpy as np\nfrom relaydsl import Float, Tensor, relay\n\n"
              + block.replace("\ntotal(Tree.Node(", "\nresult = total(Tree.Node("))
    script = tmp_path / "readme_adt.py"  # decorated functions need a real source file
    script.write_text(source)
    namespace = {"__name__": "readme_adt"}
    exec(compile(source, str(script), "exec"), namespace)
    np.testing.assert_allclose(namespace["result"], np.full(3, np.tanh(1.0)), rtol=1e-6)


def test_ci_runs_the_readme_commands_verbatim():
    """The install commands a user copies are the ones CI proves on a clean clone."""
    commands = re.findall(r"```bash\n(.*?)\n```", README.read_text(), re.S)
    assert len(commands) == 2  # install + main example; install + tests
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    for command in commands:
        assert f"{command} || exit" in ci_lines, f".ci/run does not run the README's: {command}"


def test_no_link_leaves_the_repository():
    """Relative links in the project's Markdown resolve to files inside the repository."""
    for page in [README, *ROOT.glob("docs/*.md"), *ROOT.glob("benchmarks/*.md")]:
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" in target:
                continue
            resolved = (page.parent / target).resolve()
            assert resolved.is_relative_to(ROOT) and resolved.exists(), f"{page.name}: {target}"


def test_the_unsupported_list_names_reassigning_a_captured_name():
    # issue 11, item 16: the frontend refuses it (tests/frontend/test_errors.py locates the
    # DSLSyntaxError), but the README's list of unsupported constructs did not say so
    text = README.read_text()
    unsupported = re.search(r"- \*\*Not supported\*\*(.*?)\n\n", text, re.S).group(1)
    assert "after a nested `def` or `lambda` captured it" in " ".join(unsupported.split())


def test_the_seeing_section_runs(tmp_path, capsys):
    """Issue 13, item 6: the README's "Seeing what the compiler does" example runs as shown."""
    block = re.search(r"## Seeing what the compiler does\n\n```python\n(.*?)```",
                      README.read_text(), re.S).group(1)
    script = tmp_path / "seeing.py"
    script.write_text(block)
    exec(compile(block, str(script), "exec"), {"__name__": "readme_seeing"})
    out = capsys.readouterr().out
    assert out.count("Primitive=1") == 3 and 'label="fused: dense + relu"' in out
