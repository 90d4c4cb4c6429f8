"""Testing support: the JAX oracle and generators of random well-typed programs."""
from relaydsl.testing.oracle import OracleError, assert_matches_jax, to_jax

__all__ = ["OracleError", "assert_matches_jax", "to_jax"]
