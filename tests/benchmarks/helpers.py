"""What the benchmark-row tests share: run a row's systems once and check them against JAX."""
import importlib.util

from benchmarks import harness


def assert_systems_agree(case: harness.Case) -> dict[str, harness.Runner]:
    """Checks every system of `case` against its reference, as the benchmark does before
    timing, leaving out torch.compile (its first compilation alone takes seconds to tens of
    seconds) and PyTorch where it is not installed; the runners, by system."""
    case.setups.pop("torch_compile", None)
    if importlib.util.find_spec("torch") is None:
        case.setups.pop("torch", None)
    cells, runners = harness.check(case)
    problems = {k: c.footnote for k, c in cells.items() if c.status != "ok"}
    assert not problems, problems
    assert sorted(runners) == sorted(case.setups)
    return runners
