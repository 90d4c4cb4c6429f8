"""Reusable test programs, built with the Python IR API.

Every builder returns a fresh IRModule (with the prelude). ``ALL_PROGRAMS`` lists
(name, builder) pairs that together use every node type, pattern kind and type
form; the text-format tests round-trip each one, and later stages (inference,
interpreter, passes) can import them. ``WELL_TYPED`` names the programs meant to
type-check; the others exercise IR forms (free type variables, explicit type
arguments, operators as values) that only the printer and parser care about.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
from hypothesis import strategies as st

from relaydsl.ir import (
    Any,
    Call,
    Clause,
    Function,
    FuncType,
    GlobalVar,
    Grad,
    If,
    IRModule,
    Kind,
    Let,
    Match,
    Op,
    PatternConstructor,
    PatternTuple,
    PatternVar,
    PatternWildcard,
    RefCreate,
    RefRead,
    RefType,
    RefWrite,
    TensorType,
    Tuple,
    TupleGetItem,
    TupleType,
    TypeCall,
    TypeVar,
    Var,
    const,
    define_adt,
)
from relaydsl.ir.expr import Constant, Expr

I32_1 = TensorType((1,), "int32")
F32 = TensorType((), "float32")
I32 = TensorType((), "int32")


def op(name: str, *args: Expr, **attrs) -> Call:
    """``Call(Op.get(name), args, attrs)``."""
    return Call(Op.get(name), args, attrs)


def int1(value: int) -> Constant:
    """A Tensor[(1,), int32] constant (the figure's constants live in the metadata pool)."""
    return Constant(np.array([value], dtype="int32"))


# ---------------------------------------------------------------------------
# Figure 2 of the 2019 paper: tf.while_loop converted to a tail-recursive function.
# ---------------------------------------------------------------------------
def figure2_while_loop_module(start: tuple[int, int, int] = (1, 1, 5)) -> IRModule:
    """The paper's loop: ``i, j, k = 1, 1, 5``; while ``(i + j < 10 != j * k < 100) ==
    (k >= i + j)``: ``i, j, k = i + j, j + k, k + 1``. A let-bound recursive closure,
    subterms duplicated exactly as the figure prints them (``%0`` and ``%5`` are two adds).

    From the figure's (1, 1, 5) the condition is already false, so main returns (1, 1, 5);
    from `start` = (1, 1, 1) it steps three times to (8, 7, 4) (see figure2_expected).
    """
    lvar0, lvar1, lvar2 = (Var(f"lvar{i}", I32_1) for i in range(3))
    loop = Var("while_loop", FuncType((I32_1,) * 3, TupleType((I32_1,) * 3)))
    v1 = op("less", op("add", lvar0, lvar1), int1(10))
    v3 = op("less", op("multiply", lvar1, lvar2), int1(100))
    v4 = op("not_equal", v1, v3)
    v6 = op("greater_equal", lvar2, op("add", lvar0, lvar1))
    cond = op("min", op("equal", v4, v6))
    step = Call(loop, (op("add", lvar0, lvar1), op("add", lvar1, lvar2), op("add", lvar2, int1(1))))
    body = If(cond, step, Tuple((lvar0, lvar1, lvar2)))
    fn = Function((lvar0, lvar1, lvar2), body, TupleType((I32_1,) * 3))
    main = Let(loop, fn, Call(loop, tuple(int1(v) for v in start)))
    mod = IRModule()
    mod.add("main", Function((), main, TupleType((I32_1,) * 3)))
    return mod


def figure2_expected(i: int = 1, j: int = 1, k: int = 5) -> tuple[np.ndarray, ...]:
    """The figure's loop run in Python from (i, j, k), as the program's (1,)-shaped tensors.

    >>> [int(v[0]) for v in figure2_expected()], [int(v[0]) for v in figure2_expected(1, 1, 1)]
    ([1, 1, 5], [8, 7, 4])
    """
    while ((i + j < 10) != (j * k < 100)) == (k >= i + j):
        i, j, k = i + j, j + k, k + 1
    return tuple(np.array([v], dtype="int32") for v in (i, j, k))


# ---------------------------------------------------------------------------
# The round-trip corpus
# ---------------------------------------------------------------------------
def mlp_module() -> IRModule:
    """A dense layer with bias, relu, softmax and a keepdims sum: op attributes and a
    weight constant in the metadata pool."""
    x = Var("x", TensorType((4, 8), "float32"))
    w = Var("w", TensorType((8, 3), "float32"))
    bias = Constant(np.linspace(-1, 1, 3, dtype="float32"))
    h = op("relu", op("add", op("matmul", x, w), bias))
    probs = op("softmax", h, axis=1)
    total = op("sum", probs, axis=[1], keepdims=True)
    mod = IRModule()
    mod.add("main", Function((x, w), Tuple((probs, total))))
    return mod


def attrs_module() -> IRModule:
    """Operators with every kind of attribute value: ints, lists, floats, strings, dtypes."""
    x = Var("x", TensorType((2, 3), "float32"))
    i = Var("i", TensorType((2,), "int32"))
    clipped = op("clip", x, a_min=-1.5, a_max=float("inf"))
    reshaped = op("reshape", clipped, newshape=[3, 2])
    cast = op("cast", reshaped, dtype="int32")
    taken = op("take", x, i, axis=1, mode="wrap")
    sliced = op("strided_slice", x, begin=[0, 1], end=[2, 3])
    both = op("concatenate", Tuple((x, sliced)), axis=1)
    zeros = op("zeros", shape=[2, 2], dtype="float64")
    mod = IRModule()
    mod.add("main", Function((x, i), Tuple((cast, taken, both, zeros, op("sum", x)))))
    return mod


def lets_and_closures_module() -> IRModule:
    """Let chains, a closure capturing a let-bound variable, a higher-order call, and a
    function literal applied directly."""
    x = Var("x", F32)
    scale = Var("scale")
    add_scale = Var("add_scale")
    y = Var("y", F32)
    twice = Var("twice")
    f, z = Var("f", FuncType((F32,), F32)), Var("z", F32)
    closure = Function((y,), op("add", y, scale), F32)
    twice_fn = Function((f, z), Call(f, (Call(f, (z,)),)), F32)
    w = Var("w", F32)
    direct = Call(Function((w,), op("negative", w)), (x,))
    body = Let(scale, op("multiply", x, const(2.0)),
               Let(add_scale, closure,
                   Let(twice, twice_fn,
                       op("add", Call(twice, (add_scale, x)), direct))))
    mod = IRModule()
    mod.add("main", Function((x,), body, F32))
    return mod


def recursion_module() -> IRModule:
    """Recursion through globals: factorial, and mutually recursive even/odd defined in an
    order that needs forward references."""
    mod = IRModule()
    fact, even, odd = GlobalVar("fact"), GlobalVar("even"), GlobalVar("odd")
    n = Var("n", I32)
    mod.add(fact, Function((n,), If(
        op("equal", n, const(0)), const(1),
        op("multiply", n, Call(fact, (op("subtract", n, const(1)),)))), I32))
    bool_t = TensorType((), "bool")
    m = Var("m", I32)
    mod.add(even, Function((m,), If(op("equal", m, const(0)), const(True),
                                    Call(odd, (op("subtract", m, const(1)),))), bool_t))
    k = Var("k", I32)
    mod.add(odd, Function((k,), If(op("equal", k, const(0)), const(False),
                                   Call(even, (op("subtract", k, const(1)),))), bool_t))
    a = Var("a", I32)
    mod.add("main", Function((a,), Tuple((Call(fact, (a,)), Call(even, (a,))))))
    return mod


def adt_module() -> IRModule:
    """A user ADT, nested constructor/tuple/wildcard patterns, an incomplete match, and the
    prelude's List, Option and map."""
    mod = IRModule()
    tree = define_adt("BTree", ["a"], [
        ("Leaf", []),
        ("Node", [lambda s, tv: s, lambda s, tv: tv[0], lambda s, tv: s]),
    ])
    mod.add_type(tree)
    leaf, node = tree.constructors
    a = TypeVar("a")
    t = Var("t", TypeCall(tree.header, (a,)))
    left, v, w = Var("left"), Var("v", a), Var("w")
    size = GlobalVar("size")
    body = Match(t, (
        Clause(PatternConstructor(leaf), const(0)),
        Clause(PatternConstructor(node, (PatternVar(left), PatternVar(v),
                                         PatternConstructor(leaf))),
               op("add", Call(size, (left,)), const(1))),
        Clause(PatternConstructor(node, (PatternWildcard(), PatternWildcard(),
                                         PatternConstructor(node, (PatternWildcard(), PatternVar(w),
                                                                   PatternWildcard())))),
               const(2)),
        Clause(PatternWildcard(), const(3)),
    ))
    mod.add(size, Function((t,), body, I32, (a,)))

    cons, nil = mod.get_constructor("Cons"), mod.get_constructor("Nil")
    some, none = mod.get_constructor("Some"), mod.get_constructor("None")
    x = Var("x", F32)
    xs = Call(cons, (x, Call(cons, (const(2.0), Call(nil, ())))))
    pair = Tuple((Call(some, (x,)), xs))
    h, rest = Var("h"), Var("rest")
    head = Match(pair, (
        Clause(PatternTuple((PatternConstructor(some, (PatternVar(h),)),
                             PatternConstructor(cons, (PatternWildcard(), PatternVar(rest))))), h),
        Clause(PatternTuple((PatternConstructor(none), PatternWildcard())), x),
    ), complete=False)
    one = Var("one", F32)
    mapped = Call(mod.get_global_var("map"), (Function((one,), op("exp", one)), xs))
    tr = Call(node, (Call(leaf, ()), x, Call(leaf, ())))
    mod.add("main", Function((x,), Tuple((head, mapped, Call(size, (tr,)))),))
    return mod


def refs_module() -> IRModule:
    """A counter cell: ref, ref_read, ref_write, and a Ref-typed annotation."""
    x = Var("x", F32)
    r = Var("r", RefType(F32))
    unit = Var("unit", TupleType(()))
    body = Let(r, RefCreate(const(0.0)),
               Let(unit, RefWrite(r, op("add", RefRead(r), x)),
                   Let(Var("again"), RefWrite(r, op("multiply", RefRead(r), const(3.0))),
                       RefRead(r))))
    mod = IRModule()
    mod.add("main", Function((x,), body, F32))
    return mod


def tuples_module() -> IRModule:
    """Nested tuples, projections (chained), the empty tuple and a one-tuple."""
    x, y = Var("x", F32), Var("y", TensorType((2,), "int32"))
    nested = Tuple((x, Tuple((y, Tuple(()))), Tuple((x,))))
    p = Var("p")
    body = Let(p, nested, Tuple((TupleGetItem(TupleGetItem(p, 1), 0), TupleGetItem(p, 2),
                                 TupleGetItem(TupleGetItem(nested, 2), 0))))
    mod = IRModule()
    mod.add("main", Function((x, y), body))
    return mod


def constants_module() -> IRModule:
    """Scalars of every dtype inline, and tensors (with NaN, -0.0, infinities, an odd NaN
    payload, and an empty shape) in the metadata pool."""
    scalars = [
        Constant(np.array(v, dtype=d)) for v, d in [
            (0.1, "float16"), (-0.0, "float32"), (3.0, "float32"), (1e-300, "float64"),
            (1.5, "float64"), (2.5e38, "float32"), (-128, "int8"), (255, "uint8"),
            (-(2 ** 63), "int64"), (7, "int16"), (True, "bool"), (False, "bool"),
            (float("nan"), "float32"), (float("-inf"), "float64"),
        ]
    ]
    odd_nan = np.frombuffer(np.uint32(0xFFC00123).tobytes(), dtype="float32")
    tensors = [
        Constant(np.array([[1.0, -0.0], [np.nan, np.inf]], dtype="float32")),
        Constant(np.concatenate([odd_nan, np.array([np.float32(0.1)])])),
        Constant(np.zeros((0, 3), dtype="int64")),
        Constant(np.array([True, False])),
        Constant(np.arange(6, dtype="uint8").reshape(2, 3)),
        Constant(np.array([1 / 3, 2 ** -1074], dtype="float64")),
    ]
    mod = IRModule()
    mod.add("main", Function((), Tuple((*scalars, *tensors, tensors[0]))))
    return mod


def polymorphic_module() -> IRModule:
    """Globals with type parameters and function types in their annotations, instantiated
    at two different types."""
    mod = IRModule()
    a = TypeVar("a")
    x = Var("x", a)
    ident = mod.add("id", Function((x,), x, a, (a,)))
    a2, b2 = TypeVar("a"), TypeVar("b")
    f, y = Var("f", FuncType((a2,), b2)), Var("y", a2)
    apply = mod.add("apply", Function((f, y), Call(f, (y,)), b2, (a2, b2)))
    z = Var("z", F32)
    u = Var("u", F32)
    body = Tuple((Call(ident, (z,)), Call(ident, (const(2),)),
                  Call(apply, (Function((u,), op("equal", u, const(1.0))), z))))
    mod.add("main", Function((z,), body))
    return mod


def symbolic_dims_module() -> IRModule:
    """Shape parameters, free symbolic dims shared across a signature, Any dims, a dtype
    variable, and symbolic dims in a nested function's annotations."""
    mod = IRModule()
    n = TypeVar("n", Kind.Shape)
    x = Var("x", TensorType((n, 3), "float32"))
    mod.add("rows", Function((x,), op("sum", x, axis=[1]), TensorType((n,), "float32"), (n,)))
    m = TypeVar("m", Kind.Shape)
    u = Var("u", TensorType((m, Any), "float32"))
    v = Var("v", TensorType((m,), "float32"))
    inner = Var("inner", TensorType((m,), "float32"))
    body = Call(Function((inner,), op("negative", inner), TensorType((m,), "float32")),
                (op("add", op("sum", u, axis=[1]), v),))
    mod.add("free_dims", Function((u, v), body, TensorType((m,), "float32")))
    dt = TypeVar("dt", Kind.BaseType)
    k = TypeVar("k", Kind.Shape)
    w = Var("w", TensorType((k,), dt))
    mod.add("dtype_poly", Function((w,), w, TensorType((k,), dt), (k, dt)))
    clash = TypeVar("n", Kind.Shape)  # a different variable with the same name as `n`
    p, q = Var("p", TensorType((n,), "float32")), Var("q", TensorType((clash,), "float32"))
    mod.add("name_clash", Function((p, q), Tuple((p, q)), None, (n, clash)))
    return mod


def sharing_module() -> IRModule:
    """A DAG: a subterm shared by two uses, shared across both branches of an if, and a
    closure shared by two calls; plus same-named variables that need new display names."""
    x1, x2 = Var("x", F32), Var("x", F32)
    s = op("add", x1, x2)
    shared = op("multiply", s, s)
    branchy = If(op("less", x1, x2), op("exp", shared), op("negative", shared))
    y = Var("y", F32)
    closure = Function((y,), op("add", y, shared))
    body = Tuple((Call(closure, (x1,)), Call(closure, (x2,)), branchy, shared))
    mod = IRModule()
    mod.add("main", Function((x1, x2), body))
    return mod


def ir_forms_module() -> IRModule:
    """IR forms beyond the typed surface language: function attributes, explicit type
    arguments, an operator and constructors passed as values, a let whose value is a let,
    a variable annotated with a free type variable, a rank-2 parameter, odd name hints."""
    mod = IRModule()
    a = TypeVar("a")
    x = Var("x", F32)
    prim = Function((Var("p", F32),), const(1.0), F32, (), {"Primitive": 1, "name": "fused"})
    some = mod.get_constructor("Some")
    nil = mod.get_constructor("Nil")
    mapper = mod.get_global_var("map")
    xs = Call(nil, (), type_args=(F32,))
    inner_v = Var("0", F32)
    nested_let = Let(Var("outer.v", a), Let(inner_v, x, op("exp", inner_v)), x)
    c = TypeVar("c")
    g = Var("g", FuncType((c,), c, (c,)))
    use = mod.add("use_poly", Function((g,), Tuple((Call(g, (const(1.0),)), Call(g, (const(2),))))))
    d = TypeVar("d")
    q = Var("q", d)
    local_id = Function((q,), q, d, (d,))
    y = Var("y", F32)
    derivative = Grad(Function((y,), op("tanh", y)))
    body = Tuple((Call(prim, (x,)), Call(mapper, (some, xs)), Op.get("negative"), nil,
                  nested_let, Call(mapper, (Op.get("exp"), xs), type_args=(F32, F32)),
                  Call(use, (local_id,)), Call(derivative, (x,))))
    mod.add("main", Function((x,), body))
    return mod


def scoped_if_module() -> IRModule:
    """Nested ifs whose branches contain lets and matches; temporaries scoped per branch."""
    x = Var("x", F32)
    c = op("less", x, const(0.0))
    t = Var("t", F32)
    then = Let(t, op("negative", x), op("multiply", t, t))
    xs = Call(IRModule().get_constructor("Cons"), (x, Call(IRModule().get_constructor("Nil"), ())))
    h = Var("h")
    other = If(op("greater", x, const(10.0)), const(10.0),
               Match(xs, (Clause(PatternConstructor(IRModule().get_constructor("Cons"),
                                                    (PatternVar(h), PatternWildcard())),
                                 op("add", h, op("exp", x))),
                          Clause(PatternWildcard(), x))))
    mod = IRModule()
    mod.add("main", Function((x,), If(c, then, other), F32))
    return mod


ALL_PROGRAMS: list[tuple[str, Callable[[], IRModule]]] = [
    ("figure2_while_loop", figure2_while_loop_module),
    ("mlp", mlp_module),
    ("attrs", attrs_module),
    ("lets_and_closures", lets_and_closures_module),
    ("recursion", recursion_module),
    ("adt", adt_module),
    ("refs", refs_module),
    ("tuples", tuples_module),
    ("constants", constants_module),
    ("polymorphic", polymorphic_module),
    ("symbolic_dims", symbolic_dims_module),
    ("sharing", sharing_module),
    ("ir_forms", ir_forms_module),
    ("scoped_if", scoped_if_module),
]

WELL_TYPED = frozenset({
    "figure2_while_loop", "mlp", "attrs", "lets_and_closures", "recursion", "adt", "refs",
    "tuples", "constants", "polymorphic", "symbolic_dims", "sharing", "scoped_if",
})


def let_chain(n: int, annotated: bool = False) -> Expr:
    """``let %x1 = add(%x0, 1f); ...; %xn`` with a free ``%x0``: a chain of n lets."""
    ann = F32 if annotated else None
    vars_ = [Var(f"x{i}", ann) for i in range(n + 1)]
    one = const(1.0)
    body: Expr = vars_[-1]
    for i in range(n, 0, -1):
        body = Let(vars_[i], op("add", vars_[i - 1], one), body)
    return body


def diamond(depth: int) -> Expr:
    """``d_{k+1} = add(d_k, d_k)`` nested `depth` times: 2**depth paths, depth + 1 nodes."""
    x = Var("x", F32)
    e: Expr = x
    for _ in range(depth):
        e = op("add", e, e)
    return e


@st.composite
def random_exprs(draw: st.DrawFn, depth: int = 3, env: tuple[Var, ...] = ()) -> Expr:
    """A hypothesis strategy for small closed programs: constants, arithmetic, lets, applied
    lambdas, tuples with projections, and ifs, over float32 scalars."""
    leaves = ["const"] + (["var"] if env else [])
    kinds = leaves if depth == 0 else ["call", "let", "fn", "tuple", "if", *leaves, *leaves]
    kind = draw(st.sampled_from(kinds))

    def sub(scope: tuple[Var, ...] = env) -> Expr:
        return draw(random_exprs(depth - 1, scope))

    if kind == "var":
        return draw(st.sampled_from(env))
    if kind == "const":
        return const(draw(st.sampled_from([0.0, 1.0, 2.5])))
    if kind == "call":
        return op(draw(st.sampled_from(["add", "multiply"])), sub(), sub())
    if kind == "let":
        v = Var("v", F32)
        return Let(v, sub(), sub((*env, v)))
    if kind == "fn":
        p = Var("p", F32)
        return Call(Function((p,), sub((*env, p))), (sub(),))
    if kind == "tuple":
        return TupleGetItem(Tuple((sub(), sub())), draw(st.integers(0, 1)))
    return If(op("less", sub(), sub()), sub(), sub())
