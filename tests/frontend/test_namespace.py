"""relay.<op> as a TVM or NumPy user calls it: attributes positionally in TVM's order or by
keyword, inputs by name, help() showing the op, one function per op (issue 13, item 1)."""
import inspect
import pydoc

import jax.numpy as jnp
import numpy as np
import pytest

from relaydsl import Float, Tensor, relay
from relaydsl.errors import DSLSyntaxError

X = np.arange(12, dtype=np.float32).reshape(3, 4) / 7.0


def test_attributes_positionally_in_tvms_order_or_by_keyword_outside_decorated_code():
    np.testing.assert_allclose(relay.sum(X, 1), jnp.sum(X, 1), rtol=1e-6)
    np.testing.assert_allclose(relay.sum(X, 1, True), jnp.sum(X, 1, keepdims=True), rtol=1e-6)
    np.testing.assert_allclose(relay.reshape(X, (4, 3)), jnp.reshape(X, (4, 3)))
    for got, want in zip(relay.split(X, 2, 1), jnp.split(X, 2, axis=1)):
        np.testing.assert_allclose(got, want)
    zeros = relay.zeros((3,), "float32")
    assert zeros.dtype == np.float32 and zeros.shape == (3,) and not zeros.any()
    ones = relay.ones((2,), dtype="float64")
    assert ones.dtype == np.float64 and (ones == 1).all()
    np.testing.assert_allclose(relay.softmax(data=X, axis=0), np.asarray(
        jnp.exp(X) / jnp.exp(X).sum(0)), rtol=1e-5)
    np.testing.assert_allclose(relay.clip(X, 0.2, 1.0), jnp.clip(X, 0.2, 1.0))


def test_the_same_calls_inside_decorated_code():
    @relay
    def f(x: Tensor[Float, (3, 4)]) -> Tensor[Float, (4, 3)]:
        left, right = relay.split(x, 2, 1)
        total = relay.sum(left, 1, True) + relay.sum(right, axis=1, keepdims=True)
        return relay.reshape(total * x, (4, 3)) + relay.zeros((4, 3), "float32") + \
            relay.softmax(data=relay.transpose(x, (1, 0)), axis=0)

    want = jnp.reshape(X.sum(1, keepdims=True) * X, (4, 3)) + jnp.exp(X.T) / jnp.exp(X.T).sum(0)
    np.testing.assert_allclose(f(X), want, rtol=1e-5)


def test_a_call_that_does_not_fit_the_signature_is_a_clear_error():
    with pytest.raises(TypeError, match=r"max_pool2d takes 1 input\(s\) and 2 positional "
                                        r"attribute\(s\) \(2 more by keyword only\)"):
        relay.max_pool2d(np.ones((1, 1, 4, 4), np.float32), (2, 2), (2, 2), (1, 1))
    with pytest.raises(TypeError, match="attribute 'axis' given twice"):
        relay.sum(X, 1, axis=1)
    with pytest.raises(TypeError, match="missing input 'rhs'"):
        relay.add(X)

    def bad(x: Tensor[Float, (3, 4)]) -> Tensor[Float, (3,)]:
        return relay.sum(x, 1, False, 3)

    with pytest.raises(DSLSyntaxError, match=r"sum takes 1 input\(s\) and 2 positional") as e:
        relay(bad)(X)
    assert "test_namespace.py" in str(e.value)

    def not_constant(x: Tensor[Float, (3, 4)], k: int) -> Tensor[Float, (3,)]:
        return relay.sum(x, k)

    with pytest.raises(DSLSyntaxError, match="the attribute axis of sum must be a constant"):
        relay(not_constant)(X, 1)


def test_keyword_only_attributes_where_tvms_signature_differs():
    # TVM: max_pool2d(data, pool_size, strides, dilation, padding, ...): our pools have no
    # dilation, so padding on is by keyword, not silently in dilation's place
    sig = inspect.signature(relay.max_pool2d)
    assert [p.name for p in sig.parameters.values() if p.kind is p.KEYWORD_ONLY] == [
        "padding", "ceil_mode"]
    assert "mode" in [p.name for p in inspect.signature(relay.take).parameters.values()
                      if p.kind is p.KEYWORD_ONLY]


def test_one_function_per_op_whose_help_shows_signature_attributes_and_math():
    assert relay.softmax is relay.softmax
    assert relay.softmax.__name__ == "softmax"
    text = pydoc.render_doc(relay.conv2d, renderer=pydoc.plaintext)
    assert "conv2d(data, weight, strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), " \
           "groups=1" in text
    assert "groups (an int, default 1)" in text
    assert "Gradient: d conv2d(x, w) = (conv2d(dilate(g, strides)" in text
    text = pydoc.render_doc(relay.softmax, renderer=pydoc.plaintext)
    assert "softmax(data, axis=-1)" in text and "exp(x - max) / sum(exp(x - max))" in text


def test_an_op_passed_as_a_value_is_still_the_op():
    @relay
    def apply(x: Tensor[Float, (3, 4)]) -> Tensor[Float, (3, 4)]:
        f = relay.tanh
        return f(x)

    np.testing.assert_allclose(apply(X), jnp.tanh(X), rtol=1e-6)


def test_source_text_runs_with_the_names_from_relaydsl_import_star():
    """relay.function_from_source gives the text relaydsl's public names (and np), which the
    frontend lists apart from relaydsl/__init__.py, as the frontend does not import it."""
    import relaydsl
    from relaydsl.frontend.namespace import _user_names

    assert _user_names() == {name: getattr(relaydsl, name) for name in relaydsl.__all__}
