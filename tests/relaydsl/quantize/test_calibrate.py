"""Calibration recovers known ranges on synthetic data, in every mode."""
import numpy as np
import pytest

from relaydsl.ir import Constant
from relaydsl.op import ops
from relaydsl.quantize import QConfig
from relaydsl.quantize.calibrate import (
    HEADROOM, calibrate, global_range, kl_divergence_range, mse_range, simqs,
)
from relaydsl.quantize.flow import annotate_module
from tests.relaydsl.quantize.helpers import module, runner, weights

rng = np.random.default_rng(3)
ALL = QConfig(skip_conv_layers=(), skip_dense_layer=False)


def uniform_batches(rho, n=4, shape=(64, 8)):
    """Uniform in [-rho, rho], with the extremes present."""
    out = []
    for _ in range(n):
        x = rng.uniform(-rho, rho, shape).astype(np.float32)
        x[0, 0], x[0, 1] = rho, -rho
        out.append((x,))
    return out


def one_dense(w=None):
    w = weights(4, 8) if w is None else w
    return module(lambda x: ops.dense(x, w), (64, 8))


def activation_range(config, batches, mod=None):
    annotated = annotate_module(mod or one_dense(), config)
    out = calibrate(annotated, "main", batches, config, runner())
    kinds = dict(out.ranges[i] for i in range(len(out.ranges)) if out.ranges[i][0] == "input")
    step = simqs(out.mod["main"].body)[0].args[1].data
    return kinds["input"], float(step)


@pytest.mark.parametrize("mode, rho, low, high", [
    ("percentile", 3.0, 2.99, 3.0),  # percentile 99.99 of |x| of uniform data: just below rho
    ("mse", 3.0, 2.7, 3.0),
    ("kl_divergence", 3.0, 2.5, 3.0),
])
def test_the_range_of_uniform_data_is_recovered(mode, rho, low, high):
    r, step = activation_range(ALL.replace(calibrate_mode=mode), uniform_batches(rho))
    assert low <= r <= high
    assert step == pytest.approx(r / 128)  # the paper's s = rho / 2^(beta - sigma)


@pytest.mark.parametrize("rho, global_scale, expected", [(3.0, 1.0, 4.0), (0.3, 8.0, 0.5),
                                                        (8.0, 8.0, 8.0)])
def test_global_scale_is_the_smallest_power_of_two_multiple_with_no_overflow(rho, global_scale,
                                                                            expected):
    cfg = ALL.replace(calibrate_mode="global_scale", global_scale=global_scale)
    r, _ = activation_range(cfg, uniform_batches(rho))
    assert r == expected == global_range(rho, global_scale)


def test_percentile_ignores_outliers_and_kl_clips_them():
    x = rng.standard_normal(200_000).astype(np.float32)
    x[:5] = 50.0  # rare outliers
    assert np.percentile(np.abs(x), 99.99) < 5
    r = kl_divergence_range(x, qmax=127)
    assert 2.5 < r < 12  # far below the outliers, past the bulk of N(0, 1)
    assert kl_divergence_range(x, qmax=32767) == pytest.approx(50.0)  # enough levels: no clip


def test_kl_is_not_pulled_down_by_a_relus_zeros():
    x = np.maximum(rng.uniform(-27, 3, 100_000), 0).astype(np.float32)  # 90% exact zeros
    assert 2.5 < kl_divergence_range(x, qmax=127) <= 3.0


def test_mse_finds_the_error_minimising_clip():
    x = rng.standard_normal((1, 100_000))
    (r,) = mse_range(x, qmax=7, levels=8)  # 4 bits: clipping pays
    best = min((np.mean((np.clip(np.round(x / (c / 8)), -7, 7) * (c / 8) - x) ** 2), c)
               for c in np.linspace(0.1, np.abs(x).max(), 400))[1]
    assert r == pytest.approx(best, rel=0.1)


@pytest.mark.parametrize("mode, weight_scale", [("percentile", "max"), ("global_scale", "power2")])
def test_per_channel_weight_ranges_are_each_channels(mode, weight_scale):
    known = np.array([0.5, 1.0, 2.0, 0.125], np.float32)
    w = rng.uniform(-1, 1, (4, 8)).astype(np.float32)
    w[:, 0] = 1.0
    w *= known[:, None]
    cfg = ALL.replace(per_channel=True, calibrate_mode=mode, weight_scale=weight_scale)
    out = calibrate(annotate_module(one_dense(Constant(w)), cfg), "main", uniform_batches(1.0),
                    cfg, runner())
    (_, weight) = simqs(out.mod["main"].body)
    np.testing.assert_allclose(weight.args[1].data * 128, known)  # all powers of two already


def test_an_accumulator_that_would_overflow_gets_coarser_steps():
    """8/16: 64 products of values near 127 * 127 cannot fit int16; calibration coarsens
    the steps until the largest accumulator seen, with HEADROOM, does."""
    w = np.full((4, 64), 0.9, np.float32)
    mod = module(lambda x: ops.dense(x, Constant(w)), (8, 64))
    batches = [(np.full((8, 64), 0.9, np.float32),)]
    for acc, coarsened in ((32, 0), (16, 1)):
        cfg = ALL.replace(calibrate_mode="percentile", nbit_activation=acc)
        out = calibrate(annotate_module(mod, cfg), "main", batches, cfg, runner())
        assert out.coarsened == coarsened
        x, wq = (q.args[1].data for q in simqs(out.mod["main"].body))
        largest = 64 * 0.9 * 0.9 / (x * wq)
        assert largest * HEADROOM <= 2 ** (acc - 1) - 1


def test_a_network_deeper_than_graph_form_inlines_calibrates_past_its_let():
    """Graph normal form keeps a let every MAX_DEPTH nodes (ResNet-101 has one); the
    second dense's input is watched past that let, under it (it was outside the let's scope:
    'variable %x is used outside the scope that binds it'). Its range is the largest
    |relu(x w1^T)| that JAX computes on the batch."""
    import jax.numpy as jnp

    from relaydsl.ir import Let
    from tests.relaydsl.quantize.helpers import past_a_let

    mod, w1, _ = past_a_let()
    cfg = ALL.replace(calibrate_mode="percentile", percentile=100.0)
    annotated = annotate_module(mod, cfg)
    assert isinstance(annotated["main"].body, Let)  # the case: a let survived preparation
    batches = uniform_batches(1.0, n=1, shape=(4, 8))
    out = calibrate(annotated, "main", batches, cfg, runner())
    ranges = [r for kind, r in out.ranges if kind == "input"]
    x = jnp.asarray(batches[0][0])
    np.testing.assert_allclose(ranges, [1.0, float(jnp.max(jnp.maximum(x @ w1.T, 0)))],
                               rtol=1e-5)
