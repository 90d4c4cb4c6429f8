import numpy as np
import pytest

from tests.relaydsl.quantize import helpers


@pytest.fixture(autouse=True)
def _same_data_whatever_the_order():
    """Each test draws its weights and data from a fresh seed: in any order, alone or not."""
    helpers.rng = np.random.default_rng(0)
