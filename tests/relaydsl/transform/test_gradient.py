"""The higher-order reverse-mode transform against jax.grad: nesting, control flow, closures,
recursion, data types, and whole networks."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from relaydsl import Float, Int, RelayTypeError, Tensor, relay, relay_model
from tests.frontend.models import lenet, loss as lenet_loss
from tests.frontend.test_layers import jax_lenet

jax.config.update("jax_enable_x64", True)
rng = np.random.default_rng(0)


def derivative(f):
    """d/dx f as a decorated function, written with the Grad node (so it nests)."""
    @relay
    def d(x: Float) -> Float:
        return relay.grad(f)(x)[1][0]

    return d


@relay
def poly(x: Float) -> Float:
    return 3.0 * x * x * x - 2.0 * x * x + x - 5.0


@relay
def tanh_f(x: Float) -> Float:
    return relay.tanh(x)


@relay
def exp_f(x: Float) -> Float:
    return relay.exp(x * 0.5)


@relay
def piecewise(x: Float) -> Float:
    if x > 0.0:
        return x * x * x
    return x * x


@relay
def power(x: Float, n: Int) -> Float:
    if n == 0:
        return 1.0
    return x * power(x, n - 1)


@relay
def cube_by_power(x: Float) -> Float:
    return power(x, 3)


CASES = [
    (poly, lambda x: 3 * x ** 3 - 2 * x ** 2 + x - 5),
    (tanh_f, jnp.tanh),
    (exp_f, lambda x: jnp.exp(x * 0.5)),
    (piecewise, lambda x: x ** 3 if x > 0 else x ** 2),
    (cube_by_power, lambda x: x ** 3),
]


@pytest.mark.slow
@pytest.mark.parametrize("f, jf", CASES, ids=lambda c: getattr(c, "__name__", ""))
def test_first_second_and_third_derivatives_match_jax(f, jf):
    # each derivative is built and compiled once, then run at both points
    grads = [relay.grad(f), relay.grad(derivative(f)), relay.grad(derivative(derivative(f)))]
    for x in (0.7, -1.3):
        value, (g,) = grads[0](np.float32(x))
        np.testing.assert_allclose(value, jf(x), rtol=1e-5)
        np.testing.assert_allclose(g, jax.grad(jf)(x), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(grads[1](np.float32(x))[1][0], jax.grad(jax.grad(jf))(x),
                                   rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(grads[2](np.float32(x))[1][0],
                                   jax.grad(jax.grad(jax.grad(jf)))(x), rtol=1e-4, atol=1e-4)


@relay
def repeated(x: Tensor[Float, 3], n: Int) -> Float:
    acc = x
    for _ in range(n):
        acc = relay.tanh(acc * x + 0.5)
    return relay.sum(acc)


def test_a_loop_whose_trip_count_depends_on_an_argument():
    x = rng.standard_normal(3).astype(np.float32)

    def jax_repeated(x, n):
        acc = x
        for _ in range(n):  # Python control flow, un-jitted
            acc = jnp.tanh(acc * x + 0.5)
        return jnp.sum(acc)

    for n in (0, 1, 4):
        value, (gx, gn) = relay.grad(repeated)(x, np.int32(n))
        np.testing.assert_allclose(value, jax_repeated(x, n), rtol=1e-5)
        np.testing.assert_allclose(gx, jax.grad(jax_repeated)(x, n), rtol=1e-4, atol=1e-6)
        assert gn.dtype == np.int32 and gn == 0


@relay
def branchy(x: Tensor[Float, 4], y: Tensor[Float, 4]) -> Float:
    if relay.sum(x) > relay.sum(y):
        z = x * y
    else:
        z = relay.exp(x) - y
    return relay.sum(z * z)


def test_an_if_on_a_tensor():
    def jax_branchy(x, y):
        z = x * y if jnp.sum(x) > jnp.sum(y) else jnp.exp(x) - y
        return jnp.sum(z * z)

    for shift in (1.0, -1.0):
        x = (rng.standard_normal(4) + shift).astype(np.float32)
        y = rng.standard_normal(4).astype(np.float32)
        _, (gx, gy) = relay.grad(branchy)(x, y)
        jx, jy = jax.grad(jax_branchy, argnums=(0, 1))(x, y)
        np.testing.assert_allclose(gx, jx, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(gy, jy, rtol=1e-4, atol=1e-5)


@relay
def with_closures(x: Tensor[Float, 3], w: Tensor[Float, 3]) -> Float:
    scale = relay.sigmoid(w)

    def layer(v):
        return relay.tanh(v * scale)

    twice = lambda v: layer(layer(v))  # noqa: E731 (a lambda in the DSL is the subject)
    return relay.sum(twice(x) * w)


def test_closures_capturing_lets():
    x, w = (rng.standard_normal(3).astype(np.float32) for _ in range(2))

    def jax_f(x, w):
        def layer(v):
            return jnp.tanh(v * jax.nn.sigmoid(w))

        return jnp.sum(layer(layer(x)) * w)

    _, (gx, gw) = relay.grad(with_closures)(x, w)
    jx, jw = jax.grad(jax_f, argnums=(0, 1))(x, w)
    np.testing.assert_allclose(gx, jx, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(gw, jw, rtol=1e-4, atol=1e-6)


@relay
def fold_list(x: Tensor[Float, 2]) -> Float:
    xs = [x, x * 2.0, relay.exp(x)]
    total = relay.foldl(lambda acc, e: acc * relay.tanh(e) + e, relay.zeros_like(x), xs)
    return relay.sum(total)


def test_a_recursive_list_fold():
    x = rng.standard_normal(2).astype(np.float32)

    def jax_f(x):
        acc = jnp.zeros_like(x)
        for e in [x, x * 2.0, jnp.exp(x)]:
            acc = acc * jnp.tanh(e) + e
        return jnp.sum(acc)

    _, (gx,) = relay.grad(fold_list)(x)
    np.testing.assert_allclose(gx, jax.grad(jax_f)(x), rtol=1e-4, atol=1e-6)


def test_lenet_gradients_of_every_parameter_match_jax():
    model = relay.create_model(lenet, seed=2, init="glorot")
    x = rng.standard_normal((1, 28, 28)).astype(np.float32)
    y = np.eye(10, dtype=np.float32)[4]
    grads = relay.grad(model, lenet_loss, (x, y))
    x64, y64 = x.astype(np.float64), y.astype(np.float64)
    expected = jax.grad(lambda p: -jnp.sum(y64 * jax.nn.log_softmax(jax_lenet(p, x64))))(
        {k: jnp.asarray(v, jnp.float64) for k, v in model.params.items()})
    assert set(grads) == set(model.params)
    for k in grads:
        np.testing.assert_allclose(grads[k], expected[k], rtol=1e-4, atol=1e-5, err_msg=k)


@relay_model
def mlp(x: Tensor[Float, ("n", 20)]) -> Tensor[Float, ("n", 5)]:
    h = relay.relu(relay.linear(x, num_hidden=16))
    return relay.linear(relay.tanh(relay.linear(h, num_hidden=8)), num_hidden=5)


@relay
def mlp_loss(x: Tensor[Float, ("n", 20)], y: Tensor[Float, ("n", 5)]) -> Float:
    return relay.softmax_cross_entropy(mlp(x), y)


def test_mlp_gradients_match_jax_and_training_reduces_the_loss():
    model = relay.create_model(mlp, seed=0, init="glorot")
    x = rng.standard_normal((32, 20)).astype(np.float32)
    y = np.eye(5, dtype=np.float32)[rng.integers(0, 5, 32)]

    def jax_loss(p):
        h = jax.nn.relu(x.astype(np.float64) @ p["linear_0.weight"].T + p["linear_0.bias"])
        h = jnp.tanh(h @ p["linear_1.weight"].T + p["linear_1.bias"])
        logits = h @ p["linear_2.weight"].T + p["linear_2.bias"]
        return jnp.mean(-jnp.sum(y * jax.nn.log_softmax(logits), axis=-1))

    grads = relay.grad(model, mlp_loss, (x, y))
    expected = jax.grad(jax_loss)({k: jnp.asarray(v, jnp.float64) for k, v in model.params.items()})
    for k in grads:
        np.testing.assert_allclose(grads[k], expected[k], rtol=1e-4, atol=1e-6, err_msg=k)
    step = relay.grad(model, mlp_loss)
    first = float(model.apply(mlp_loss, x, y))
    for _ in range(30):
        relay.update_model_params(model, step(x, y), lr=0.5)
    assert float(model.apply(mlp_loss, x, y)) < 0.5 * first


def test_grad_of_a_function_not_returning_a_tensor_is_a_clear_error():
    @relay
    def pair(x: Float) -> tuple[Float, Float]:
        return x, x

    with pytest.raises(TypeError, match="returning a floating-point tensor"):
        relay.grad(pair)


def test_through_references():
    from relaydsl.backend.interpreter import evaluate
    from relaydsl.ir import (
        Call, Function, Grad, IRModule, Let, Op, RefCreate, RefRead, RefWrite, TensorType, Var,
    )
    from relaydsl.transform.gradient import lower_grads

    def op(name, *args):
        return Call(Op.get(name), args)

    # r = ref(x); r := !r * x; r := tanh(!r); sum(!r)
    x, r = Var("x", TensorType((3,))), Var("r")
    body = Let(r, RefCreate(x),
               Let(Var("_"), RefWrite(r, op("multiply", RefRead(r), x)),
                   Let(Var("_"), RefWrite(r, op("tanh", RefRead(r))), op("sum", RefRead(r)))))
    mod = IRModule()
    f = mod.add("f", Function([x], body))
    y = Var("y", TensorType((3,)))
    mod["main"] = Function([y], Call(Grad(f), [y]))
    v = np.array([0.3, -0.2, 0.5], np.float32)
    np.testing.assert_allclose(evaluate(lower_grads(mod), v)[1][0],
                               jax.grad(lambda x: jnp.sum(jnp.tanh(x * x)))(v), rtol=1e-5)


@relay.adt("a")
class BTree:
    Leaf: "a"
    Node: ("BTree", "BTree")


@relay
def tree_product(t: BTree[Tensor[Float, 2]]) -> Tensor[Float, 2]:
    match t:
        case BTree.Leaf(v):
            return relay.tanh(v)
        case BTree.Node(l, r):
            return tree_product(l) * tree_product(r)


@relay
def tree_loss(x: Tensor[Float, 2]) -> Float:
    t = BTree.Node(BTree.Leaf(x), BTree.Node(BTree.Leaf(x * 2.0), BTree.Leaf(x + 1.0)))
    return relay.sum(tree_product(t))


def test_through_a_user_adt_and_match():
    x = np.array([0.3, -0.7], np.float32)
    expected = jax.grad(lambda x: jnp.sum(jnp.tanh(x) * jnp.tanh(2 * x) * jnp.tanh(x + 1)))(x)
    np.testing.assert_allclose(relay.grad(tree_loss)(x)[1][0], expected, rtol=1e-5)


def test_differentiating_a_non_float_result_is_a_clear_error():
    @relay
    def index_of_max(x: Tensor[Float, 3]) -> Tensor[Int, ()]:
        return relay.argmax(x)

    with pytest.raises(TypeError, match="floating-point tensor"):
        relay.grad(index_of_max)

    def inside(x: Tensor[Float, 3]) -> Tensor[Float, 3]:
        return relay.grad(index_of_max)(x)[1][0]

    with pytest.raises(RelayTypeError, match="grad needs a function returning a floating-point"):
        relay(inside)  # reported when decorated


@relay
def sum_of_squares(x: Tensor[Float, 3]) -> Float:
    return relay.sum(x * x)


@relay
def gradient_through_a_local_name(x: Tensor[Float, 3]) -> Tensor[Float, 3]:
    d = relay.grad(sum_of_squares)  # a grad function bound to a name, then called
    return d(x)[1][0]


def test_a_grad_function_bound_to_a_name_returns_value_and_gradients():
    x = np.array([1.0, -2.0, 0.5], np.float32)
    expected = jax.grad(lambda v: jnp.sum(v * v))(x)
    np.testing.assert_allclose(gradient_through_a_local_name(x), expected, rtol=1e-6)


# Symbolic dimensions are shape parameters: each use of a shape-polymorphic function,
# a grad of it included, instantiates them (issue 11, item 1).

@relay
def sum_of_squares_any_length(x: Tensor[Float, ("n",)]) -> Float:
    return relay.sum(x * x)


@relay
def gradient_at_any_length(x: Tensor[Float, ("n",)]) -> Tensor[Float, ("n",)]:
    # the caller's n and the callee's n are different shape parameters of the same name
    return relay.grad(sum_of_squares_any_length)(x)[1][0]


@relay
def batch_layer(x: Tensor[Float, ("n", 4)], w: Tensor[Float, (4, 3)]) -> Tensor[Float, ("n", 3)]:
    return relay.tanh(x @ w)


@pytest.mark.parametrize("target", ["llvm", "interp"])
def test_grad_of_a_shape_polymorphic_function_at_several_sizes(target, monkeypatch):
    monkeypatch.setenv("RELAYDSL_TARGET", target)
    d = relay.grad(sum_of_squares_any_length)
    for n in (3, 5):
        x = rng.normal(size=n).astype(np.float32)
        value, (dx,) = d(x)
        np.testing.assert_allclose(value, np.sum(x * x), rtol=1e-6)
        np.testing.assert_allclose(dx, jax.grad(lambda v: jnp.sum(v * v))(x), rtol=1e-6)


@pytest.mark.parametrize("target", ["llvm", "interp"])
def test_grad_of_a_shape_polymorphic_function_inside_decorated_code(target):
    exe = relay.build(gradient_at_any_length, target=target)
    for n in (2, 4):
        x = rng.normal(size=n).astype(np.float32)
        np.testing.assert_allclose(exe(x), jax.grad(lambda v: jnp.sum(v * v))(x), rtol=1e-6)


@pytest.mark.parametrize("target", ["llvm", "interp"])
def test_grad_of_a_batch_generic_layer_matches_jax(target, monkeypatch):
    monkeypatch.setenv("RELAYDSL_TARGET", target)
    x = rng.normal(size=(5, 4)).astype(np.float32)
    w = rng.normal(size=(4, 3)).astype(np.float32)
    value, (dx, dw) = relay.grad(batch_layer)(x, w)
    # a non-scalar result is seeded with ones: the gradient of its sum
    expected = jax.grad(lambda a, b: jnp.sum(jnp.tanh(a @ b)), argnums=(0, 1))(x, w)
    np.testing.assert_allclose(value, np.tanh(x @ w), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dx, expected[0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dw, expected[1], rtol=1e-5, atol=1e-6)


@relay
def squares_twice(x: Tensor[Float, ("m",)]) -> Float:
    f = sum_of_squares_any_length  # a polymorphic global used as a value, under grad
    return f(x) + f(x * 2.0)


@pytest.mark.parametrize("target", ["llvm", "interp"])
def test_grad_through_a_polymorphic_global_used_as_a_value(target, monkeypatch):
    monkeypatch.setenv("RELAYDSL_TARGET", target)
    x = rng.normal(size=4).astype(np.float32)
    value, (dx,) = relay.grad(squares_twice)(x)
    expected = jax.grad(lambda v: jnp.sum(v * v) + jnp.sum((2 * v) ** 2))(x)
    np.testing.assert_allclose(value, 5 * np.sum(x * x), rtol=1e-5)
    np.testing.assert_allclose(dx, expected, rtol=1e-5)


# ---- the operators of issue 12, item 7, in one program ------------------------------------------


@relay
def new_ops_program(x: Tensor[Float, (3, 4)], i: Tensor[Int, (2, 2)]) -> Float:
    waves = relay.sin(x) * relay.cos(x * 0.5) + relay.atan(relay.tan(x * 0.3))
    smooth = relay.erf(waves) + relay.floor_mod(x, relay.variance(x, axis=1, keepdims=True))
    picked = relay.gather_nd(relay.tile(smooth, reps=(2, 1)), i)
    spread = relay.variance(picked, unbiased=True)
    onehot = relay.one_hot(relay.take(i, 0, axis=0), 2.0, -0.5, depth=4, dtype="float32")
    top = relay.topk(smooth, k=2, axis=1)[0]
    return spread + relay.sum(onehot * relay.sum(smooth, axis=0)) + relay.sum(top * top)


def jax_new_ops_program(x, i):
    waves = jnp.sin(x) * jnp.cos(x * 0.5) + jnp.arctan(jnp.tan(x * 0.3))
    var = jnp.var(x, axis=1, keepdims=True)
    smooth = jax.scipy.special.erf(waves) + (x - jnp.floor(x / var) * var)
    tiled = jnp.tile(smooth, (2, 1))
    picked = tiled[jnp.clip(i[0], 0, 5), jnp.clip(i[1], 0, 3)]
    onehot = jnp.where(i[0][:, None] == jnp.arange(4), 2.0, -0.5).astype(jnp.float32)
    top = jax.lax.top_k(smooth, 2)[0]
    return (jnp.var(picked, ddof=1) + jnp.sum(onehot * jnp.sum(smooth, axis=0))
            + jnp.sum(top * top))


@pytest.mark.parametrize("target", ["interp", "llvm"])
def test_new_ops_in_one_program_match_jax(target):
    """sin, cos, tan, atan, erf, floor_mod, variance, tile, gather_nd, one_hot, topk compiled
    together (fused on llvm), and their gradients through relay.grad, against JAX."""
    x = rng.uniform(-2, 2, (3, 4)).astype(np.float32)
    i = np.array([[5, 1], [3, 0]], np.int32)
    expected = jax_new_ops_program(jnp.asarray(x), jnp.asarray(i))
    np.testing.assert_allclose(new_ops_program.build(target)(x, i), expected, rtol=1e-4,
                               atol=1e-5)
    value, (dx, _) = relay.grad(new_ops_program)(x, i)
    np.testing.assert_allclose(value, expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dx, jax.grad(jax_new_ops_program)(jnp.asarray(x), jnp.asarray(i)),
                               rtol=1e-3, atol=1e-4)
