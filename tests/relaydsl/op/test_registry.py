"""Every registered op has every field this stage requires and is checked against JAX."""
import importlib

import pytest

from relaydsl.op import OpPattern, all_ops

FAMILY_TESTS = ["test_tensor", "test_reduce", "test_transform", "test_nn"]


def covered_ops() -> set[str]:
    ops: set[str] = set()
    for name in FAMILY_TESTS:
        module = importlib.import_module(f"tests.relaydsl.op.{name}")
        ops.update(case.op for case in module.CASES)
    return ops


@pytest.mark.parametrize("name", sorted(all_ops()))
def test_op_definition_is_complete(name):
    d = all_ops()[name]
    assert d.name == name and d.op is not None and d.op.name == name
    assert callable(d.type_relation), f"{name}: no type relation"
    assert callable(d.numpy_ref), f"{name}: no NumPy reference"
    assert callable(d.jax_lower), f"{name}: no JAX lowering"
    assert isinstance(d.pattern, OpPattern), f"{name}: no fusion pattern kind"
    assert callable(d.compute), f"{name}: no compute rule (relaydsl/te/compute_rules)"
    assert d.doc.strip(), f"{name}: no doc"
    assert len({a.name for a in d.attrs}) == len(d.attrs), f"{name}: duplicate attribute names"


def test_every_op_is_checked_against_jax():
    missing = sorted(set(all_ops()) - covered_ops())
    assert not missing, f"ops without a JAX test case: {missing}"


def test_the_required_op_set_is_registered():
    required = """negative exp log sqrt rsqrt tanh sigmoid relu abs sign floor ceil round clip cast
    add subtract multiply divide power maximum minimum equal not_equal less less_equal greater
    greater_equal logical_and logical_or logical_not where sum mean max min prod argmax argmin
    reshape transpose expand_dims squeeze concatenate split stack take strided_slice broadcast_to
    zeros ones full zeros_like ones_like matmul dense batch_matmul conv2d max_pool2d avg_pool2d
    global_avg_pool2d softmax log_softmax batch_norm layer_norm dropout pad flatten bias_add
    softmax_cross_entropy""".split()
    missing = sorted(set(required) - set(all_ops()))
    assert not missing, f"required ops not registered: {missing}"
