"""benchmarks/figure5.py's code path (its --quick run) on the smallest network: every pass
set's program agrees with JAX, the table replaces its own section of RESULTS.md only, the
chart is drawn where matplotlib is installed; speed is not asserted."""
import importlib.util

from benchmarks import figure5
from benchmarks.harness import replace_section, sections

OTHER = "# Benchmark results\n\n## Machine\n\n- cpu\n\n## Results\n\n| a | b |\n\nnotes\n"


def test_a_quick_run_checks_every_pass_set_and_writes_its_section(tmp_path, capsys):
    results, chart = tmp_path / "RESULTS.md", tmp_path / "figure5.png"
    results.write_text(replace_section(OTHER, figure5.SECTION, "an earlier run"))
    assert figure5.main(["--quick", "--models", "dqn", "--output", str(results),
                         "--chart", str(chart)]) == 0
    text = results.read_text()
    assert text.startswith(OTHER)  # the sections run.py writes are untouched
    assert "an earlier run" not in text
    assert "Written by `python benchmarks/figure5.py --quick --models dqn --output " in text
    (row,) = [line for line in text.splitlines() if line.startswith("| Nature-DQN (36x36)")]
    cells = row.strip("|").split("|")[1:]
    assert len(cells) == len(figure5.LAYERS) + 1
    # each program ran and matched JAX (a failure or mismatch shows its status instead)
    assert cells[0].strip().startswith("1.00x (")
    assert all("x (" in c and " ms)" in c for c in cells[:-1]), row
    out = capsys.readouterr()
    for name in figure5.skipped(figure5.LAYERS, figure5.known_passes()):
        assert f"{name}: not in this pipeline, skipped" in out.err
    if importlib.util.find_spec("matplotlib"):
        assert chart.read_bytes().startswith(b"\x89PNG")
    else:
        assert "no chart: matplotlib is not installed" in out.out


def test_a_pass_the_pipeline_lacks_is_left_out_of_the_context():
    layer = figure5.Layer("+ new", 1, ("FoldConstant", "NoSuchPass"))
    known = figure5.known_passes()
    assert "FoldConstant" in known and "NoSuchPass" not in known
    assert figure5.context(layer, known).required_pass == frozenset({"FoldConstant"})
    assert figure5.skipped([figure5.LAYERS[0], layer], known) == ["NoSuchPass"]
    later = figure5.Layer("+ more", 1, ("FoldConstant", "NoSuchPass", "EliminateCommonSubexpr"))
    # the table and the chart name what a layer lacks where it would have added it
    assert figure5.labels([layer, later], known) == ["+ new (no NoSuchPass)", "+ more"]


def test_sections_are_replaced_in_place_or_appended():
    text = OTHER + "\n## Later\n\nkept\n"
    once = replace_section(text, "## Figure 5", "first")
    assert once == text + "\n## Figure 5\n\nfirst\n"
    assert [h for h, _ in sections(once)] == ["## Machine", "## Results", "## Later",
                                              "## Figure 5"]
    middle = replace_section(replace_section(OTHER, "## Figure 5", "old") + "\n## Later\n\nx\n",
                             "## Figure 5", "new")
    assert middle == OTHER + "\n## Figure 5\n\nnew\n\n## Later\n\nx\n"
