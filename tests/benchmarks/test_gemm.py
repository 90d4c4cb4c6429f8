"""The GEMM rows (benchmarks/workloads/gemm.py): at small odd sizes, every system of the
GEMM and the dense (x @ W^T) rows computes what JAX computes, as the benchmark checks before
timing."""
import pytest

from benchmarks.workloads import gemm
from tests.benchmarks.helpers import assert_systems_agree


@pytest.mark.parametrize("n", [7, 45])
@pytest.mark.parametrize("transposed", [False, True])
def test_gemm_and_dense_rows_agree_with_jax(n, transposed):
    case = gemm.case(n, transposed=transposed)
    assert case.name == (f"dense {n} (x @ W^T)" if transposed else f"GEMM {n}")
    assert_systems_agree(case)
