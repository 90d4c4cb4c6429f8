"""What the workload modules share: the relaydsl build, optional PyTorch, random inputs."""
from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import numpy as np

from relaydsl import relay

# set by run.py from --target before any Case is set up
RELAY_TARGET = {"target": "llvm"}


def specialize(template: Callable, decorator: Callable = relay, **constants: Any):
    """``@relay`` (or `decorator`: ``relay_model``) applied to `template` with shape constants
    (``N=512``) bound in its globals.

    The DSL resolves the names in a function's annotations in its module globals (or its
    closure), so one template written with ``Tensor[Float, (N, N)]`` gives a statically shaped
    function per size; static shapes are what a compiler specialises best. The workload modules
    use ``from __future__ import annotations`` so that the templates' annotations are not
    evaluated by Python itself.
    """
    fn = types.FunctionType(template.__code__, {**template.__globals__, **constants},
                            template.__name__, template.__defaults__, template.__closure__)
    fn.__qualname__ = template.__qualname__
    return decorator(fn)


def build(fn, target: str | None = None):
    """``relay.build(fn, target=...)`` at the target's default opt_level (llvm: 3, everything;
    interp: 0, the reference)."""
    return relay.build(fn, target=target or RELAY_TARGET["target"])


def relaydsl_runner(fn, *args: Any) -> Callable[[], Any]:
    """The public API only: ``exe = relay.build(fn, target=...)``; ``exe(*args)``."""
    exe = build(fn)
    return lambda: exe(*args)


def rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def normal(r: np.random.Generator, shape: tuple[int, ...], scale: float = 1.0) -> np.ndarray:
    return (r.standard_normal(shape) * scale).astype(np.float32)


def torch_module():
    """``torch`` with two threads, or an ImportError (the harness prints "—" and a footnote)."""
    import torch

    if torch.get_num_threads() != 2:
        torch.set_num_threads(2)
    return torch


def torch_compiled_inference(forward: Callable, params: tuple[np.ndarray, ...],
                             *inputs: np.ndarray) -> Callable[[], Any]:
    """A runner of ``forward(*inputs, *params)`` for inference through torch.compile as
    PyTorch recommends on CPUs: `params` the weights of an ``nn.Module`` (in eval mode)
    compiled with freezing, so that inductor treats them as constants (folding what depends
    on them alone and packing convolution and linear weights for oneDNN once). Freezing
    applies under ``torch.no_grad()`` only, where the runner calls it. Weights passed as
    arguments, as the other systems take them, would be inputs of the graph, out of
    freezing's reach."""
    torch = torch_module()

    class Inference(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weights = torch.nn.ParameterList(
                torch.nn.Parameter(torch.from_numpy(p), requires_grad=False) for p in params)

        def forward(self, *inputs):
            return forward(*inputs, *self.weights)

    compiled = torch.compile(Inference().eval(), options={"freezing": True})
    tensors = [torch.from_numpy(a) for a in inputs]

    def run():
        with torch.no_grad():
            return compiled(*tensors)
    return run


def jax_modules():
    import jax
    import jax.numpy as jnp

    return jax, jnp
