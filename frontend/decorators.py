"""``@relay``: a Python function translated to Relay, type-checked and run.

Decorating translates the function at once (so a construct outside the
subset is reported where it is defined); references to decorated functions
not defined yet (recursion, mutual recursion, any order of definition) are
resolved when the function is first compiled. Calling it type-checks the
module of every function it reaches, compiles once per (target, options),
checks the arguments against the annotations and runs.

>>> import numpy as np
>>> from relaydsl import relay, Tensor, Float
>>> @relay
... def scale(x: Tensor[Float, (3,)]) -> Tensor[Float, (3,)]:
...     return x * 2.0
>>> scale(np.ones(3, np.float32))
array([2., 2., 2.], dtype=float32)
"""
from __future__ import annotations

import builtins
import functools
import itertools
from typing import Any as AnyValue, Callable

import numpy as np

from frontend import annotations
from frontend.source import Source
from frontend.translate import Resolver, Translator
from relaydsl.errors import DSLSyntaxError
from relaydsl.ir.expr import Expr, Function, GlobalVar
from relaydsl.ir.module import IRModule
from relaydsl.ir.printer import astext
from relaydsl.ir.types import FuncType, Type
from relaydsl.ir.visitor import ExprMutator

_used_global_names: set[str] = set()


def _unique_global_name(name: str) -> str:
    from relaydsl.ir.prelude import prelude_definitions

    taken = _used_global_names | {gv.name_hint for gv in prelude_definitions()[1]}
    candidate = name
    for i in itertools.count(2):
        if candidate not in taken:
            break
        candidate = f"{name}_{i}"
    _used_global_names.add(candidate)
    return candidate


class RelayFunction:
    """What ``@relay`` returns: callable like the Python function, plus the compiler's views."""

    is_model = False

    def __init__(self, pyfunc: Callable):
        functools.update_wrapper(self, pyfunc)
        self.pyfunc = pyfunc
        self.source = Source.of(pyfunc)
        self.global_var = GlobalVar(_unique_global_name(pyfunc.__name__),
                                    span=self.source.span(self.source.tree))
        self.callees: list[RelayFunction] = []
        self._resolver = Resolver(self._lookup, self._to_global, self._annotation_type,
                                  _special_call)
        self.function: Function = Translator(self.source, self._resolver).function(self.source.tree)
        self._module: IRModule | None = None
        self._executables: dict[tuple, AnyValue] = {}

    # ---- name resolution -------------------------------------------------
    def _lookup(self, name: str) -> AnyValue:
        code = self.pyfunc.__code__
        if name in code.co_freevars and self.pyfunc.__closure__:
            cell = self.pyfunc.__closure__[code.co_freevars.index(name)]
            try:
                return cell.cell_contents
            except ValueError:  # defined later in the enclosing function
                raise KeyError(name) from None
        if name in self.pyfunc.__globals__:
            return self.pyfunc.__globals__[name]
        if hasattr(builtins, name):
            return getattr(builtins, name)
        raise KeyError(name)

    def _to_global(self, value: AnyValue) -> GlobalVar | None:
        if isinstance(value, RelayFunction):
            if value is not self and value not in self.callees:
                self.callees.append(value)
            return value.global_var
        return None

    @staticmethod
    def _annotation_type(ann: AnyValue, symbols: dict) -> Type:
        return annotations.annotation_to_type(ann, symbols=symbols)

    def _resolve_forward_refs(self) -> dict[GlobalVar, GlobalVar]:
        """Names used before their decorated function existed: find them now."""
        mapping = {}
        for name, placeholder in self._resolver.forward_refs.items():
            try:
                value = self._lookup(name)
            except KeyError:
                raise DSLSyntaxError(f"name {name!r} is not defined", placeholder.span) from None
            gv = self._to_global(value)
            if gv is None:
                raise DSLSyntaxError(
                    f"{name!r} is {type(value).__name__}, not a decorated function; it was not "
                    "defined when this function was decorated, so only a decorated function "
                    "can be meant", placeholder.span)
            mapping[placeholder] = gv
        return mapping

    # ---- the module ----------------------------------------------------------
    @property
    def mod(self) -> IRModule:
        """The typed module: this function and every decorated function it reaches."""
        if self._module is None:
            from relaydsl.typing import infer_types

            mod = IRModule()
            pending, seen = [self], set()
            while pending:
                f = pending.pop()
                if f in seen:
                    continue
                seen.add(f)
                mapping = f._resolve_forward_refs()
                mod.add(f.global_var, _replace_globals(f.function, mapping))
                pending.extend(f.callees)
            self._module = infer_types(mod)
        return self._module

    @property
    def checked_type(self) -> FuncType:
        """The inferred type of the function."""
        t = self.mod[self.global_var].checked_type
        assert isinstance(t, FuncType)
        return t

    def astext(self, *, show_types: bool = False) -> str:
        """The Relay text of the typed module."""
        return astext(self.mod, show_types=show_types)

    # ---- running -------------------------------------------------------------
    def build(self, target: str = "interp", **options: AnyValue) -> "Executable":
        key = (target, tuple(sorted(options.items())))
        exe = self._executables.get(key)
        if exe is None:
            exe = Executable(self, target, options)
            self._executables[key] = exe
        return exe

    def __call__(self, *args: AnyValue) -> AnyValue:
        return self.build()(*args)

    def __repr__(self) -> str:
        return f"<relay function {self.global_var.name_hint}>"


class Executable:
    """A compiled function for one target: checks its arguments, runs, returns NumPy values."""

    def __init__(self, fn: RelayFunction, target: str, options: dict[str, AnyValue]):
        if target != "interp":
            raise ValueError(f"unknown target {target!r}; available: 'interp'")
        self.fn, self.target, self.options = fn, target, options
        self.mod = fn.mod
        self.type = fn.checked_type

    def __call__(self, *args: AnyValue) -> AnyValue:
        from backend.interpreter import evaluate

        params = self.fn.function.params
        if len(args) != len(params):
            raise TypeError(f"{self.fn.global_var.name_hint}() takes {len(params)} argument(s) "
                            f"({', '.join(p.name_hint for p in params)}), got {len(args)}")
        bindings: dict = {}
        values = [annotations.check_argument(p.name_hint, t, a, bindings)
                  for p, t, a in zip(params, self.type.arg_types, args)]
        return _to_python(evaluate(self.mod, *values, entry=self.fn.global_var.name_hint))


def _to_python(value: AnyValue) -> AnyValue:
    if isinstance(value, tuple):
        return tuple(_to_python(v) for v in value)
    if isinstance(value, np.ndarray):
        return value
    return value


def _replace_globals(fn: Function, mapping: dict[GlobalVar, GlobalVar]) -> Function:
    if not mapping:
        return fn

    class _Replace(ExprMutator):
        def visit_global_var(self, gv: GlobalVar) -> Expr:
            return mapping.get(gv, gv)

    out = _Replace().visit(fn)
    assert isinstance(out, Function)
    return out


def _special_call(translator: Translator, target: AnyValue, node, args: list,
                  kwargs: dict) -> Expr | None:
    """Calls with a meaning of their own: relay operators, prelude functions, Python builtins."""
    from frontend.namespace import OpFunction, PreludeFunction

    if isinstance(target, OpFunction):
        return translator.op_call(target.name, node, args, kwargs)
    if isinstance(target, PreludeFunction):
        from relaydsl.ir.expr import Call

        if kwargs:
            raise translator.error(node, f"relay.{target.name} takes no keyword arguments")
        return Call(target.global_var, translator.materialize_all(args), span=translator.span(node))
    if target is range:
        raise translator.error(node, "range(...) can only be iterated by a `for` loop")
    if getattr(builtins, getattr(target, "__name__", ""), None) is target:
        raise translator.error(node, f"the Python builtin {target.__name__}() cannot run inside "
                                     "decorated code; use relay operators")
    return None


def relay_decorator(pyfunc: Callable) -> RelayFunction:
    """``@relay``: see the module docstring."""
    if isinstance(pyfunc, RelayFunction):
        return pyfunc
    if not callable(pyfunc):
        raise TypeError(f"@relay decorates a function, got {type(pyfunc).__name__}")
    return RelayFunction(pyfunc)
