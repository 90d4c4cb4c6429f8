"""benchmarks/distributed.py's model of larger jobs and its report, from made-up measurements
(the measurements themselves launch MPI jobs of minutes: the benchmark is run by hand)."""
import pytest

from benchmarks import distributed


def test_ring_allreduce_time_is_bandwidth_and_latency_terms():
    assert distributed.ring_seconds(1e9, 1) == 0.0
    # 2 (p - 1) / p of 1 GB at 25 Gb/s (3.125 GB/s), and 2 (p - 1) latencies
    assert distributed.ring_seconds(1e9, 2, latency=0.0) == pytest.approx(0.32)
    assert distributed.ring_seconds(1e9, 8, latency=1e-3) == pytest.approx(
        2 * 7 / 8 / 3.125 + 14e-3)


def test_resnet18_s_size_and_work_are_those_published():
    assert distributed.resnet18_gradient_bytes() == 4 * 11_173_962
    assert distributed.conv_flops(distributed.resnet18_convs(), 32) == pytest.approx(1.11e9,
                                                                                     rel=0.01)


def _run(ranks: int, batch: int, compute: float, comm: float) -> dict:
    return {"ranks": ranks, "batch": batch, "steps": 5, "compute": compute, "comm": comm,
            "update": 0.001, "step": compute + comm + 0.001, "wall": 1.0, "alone": comm / 2,
            "bytes": 1_720_000, "buckets": 1, "grad_bytes": 1_720_000,
            "images_per_s": ranks * batch / (compute + comm + 0.001)}


def test_the_report_holds_the_measured_and_the_modelled_tables():
    results = {"lenet": {"1": _run(1, 64, 0.060, 0.0), "2": _run(2, 64, 0.061, 0.001),
                         "2 strong": _run(2, 32, 0.031, 0.001)},
               "resnet": {"1": _run(1, 64, 0.400, 0.0), "2": _run(2, 64, 0.400, 0.002),
                          "2 strong": _run(2, 32, 0.200, 0.002)}}
    text = distributed.report(results, quick=True)
    assert ("| LeNet (MNIST) | 1.72 MB | 2 ranks | 64 | 128 | 61.0 | 61.0 | 1.0 | 0.5 | 1.0 | "
            "63.0 |") in text
    for p in (8, 64, 512):
        assert f"| LeNet (MNIST) | 1.72 MB | 64 | {p} |" in text
        assert f"| ResNet-18 (CIFAR), estimated | 44.70 MB | 64 | {p} |" in text
    assert "LeNet (MNIST): 1.94x measured at 2 ranks (meets the 1.8x goal)" in text
