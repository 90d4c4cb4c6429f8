"""Relay-to-Relay transforms, one per file.

- gradient.py: higher-order reverse-mode AD; ``lower_grads(mod)`` replaces grad nodes
  by ordinary Relay (innermost first), the paper's Grad node made executable;
- first_order_gradient.py: the reference-free adjoint program for straight-line code,
  used by ``lower_grads(mod, first_order=True)``.
"""
