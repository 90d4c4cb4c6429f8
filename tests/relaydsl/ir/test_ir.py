"""IR construction (and the errors it raises), traversal on DAGs, and 100,000-let chains."""
import numpy as np
import pytest

from relaydsl.errors import IRError
from relaydsl.ir import (
    Attrs,
    Call,
    Clause,
    Constant,
    ExprMutator,
    ExprVisitor,
    Function,
    GlobalVar,
    IRModule,
    Let,
    Match,
    Op,
    PatternConstructor,
    PatternWildcard,
    TensorType,
    Tuple,
    TupleGetItem,
    TypeVar,
    Var,
    const,
    free_vars,
    post_order,
)
from relaydsl.ir.parser import parse_expr
from relaydsl.ir.printer import astext
from relaydsl.ir.structural import structural_equal
from tests.relaydsl.ir.programs import F32, diamond, let_chain, op


# ---- construction -------------------------------------------------------------------------------
def test_op_calls_fill_default_attributes():
    x = Var("x", TensorType((2, 3)))
    call = op("sum", x, axis=[1])
    assert call.attrs == Attrs({"axis": (1,), "keepdims": False})
    assert call.op is Op.get("sum") and call.op.definition.name == "sum"
    with pytest.raises(AttributeError, match="immutable"):
        call.attrs.axis = 2  # type: ignore[misc]


def test_constants_are_private_read_only_copies():
    data = np.arange(3, dtype="float32")
    c = Constant(data)
    data[0] = 7
    assert c.data[0] == 0 and not c.data.flags.writeable
    assert const(1.5).data.dtype == np.float32 and const(2).data.dtype == np.int32
    assert const(2, "int64").data.dtype == np.int64


def test_module_holds_globals_and_prelude():
    mod = IRModule()
    x = Var("x")
    gv = mod.add("f", Function([x], x))
    assert mod["f"].params[0] is x and mod.get_global_var("f") is gv and "f" in mod
    assert "map" in mod and "f" in {g.name_hint for g in mod.user_functions()}
    assert mod.get_constructor("Cons").belong_to is mod.get_type("List").header
    with pytest.raises(IRError, match=r"no global function named 'fx'\. Did you mean f"):
        mod.get_global_var("fx")
    main = IRModule.from_expr(const(1.0))
    assert isinstance(main["main"], Function) and main["main"].params == ()


@pytest.mark.parametrize("build,message", [
    (lambda x: op("add", x), r"add takes 2 argument\(s\) \(lhs, rhs\), got 1"),
    (lambda x: Op.get("ad"), r"unknown operator 'ad'\. Did you mean .*add"),
    (lambda x: op("sum", x, keepdims=1), r"sum: attribute 'keepdims' must be a bool, got int 1"),
    (lambda x: op("sum", x, axis="rows"), r"sum: attribute 'axis' must be None, an int or a tuple"),
    (lambda x: op("sum", x, axes=[1]), r"sum: unknown attribute\(s\) axes; known: axis, keepdims"),
    (lambda x: op("clip", x, a_max=1.0), r"clip: attribute 'a_min' is required"),
    (lambda x: Call(Function([], x), [], {"axis": 1}), r"only operator calls take attributes"),
    (lambda x: TupleGetItem(Tuple([x]), -1), r"tuple index must be a non-negative int, got -1"),
    (lambda x: TupleGetItem(Tuple([x]), True), r"tuple index must be a non-negative int, got True"),
    (lambda x: TupleGetItem(Tuple([x]), 1.0), r"tuple index must be a non-negative int, got 1\.0"),
    (lambda x: op("add", x, 1.0), r"argument 1 of a call must be a relay Expr, got float: 1\.0"),
    (lambda x: Tuple([x, np.ones(2)]), r"tuple field 1 must be a relay Expr, got ndarray"),
    (lambda x: Let("y", x, x), r"a let binds a Var, got 'y'"),
    (lambda x: Function(["y"], x), r"function parameters must be Vars, got 'y'"),
    (lambda x: Function([x, x], x), r"a function lists the same parameter Var twice"),
    (lambda x: Call(x, [x, "a"]), r"argument 1 of a call must be a relay Expr, got str"),
    (lambda x: Constant(3.0), r"Constant takes a numpy array \(use relay\.const"),
    (lambda x: Constant(np.zeros(2, "complex64")), r"constant of unsupported dtype complex64"),
    (lambda x: Var(""), r"Var name must be a non-empty string"),
    (lambda x: Var("y", "float32"), r"type_annotation must be a Type, got 'float32'"),
    (lambda x: TensorType((2,), "float8"), r"unknown dtype 'float8'"),
    (lambda x: TensorType((-1,)), r"a tensor dimension must be non-negative, got -1"),
    (lambda x: TensorType((TypeVar("a"),)), r"type variable a of kind Type used as a dimension"),
    (lambda x: Match(x, []), r"a match needs at least one clause"),
    (lambda x: Clause(x, x), r"a clause's left-hand side must be a Pattern"),
    (lambda x: Call(IRModule().get_constructor("Cons"), [x]),
     r"constructor Cons takes 2 arguments, got 1"),
    (lambda x: PatternConstructor(IRModule().get_constructor("Cons"), [PatternWildcard()]),
     r"pattern Cons\(\.\.\.\) has 1 sub-patterns, but Cons takes 2"),
])
def test_malformed_ir_raises_irerror(build, message):
    with pytest.raises(IRError, match=message):
        build(Var("x", F32))


def test_irerror_is_a_value_error_and_keeps_the_raw_message():
    with pytest.raises(ValueError) as info:
        op("add", Var("x"))
    assert info.value.raw_message.startswith("add takes 2")


def test_expressions_print_as_text():
    x = Var("x", F32)
    assert repr(op("negative", x)).endswith("negative(%x: Tensor[(), float32])")
    assert str(GlobalVar("main")).endswith("@main")


# ---- traversal on DAGs ---------------------------------------------------------------------------
class CountingVisitor(ExprVisitor):
    def __init__(self):
        super().__init__()
        self.calls = 0
        self.vars = 0

    def visit_call(self, call):
        self.calls += 1
        super().visit_call(call)

    def visit_var(self, var):
        self.vars += 1


def test_visitor_visits_each_node_of_a_diamond_once():
    v = CountingVisitor()
    v.visit(diamond(30))  # 2**30 paths, 31 nodes
    assert (v.calls, v.vars) == (30, 1)


def test_mutator_is_linear_on_a_diamond_and_keeps_sharing():
    x = Var("x", F32)
    e = op("add", x, x)
    for _ in range(29):
        e = op("add", e, e)
    assert ExprMutator().visit(e) is e  # nothing changed: the very same node
    y = Var("y", F32)

    class Replace(ExprMutator):
        visits = 0

        def visit_call(self, call):
            Replace.visits += 1
            return super().visit_call(call)

        def visit_var(self, v):
            return y if v is x else v

    out = Replace().visit(e)
    assert Replace.visits == 30
    assert out is not e and out.args[0] is out.args[1]
    assert free_vars(out) == [y]
    counter = CountingVisitor()
    counter.visit(out)
    assert counter.calls == 30


def test_post_order_and_free_vars():
    x, y, z = Var("x"), Var("y"), Var("z")
    inner = op("add", x, y)
    e = Let(z, inner, op("multiply", z, x))
    order = []
    post_order(e, order.append)
    assert order.index(inner) < order.index(e) and order[-1] is e
    assert free_vars(e) == [x, y]
    assert free_vars(Function([x], op("add", x, y))) == [y]


# ---- 100,000 lets through every traversal ------------------------------------------------------
N = 100_000


@pytest.fixture(scope="module")
def chain():
    return let_chain(N)


def test_visitor_walks_a_long_let_chain(chain):
    class Lets(ExprVisitor):
        count = 0

        def visit_let(self, let):
            Lets.count += 1
            super().visit_let(let)

        def visit_let_binding(self, let):
            Lets.count += 1

    Lets().visit(chain)
    assert Lets.count == N
    assert len(free_vars(chain)) == 1


def test_mutator_rebuilds_a_long_let_chain(chain):
    assert ExprMutator().visit(chain) is chain
    (x0,) = free_vars(chain)
    y = Var("y")

    class Substitute(ExprMutator):  # every let is rebuilt: the change is at the top
        def visit_var(self, v):
            return y if v is x0 else v

    out = Substitute().visit(chain)
    assert out is not chain and free_vars(out) == [y]
    assert structural_equal(chain, out, map_free_vars=True)
    assert not structural_equal(chain, out)


def test_text_round_trip_of_a_long_let_chain(chain):
    text = astext(chain)
    assert text.count("\nlet ") == N
    again = parse_expr(text)
    assert structural_equal(chain, again, map_free_vars=True)
    assert not structural_equal(chain, again)  # the free %x0 is a new variable
