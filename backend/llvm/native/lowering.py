"""A program's LLVM module (``Lowering``): a function per reachable Relay function
(functions.py), the kernels they call compiled first (or left to Python: externals.py),
the arena's allocation and reset functions, constants, and the wrappers through which
Python calls the entry and the closures a call returns (``i64 run(state, slots)``).

It takes functions in A-normal form only (ToANormalForm, the last pass of every pipeline
that hands it a module; checked first, an IRError naming the function otherwise): a node
is emitted once per use, so a node graph form shares must be one let, and a value's
operands are atoms, so emitting nests no deeper than the blocks (``if``, ``match``) do,
however deep the dataflow graph.
"""
from __future__ import annotations

import itertools
from typing import Any as AnyValue

import numpy as np
from llvmlite import ir

from relaydsl.backend.llvm import jit
from relaydsl.backend.llvm.kernel import Kernel, address, compile_primitives
from relaydsl.ir.types import static_type
from relaydsl.backend.llvm.native.functions import (
    FunctionCompiler, Unsupported, primitive_of, symbol,
)
from relaydsl.backend.llvm.native.abi import (
    I32, I64, PTR, SLOTS, Error, Word,
)
from relaydsl.backend.llvm.native.externals import ExternalKernel, Externals
from relaydsl.backend.llvm.native.loops import young_function
from relaydsl.backend.llvm.native.sites import ALIGN, KernelSite, leaf_types
from relaydsl.backend.llvm.native.values import contiguous
from relaydsl.ir.expr import (
    Call, Expr, Function, GlobalVar, Match, Op, Var,
)
from relaydsl.ir.module import IRModule
from relaydsl.ir.types import FuncType, TensorType, TupleType, Type, TypeCall
from relaydsl.ir.visitor import post_order
from relaydsl.op.collective import Collective
from relaydsl.transform.a_normal_form import check_a_normal_form
from relaydsl.transform.fuse_ops import is_primitive
from relaydsl.transform.pipeline import CompileOptions


_CHUNK = 1 << 20


# ---- lowering ------------------------------------------------------------------------------

# the wrappers' names, made unique per compiled module by native/program.py
WRAPPER = "relaydsl_native_PROGRAM_"


class Lowering:
    """The LLVM module of one program: a function per reachable Relay function."""

    def __init__(self, mod: IRModule, options: CompileOptions, resolve: int, reduce: int,
                 shapes_at_run_time: bool, external: int = 0,
                 externals: Externals | None = None, count_calls: bool = False):
        self.mod, self.options = mod, options
        self.shapes_at_run_time = shapes_at_run_time
        # the addresses the code reads from the link table (Word.LINKS), by index; the first
        # is that of ``i64 resolve(site, dims)`` (Python: kernels of run-time shapes), the
        # second ``i64 reduce(collective, data, count)`` (Python: a collective's exchange),
        # the third ``i64 external(site, table)`` (Python: external kernels, externals.py)
        self.links: list[int] = []
        self._link_index: dict[int, int] = {}
        self.resolve = self.link(resolve)
        self.reduce = self.link(reduce)
        self.external = self.link(external)
        # the hook that makes primitive functions external kernels, and those it made, by
        # the site index ``external`` is called with
        self._externals = externals
        self.external_kernels: list[ExternalKernel] = []
        self.external_sites: dict[Function, int] = {}
        # with count_calls, the calls of each primitive function (by index in
        # ``counted``), counted by native code in an array the program keeps
        self.count_calls = count_calls
        self.counted: dict[Function, int] = {}
        self.call_counts = np.zeros(0, np.int64)
        self.counts_link = 0
        # the collective call sites, by the index ``reduce`` is called with: what each does
        # and its dtype
        self.collectives: list[tuple[Collective, np.dtype]] = []
        # tensors as headers [data, dims...] (when some shape is known only at run time)
        self.boxed = False
        self.sites: list[KernelSite] = []  # kernel calls of run-time shapes, by index
        # the shape checks' kernels and spans
        self.wrong_shapes: list[tuple[Kernel | ExternalKernel, AnyValue]] = []
        self.op_kernels: dict[Call, Function] = {}  # a lone operator call's primitive function
        self.module = ir.Module(name="relaydsl_native")
        self.module.triple = jit.host_target().triple
        self.module.data_layout = jit.data_layout()
        self.keep: list[AnyValue] = []  # constants and kernels the code points at
        self.kernels: dict[Function, Kernel] = {}  # by primitive function
        self.matches: list[Match] = []  # by the index a no-clause error reports
        self.entry: GlobalVar | None = None
        # whether the entry writes result leaves into arrays Python makes (results.py)
        self.results_in_place = False
        # whether every run ends by itself: no loop, no call of a function (one that could
        # recurse); such a program need not be stoppable by Ctrl-C (program.py)
        self.finite = True
        self.kernel_calls = 0
        self.globals: dict[GlobalVar, ir.Function] = {}
        self.closures: dict[GlobalVar, ir.Value] = {}
        self.pending: list[tuple] = []  # functions declared, to emit
        self.names = itertools.count()
        self.malloc = ir.Function(self.module, ir.FunctionType(PTR, [I64]), "malloc")
        self.free = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [PTR]), "free")
        self.memcpy = self.module.declare_intrinsic("llvm.memcpy", [PTR, PTR, I64])
        self.alloc = self._alloc_function()
        self.reset = self._reset_function()
        # (), what a ref_write returns: no allocation
        self.unit = self.constant_object("relaydsl_unit", [ir.Constant(PTR, None)])
        self.frame_address = ir.Function(self.module, ir.FunctionType(PTR, [I32]),
                                         "llvm.frameaddress.p0")
        self._young: ir.Function | None = None

    @property
    def young(self) -> ir.Function:
        """``young(state, address, mark...)`` (loops.py), emitted for programs that loop.

        Not a functools.cached_property: on Python 3.11 its one lock for every instance
        would hang a child forked while another thread emits it."""
        if self._young is None:
            self._young = young_function(self.module)
        return self._young

    def lower_entry(self, entry: GlobalVar, boundary: list[Type]) -> str:
        self.entry = entry
        self.compile_kernels(entry)
        self.boxed = self.shapes_at_run_time or bool(self.dynamic) or \
            any(self.dynamic_type(t, set()) for t in boundary)
        target = self.global_function(entry)
        while self.pending:
            FunctionCompiler(self, *self.pending.pop()).compile()
        return self._entry_wrapper(target, len(self.mod[entry].params))

    def compile_kernels(self, entry: GlobalVar) -> None:
        """Compiles every primitive function the entry can reach, together."""
        seen, todo, prims, op_calls = {entry}, [entry], [], []

        def note(e: Expr) -> None:
            if isinstance(e, GlobalVar) and e not in seen:
                seen.add(e)
                todo.append(e)
            elif isinstance(e, Function) and is_primitive(e):
                prims.append(e)
            elif isinstance(e, Call) and isinstance(e.op, Op):
                op_calls.append(e)

        while todo:
            gv = todo.pop()
            # one node lowered once: sharing must be explicit (a let), as deep as the graph is
            check_a_normal_form(self.mod[gv], gv.name_hint, "native code (the llvm lowering)")
            post_order(self.mod[gv], note)
        inside: set[Expr] = set()
        for f in prims:
            post_order(f.body, inside.add)
        for call in op_calls:  # outside primitive functions: FuseOps did not run
            if call not in inside:
                self.op_kernels[call] = primitive_of(call)
                prims.append(self.op_kernels[call])
        unique = list(dict.fromkeys(prims))
        static = []
        self.dynamic: set[Function] = set()  # primitive functions compiled per shape at run time
        for f in unique:
            t = f.checked_type
            if all(static_type(p) for p in t.arg_types) and static_type(t.ret_type) and \
                    not self.shapes_at_run_time:
                static.append(f)
            elif all(isinstance(p.dtype, str) for p in leaf_types([*t.arg_types, t.ret_type])):
                self.dynamic.add(f)
            else:
                raise Unsupported("a kernel whose dtypes are known only at run time")
        if self._externals is not None:
            static = [f for f in static if not self._external(f)]
        for f, k in zip(static, compile_primitives(static, self.options)):
            self.kernels[f] = k
            self.keep.append(k)
        if self.count_calls:
            self.counted = {f: i for i, f in enumerate(unique)}
            self.call_counts = np.zeros(max(len(unique), 1), np.int64)
            self.keep.append(self.call_counts)
            self.counts_link = self.link(address(self.call_counts))

    def _external(self, fn: Function) -> bool:
        """Whether the hook makes `fn` an external kernel (noted if so)."""
        assert self._externals is not None
        kernel = self._externals(fn)
        if kernel is None:
            return False
        t = fn.checked_type
        assert isinstance(t, FuncType)
        want = (leaf_types(t.arg_types), leaf_types([t.ret_type]))
        if (kernel.input_types, kernel.output_types) != want:
            raise ValueError(f"an external kernel of {kernel.input_types} -> "
                             f"{kernel.output_types} for a primitive function of "
                             f"{want[0]} -> {want[1]}")
        self.external_sites[fn] = len(self.external_kernels)
        self.external_kernels.append(kernel)
        return True

    def dynamic_type(self, t: Type, seen: set) -> bool:
        """Whether a value of type `t` from or to Python holds a tensor of a shape known
        only at run time (the fields of data types included)."""
        if isinstance(t, TensorType):
            return not static_type(t)
        if isinstance(t, TupleType):
            return any(self.dynamic_type(f, seen) for f in t.fields)
        if isinstance(t, TypeCall) and t not in seen:
            seen.add(t)
            return any(self.dynamic_type(f, seen)
                       for c in self.mod.type_definitions[t.func].constructors
                       for f in self.mod.field_types(c, t))
        return False

    def signature(self, arity: int) -> ir.FunctionType:
        return ir.FunctionType(PTR, [PTR, PTR] + [PTR] * arity)

    def declare(self, fn: Function, hint: str, captures: list, self_var: Var | None,
                self_global: GlobalVar | None) -> ir.Function:
        """A function for `fn`, emitted later (closures and globals nest freely)."""
        f = ir.Function(self.module, self.signature(len(fn.params)),
                        f"{symbol(hint)}_{next(self.names)}")
        f.linkage = "internal"
        self.pending.append((f, fn, captures, self_var, self_global))
        return f

    def global_function(self, gv: GlobalVar) -> ir.Function:
        f = self.globals.get(gv)
        if f is None:
            # the entry is "entry": a function built again (its global renamed "layer_2")
            # is the same text, and shares its compiled module (program.py)
            hint = "entry" if gv == self.entry else gv.name_hint
            f = self.globals[gv] = self.declare(self.mod[gv], hint, [], None, gv)
        return f

    def global_closure(self, gv: GlobalVar) -> ir.Value:
        """The closure of a global used as a value: its code and no captures."""
        closure = self.closures.get(gv)
        if closure is None:
            closure = self.closures[gv] = self.constant_object(
                f"closure_{symbol(gv.name_hint)}_{next(self.names)}",
                [self.global_function(gv).bitcast(PTR)])
        return closure

    def constant_object(self, name: str, fields: list[ir.Constant]) -> ir.Value:
        """An object in the module's constant data rather than the arena."""
        t = ir.ArrayType(PTR, len(fields))
        g = ir.GlobalVariable(self.module, t, name)
        g.linkage = "internal"
        g.global_constant = True
        g.initializer = ir.Constant(t, fields)
        return g.bitcast(PTR)

    def link(self, address: int) -> int:
        """The index of `address` in the link table (FunctionCompiler.linked reads it)."""
        index = self._link_index.get(address)
        if index is None:
            index = self._link_index[address] = len(self.links)
            self.links.append(address)
        return index

    def constant(self, data: np.ndarray) -> int:
        """The link of a copy of `data` the program keeps."""
        a = contiguous(data)
        self.keep.append(a)
        return self.link(address(a))

    def _alloc_function(self) -> ir.Function:
        """``ptr alloc(state, bytes, align - 1)``: bump allocation; when the arena is full,
        a chunk from malloc (linked into the state's list, for Python to free)."""
        f = ir.Function(self.module, ir.FunctionType(PTR, [PTR, I64, I64]), "relaydsl_alloc")
        f.linkage = "internal"
        st, n, mask = f.args
        entry, bump, fast, slow = (f.append_basic_block(x)
                                   for x in ("entry", "bump", "fast", "slow"))
        b = ir.IRBuilder(entry)
        words = b.bitcast(st, I64.as_pointer())
        cur_p, end_p = b.gep(words, [I64(Word.CUR)]), b.gep(words, [I64(Word.END)])
        b.branch(bump)
        b.position_at_end(bump)
        start = b.and_(b.add(b.load(cur_p), mask), b.not_(mask))
        new = b.add(start, n)
        b.cbranch(b.icmp_unsigned("<=", new, b.load(end_p)), fast, slow)
        b.position_at_end(fast)
        b.store(new, cur_p)
        b.ret(b.inttoptr(start, PTR))
        b.position_at_end(slow)
        size = b.add(n, I64(_CHUNK + 2 * ALIGN))
        chunk = b.call(self.malloc, [size])
        chunks_p = b.gep(words, [I64(Word.CHUNKS)])
        chunk_words = b.bitcast(chunk, I64.as_pointer())  # [next chunk, size, ...]
        b.store(b.load(chunks_p), chunk_words)
        b.store(size, b.gep(chunk_words, [I64(1)]))
        b.store(b.ptrtoint(chunk, I64), chunks_p)
        over_p = b.gep(words, [I64(Word.OVERFLOW)])
        over = b.add(b.load(over_p), size)
        b.store(over, over_p)
        peak_p = b.gep(words, [I64(Word.PEAK)])
        peak = b.load(peak_p)
        b.store(b.select(b.icmp_unsigned(">", over, peak), over, peak), peak_p)
        with b.if_then(b.icmp_unsigned(">", over, b.load(b.gep(words, [I64(Word.BUDGET)]))),
                       likely=False):  # the run stops at the next call or loop turn
            b.store(I64(Error.NO_MEMORY), b.gep(words, [I64(Word.ERROR)]))
        base = b.ptrtoint(chunk, I64)
        b.store(b.add(base, I64(ALIGN)), cur_p)
        b.store(b.add(base, size), end_p)
        b.branch(bump)
        return f

    def _reset_function(self) -> ir.Function:
        """``void reset(state, cur, end, chunks)``: the arena back to a mark taken earlier,
        the chunks taken since freed."""
        f = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [PTR, I64, I64, I64]),
                        "relaydsl_reset")
        f.linkage = "internal"
        st, cur, end, mark = f.args
        entry, test, release, done = (f.append_basic_block(x)
                                      for x in ("entry", "test", "release", "done"))
        b = ir.IRBuilder(entry)
        words = b.bitcast(st, I64.as_pointer())
        chunks_p, over_p = b.gep(words, [I64(Word.CHUNKS)]), b.gep(words, [I64(Word.OVERFLOW)])
        b.branch(test)
        b.position_at_end(test)
        chunk = b.load(chunks_p)
        b.cbranch(b.icmp_unsigned("!=", chunk, mark), release, done)
        b.position_at_end(release)
        chunk_words = b.inttoptr(chunk, I64.as_pointer())
        b.store(b.load(chunk_words), chunks_p)
        b.store(b.sub(b.load(over_p), b.load(b.gep(chunk_words, [I64(1)]))), over_p)
        b.call(self.free, [b.inttoptr(chunk, PTR)])
        b.branch(test)
        b.position_at_end(done)
        b.store(cur, b.gep(words, [I64(Word.CUR)]))
        b.store(end, b.gep(words, [I64(Word.END)]))
        b.ret_void()
        return f

    def _entry_wrapper(self, target: ir.Function | None, arity: int) -> str:
        """``i64 run(state, slots)``: the entry (`target`) on ``slots[0..arity)``, its
        result into ``slots[arity]`` -- or, with no target, the closure at ``slots[0]`` on
        the next `arity` slots; returns the state's error code. Turns the state's stack
        budget into the lowest address functions may reach."""
        name = f"{WRAPPER}{next(self.names)}"
        f = ir.Function(self.module, ir.FunctionType(I64, [PTR, PTR]), name)
        st, slots = f.args
        b = ir.IRBuilder(f.append_basic_block("entry"))
        words = b.bitcast(st, I64.as_pointer())
        limit_p = b.gep(words, [I64(Word.STACK_LIMIT)])
        here = b.ptrtoint(b.call(self.frame_address, [I32(0)]), I64)
        b.store(b.add(here, b.load(limit_p)), limit_p)
        pointers = b.bitcast(slots, SLOTS)
        first = 0 if target is not None else 1
        args = [b.load(b.gep(pointers, [I64(first + i)])) for i in range(arity)]
        if target is not None:
            result = b.call(target, [st, ir.Constant(PTR, None), *args])
        else:
            closure = b.load(pointers)
            code = b.load(b.bitcast(closure, SLOTS))
            result = b.call(b.bitcast(code, self.signature(arity).as_pointer()),
                            [st, closure, *args])
        b.store(result, b.gep(pointers, [I64(first + arity)]))
        b.ret(b.load(b.gep(words, [I64(Word.ERROR)])))
        return name

    def closure_wrapper(self, arity: int) -> str:
        """``i64 run(state, slots)`` calling a closure of `arity` arguments (one a call
        returned to Python)."""
        return self._entry_wrapper(None, arity)
