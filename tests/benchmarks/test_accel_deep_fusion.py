"""benchmarks/accel/deep_fusion.py: a quick run writes its tables and charts, with every
schedule's traffic between the compulsory bytes and the baseline's."""
import re

import pytest

from benchmarks.accel import deep_fusion


@pytest.mark.slow
def test_a_quick_run_writes_the_tables_and_charts(tmp_path, capsys):
    out = tmp_path / "RESULTS.md"
    assert deep_fusion.main(["--quick", "--networks", "resnet18",
                             "--output", str(out)]) == 0
    text = out.read_text()
    for label in deep_fusion.LABELS.values():
        assert f"| resnet18 | {label} |" in text
    for row in re.findall(r"\| resnet18 \| (.*?) \| ([\d.]+) \| ([\d.]+)x \| "
                          r"[\d.]+ \| (-?[\d.]+)% \|", text):
        label, _, over_compulsory, cut = row
        assert float(over_compulsory) >= 1.0
        assert float(cut) >= 0.0 if label != "none" else float(cut) == 0.0
    if pytest.importorskip("matplotlib"):
        assert (tmp_path / "speedup.png").read_bytes()[:4] == b"\x89PNG"
        assert (tmp_path / "traffic_reduction.png").exists()


def test_an_unknown_network_is_refused(capsys):
    with pytest.raises(SystemExit):
        deep_fusion.main(["--networks", "alexnet", "--output", ""])
    assert "unknown network alexnet" in capsys.readouterr().err
