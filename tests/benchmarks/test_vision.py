"""The Figure 5 networks (benchmarks/workloads/vision.py): each forward pass against a JAX one
over the same weights, at 32x32 (DQN 36x36) to stay fast; their parameters bound as
constants give the same program."""
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from benchmarks.workloads import vision
from relaydsl import relay
from relaydsl.backend.target import get_target
from relaydsl.ir.expr import Constant
from relaydsl.ir.visitor import post_order
from relaydsl.transform import PassContext

RTOL, ATOL = 1e-4, 1e-3  # ResNet-18's logits reach ~100 with these random weights
SMALL = {"resnet18": 32, "mobilenet": 32, "vgg16": 32, "dqn": 36}


@functools.cache  # the JAX reference takes seconds to compile: one per network
def small_model(name):
    model = relay.create_model(vision.model(name, SMALL[name]))
    params = vision.random_params(model, seed=0)
    x = np.random.default_rng(1).standard_normal(
        vision.input_shape(name, SMALL[name])).astype(np.float32)
    want = jax.jit(vision.JAX_FORWARD[name])({k: jnp.asarray(v) for k, v in params.items()}, x)
    return model, x, np.asarray(want)


@pytest.mark.parametrize("name", list(vision.MODELS))
def test_each_network_computes_its_jax_forward_pass(name):
    model, x, want = small_model(name)
    assert np.abs(want).max() > 0.5  # the random weights keep the activations alive
    got = model(x)
    assert got.shape == (1, vision.MODELS[name][3])
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def test_the_networks_have_their_published_parameter_shapes():
    shapes = {name: {k: v.shape for k, v in
                     relay.create_model(vision.model(name, SMALL[name])).params.items()}
              for name in ("mobilenet", "dqn")}
    # MobileNet's depthwise convolutions: one 3x3 filter per channel
    assert shapes["mobilenet"]["conv2d_1.weight"] == (32, 1, 3, 3)
    assert shapes["mobilenet"]["conv2d_26.weight"] == (1024, 1024, 1, 1)
    assert len([k for k in shapes["mobilenet"] if k.endswith("moving_var")]) == 27
    assert shapes["dqn"]["conv2d_0.weight"] == (32, 4, 8, 8)
    assert shapes["dqn"]["linear_1.weight"] == (18, 512)
    # at Atari's 84x84 the last convolution leaves 64 x 7 x 7 features
    dqn = relay.create_model(vision.model("dqn"))
    assert dqn.params["linear_0.weight"].shape == (512, 64 * 7 * 7)


def test_bound_parameters_are_constants_of_the_same_program():
    model, x, want = small_model("resnet18")
    mod, entry = vision.bind_params(model)
    main = mod[entry]
    assert [p.name_hint for p in main.params] == ["x"]
    constants = []
    post_order(main.body, lambda e: constants.append(e) if isinstance(e, Constant) else None)
    assert len(constants) >= len(model.params)
    for level in (0, 2):
        with PassContext(opt_level=level):
            program = get_target("llvm").build(mod, entry, {})
        np.testing.assert_allclose(program(x), want, rtol=RTOL, atol=ATOL)
