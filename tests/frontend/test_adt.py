"""Algebraic data types declared in Python (frontend/adt.py): the declarations a Python user
writes first, forward references included (issue 26, item 3); values against JAX."""
from __future__ import annotations

import traceback

import jax.numpy as jnp
import numpy as np
import pytest

from relaydsl import Float, Tensor, relay


@relay.adt
class Tree:
    Leaf: Tensor[Float, 3]
    Node: tuple[Tree, Tree]  # the class's own name, bare (annotations postponed here)


@relay.adt
class Quoted:
    Leaf: Tensor[Float, 3]
    Node: tuple["Quoted", "Quoted"]  # or quoted, as without postponed annotations


@relay.adt
class Boxed:
    Box: (tuple[Tensor[Float, 3], Tensor[Float, 3]],)  # one field of tuple type


@relay
def total(t: Tree) -> Tensor[Float, 3]:
    match t:
        case Tree.Leaf(v):
            return relay.tanh(v)
        case Tree.Node(left, right):
            return total(left) + total(right)


@relay
def quoted_total(t: Quoted) -> Tensor[Float, 3]:
    match t:
        case Quoted.Leaf(v):
            return relay.tanh(v)
        case Quoted.Node(left, right):
            return quoted_total(left) + quoted_total(right)


@relay
def unbox(b: Boxed) -> Tensor[Float, 3]:
    match b:
        case Boxed.Box((a, b)):
            return a * b


LEAVES = np.random.default_rng(3).standard_normal((3, 3)).astype(np.float32)


def test_tuple_fields_with_forward_references_declare_two_fields():
    assert len(Tree.Node.constructor.inputs) == 2
    assert len(Quoted.Node.constructor.inputs) == 2
    expected = jnp.sum(jnp.tanh(LEAVES), axis=0)
    tree = Tree.Node(Tree.Leaf(LEAVES[0]), Tree.Node(Tree.Leaf(LEAVES[1]), Tree.Leaf(LEAVES[2])))
    np.testing.assert_allclose(total(tree), expected, rtol=1e-5)
    quoted = Quoted.Node(Quoted.Leaf(LEAVES[0]),
                         Quoted.Node(Quoted.Leaf(LEAVES[1]), Quoted.Leaf(LEAVES[2])))
    np.testing.assert_allclose(quoted_total(quoted), expected, rtol=1e-5)


def test_a_field_of_tuple_type_is_written_in_parentheses():
    assert len(Boxed.Box.constructor.inputs) == 1
    np.testing.assert_allclose(unbox(Boxed.Box((LEAVES[0], LEAVES[1]))), LEAVES[0] * LEAVES[1],
                               rtol=1e-6)


def test_a_bad_declaration_is_an_error_without_library_frames():
    with pytest.raises(TypeError, match=r"Bad\.Node: cannot evaluate the annotation 'Missing' "
                                        r"\(NameError: name 'Missing' is not defined\)") as info:
        @relay.adt
        class Bad:
            Leaf: Tensor[Float, 3]
            Node: tuple["Bad", "Missing"]
    files = [frame.filename for frame in traceback.extract_tb(info.value.__traceback__)]
    assert not any(f.endswith(("frontend/adt.py", "frontend/annotations.py")) for f in files)
