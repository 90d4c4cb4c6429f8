"""The Deep Fusion paper's five networks (benchmarks/accel/networks.py): each forward pass on
the llvm target against a JAX one over the same weights, at a small image size; the real
architectures at full size checked by type inference alone (parameter counts, layers, output
shape), without running them."""
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from benchmarks.accel import networks
from benchmarks.workloads import vision
from relaydsl import relay
from relaydsl.backend.target import get_target
from relaydsl.ir.expr import Call
from relaydsl.ir.visitor import post_order
from relaydsl.transform import PassContext
from relaydsl.transform.inline import inline_all

# With vision.random_params's He-normal weights the logits reach 2 to 2,000 (ResNet-50's
# residual sums grow); float32 sums in another order than JAX's differ by up to ~2e-6 of the
# largest logit, so the absolute tolerance scales with it.
RTOL, ATOL_OF_LARGEST = 1e-4, 1e-5
# The smallest images the networks take: 32 halves five times to 1x1; InceptionV3's stem and
# grid reductions need 75 (its 8x8 stage is then 1x1).
SMALL = {"vgg19": 32, "googlenet": 32, "inception_v3": 75, "resnet18": 32, "resnet50": 32}


def build_small_model(name):
    """Network `name` at its small size with random parameters, an input and JAX's logits."""
    model = relay.create_model(networks.model(name, SMALL[name]))
    params = vision.random_params(model, seed=0)
    x = np.random.default_rng(1).standard_normal(
        networks.input_shape(name, SMALL[name])).astype(np.float32)
    forward = jax.jit(networks.JAX_FORWARD[name])
    want = forward({k: jnp.asarray(v) for k, v in params.items()}, x)
    return model, x, np.asarray(want)


@pytest.fixture(scope="module")
def small_model():
    # the JAX reference takes seconds to compile: one per network, kept while this module's
    # tests run (the five models hold ~90 million parameters)
    return functools.cache(build_small_model)


def assert_close_logits(got, want):
    np.testing.assert_allclose(got, want, rtol=RTOL,
                               atol=ATOL_OF_LARGEST * np.abs(want).max())


# compiling GoogLeNet's and InceptionV3's 57 and 94 convolutions, and JAX's, takes ~10 s each
SLOW = {"googlenet", "inception_v3"}


@pytest.mark.parametrize("name", [pytest.param(name, marks=[pytest.mark.slow] * (name in SLOW))
                                  for name in networks.NETWORKS])
def test_each_network_computes_its_jax_forward_pass_on_llvm(small_model, name):
    model, x, want = small_model(name)
    assert np.abs(want).max() > 0.5  # the random weights keep the activations alive
    got = relay.build(model.fn, target="llvm").run((x,), model.values_for(model.fn))
    assert got.shape == (1, networks.CLASSES)
    assert_close_logits(got, want)


@pytest.mark.slow  # GoogLeNet's forward passes, as above
def test_with_its_parameters_bound_a_network_inlines_into_one_function(small_model):
    # what an accelerator's code generator is given (issue 23: InlineAll, one call): the
    # blocks' calls, polymorphic in the image size, are inlined at their concrete sizes
    model, x, want = small_model("googlenet")
    mod, entry = vision.bind_params(model)
    assert {gv.name_hint for gv in mod.user_functions()} > {entry}  # the nine modules' calls
    assert [gv.name_hint for gv in inline_all(mod).user_functions()] == [entry]
    with PassContext(opt_level=3, required_pass=["InlineAll"]):
        program = get_target("llvm").build(mod, entry, {})
    assert_close_logits(program(x), want)


def trainable_parameters(fn) -> dict[str, tuple[int, ...]]:
    """The shapes of `fn`'s weights, biases and batch norm scales and shifts (its running
    statistics are state), by name, from the types of its hidden parameters: nothing is
    allocated."""
    main = fn.mod[fn.global_var]
    hidden = zip(fn.hidden, main.params[fn.num_user_params:])
    return {h.name: var.checked_type.concrete_shape() for h, var in hidden if not h.spec.state}


# The published counts: VGG-19's and ResNet-18's and ResNet-50's (torchvision's), InceptionV3's
# without its auxiliary head (torchvision's 27,161,264 less the head's 3,326,696), GoogLeNet's
# with batch norm and the paper's 5x5 branches (torchvision's 6,624,904 has 3x3 ones; 380,928
# fewer). The layers: (convolutions, dense layers).
PUBLISHED = {
    "vgg19": (143_667_240, (16, 3)),
    "googlenet": (7_005_832, (3 + 9 * 6, 1)),
    "inception_v3": (23_834_568, (94, 1)),
    "resnet18": (11_689_512, (1 + 8 * 2 + 3, 1)),
    "resnet50": (25_557_032, (1 + 16 * 3 + 4, 1)),
    # the Relay paper's Figure 3 adds these two; torchvision's counts
    "resnet34": (21_797_672, (1 + 16 * 2 + 3, 1)),
    "resnet101": (44_549_160, (1 + 33 * 3 + 4, 1)),
}


@pytest.mark.parametrize("name", list(networks.TEMPLATES))
def test_each_network_at_its_published_size_has_its_published_parameters(name):
    fn = networks.model(name)
    size = 299 if name == "inception_v3" else 224
    assert fn.checked_type.arg_types[0].concrete_shape() == (1, 3, size, size)
    assert fn.checked_type.ret_type.concrete_shape() == (1, 1000)
    shapes = trainable_parameters(fn)
    count, layers = PUBLISHED[name]
    assert sum(math.prod(s) for s in shapes.values()) == count
    weights = [n.rsplit(".", 2)[-2] for n in shapes if n.endswith(".weight")]
    assert (sum(w.startswith("conv2d_") for w in weights),
            sum(w.startswith("linear_") for w in weights)) == layers


def test_the_blocks_have_their_published_shapes():
    googlenet = trainable_parameters(networks.model("googlenet"))
    # module 5b (the ninth): 832 channels in; its 5x5 branch reduces them to 48, then 128
    assert googlenet["inception_8.conv2d_3.weight"] == (48, 832, 1, 1)
    assert googlenet["inception_8.conv2d_4.weight"] == (128, 48, 5, 5)
    assert googlenet["linear_0.weight"] == (1000, 1024)
    inception_v3 = trainable_parameters(networks.model("inception_v3"))
    # Mixed_6e (the fourth C module): 192 channels through its 1x7 and 7x1 convolutions
    assert inception_v3["inception_c_3.conv2d_2.weight"] == (192, 192, 1, 7)
    assert inception_v3["inception_c_3.conv2d_3.weight"] == (192, 192, 7, 1)
    assert inception_v3["linear_0.weight"] == (1000, 2048)
    resnet50 = trainable_parameters(networks.model("resnet50"))
    # the last block of stage 3 (the tenth identity block): 1024 -> 256 -> 256 -> 1024
    assert [resnet50[f"bottleneck_9.conv2d_{i}.weight"] for i in range(3)] == [
        (256, 1024, 1, 1), (256, 256, 3, 3), (1024, 256, 1, 1)]


def own_calls(fn, op: str) -> list[Call]:
    """The calls of `op` in `fn`'s own body (not in the blocks it calls), in program order."""
    calls = []
    post_order(fn.mod[fn.global_var].body, lambda e: calls.append(e) if isinstance(e, Call)
               and getattr(e.op, "name", None) == op else None)
    return calls


def test_resnet50_strides_in_the_first_convolution_of_a_stage_as_the_original():
    convs = own_calls(networks.model("resnet50", image=64), "conv2d")
    # the stem, then each stage's first block: 1x1, 3x3, 1x1 and the projection
    geometry = [(c.attrs["kernel_size"], c.attrs["strides"]) for c in convs]
    assert geometry[:5] == [((7, 7), (2, 2)), ((1, 1), (1, 1)), ((3, 3), (1, 1)),
                            ((1, 1), (1, 1)), ((1, 1), (1, 1))]
    for stage in range(1, 4):
        assert geometry[1 + 4 * stage: 5 + 4 * stage] == [
            ((1, 1), (2, 2)), ((3, 3), (1, 1)), ((1, 1), (1, 1)), ((1, 1), (2, 2))]
    assert convs[-1].checked_type.concrete_shape() == (1, 2048, 2, 2)


@pytest.mark.parametrize(("image", "grids"), [(299, (35, 17, 8)), (224, (25, 12, 5))])
def test_inception_v3_takes_other_image_sizes(image, grids):
    fn = networks.model("inception_v3", image=image)
    assert fn.checked_type.ret_type.concrete_shape() == (1, 1000)
    # the grid reductions' outputs: Mixed_6a's 768 channels and Mixed_7a's 1280
    reductions = [c.checked_type.concrete_shape() for c in own_calls(fn, "concatenate")]
    assert reductions == [(1, 768, grids[1], grids[1]), (1, 1280, grids[2], grids[2])]
    # Mixed_5b's input, the last max pool's output
    assert own_calls(fn, "max_pool2d")[1].checked_type.concrete_shape() == (
        1, 192, grids[0], grids[0])
