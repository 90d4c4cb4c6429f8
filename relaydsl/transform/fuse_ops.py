"""Operator fusion (2019 paper §4.1; TVM's FuseOps, src/relay/transforms/fuse_ops.cc).

Every operator call ends up inside a *primitive function* -- ``fn (...) { ... }`` with
``attrs.Primitive == 1`` -- called where the group's result is needed; ops that may be
computed in one kernel share one primitive function. Example input (graph form)::

    fn (%x: Tensor[(1, 16), float32], %w: Tensor[(8, 16), float32], %b: Tensor[(8,), float32]) {
      relu(bias_add(dense(%x, %w), %b))
    }

Output: one group, anchored at dense, with its elementwise epilogue::

    fn (%x, %w, %b) {
      %0 = fn (%p0, %p1, %p2, Primitive=1) { relu(bias_add(dense(%p0, %p1), %p2)) };
      %0(%x, %w, %b)
    }

The algorithm, per dataflow region (a function body, an ``if`` branch or a ``match``
clause; control flow, closures, calls of non-primitive functions, lets and references are
opaque, so fusion never crosses them):

1. Build the indexed forward graph in post-DFS order. Each node has a pattern: an op call
   its op's ``OpPattern``; a Tuple ``TUPLE``; a projection of a tuple of tensors
   ``INJECTIVE``; anything else ``OPAQUE``. An edge carries the consumer's pattern, except
   that a broadcast consumer whose output has the argument's shape makes the edge
   ``ELEMWISE``. Values used by an opaque construct (let, if, ...), by a nested region or as
   the region's result are *extern*: they must exist on their own.
2. Build the post-dominator tree: a node's parent is the least common ancestor of its
   consumers (none for extern nodes), the edge patterns combined (max) on the way.
3. Partition with union-find groups, visiting nodes producers first, in three phases;
   a node fuses into its immediate post-dominator P, merging every node on the paths
   between them, when:

   - phase 0: an ``OUT_ELEMWISE_FUSABLE`` node (conv2d, dense, matmul, pools) when the
     dominator edge is elementwise and every node on the paths, P included, is at most
     ``BROADCAST`` -- the anchor with its elementwise epilogue (bias, activation, residual
     add); an ``ELEMWISE``/``BROADCAST`` node (tried again in phase 1) when the dominator
     edge is at most ``INJECTIVE`` or ``COMM_REDUCE``, the nodes on the paths are at most
     ``INJECTIVE`` and P is at most ``OUT_ELEMWISE_FUSABLE`` (so chains and diamonds fuse,
     an elementwise prologue joins a reduction -- which then ends its group, as reductions
     never fuse forward -- and a residual add joins a conv group);
   - phase 1: ``INJECTIVE`` and ``TUPLE`` nodes when every node on the paths, P included,
     is at most ``INJECTIVE`` (after phase 0, so anchors finish fusing first); and a 2-D
     ``transpose`` consumed only by a contraction (matmul, dense, batch_matmul), which
     reads it in place (``_transpose_into_contraction``);
   - phase 2: ``INJECTIVE``-or-lower nodes into a Tuple P that phase 1 fused into an
     injective consumer (``concatenate((relu(a), relu(b)))``: multi-input, one group).

   Nothing fuses into a Tuple P otherwise, and a group never grows past ``max_fuse_depth``
   nodes (256, as TVM).
4. Rewrite: each group containing an op call becomes ``Call(Function(params, body,
   attrs=Primitive=1), args)`` at its root. The body is graph form (no let); its parameters
   are the group's external inputs, each a tensor (a tuple-typed input is passed field by
   field and re-tupled inside); constants stay inside. A group rooted at a tuple-valued op
   (``split``) returns the tuple and its consumers project it outside.

The pass requires ToGraphNormalForm, which runs right before it (it does not inline lets
itself: a let is an opaque boundary); ToANormalForm runs after it in the pipeline, so that
each primitive call is evaluated once.
Existing primitive functions are left as they are, so the pass is idempotent.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from relaydsl.ir.adt import Constructor
from relaydsl.ir.expr import (
    Call, Clause, Constant, Expr, Function, GlobalVar, Grad, If, Let, Match, Op, RefCreate,
    RefRead, RefWrite, Tuple, TupleGetItem, Var,
)
from relaydsl.ir.module import IRModule
from relaydsl.ir.types import TensorType, TupleType, Type
from relaydsl.ir.visitor import children, post_order, scoped_children, type_vars_of
from relaydsl.op.registry import OpPattern
from relaydsl.ir.visitor import deep_recursion
from relaydsl.transform._util import PRIMITIVE, is_primitive
from relaydsl.transform.graph_normal_form import ToGraphNormalForm
from relaydsl.transform.pass_infra import Pass, PassContext

ELEMWISE, BROADCAST, INJECTIVE = OpPattern.ELEMWISE, OpPattern.BROADCAST, OpPattern.INJECTIVE
COMM_REDUCE, OUT_FUSABLE = OpPattern.COMM_REDUCE, OpPattern.OUT_ELEMWISE_FUSABLE
TUPLE, OPAQUE = OpPattern.TUPLE, OpPattern.OPAQUE
MAX_FUSE_DEPTH = 256
_LEAVES = (Var, GlobalVar, Constant, Op, Constructor)


# ---- 1. the indexed forward graph ----------------------------------------------------------

@dataclass(eq=False)
class _Node:
    expr: Expr
    index: int
    pattern: OpPattern = OPAQUE
    outputs: list[tuple[_Node, OpPattern]] = field(
        default_factory=list[tuple["_Node", OpPattern]])
    extern_ref: bool = False


@dataclass
class _Graph:
    nodes: dict[Expr, _Node] = field(default_factory=dict[Expr, _Node])  # by its expression
    post_dfs: list[_Node] = field(default_factory=list[_Node])
    nested: list[Expr] = field(default_factory=list[Expr])  # roots of nested regions


def _is_tensor(t: Type) -> bool:
    return isinstance(t, TensorType)


def _region_children(e: Expr, nested: list[Expr]) -> list[Expr]:
    """Sub-expressions in the same region as `e`; roots of nested regions (a function's body,
    an if's branches, a match's clauses) go to `nested`."""
    same: list[Expr] = []
    for child, scope in scoped_children(e):
        (same if scope is None else nested).append(child)
    return same


def _links(e: Expr) -> tuple[OpPattern, list[tuple[Expr, OpPattern | None]]]:
    """The pattern of node `e` and, per child, the edge pattern (None: the child is extern)."""
    if isinstance(e, Call):
        if isinstance(e.op, Op):
            pattern = e.op.definition.pattern
            out_t = e.checked_type
            edges: list[tuple[Expr, OpPattern | None]] = []
            for a in e.args:
                edge = pattern
                arg_t = a.checked_type
                if edge == BROADCAST and _is_tensor(out_t) and _is_tensor(arg_t) and \
                        out_t.shape == arg_t.shape:  # type: ignore[attr-defined]
                    edge = ELEMWISE
                edges.append((a, edge))
            return pattern, edges
        return OPAQUE, [(e.op, None), *[(a, OPAQUE) for a in e.args]]
    if isinstance(e, Tuple):
        return TUPLE, [(f, INJECTIVE if _is_tensor(f.checked_type) else None) for f in e.fields]
    if isinstance(e, TupleGetItem):
        t = e.tuple_value.checked_type
        if isinstance(t, TupleType) and all(_is_tensor(f) for f in t.fields):
            return INJECTIVE, [(e.tuple_value, INJECTIVE)]
        return OPAQUE, [(e.tuple_value, None)]
    return OPAQUE, [(c, None) for c in _region_children(e, [])]


def _build_graph(root: Expr, is_outer: Callable[[Expr], bool]) -> _Graph:
    graph = _Graph()

    def is_node(e: Expr) -> bool:
        return not isinstance(e, _LEAVES) and not is_primitive(e) and not is_outer(e)

    visiting: set[Expr] = set()
    stack: list[tuple[Expr, bool]] = [(root, False)]
    while stack:  # iterative post-order DFS: producers get lower indices than consumers
        e, expanded = stack.pop()
        if expanded:
            node = _Node(e, len(graph.post_dfs))
            node.pattern, edges = _links(e)
            for child, edge in edges:
                cnode = graph.nodes.get(child)
                if cnode is None:
                    continue  # a leaf or a value of an enclosing region
                if edge is None:
                    cnode.extern_ref = True
                else:
                    cnode.outputs.append((node, edge))
            graph.nodes[e] = node
            graph.post_dfs.append(node)
            continue
        if e in visiting or not is_node(e):
            continue
        visiting.add(e)
        stack.append((e, True))
        stack += [(c, False) for c in reversed(_region_children(e, graph.nested))]
    if root in graph.nodes:
        graph.nodes[root].extern_ref = True
    _mark_nested_uses(graph)
    return graph


def _mark_nested_uses(graph: _Graph) -> None:
    """A value of this region used inside a nested region must exist on its own: extern."""
    seen: set[Expr] = set()
    stack = list(graph.nested)
    while stack:
        e = stack.pop()
        if e in seen:
            continue
        seen.add(e)
        node = graph.nodes.get(e)
        if node is not None:
            node.extern_ref = True
            continue
        stack += children(e)


# ---- 2. the post-dominator tree ------------------------------------------------------------

@dataclass(eq=False)
class _DomNode:
    node: _Node
    parent: "_DomNode | None"
    depth: int
    pattern: OpPattern


def _lca(a: _DomNode | None, b: _DomNode | None, pattern: OpPattern
         ) -> tuple[_DomNode | None, OpPattern]:
    while a is not b:
        if a is None or b is None:
            return None, pattern
        if a.depth < b.depth:
            pattern, b = max(pattern, b.pattern), b.parent
        elif b.depth < a.depth:
            pattern, a = max(pattern, a.pattern), a.parent
        else:
            pattern = max(pattern, a.pattern, b.pattern)
            a, b = a.parent, b.parent
    return a, pattern


def _post_dominators(graph: _Graph) -> list[_DomNode]:
    tree: list[_DomNode | None] = [None] * len(graph.post_dfs)
    for node in reversed(graph.post_dfs):  # consumers before producers
        if node.extern_ref or not node.outputs:
            tree[node.index] = _DomNode(node, None, 1, OPAQUE)
            continue
        pattern = ELEMWISE
        parent: _DomNode | None = None
        for i, (out, edge) in enumerate(node.outputs):
            onode = tree[out.index]
            parent, pattern = (onode, pattern) if i == 0 else _lca(parent, onode, pattern)
            pattern = max(pattern, edge)
        tree[node.index] = _DomNode(node, parent, parent.depth + 1 if parent else 1, pattern)
    return tree  # type: ignore[return-value]


# ---- 3. partition --------------------------------------------------------------------------

@dataclass(eq=False)
class _Group:
    pattern: OpPattern
    root: _Node
    parent: "_Group | None" = None
    anchor: _Node | None = None
    num_nodes: int = 1

    def find_root(self) -> "_Group":
        g = self
        while g.parent is not None:
            g = g.parent
        node = self
        while node.parent is not None and node.parent is not g:  # path compression
            node.parent, node = g, node.parent
        return g


class _Partitioner:
    """TVM's GraphPartitioner."""

    def __init__(self, graph: _Graph, max_fuse_depth: int):
        self.graph = graph
        self.max_fuse_depth = max_fuse_depth
        self.groups = [
            _Group(n.pattern, n, anchor=n if n.pattern == OUT_FUSABLE else None)
            for n in graph.post_dfs
        ]

    def partition(self, opt_level: int) -> list[_Group]:
        if opt_level > 0:
            tree = _post_dominators(self.graph)
            for phase in range(3):
                self.run_fuse(tree, phase)
        return self.groups

    def _reach(self, src: _Node, sink: _Node) -> list[_Node]:
        """The nodes on paths from src's consumers up to and including sink."""
        out: list[_Node] = []
        seen: set[int] = set()
        stack = [o for o, _ in src.outputs]
        while stack:
            n = stack.pop()
            if n.index in seen:
                continue
            seen.add(n.index)
            out.append(n)
            if n is not sink:
                stack += [o for o, _ in n.outputs]
        return out

    def check_path(self, src: _Node, sink: _Node,
                   fcond: Callable[[OpPattern, bool], bool]) -> bool:
        return all(fcond(self.groups[n.index].find_root().pattern, n is sink)
                   for n in self._reach(src, sink))

    def commit_fuse(self, src: _Node, sink: _Node) -> None:
        target = self.groups[sink.index]
        for n in [src, *self._reach(src, sink)]:
            if n is not sink:
                self.merge(self.groups[n.index], target)

    def merge(self, child: _Group, parent: _Group) -> None:
        child, parent = child.find_root(), parent.find_root()
        if child is parent:
            return
        parent.num_nodes += child.num_nodes
        child.parent = parent
        if child.anchor is not None and parent.anchor is None:
            parent.anchor = child.anchor
            parent.pattern = max(child.pattern, parent.pattern)

    def count_with_new_child(self, child: _Node, sink: _Node) -> int:
        nodes = [child, *(n for n in self._reach(child, sink) if n is not sink)]
        return self.groups[sink.index].find_root().num_nodes + sum(
            self.groups[n.index].num_nodes for n in nodes)

    def run_fuse(self, tree: list[_DomNode], phase: int) -> None:
        for node in self.graph.post_dfs:
            dom = tree[node.index]
            group = self.groups[node.index]
            if group.pattern == OPAQUE or dom.parent is None:
                continue
            sink = dom.parent.node
            if self.count_with_new_child(node, sink) > self.max_fuse_depth:
                continue
            sink_group = self.groups[sink.index]
            if phase == 2:
                # Injective ops into an intermediate tuple already fused into its consumer.
                if group.pattern > INJECTIVE:
                    continue
                sink_root = sink_group.find_root()
                if sink_root.pattern == TUPLE:
                    continue
                if sink_group.pattern == TUPLE and sink_root.pattern <= INJECTIVE and \
                        self.check_path(node, sink, lambda k, is_sink: k <= INJECTIVE):
                    self.commit_fuse(node, sink)
                continue
            if group.find_root() is sink_group.find_root() or sink_group.pattern == TUPLE:
                continue  # already fused; never fuse into a tuple here
            if group.pattern == OUT_FUSABLE:
                if phase == 0 and dom.pattern == ELEMWISE and \
                        self.check_path(node, sink, lambda k, is_sink: k <= BROADCAST):
                    self.commit_fuse(node, sink)
            elif group.pattern <= BROADCAST:
                if dom.pattern <= INJECTIVE or dom.pattern == COMM_REDUCE:
                    def fcond(k: OpPattern, is_sink: bool) -> bool:
                        return k <= OUT_FUSABLE if is_sink else k <= INJECTIVE
                    if self.check_path(node, sink, fcond):
                        self.commit_fuse(node, sink)
            elif group.pattern in (INJECTIVE, TUPLE) and phase == 1 and (
                    self.check_path(node, sink, lambda k, is_sink: k <= INJECTIVE)
                    or _transpose_into_contraction(node, sink)):
                self.commit_fuse(node, sink)
            # COMM_REDUCE: a reduction never fuses into its consumers; it ends its group.


def _transpose_into_contraction(node: _Node, sink: _Node) -> bool:
    """A 2-D transpose whose only consumer is a contraction joins the contraction's group.

    A GEMM packs its operands anyway, so it can read the untransposed tensor through swapped
    strides (backend/llvm/schedule.py) where a transpose kernel would copy it -- and a
    transpose of a (64, 512) gradient is as slow as the GEMM it feeds. This is how the
    gradients of dense, ``matmul(transpose(g), x)``, run as one kernel.
    """
    e, s = node.expr, sink.expr
    return (isinstance(e, Call) and isinstance(e.op, Op) and e.op.definition.traits.transpose
            and isinstance(s, Call) and isinstance(s.op, Op)
            and s.op.definition.traits.contraction
            and len(node.outputs) == 1 and node.outputs[0][0] is sink
            and isinstance(e.checked_type, TensorType) and len(e.checked_type.shape) == 2)


# ---- 4. rewrite ----------------------------------------------------------------------------

class _Region:
    """One dataflow region: its graph, its groups, and the rewriting of its nodes."""

    def __init__(self, fuser: "_Fuser", root: Expr, outer: list["_Region"]):
        self.fuser = fuser
        self.outer = outer
        self.graph = _build_graph(root, lambda e: self._owner(e) is not None)
        groups = _Partitioner(self.graph, fuser.max_fuse_depth).partition(fuser.opt_level)
        self.group_of = {n.expr: groups[n.index].find_root() for n in self.graph.post_dfs}
        self.op_groups = {
            self.group_of[n.expr] for n in self.graph.post_dfs
            if isinstance(n.expr, Call) and isinstance(n.expr.op, Op)
        }
        self.memo: dict[Expr, Expr] = {}

    def _owner(self, e: Expr) -> "_Region | None":
        for region in reversed(self.outer):
            if e in region.graph.nodes:
                return region
        return None

    def nested(self, root: Expr) -> Expr:
        return _Region(self.fuser, root, [*self.outer, self]).rewrite(root)

    def rewrite(self, e: Expr) -> Expr:
        """The expression computing `e`'s value outside any primitive function."""
        hit = self.memo.get(e)
        if hit is not None:
            return hit
        if e not in self.graph.nodes:
            owner = self._owner(e)
            return owner.rewrite(e) if owner is not None else e  # a leaf
        group = self.group_of[e]
        if group in self.op_groups:
            assert group.root.expr is e, "fusion: a group's intermediate value is used outside it"
            result = self._fused_call(group)
        else:
            result = self._rebuild(e)
        self.memo[e] = result
        return result

    def _rebuild(self, e: Expr) -> Expr:
        """`e` with its children rewritten (the very node when none changed)."""
        if isinstance(e, Let):
            return self._rebuild_lets(e)
        r, nested = self.rewrite, self.nested
        # Each case gives the node's children (old), their rewrites (new) and `make`, which
        # builds the node from new children: a one-line lambda per case (noqa: E731).
        make: Callable[[list[Expr]], Expr]
        match e:
            case Call(op=op, args=args):
                old = [op, *args]
                new = [r(x) for x in old]
                make = lambda k: Call(  # noqa: E731
                    k[0], tuple(k[1:]), e.attrs, e.type_args, span=e.span)
            case Tuple(fields=fields):
                old = list(fields)
                new = [r(x) for x in old]
                make = lambda k: Tuple(tuple(k), span=e.span)  # noqa: E731
            case TupleGetItem(tuple_value=t, index=i):
                old, new = [t], [r(t)]
                make = lambda k: TupleGetItem(k[0], i, span=e.span)  # noqa: E731
            case If(cond=c, true_branch=a, false_branch=b):
                old, new = [c, a, b], [r(c), nested(a), nested(b)]
                make = lambda k: If(*k, span=e.span)  # noqa: E731
            case Match(data=data, clauses=clauses, complete=complete):
                old = [data, *(c.rhs for c in clauses)]
                new = [r(data), *(nested(c.rhs) for c in clauses)]
                make = lambda k: Match(k[0], tuple(  # noqa: E731
                    Clause(c.lhs, rhs) for c, rhs in zip(clauses, k[1:])), complete, span=e.span)
            case Function(params=params, body=body):
                old, new = [body], [nested(body)]
                make = lambda k: Function(  # noqa: E731
                    params, k[0], e.ret_type, e.type_params, e.attrs, span=e.span)
            case RefCreate(value=v):
                old, new = [v], [r(v)]
                make = lambda k: RefCreate(k[0], span=e.span)  # noqa: E731
            case RefRead(ref=v):
                old, new = [v], [r(v)]
                make = lambda k: RefRead(k[0], span=e.span)  # noqa: E731
            case RefWrite(ref=ref, value=v):
                old, new = [ref, v], [r(ref), r(v)]
                make = lambda k: RefWrite(*k, span=e.span)  # noqa: E731
            case Grad(fn=fn):
                old, new = [fn], [r(fn)]
                make = lambda k: Grad(k[0], span=e.span)  # noqa: E731
            case _:
                raise AssertionError(f"fuse_ops: unexpected node {type(e).__name__}")
        return e if all(a is b for a, b in zip(old, new)) else make(new)

    def _rebuild_lets(self, let: Let) -> Expr:
        """A chain of lets, iteratively (a program may have thousands)."""
        chain = [let]
        node = let.body
        while isinstance(node, Let) and node in self.graph.nodes and node not in self.memo:
            chain.append(node)
            node = node.body
        values = [self.rewrite(link.value) for link in chain]
        body = self.rewrite(node)
        for link, value in zip(reversed(chain), reversed(values)):
            if value is not link.value or body is not link.body:
                body = Let(link.var, value, body, span=link.span)
            else:
                body = link
            self.memo[link] = body
        return body

    def _fused_call(self, group: _Group) -> Expr:
        """``Call(fn(params, Primitive=1) { group body }, external inputs)``."""
        params: list[Var] = []
        args: list[Expr] = []
        body_memo: dict[Expr, Expr] = {}

        def as_params(t: Type, outside: Expr) -> Expr:
            if isinstance(t, TupleType):  # pass a tuple field by field; re-tuple inside
                fields = outside.fields if isinstance(outside, Tuple) else [
                    TupleGetItem(outside, i) for i in range(len(t.fields))]
                return Tuple(tuple(as_params(ft, fo) for ft, fo in zip(t.fields, fields)))
            p = Var(f"p{len(params)}", None if type_vars_of(t) else t)
            params.append(p)
            args.append(outside)
            return p

        def inside(x: Expr) -> Expr:
            hit = body_memo.get(x)
            if hit is not None:
                return hit
            if isinstance(x, (Constant, Op)):
                return x  # constants stay inside the primitive function
            if self.group_of.get(x) is group:
                match x:
                    case Call(op=op, args=xs):
                        result: Expr = Call(op, tuple(inside(a) for a in xs), x.attrs,
                                            x.type_args, span=x.span)
                    case Tuple(fields=fs):
                        result = Tuple(tuple(inside(f) for f in fs), span=x.span)
                    case TupleGetItem(tuple_value=t, index=i) if self.group_of.get(t) is group:
                        result = TupleGetItem(inside(t), i, span=x.span)
                    case TupleGetItem(tuple_value=t, index=i):  # pass just the field used
                        result = as_params(x.checked_type,
                                           TupleGetItem(self.rewrite(t), i, span=x.span))
                    case _:
                        raise AssertionError(f"fuse_ops: a {type(x).__name__} in a group")
            else:
                result = as_params(x.checked_type, self.rewrite(x))
            body_memo[x] = result
            return result

        body = inside(group.root.expr)
        return Call(Function(tuple(params), body, attrs=PRIMITIVE), tuple(args),
                    span=group.root.expr.span)


@dataclass
class _Fuser:
    opt_level: int
    max_fuse_depth: int

    def function(self, fn: Function) -> Function:
        if is_primitive(fn):
            return fn
        body = _Region(self, fn.body, []).rewrite(fn.body)
        if body is fn.body:
            return fn
        return Function(fn.params, body, fn.ret_type, fn.type_params, fn.attrs, span=fn.span)


def fuse_function(fn: Function, fuse_opt_level: int = 2,
                  max_fuse_depth: int = MAX_FUSE_DEPTH) -> Function:
    """Fuse the operators of one typed function in graph form (nested functions included)."""
    with deep_recursion():
        return _Fuser(fuse_opt_level, max_fuse_depth).function(fn)


@dataclass(frozen=True)
class FuseOps(Pass, opt_level=0, requires=(ToGraphNormalForm,),
              description="put op calls in primitive functions: one op each at opt_level 0, "
                          "fused from 1"):
    """The op calls of every global function grouped into primitive functions (see the
    module doc). `level` 0 puts each op call alone in a primitive function of its own, 1 or
    more fuses; None takes it from the PassContext, as TVM's: 0 at opt_level 0, else 2."""

    level: int | None = None
    max_fuse_depth: int = MAX_FUSE_DEPTH

    def transform(self, mod: IRModule) -> IRModule:
        level = self.level
        if level is None:
            level = 0 if PassContext.current().opt_level == 0 else 2
        out = mod.copy()
        for gv, fn in mod.functions.items():
            new = fuse_function(fn, level, self.max_fuse_depth)
            if new is not fn:
                out.add(gv, new)
        return out


def fuse_ops(mod: IRModule, fuse_opt_level: int = 2,
             max_fuse_depth: int = MAX_FUSE_DEPTH) -> IRModule:
    """``FuseOps(fuse_opt_level, max_fuse_depth)(mod)``: the op calls of `mod` grouped into
    primitive functions, after ToGraphNormalForm."""
    return FuseOps(fuse_opt_level, max_fuse_depth)(mod)


def primitive_functions(expr: Expr | IRModule) -> list[Function]:
    """The primitive functions in `expr` (every global for a module), in post-order."""
    found: list[Function] = []

    def collect(e: Expr) -> None:
        if is_primitive(e):
            found.append(e)  # type: ignore[arg-type]

    for root in list(expr.functions.values()) if isinstance(expr, IRModule) else [expr]:
        post_order(root, collect)
    return found

__all__ = ["FuseOps", "fuse_ops", "fuse_function", "primitive_functions", "MAX_FUSE_DEPTH"]
