"""One Relay function as one LLVM function (``FunctionCompiler``), inside a program's module
(lowering.py).

A function becomes ``ptr f(ptr state, ptr closure, ptr arg0, ...)``; let-bound values are
LLVM values, a call of a primitive function calls its kernel with freshly allocated outputs
(or a kernel site's, for shapes known only at run time: sites.py; or Python's, for an
external kernel: externals.py), ``if`` and ``match`` branch, a self call in tail position
jumps back to the header (a loop, whose memory loops.py releases), and every call site
checks the state for an error and returns.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, Sequence

import numpy as np
from llvmlite import ir

from relaydsl.backend.llvm.kernel import Kernel
from relaydsl.backend.llvm.native.abi import (
    I8, I32, I64, PTR, SLOTS, Error, Word,
)
from relaydsl.backend.llvm.native.accumulations import Accumulation, accumulations
from relaydsl.backend.llvm.native.externals import external_call
from relaydsl.backend.llvm.native.frames import frame
from relaydsl.backend.llvm.native.loops import (
    LoopMemory, flat, immutable_data, written_cells,
)
from relaydsl.backend.llvm.native.results import Destinations, destinations
from relaydsl.backend.llvm.native.sites import ALIGN, check_shapes, nbytes, site_call
from relaydsl.ir.adt import (
    Constructor, Pattern, PatternConstructor, PatternTuple, PatternVar, PatternWildcard,
)
from relaydsl.ir.expr import (
    Call, Constant, Expr, Function, GlobalVar, If, Let, Match, Op, RefCreate, RefRead,
    RefWrite, Tuple, TupleGetItem, Var,
)
from relaydsl.ir.types import TensorType, TupleType, Type
from relaydsl.ir.visitor import ExprFunctorWithArgs, free_vars
from relaydsl.op.collective import Collective
from relaydsl.transform._util import collective_of
from relaydsl.transform.fuse_ops import PRIMITIVE, is_primitive

if TYPE_CHECKING:
    from relaydsl.backend.llvm.native.lowering import Lowering




class Unsupported(Exception):
    """The program uses something the native lowering does not run (the dispatcher does)."""


@dataclass(frozen=True)
class _Primitive:
    """A let-bound primitive function: called as a kernel, never a runtime value."""

    fn: Function


def symbol(hint: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "_" for c in hint)[:40] or "fn"


class FunctionCompiler(ExprFunctorWithArgs[[dict, bool], ir.Value]):
    """Emits one Relay function as ``ptr f(state, closure, params...)``.

    `captures` lists the free variables of a closure in the order its object holds them
    (a let-bound primitive function is static: no slot); `self_var` is the name a
    recursive local function calls itself by, `self_global` the global being emitted.
    An expression's value is emitted by ``value(e, env)``: a functor whose per-kind methods
    take the environment and whether the value is returned at once (tail position).
    """

    def __init__(self, lowering: Lowering, llvm_fn: ir.Function, fn: Function,
                 captures: list, self_var: Var | None, self_global: GlobalVar | None):
        self.low, self.llvm_fn, self.fn = lowering, llvm_fn, fn
        self.captures, self.self_var, self.self_global = captures, self_var, self_global

    def compile(self) -> None:
        f, fn = self.llvm_fn, self.fn
        self.st, self.closure, *params = f.args
        allocas = f.append_basic_block("allocas")
        start = f.append_basic_block("start")
        self.allocas = ir.IRBuilder(allocas)
        self.table: ir.AllocaInstr | None = None
        self.table_size = 0
        self.b = b = ir.IRBuilder(start)
        self.words = b.bitcast(self.st, I64.as_pointer())
        here = b.ptrtoint(b.call(self.low.frame_address, [I32(0)]), I64)
        deep = b.icmp_unsigned("<", here, b.load(b.gep(self.words, [I64(Word.STACK_LIMIT)])))
        with b.if_then(deep, likely=False):
            self.fail(Error.TOO_DEEP, 0)
        env: dict = {}
        slot = 1
        for v, static in self.captures:
            if static is None:
                env[v] = self.field(self.closure, slot)
                slot += 1
            else:
                env[v] = static
        if self.self_var is not None:
            env[self.self_var] = self.closure
        self.accumulations = accumulations(fn.body)
        # a self call in tail position comes back to the header with new arguments
        loops = self.loops(fn.body)
        if loops:
            self.low.finite = False
        self.loop_memory: LoopMemory | None = None
        if loops and all(p.has_type and immutable_data(p.checked_type, self.low.mod)
                         for p in fn.params):
            roots = written_cells(fn, [v for v, static in self.captures if static is None])
            self.loop_memory = LoopMemory(self, [(env[v], v.checked_type.value) for v in roots])
        # the entry's result leaves written where Python says (results.py)
        self.destinations: Destinations = {}
        straight = not loops and not self.low.boxed  # static shapes, no turn to overwrite
        if straight and self.self_global is not None and self.self_global == self.low.entry \
                and flat(fn.body.checked_type):
            self.destinations = destinations(fn)
        if self.destinations:
            self.low.results_in_place = True
            results_p = b.gep(self.words, [I64(Word.RESULTS)])
            self.results = b.load(results_p)
            b.store(I64(0), results_p)  # not for the calls the entry makes of itself
        # the spine's temporaries placed in one frame (frames.py)
        self.frame = frame(fn) if straight else None
        if self.frame is not None and self.frame.offsets:
            self.frame_base = self.allocate(self.frame.size, ALIGN)
        self.header = f.append_basic_block("header")
        before = b.block
        b.branch(self.header)
        b.position_at_end(self.header)
        self.phis = [b.phi(PTR, name=symbol(p.name_hint)) for p in fn.params]
        for phi, arg in zip(self.phis, params):
            phi.add_incoming(arg, before)
        if self.loop_memory is not None:
            self.loop_memory.start(before)
        self.poll_stop()
        env.update(zip(fn.params, self.phis))
        self.tail(fn.body, env)
        self.allocas.branch(start)

    # ---- helpers ---------------------------------------------------------------------
    def fail(self, code: int, detail: int) -> None:
        b = self.b
        b.store(I64(code), b.gep(self.words, [I64(Word.ERROR)]))
        b.store(I64(detail), b.gep(self.words, [I64(Word.DETAIL)]))
        b.ret(ir.Constant(PTR, None))

    def poll_stop(self) -> None:
        """At each call and loop turn: stop on a SIGINT, or on an error an allocation
        flagged (it cannot return one itself)."""
        b = self.b
        flag = b.inttoptr(b.load(b.gep(self.words, [I64(Word.STOP)])), I32.as_pointer())
        stop = b.load_atomic(flag, "monotonic", 4)
        with b.if_then(b.icmp_signed("!=", stop, I32(0)), likely=False):
            self.fail(Error.INTERRUPTED, 0)
        self.check_error()

    def check_error(self) -> None:
        b = self.b
        err = b.load(b.gep(self.words, [I64(Word.ERROR)]))
        with b.if_then(b.icmp_signed("!=", err, I64(0)), likely=False):
            b.ret(ir.Constant(PTR, None))

    def allocate(self, nbytes: int | ir.Value, align: int = 8) -> ir.Value:
        size = I64(max(nbytes, 1)) if isinstance(nbytes, int) else nbytes
        return self.b.call(self.low.alloc, [self.st, size, I64(align - 1)])

    def field(self, obj: ir.Value, i: int) -> ir.Value:
        return self.b.load(self.b.gep(self.b.bitcast(obj, SLOTS), [I64(i)]))

    def word(self, obj: ir.Value, i: int | ir.Value) -> ir.Value:
        """Word `i` of `obj` as an integer."""
        at = I64(i) if isinstance(i, int) else i
        return self.b.load(self.b.gep(self.b.bitcast(obj, I64.as_pointer()), [at]))

    # ---- tensors: data pointers, or headers [data, dims...] when shapes vary at run time
    def data(self, tensor: ir.Value) -> ir.Value:
        return self.field(tensor, 0) if self.low.boxed else tensor

    def dims(self, tensor: ir.Value, rank: int) -> list[ir.Value]:
        return [self.word(tensor, 1 + i) for i in range(rank)]

    def linked(self, index: int) -> ir.Value:
        """Link `index` of the program's table (Lowering.link): an address, as a pointer."""
        b = self.b
        table = b.inttoptr(b.load(b.gep(self.words, [I64(Word.LINKS)])), I64.as_pointer())
        return b.inttoptr(b.load(b.gep(table, [I64(index)])), PTR)

    def tensor_constant(self, data: np.ndarray) -> ir.Value:
        """A constant tensor as a value: its data, or a header made for it when tensors are
        boxed."""
        pointer = self.linked(self.low.constant(data))
        if not self.low.boxed:
            return pointer
        header = self.allocate(8 * (1 + np.ndim(data)))
        self.set_field(header, 0, pointer)
        for i, d in enumerate(np.shape(data)):
            self.set_field(header, 1 + i, self.b.inttoptr(I64(d), PTR))
        return header

    def new_tensor(self, dims: Sequence[ir.Value], nbytes: int | ir.Value) -> ir.Value:
        """Fresh memory for a tensor of `dims`, `nbytes` of data."""
        if not self.low.boxed:
            return self.allocate(nbytes, ALIGN)
        header = _header_bytes(len(dims))
        size = I64(header + max(nbytes, 1)) if isinstance(nbytes, int) else \
            self.b.add(nbytes, I64(header))
        tensor = self.allocate(size, ALIGN)
        self.set_field(tensor, 0, self.b.gep(tensor, [I64(header)]))
        for i, d in enumerate(dims):
            self.set_field(tensor, 1 + i, self.b.inttoptr(d, PTR))
        return tensor

    def set_field(self, obj: ir.Value, i: int, value: ir.Value) -> None:
        self.b.store(value, self.b.gep(self.b.bitcast(obj, SLOTS), [I64(i)]))

    def record(self, values: Sequence[ir.Value], tag: int | None = None) -> ir.Value:
        """A fresh object holding `values` (after an ADT value's tag)."""
        fields = ([] if tag is None else [ir.Constant(I64, tag).inttoptr(PTR)]) + list(values)
        obj = self.allocate(8 * len(fields))
        for i, v in enumerate(fields):
            self.set_field(obj, i, v)
        return obj

    def new_block(self, name: str) -> ir.Block:
        return self.llvm_fn.append_basic_block(name)

    # ---- tail position ---------------------------------------------------------------
    def tail(self, e: Expr, env: dict) -> None:
        """Emits `e` and returns its value; a self call jumps back to the header."""
        while isinstance(e, Let):
            env = self.bind(e, env)
            e = e.body
        b = self.b
        if isinstance(e, If):
            for block, branch in zip(self.branch(e, env), (e.true_branch, e.false_branch)):
                b.position_at_end(block)
                self.tail(branch, env)
        elif isinstance(e, Match):
            for block, clause_env, rhs in self.clauses(e, env):
                b.position_at_end(block)
                self.tail(rhs, clause_env)
        elif isinstance(e, Call) and self.is_self(e.op, env):
            args = [self.value(a, env) for a in e.args]
            if self.loop_memory is not None:
                args = self.loop_memory.back_edge(args)
            for phi, a in zip(self.phis, args):
                phi.add_incoming(a, b.block)
            b.branch(self.header)
        else:
            result = self.value(e, env, tail=True)
            if self.loop_memory is not None:
                self.loop_memory.leave()
            b.ret(result)

    def loops(self, e: Expr) -> bool:
        """Whether `e`, the body, calls this function in tail position (a loop)."""
        while isinstance(e, Let):
            e = e.body
        if isinstance(e, If):
            return self.loops(e.true_branch) or self.loops(e.false_branch)
        if isinstance(e, Match):
            return any(self.loops(c.rhs) for c in e.clauses)
        return isinstance(e, Call) and (e.op is self.self_global if self.self_global
                                        else e.op is self.self_var and e.op is not None)

    def is_self(self, op: Expr, env: dict) -> bool:
        if self.self_global is not None:
            return op is self.self_global
        return self.self_var is not None and op is self.self_var and \
            env.get(op) is self.closure

    def branch(self, e: If, env: dict) -> tuple[ir.Block, ir.Block]:
        """Branches on the bool scalar `e.cond`; the two blocks to fill."""
        b = self.b
        flag = b.load(b.bitcast(self.data(self.value(e.cond, env)), I8.as_pointer()))
        then, other = self.new_block("then"), self.new_block("else")
        b.cbranch(b.icmp_unsigned("!=", flag, I8(0)), then, other)
        return then, other

    def clauses(self, m: Match, env: dict) -> list[tuple[ir.Block, dict, Expr]]:
        """Tests the clauses in order: each one's body block (empty, to fill), environment
        and body. When none matches, the run stops with the match's index."""
        b = self.b
        data = self.value(m.data, env)
        self.low.matches.append(m)
        site = len(self.low.matches) - 1
        bodies = []
        for clause in m.clauses:
            no = self.new_block("next_clause")
            clause_env = dict(env)
            self.test(clause.lhs, data, clause_env, no)
            body = self.new_block("clause")
            b.branch(body)
            bodies.append((body, clause_env, clause.rhs))
            b.position_at_end(no)
        self.fail(Error.NO_CLAUSE, site)
        return bodies

    def test(self, p: Pattern, value: ir.Value, env: dict, no: ir.Block) -> None:
        """Branches to `no` unless `value` matches `p`; binds its variables in `env`."""
        b = self.b
        if isinstance(p, PatternWildcard):
            return
        if isinstance(p, PatternVar):
            env[p.var] = value
        elif isinstance(p, PatternConstructor):
            tag = b.ptrtoint(self.field(value, 0), I64)
            yes = self.new_block("tag_matches")
            b.cbranch(b.icmp_signed("==", tag, I64(p.constructor.tag)), yes, no)
            b.position_at_end(yes)
            for i, sub in enumerate(p.patterns):
                self.test(sub, self.field(value, i + 1), env, no)
        elif isinstance(p, PatternTuple):
            for i, sub in enumerate(p.patterns):
                self.test(sub, self.field(value, i), env, no)
        else:
            raise Unsupported(f"the pattern {type(p).__name__}")

    # ---- values ----------------------------------------------------------------------
    def bind(self, let: Let, env: dict) -> dict:
        env = dict(env)
        v = let.value
        if isinstance(v, Function) and is_primitive(v):
            env[let.var] = _Primitive(v)
        elif isinstance(v, Function):
            env[let.var] = self.closure_of(v, env, let.var)
        else:
            env[let.var] = self.value(v, env)
        return env

    def value(self, e: Expr, env: dict, tail: bool = False) -> ir.Value:
        """Emits `e`; its value (`tail`: the caller returns it at once)."""
        return self.visit(e, env, tail)

    # visit(e, env, tail): what `value` emits, per node kind
    def unsupported(self, expr: Expr) -> Exception:
        return Unsupported(type(expr).__name__)

    def visit_var(self, var: Var, env: dict, tail: bool) -> ir.Value:
        v = env.get(var)
        if v is None or isinstance(v, _Primitive):
            raise Unsupported(f"the variable {var.name_hint} used as a value")
        return v

    def visit_let(self, let: Let, env: dict, tail: bool) -> ir.Value:
        e: Expr = let
        while isinstance(e, Let):
            env = self.bind(e, env)
            e = e.body
        return self.visit(e, env, tail)

    def visit_constant(self, c: Constant, env: dict, tail: bool) -> ir.Value:
        return self.tensor_constant(c.data)

    def visit_tuple(self, t: Tuple, env: dict, tail: bool) -> ir.Value:
        return self.record([self.value(f, env) for f in t.fields])

    def visit_tuple_getitem(self, t: TupleGetItem, env: dict, tail: bool) -> ir.Value:
        return self.field(self.value(t.tuple_value, env), t.index)

    def visit_global_var(self, gv: GlobalVar, env: dict, tail: bool) -> ir.Value:
        return self.low.global_closure(gv)

    def visit_function(self, fn: Function, env: dict, tail: bool) -> ir.Value:
        if is_primitive(fn):
            raise Unsupported("a primitive function used as a value")
        return self.closure_of(fn, env, None)

    def visit_constructor(self, c: Constructor, env: dict, tail: bool) -> ir.Value:
        params = tuple(Var(f"x{i}") for i in range(len(c.inputs)))
        return self.closure_of(Function(params, Call(c, params)), {}, None)

    def visit_ref_create(self, r: RefCreate, env: dict, tail: bool) -> ir.Value:
        # a cell: [value, the epoch it was made in, whether it is the value's only holder]
        epoch = self.b.load(self.b.gep(self.words, [I64(Word.EPOCH)]))
        return self.record([self.value(r.value, env), self.b.inttoptr(epoch, PTR),
                            ir.Constant(PTR, None)])

    def visit_ref_read(self, r: RefRead, env: dict, tail: bool) -> ir.Value:
        cell = self.value(r.ref, env)
        if r not in self.accumulations.reads:  # the value may now be held elsewhere
            self.set_field(cell, 2, ir.Constant(PTR, None))
        return self.field(cell, 0)

    def visit_ref_write(self, r: RefWrite, env: dict, tail: bool) -> ir.Value:
        cell, new = self.value(r.ref, env), self.value(r.value, env)
        self.set_field(cell, 0, new)
        only = r in self.accumulations.writes  # an accumulation's total
        self.set_field(cell, 2, ir.Constant(I64, int(only)).inttoptr(PTR))
        if self.loop_memory is not None and self.loop_memory.is_root(cell):
            self.loop_memory.note_root_write(cell)
        else:
            self.note_write(cell)
        return self.low.unit

    def visit_if(self, i: If, env: dict, tail: bool) -> ir.Value:
        arms = [(block, branch, env) for block, branch in
                zip(self.branch(i, env), (i.true_branch, i.false_branch))]
        return self.join(arms)

    def visit_match(self, m: Match, env: dict, tail: bool) -> ir.Value:
        return self.join([(block, rhs, clause_env)
                          for block, clause_env, rhs in self.clauses(m, env)])

    def note_write(self, cell: ir.Value) -> None:
        """The write barrier: the state keeps the oldest epoch of a cell written into."""
        b = self.b
        written_p = b.gep(self.words, [I64(Word.WRITTEN)])
        epoch, written = self.word(cell, 1), b.load(written_p)
        b.store(b.select(b.icmp_signed("<", epoch, written), epoch, written), written_p)

    def join(self, arms: list[tuple[ir.Block, Expr, dict]]) -> ir.Value:
        """Fills each arm's block with its expression; their values meet in a phi."""
        b = self.b
        merge = self.new_block("join")
        incoming = []
        for block, e, env in arms:
            b.position_at_end(block)
            incoming.append((self.value(e, env), b.block))
            b.branch(merge)
        b.position_at_end(merge)
        phi = b.phi(PTR)
        for v, block in incoming:
            phi.add_incoming(v, block)
        return phi

    def visit_call(self, call: Call, env: dict, tail: bool) -> ir.Value:
        b, op = self.b, call.op
        if isinstance(op, Var) and isinstance(env.get(op), _Primitive):
            op = env[op].fn
        if isinstance(op, Function) and is_primitive(op):
            return self.kernel_call(op, call, env)
        if isinstance(op, Constructor):
            return self.record([self.value(a, env) for a in call.args], tag=op.tag)
        if isinstance(op, Op):
            return self.kernel_call(self.low.op_kernels[call], call, env)
        self.low.finite = False  # a function's call: it may recurse
        if isinstance(op, GlobalVar):
            args = [self.value(a, env) for a in call.args]
            result = b.call(self.low.global_function(op),
                            [self.st, ir.Constant(PTR, None), *args], tail=tail)
        else:
            closure = self.value(op, env)
            args = [self.value(a, env) for a in call.args]
            code = b.bitcast(self.field(closure, 0), self.low.signature(len(args)).as_pointer())
            result = b.call(code, [self.st, closure, *args], tail=tail)
        if not tail:
            self.check_error()
        return result

    def kernel_call(self, fn: Function, call: Call, env: dict) -> ir.Value:
        """The kernel of primitive function `fn` on the call's arguments, into fresh
        outputs: one call through its buffer table (inputs, outputs, constants, scratch)."""
        b = self.b
        self.low.kernel_calls += 1
        if self.low.count_calls:
            self.count_call(self.low.counted[fn])
        inputs: list[ir.Value] = []
        for a in call.args:
            self.leaves(self.value(a, env), a.checked_type, inputs)
        collective = collective_of(fn)
        if fn in self.low.dynamic:
            result = site_call(self, fn, call, inputs)
            if collective is not None:
                self.exchange(collective, result, call.checked_type)
            return result
        site = self.low.external_sites.get(fn)
        if site is not None:
            external = self.low.external_kernels[site]
            if self.low.boxed:
                check_shapes(self, external, call, inputs)
            outputs = self.outputs(call, external.output_types, False)
            external_call(self, site, inputs, outputs)
            return self.rebuild(call.checked_type, iter(outputs))
        kernel = self.low.kernels[fn]
        if self.low.boxed:
            check_shapes(self, kernel, call, inputs)
        accumulation = self.accumulations.get(call)
        if accumulation is not None and not kernel.empty:
            outputs = [self.accumulate(kernel, accumulation, inputs[accumulation.index], env)]
        else:
            outputs = self.outputs(call, kernel.output_types, kernel.empty)
        if not kernel.empty:
            mark = self.mark() if kernel.scratch else None
            scratch = [self.allocate(nbytes(shape, dtype), ALIGN)
                       for shape, dtype in kernel.scratch]
            constants = [self.linked(self.low.constant(c)) for c in kernel.constants]
            pointers = [*map(self.data, inputs), *map(self.data, outputs), *constants,
                        *scratch]
            table = self.kernel_table(len(pointers))
            for i, p in enumerate(pointers):
                b.store(p, b.gep(table, [I64(0), I64(i)]))
            entry = b.bitcast(self.linked(self.low.link(kernel.entry_address)),
                              ir.FunctionType(ir.VoidType(), [PTR]).as_pointer())
            b.call(entry, [b.bitcast(table, PTR)])
            if mark is not None:  # the scratch buffers are dead
                b.call(self.low.reset, [self.st, *mark])
        result = self.rebuild(call.checked_type, iter(outputs))
        if collective is not None and not kernel.empty:
            self.exchange(collective, result, call.checked_type)
        return result

    def outputs(self, call: Call, types: list[TensorType], empty: bool) -> list[ir.Value]:
        """Where a kernel call's outputs of `types` go: its place in the function's frame,
        the arrays Python returns (the entry's result leaves), else fresh memory (always,
        for a kernel with nothing to compute: `empty`)."""
        leaves = self.destinations.get(call) or [None] * len(types)
        at = self.frame.offsets.get(call) if self.frame is not None else None
        if at is not None and leaves == [None]:
            return [self.b.gep(self.frame_base, [I64(at)])]
        return [self.new_tensor([I64(d) for d in t.shape], nbytes(t.shape, t.dtype))
                if leaf is None or empty else self.result_buffer(leaf, nbytes(t.shape, t.dtype))
                for t, leaf in zip(types, leaves)]

    def count_call(self, index: int) -> None:
        """One more call of the primitive function counted at `index` (count_calls)::

            %n = load i64, ptr %counts[index]  ; then n + 1 stored back
        """
        b = self.b
        counts = b.bitcast(self.linked(self.low.counts_link), I64.as_pointer())
        slot = b.gep(counts, [I64(index)])
        b.store(b.add(b.load(slot), I64(1)), slot)

    def exchange(self, collective: Collective, tensor: ir.Value, t: Type) -> None:
        """A collective's exchange with the other ranks, after its kernel made this rank's
        part in `tensor` (of type `t`), in place: Python's ``reduce`` through the link table;
        when it fails, the run stops with what it raised::

            %status = call i64 %reduce(i64 <site>, ptr %data, i64 <elements>)
            %failed = icmp ne i64 %status, 0      ; -> Error.NO_EXCHANGE, DETAIL the site
        """
        assert isinstance(t, TensorType), "a collective's result is one tensor"
        b = self.b
        site = len(self.low.collectives)
        self.low.collectives.append((collective, np.dtype(t.dtype)))
        if self.low.boxed:  # the element count from the header's dimensions
            count: ir.Value = I64(1)
            for d in self.dims(tensor, len(t.shape)):
                count = b.mul(count, d)
        else:
            count = I64(int(np.prod(t.concrete_shape())))
        reduce = b.bitcast(self.linked(self.low.reduce),
                           ir.FunctionType(I64, [I64, PTR, I64]).as_pointer())
        status = b.call(reduce, [I64(site), self.data(tensor), count])
        with b.if_then(b.icmp_signed("!=", status, I64(0)), likely=False):
            self.fail(Error.NO_EXCHANGE, site)

    def result_buffer(self, leaf: int, size: int) -> ir.Value:
        """Where the entry's result leaf `leaf` goes: the array Python made for it, or fresh
        memory when the call is not Python's."""
        b = self.b
        given = b.icmp_unsigned("!=", self.results, I64(0))
        with b.if_else(given) as (then, otherwise):
            with then:
                slots = b.inttoptr(self.results, SLOTS)
                python = b.load(b.gep(slots, [I64(leaf)]))
                from_python = b.block
            with otherwise:
                fresh = self.allocate(size, ALIGN)
                from_arena = b.block
        phi = b.phi(PTR)
        phi.add_incoming(python, from_python)
        phi.add_incoming(fresh, from_arena)
        return phi

    def mark(self) -> list[ir.Value]:
        """Where the arena is: what ``reset`` returns it to, freeing all allocated since."""
        return [self.b.load(self.b.gep(self.words, [I64(w)]))
                for w in (Word.CUR, Word.END, Word.CHUNKS)]

    def accumulate(self, kernel: Kernel, accumulation: Accumulation, total: ir.Value,
                   env: dict) -> ir.Value:
        """The output of an accumulation's kernel: over the running total it adds to when
        the reference cell holding it is its only holder, else fresh memory."""
        b = self.b
        t = kernel.output_types[0]
        owned = self.word(env[accumulation.cell], 2)
        before = b.block
        fresh, done = self.new_block("fresh_total"), self.new_block("total")
        b.cbranch(b.icmp_unsigned("!=", owned, I64(0)), done, fresh)
        b.position_at_end(fresh)
        new = self.new_tensor([I64(d) for d in t.shape], nbytes(t.shape, t.dtype))
        fresh_end = b.block
        b.branch(done)
        b.position_at_end(done)
        out = b.phi(PTR)
        out.add_incoming(total, before)
        out.add_incoming(new, fresh_end)
        return out

    @contextmanager
    def counting(self, count: ir.Value) -> Iterator[ir.Value]:
        """A loop over ``i`` in ``[0, count)``: its body is what the block emits."""
        b = self.b
        before, test = b.block, self.new_block("count")
        body, done = self.new_block("count_body"), self.new_block("count_done")
        b.branch(test)
        b.position_at_end(test)
        i = b.phi(I64)
        i.add_incoming(I64(0), before)
        b.cbranch(b.icmp_signed("<", i, count), body, done)
        b.position_at_end(body)
        yield i
        i.add_incoming(b.add(i, I64(1)), b.block)
        b.branch(test)
        b.position_at_end(done)

    def kernel_table(self, size: int) -> ir.Value:
        """A stack array for kernels' buffer tables, in the entry block (so a loop does
        not grow the stack); one per function, grown when a kernel needs more."""
        if self.table is None or size > self.table_size:
            self.table_size = max(size, 2 * self.table_size, 8)
            self.table = self.allocas.alloca(ir.ArrayType(PTR, self.table_size))
        return self.table

    def leaves(self, value: ir.Value, t: Type, out: list[ir.Value]) -> None:
        if isinstance(t, TupleType):
            for i, f in enumerate(t.fields):
                self.leaves(self.field(value, i), f, out)
        else:
            out.append(value)

    def rebuild(self, t: Type, outputs) -> ir.Value:
        if isinstance(t, TupleType):
            return self.record([self.rebuild(f, outputs) for f in t.fields])
        return next(outputs)

    def closure_of(self, fn: Function, env: dict, self_var: Var | None) -> ir.Value:
        """A closure of `fn`: its code and the values of its free variables from `env`."""
        captures, runtime = [], []
        for v in free_vars(fn):
            if v is self_var:
                continue
            if v not in env:
                raise Unsupported(f"the free variable {v.name_hint} of a closure")
            value = env[v]
            if isinstance(value, _Primitive):
                captures.append((v, value))
            else:
                captures.append((v, None))
                runtime.append(value)
        code = self.low.declare(fn, self_var.name_hint if self_var else "lambda", captures,
                                self_var, None)
        return self.record([code.bitcast(PTR), *runtime])


def primitive_of(call: Call) -> Function:
    """A lone operator call as a primitive function of its own (tuple arguments passed
    field by field, as FuseOps passes them)."""
    from relaydsl.typing import infer_type

    params: list[Var] = []

    def as_params(t: Type) -> Expr:
        if isinstance(t, TupleType):
            return Tuple(tuple(as_params(f) for f in t.fields))
        params.append(Var(f"p{len(params)}", t))
        return params[-1]

    args = tuple(as_params(a.checked_type) for a in call.args)
    fn = infer_type(Function(tuple(params), Call(call.op, args, call.attrs, call.type_args),
                             attrs=PRIMITIVE))
    assert isinstance(fn, Function)
    return fn


def _header_bytes(rank: int) -> int:
    """The room before a boxed tensor's data (which stays 64-byte aligned)."""
    return -(-8 * (1 + rank) // ALIGN) * ALIGN
