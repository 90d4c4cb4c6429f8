"""Decorated functions made by a Python factory, as the model zoo makes them: a size the
factory takes may appear only in a signature. (No ``from __future__ import annotations``
here: the annotations are the values Python evaluated, which the frontend reads.)"""
import numpy as np

from relaydsl import Float, Tensor, relay


def make_padder(width: int):
    @relay
    def pad(x: Tensor[Float, (1, 2)], fill: Tensor[Float, (1, width)]
            ) -> Tensor[Float, (1, width + 2)]:
        # `width` is named only in the signature, so Python keeps no closure cell for it
        return relay.concatenate((x, fill), axis=1)

    return pad


def test_a_size_named_only_in_the_signature_is_the_factorys_argument():
    for width in (1, 3):
        pad = make_padder(width)
        out = pad(np.ones((1, 2), np.float32), np.zeros((1, width), np.float32))
        np.testing.assert_array_equal(out, [[1, 1] + [0] * width])
