"""JIT compilation of LLVM IR for the host CPU, with an on-disk object cache.

One process-wide MCJIT engine holds every compiled object. ``compile_ir`` takes
LLVM IR text and a cache key, optimises it at ``speed_level`` 3 with LLVM's new
pass builder (loop and SLP vectorisation on, loop unrolling off; see
../shared/PERFORMANCE.md and ``compile_ir``),
emits a native object for the host CPU and loads it. The object is also written
to the cache directory (``$RELAYDSL_CACHE_DIR``, else ``~/.cache/relaydsl``)
under a name derived from the key, the host target and the backend's source
fingerprint, so a second process loads it without recompiling and a change to
the code generator never reuses a stale object. Each module compiled or loaded is logged
(INFO, logger ``relaydsl.backend.llvm.jit``).

>>> lib = compile_ir('define i64 @twice(i64 %x) {\\n  %y = add i64 %x, %x\\n  ret i64 %y\\n}',
...                  key="doc-twice")
>>> import ctypes
>>> lib.function("twice", ctypes.c_int64, [ctypes.c_int64])(21)
42
"""
from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import logging
import os
import pathlib
import re
import select
import signal
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass
from typing import Callable, Iterator

import llvmlite
import llvmlite.binding as llvm

import relaydsl.backend.llvm
import relaydsl.op
import relaydsl.te
from relaydsl import settings
from relaydsl.errors import SettingError

# Held over each compilation and loading of an object (the JIT engine is shared).
_LOCK = threading.RLock()
_log = logging.getLogger(__name__)


def _before_fork() -> None:
    """A fork waits until no thread is inside LLVM: a child forked meanwhile would inherit
    the engine half-updated, and llvmlite's lock (one for every call into LLVM) held by a
    thread it does not have, so its first LLVM call would block forever."""
    _LOCK.acquire()
    llvm.ffi.lib._lock.__enter__()


def _after_fork() -> None:
    llvm.ffi.lib._lock.__exit__(None, None, None)
    _LOCK.release()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork,
                        after_in_child=_after_fork)


@dataclass(frozen=True)
class HostTarget:
    """The CPU the JIT compiles for, and the vector width its code is tuned to; ``key``
    names it in cache keys.

    LLVM's tuning for Intel server CPUs (Skylake-X to Emerald Rapids) prefers 256-bit
    vectors even where AVX-512 is there; AMD's Zen 4/5 prefer 512. Left to that default,
    the same program vectorises differently on the two vendors, so the width is chosen
    here, for every CPU alike: the widest registers the CPU has, unless
    ``$RELAYDSL_VECTOR_WIDTH`` says otherwise. Measured on an Intel Xeon with AMX (LLVM:
    "rocketlake" features), benchmarks/run.py, 512 vs 256 bits: GEMM 1024 301 vs 208
    GFLOP/s, MLP forward b64 0.54 vs 0.67 ms, forward+backward 1.23 vs 1.52 ms, LeNet b64
    2.53 vs 3.12 ms, the elementwise chain 0.56 ms either way.
    """

    triple: str
    cpu: str
    features: str
    vector_bits: int

    @property
    def key(self) -> str:
        text = (f"{self.triple}|{self.cpu}|{self.features}|{self.vector_bits}"
                f"|llvmlite {llvmlite.__version__}")
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @property
    def tuned_features(self) -> str:
        """The CPU's features with the tuning that makes LLVM use ``vector_bits``."""
        if "+avx512f" not in self.features:
            return self.features
        prefer_256 = "+" if self.vector_bits == 256 else "-"
        return f"{self.features},{prefer_256}prefer-256-bit"

    @classmethod
    def of(cls, triple: str, cpu: str, features: str, vector_bits: int | None = None
           ) -> HostTarget:
        """The target for a CPU, with vectors as wide as its widest registers unless
        `vector_bits` asks for 256 on a CPU with AVX-512."""
        widest = register_bits(features)
        if vector_bits is None or widest < 512:
            vector_bits = widest
        elif vector_bits not in (256, 512):
            raise SettingError(f"RELAYDSL_VECTOR_WIDTH={vector_bits}: expected 256 or 512")
        return cls(triple, cpu, features, vector_bits)


def register_bits(features: str) -> int:
    """Width of the widest vector registers of a CPU with `features` (LLVM's feature list)."""
    flags = set(features.split(","))
    if "+avx512f" in flags:
        return 512
    return 256 if "+avx" in flags else 128


@functools.cache
def host_target() -> HostTarget:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    return HostTarget.of(llvm.get_process_triple(), llvm.get_host_cpu_name(),
                         llvm.get_host_cpu_features().flatten(), settings.vector_width())


def target_machine(target: HostTarget, codegen_level: int = 3) -> llvm.TargetMachine:
    """An LLVM target machine generating code for `target` (any x86 CPU, not only this one:
    tests check the code made for the other vendor's CPUs) with LLVM's code generator at
    `codegen_level` (0: -O0's fast instruction selection and register allocation)."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    return llvm.Target.from_triple(target.triple).create_target_machine(
        cpu=target.cpu, features=target.tuned_features, opt=codegen_level,
        codemodel="jitdefault")


@functools.cache
def _machine(fast_codegen: bool = False) -> llvm.TargetMachine:
    return target_machine(host_target(), 0 if fast_codegen else 3)


@functools.cache
def _engine() -> llvm.ExecutionEngine:
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), _machine())
    _load_runtime(engine)
    return engine


def _load_runtime(engine: llvm.ExecutionEngine) -> None:
    """Loads the native runtime (runtime.py) and makes its functions linkable by kernels.

    Kernel objects declare ``relaydsl_parallel_for`` etc.; ``add_symbol`` puts the loaded
    addresses in the process's symbol table, which the engine consults when it links an
    object. Starts the worker threads (forgotten in a forked child).
    """
    from relaydsl.backend.llvm import runtime

    text = runtime.runtime_ir()
    path = object_path("runtime|" + hashlib.sha256(text.encode()).hexdigest())
    symbols, _ = _obtain(engine, path, list(runtime.EXPORTS), lambda: text, (3, True, False, False),
                         use_disk_cache=True)
    for name, address in symbols.items():
        llvm.add_symbol(name, address)
    start = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)(symbols["relaydsl_pool_start"])
    start(settings.num_threads() - 1)
    forget = ctypes.CFUNCTYPE(None)(symbols["relaydsl_pool_forget"])
    if hasattr(os, "register_at_fork"):  # a child has no workers: loops run on its thread
        os.register_at_fork(after_in_child=forget)


def runtime_threads() -> int:
    """Threads a parallel loop of compiled code runs on (the caller and the workers)."""
    with _LOCK:
        engine = _engine()
    count = ctypes.CFUNCTYPE(ctypes.c_int64)(engine.get_function_address("relaydsl_pool_threads"))
    return int(count())


def runtime_function(name: str) -> int:
    """The address of one of the native runtime's functions (runtime.EXPORTS)."""
    with _LOCK:
        return _engine().get_function_address(name)


@functools.cache
def source_fingerprint() -> str:
    """A hash of the code that decides what a kernel computes (lowering, te, ops)."""
    digest = hashlib.sha256()
    for package in (relaydsl.backend.llvm, relaydsl.te, relaydsl.op):
        folder = pathlib.Path(package.__file__).parent
        for path in sorted(folder.rglob("*.py")):
            digest.update(f"{package.__name__}/{path.relative_to(folder).as_posix()}".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def cache_dir() -> pathlib.Path:
    base = settings.cache_dir() or pathlib.Path.home() / ".cache" / "relaydsl"
    return base / "kernels"


class Library:
    """Compiled code loaded into the process: function addresses by symbol name."""

    def __init__(self, symbols: dict[str, int]):
        self._symbols = symbols

    def address(self, name: str) -> int:
        return self._symbols[name]

    def function(self, name: str, restype: type | None, argtypes: list) -> ctypes._CFuncPtr:
        """A ctypes callable; ctypes releases the GIL for the duration of each call."""
        return ctypes.CFUNCTYPE(restype, *argtypes)(self.address(name))


def data_layout() -> str:
    """The host target's data layout string, for modules built with llvmlite.ir."""
    return str(_machine().target_data)


# Counters tests read: how many modules went through LLVM, how many came from the disk cache.
stats = {"compiled": 0, "disk_hits": 0}
# A hook for tests and debugging: called with (optimised LLVM IR, assembly) of every module
# that is compiled (not of those loaded from the cache).
inspect_hook = None


def object_path(key: str) -> pathlib.Path:
    name = hashlib.sha256(f"{key}|{host_target().key}|{source_fingerprint()}".encode())
    return cache_dir() / f"{name.hexdigest()[:32]}.o"


def compile_ir(ir_text: str, key: str, *, speed_level: int = 3, vectorize: bool = True,
               unroll: bool = False, fast_codegen: bool = False, use_disk_cache: bool = True
               ) -> Library:
    """Optimises, compiles and loads `ir_text`; its defined functions are looked up by name.

    `key` must identify what `ir_text` computes (its symbols are unique per key) and how
    it is compiled. `vectorize=False` leaves out LLVM's loop and SLP vectorisers (for IR
    written with explicit vectors, where they only cost compile time). LLVM's loop
    unroller is off unless `unroll`: on the generated kernels (already vectorised and
    interleaved by the loop vectoriser) it doubled the compile time of a module and
    quadrupled its code without making the MLP or the elementwise benchmark faster.
    `fast_codegen` generates the code with LLVM's -O0 code generator (a third of the time,
    for code whose speed does not matter: it runs once a call).
    """
    return load_or_compile(key, _defined_functions(ir_text), lambda: ir_text,
                           speed_level=speed_level, vectorize=vectorize, unroll=unroll,
                           fast_codegen=fast_codegen, use_disk_cache=use_disk_cache)


def load_or_compile(key: str, names: list[str], build_ir: Callable[[], str], *,
                    speed_level: int = 3, vectorize: bool = True, unroll: bool = False,
                    fast_codegen: bool = False, use_disk_cache: bool = True) -> Library:
    """The object cached on disk under `key`, loaded; else ``build_ir()`` compiled (as by
    ``compile_ir``), cached and loaded. `names` are the functions the caller looks up.

    For callers that know their symbols and can then skip building the IR on a cache hit.
    """
    path = object_path(key)
    start = time.perf_counter()
    with _LOCK:
        symbols, compiled = _obtain(_engine(), path, names, build_ir,
                                    (speed_level, vectorize, unroll, fast_codegen),
                                    use_disk_cache)
    stats["compiled" if compiled else "disk_hits"] += 1
    if _log.isEnabledFor(logging.INFO):
        _log.info("LLVM module of %d function(s) %s in %.1f ms (%s)", len(names),
                  "compiled" if compiled else "loaded from the disk cache",
                  1000 * (time.perf_counter() - start),
                  path if use_disk_cache else "not cached on disk")
    return Library(symbols)


def _obtain(engine: llvm.ExecutionEngine, path: pathlib.Path, names: list[str],
            build_ir: Callable[[], str], options: tuple[int, bool, bool, bool],
            use_disk_cache: bool
            ) -> tuple[dict[str, int], bool]:
    """Loads the object ``compile_parallel`` compiled for `path`, else the entry at `path`,
    else compiles ``build_ir()`` with `options` (speed level, vectorize, unroll, fast
    codegen), loads it
    and caches it: the addresses of `names`, and whether it was compiled (here, now or by
    ``compile_parallel``, or by its child). Under ``_LOCK``."""
    if _AHEAD.get(path, _FINISHED) != _FINISHED:
        _help_children()  # rather than wait for a child, compile what none has taken
    obj = _READY.pop(path, None)
    if obj is not None:
        symbols = _load_object(engine, obj, names)
        if symbols is not None:
            return symbols, True
    if use_disk_cache:
        ahead = _wait_ahead(path)
        symbols = _load_cached(engine, path, names)
        if symbols is not None:
            return symbols, ahead
    obj = _compile_object(build_ir(), *options)
    symbols = _load_object(engine, obj, names)
    if symbols is None:
        raise RuntimeError(f"the compiled object lacks one of {names} (cache file {path})")
    if use_disk_cache:
        _write_cached(path, obj)
    return symbols, True


# ---- compiling on two cores: this process and a forked child -----------------------------------

_AHEAD: dict[pathlib.Path, int] = {}  # cache entries a forked child is compiling: its pid
_READY: dict[pathlib.Path, bytes] = {}  # objects compile_parallel compiled here, to be loaded
AHEAD_TIMEOUT = 60.0  # seconds a load waits for such a child before compiling itself


@dataclass(frozen=True)
class Job:
    """A module to compile as ``load_or_compile(key, names, build_ir, ...)`` would."""

    key: str
    build_ir: Callable[[], str]
    speed_level: int = 3
    vectorize: bool = True
    unroll: bool = False
    fast_codegen: bool = False


def compile_parallel(jobs: list[Job], *, share: bool = True) -> bool:
    """Compiles `jobs` on two cores before they are loaded: a forked child process and this
    one take them one at a time, in order, from one queue (a pipe), until none is left. The
    child writes what it compiles to the disk cache; this process keeps what it compiled in
    memory (and writes it to the disk cache too). ``load_or_compile`` of a job's key then
    loads this process's object, or waits for the child and loads what it wrote (or
    compiles itself if the child failed or took over ``AHEAD_TIMEOUT``). Whoever takes a
    job builds its IR too. A job that fails here is compiled again, and raises, where it is
    loaded.

    With `share` False the child takes every job and this process returns at once, to
    go on with other work meanwhile (a build compiles the modules it knows it will need,
    while it works out the rest). Such a child's jobs are not its alone: once this process
    has emptied a shared queue, or would wait for a job the child has not finished, it
    takes the ones the child has not started (``_help_children``).

    Threads instead of a child were measured and are no faster (AMD EPYC, Zen 5: the MLP's
    gradients, 175-199 ms against 169 cold): llvmlite serialises every call into LLVM
    with one lock, and a compiling thread that bypasses it still waits up to Python's
    switch interval for the interpreter lock after each of its ~20 calls while this
    thread runs Python (a 21 ms module took 85 ms beside a busy loop).

    Whether a child was started: not for fewer than two jobs to compile (one with `share`
    False; entries neither on disk nor being compiled), nor where there is no second core
    or no ``os.fork``, or the fork fails; then nothing was compiled. Sharing one queue
    balances the two processes without estimating what each module costs: they finish at
    most one job apart.

    The child only compiles and writes files, then leaves with ``os._exit`` (no exit
    handlers, no flushing of the parent's buffers); the at-fork handlers above make sure no
    thread is inside LLVM when it is forked.
    """
    _reap_finished()
    todo = [(object_path(job.key), job) for job in jobs]
    todo = [(path, job) for path, job in todo
            if path not in _AHEAD and path not in _READY and not path.exists()]
    if not hasattr(os, "fork") or settings.usable_cores() < 2:
        return False
    if share and todo:  # after these, what children compiling ahead have not started: one
        todo += _take_over_queues()  # queue balances all of it between two processes
    if len(todo) < (2 if share else 1):
        return False
    try:
        todo[0][0].parent.mkdir(parents=True, exist_ok=True)
        read, write = os.pipe()
    except OSError:
        return False
    # the queue: job numbers of 4 bytes (a read of at most PIPE_BUF bytes is atomic), then
    # the end of the file once both processes have taken every job
    os.write(write, b"".join(i.to_bytes(4, "little") for i in range(len(todo))))
    os.close(write)
    try:
        with warnings.catch_warnings():  # of forking a threaded process (Python 3.12+,
            warnings.filterwarnings("ignore", ".*fork")  # JAX): the child only compiles
            pid = os.fork()
    except OSError:
        os.close(read)
        return False
    if pid == 0:
        code = 0
        try:
            for path, job in _taken(read, todo):
                try:
                    _write_cached(path, _compile_job(job))
                except Exception:  # the parent compiles it again where it loads it
                    code = 1
        finally:
            os._exit(code)
    for path, _ in todo:
        _AHEAD[path] = pid
    _QUEUES[pid] = (read, todo)
    if share:
        _help_children()
    return True


# The queues of the children compiling ahead (their read ends), from which this process
# takes the jobs they have not taken yet when it would otherwise wait for them.
_QUEUES: dict[int, tuple[int, list[tuple[pathlib.Path, "Job"]]]] = {}


def _help_children() -> None:
    """Compiles here, in order, the jobs no child has taken yet, keeping their objects to
    be loaded (and caching them): from the queue of the jobs just shared, and from those
    children were given to compile ahead alone. A build whose own modules are compiled
    would otherwise wait idle for a child still compiling the GEMM library (the MLP's
    gradients: ~40 ms on one of the two cores)."""
    while _QUEUES:
        _, (read, todo) = _QUEUES.popitem()
        try:
            for path, job in _taken(read, todo):
                _AHEAD.pop(path, None)
                with _LOCK, contextlib.suppress(Exception):  # compiled again, and raises,
                    obj = _compile_job(job)  # at the load
                    _READY[path] = obj
                    _write_cached(path, obj)
        finally:
            os.close(read)


def _take_over_queues() -> list[tuple[pathlib.Path, Job]]:
    """The jobs no child compiling ahead has started, taken from their queues (which are
    closed: each child finishes the job it is compiling, then leaves). Until they are
    queued again, a load of one of them waits for that child, then compiles it."""
    jobs = []
    while _QUEUES:
        _, (read, todo) = _QUEUES.popitem()
        try:
            jobs += _taken(read, todo)
        finally:
            os.close(read)
    return jobs


def _forget_queues_in_child() -> None:
    """A forked child takes no job from its parent's children's queues."""
    for read, _ in _QUEUES.values():
        os.close(read)
    _QUEUES.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_queues_in_child)


def _taken(queue: int, todo: list[tuple[pathlib.Path, Job]]
           ) -> Iterator[tuple[pathlib.Path, Job]]:
    """The jobs of `todo` this process takes from `queue`, one at a time."""
    while len(number := os.read(queue, 4)) == 4:
        yield todo[int.from_bytes(number, "little")]


def _compile_job(job: Job) -> bytes:
    return _compile_object(job.build_ir(), job.speed_level, job.vectorize, job.unroll,
                           job.fast_codegen)


def _reap_finished() -> None:
    """Reaps the children compiling ahead that have finished (what they compiled may never
    be loaded: a build's guess of what it needs may be wrong), so none is left a zombie."""
    for pid in set(_AHEAD.values()):
        if pid > 0:
            try:
                finished = os.waitpid(pid, os.WNOHANG)[0]
            except ChildProcessError:  # reaped elsewhere (by a SIGCHLD handler)
                finished = pid
            if finished:
                for path in [p for p, child in _AHEAD.items() if child == pid]:
                    _AHEAD[path] = _FINISHED
                if pid in _QUEUES:
                    os.close(_QUEUES.pop(pid)[0])


_FINISHED = 0  # in _AHEAD: compiled by a child that was reaped


def _wait_ahead(path: pathlib.Path) -> bool:
    """Waits for the child compiling `path` ahead, if any (killing it after
    ``AHEAD_TIMEOUT`` or when the wait is interrupted); whether there was one."""
    pid = _AHEAD.pop(path, None)
    if pid is None:
        return False
    if pid == _FINISHED:
        return True
    deadline = time.monotonic() + AHEAD_TIMEOUT
    try:
        while not os.waitpid(pid, os.WNOHANG)[0]:
            if time.monotonic() > deadline:
                _reap(pid)
                break
            _sleep_for_exit(pid, deadline - time.monotonic())
    except ChildProcessError:  # reaped elsewhere (by a SIGCHLD handler)
        pass
    except BaseException:
        _reap(pid)
        raise
    return True


def _sleep_for_exit(pid: int, seconds: float) -> None:
    """Sleeps until child `pid` exits or `seconds` pass (woken by the exit itself where
    Linux gives a process a file descriptor, not by a timer: under load, a poll's short
    sleeps each wait for their turn on a core), or half a millisecond."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        time.sleep(0.0005)
        return
    try:
        select.select([fd], [], [], max(seconds, 0.0))
    finally:
        os.close(fd)


def _reap(pid: int) -> None:
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def _load_cached(engine: llvm.ExecutionEngine, path: pathlib.Path, names: list[str]
                 ) -> dict[str, int] | None:
    """The entry at `path` loaded into `engine`: its addresses of `names`; None when it is
    missing, damaged or fails to load (then it is deleted, to be compiled again)."""
    obj = _read_cached(path)
    if obj is None:
        return None
    try:
        symbols = _load_object(engine, obj, names)
    except Exception:  # whatever LLVM makes of an entry it cannot load: compile it again
        symbols = None
    if symbols is None:
        path.unlink(missing_ok=True)
    return symbols


def _load_object(engine: llvm.ExecutionEngine, obj: bytes, names: list[str]
                 ) -> dict[str, int] | None:
    """Adds the object to `engine`; the addresses of `names`, or None if it lacks one.

    An object whose symbol table lacks a name is refused before it enters the engine
    (there, it could shadow the definitions of the object compiled in its place).
    """
    if not all(name.encode() + b"\0" in obj for name in names):
        return None
    engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
    engine.finalize_object()
    symbols = {n: engine.get_function_address(n) for n in names}
    return symbols if all(symbols.values()) else None


def _compile_object(ir_text: str, speed_level: int, vectorize: bool = True, unroll: bool = False,
                    fast_codegen: bool = False) -> bytes:
    module = _optimised(ir_text, _machine(), speed_level, vectorize, unroll)
    machine = _machine(fast_codegen)
    if inspect_hook is not None:
        inspect_hook(str(module), machine.emit_assembly(module))
    return machine.emit_object(module)


def assembly(ir_text: str, target: HostTarget) -> str:
    """The assembly that `ir_text`, optimised as ``compile_ir`` does, becomes on `target`
    (any x86 CPU: tests read the code made for CPUs other than this one)."""
    machine = target_machine(target)
    return machine.emit_assembly(_optimised(ir_text, machine, 3, True, False))


def _optimised(ir_text: str, machine: llvm.TargetMachine, speed_level: int, vectorize: bool,
               unroll: bool) -> llvm.ModuleRef:
    module = llvm.parse_assembly(ir_text)
    module.verify()
    options = llvm.create_pipeline_tuning_options(speed_level=speed_level)
    options.loop_vectorization = vectorize and speed_level >= 2
    options.slp_vectorization = vectorize and speed_level >= 2
    options.loop_unrolling = unroll and speed_level >= 2
    builder = llvm.create_pass_builder(machine, options)
    builder.getModulePassManager().run(module, builder)
    return module


def _defined_functions(ir_text: str) -> list[str]:
    names = []
    for line in ir_text.splitlines():
        if line.startswith("define") and not re.match(r"define\s+(internal|private)\b", line):
            at = line.index("@")
            end = line.index("(", at)
            names.append(line[at + 1:end].strip('"'))
    return names


def _read_cached(path: pathlib.Path) -> bytes | None:
    """The object file cached at `path`, or None when it is missing or damaged.

    A cache entry is the object followed by its SHA-256: loading a truncated or altered
    object would crash the process (and every later one), so such an entry is recompiled.
    """
    try:
        data = path.read_bytes()
    except OSError:
        return None
    obj, digest = data[:-_DIGEST_SIZE], data[-_DIGEST_SIZE:]
    if obj[:4] != b"\x7fELF" or hashlib.sha256(obj).digest() != digest:
        return None
    return obj


_DIGEST_SIZE = 32


def _write_cached(path: pathlib.Path, obj: bytes) -> None:
    """Atomic: a concurrent reader sees the whole entry or none."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(obj + hashlib.sha256(obj).digest())
        os.replace(tmp, path)
    except OSError:
        pass  # a read-only or full cache directory only costs recompilation
