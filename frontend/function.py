"""`RelayFunction`: a decorated function, what ``@relay`` returns (decorators.py).

Decorating translates the function at once (so a construct outside the subset is reported
where it is defined); references to decorated functions not defined yet (recursion, mutual
recursion, any order of definition) are resolved when the function is first compiled. Its
typed module (``mod``) holds it and every function it reaches (gathering.py), in a mode
(modes.py); calling it type-checks that module, compiles once per (target, options,
PassContext), checks the arguments against the annotations and runs (execution.py).
"""
from __future__ import annotations

import builtins
import functools
import inspect
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any as AnyValue, Callable

from relaydsl.backend.target import get_target
from relaydsl.errors import DSLSyntaxError
from relaydsl.frontend import annotations
from relaydsl.frontend.execution import Executable
from relaydsl.frontend.gathering import gather_module
from relaydsl.frontend.layers import ParamSpec, TrainingForm
from relaydsl.frontend.model import MODEL_FUNCTIONS
from relaydsl.frontend.modes import Mode, ReplaceGlobals
from relaydsl.frontend.source import Source, names_bound_in
from relaydsl.frontend.tracebacks import user_facing
from relaydsl.frontend.translate import Resolver, Translator
from relaydsl.frontend.translate.getitem import resolve_getitems
from relaydsl.ir.expr import Call, Expr, Function, GlobalVar, Var, suggest
from relaydsl.ir.module import IRModule
from relaydsl.ir.printer import astext
from relaydsl.ir.types import FuncType, Type
from relaydsl.ir.visitor import deep_recursion
from relaydsl.prelude import prelude_definitions
from relaydsl.tools.visualize import Graph, visualize
from relaydsl.transform import pipeline
from relaydsl.typing import infer_types

if TYPE_CHECKING:
    from relaydsl.frontend.special_calls import SpecialCalls

_used_global_names: set[str] = set()


def _unique_global_name(name: str) -> str:
    taken = _used_global_names | {gv.name_hint for gv in prelude_definitions()[1]}
    candidate = name
    for i in itertools.count(2):
        if candidate not in taken:
            break
        candidate = f"{name}_{i}"
    _used_global_names.add(candidate)
    return candidate


@dataclass
class HiddenParam:
    """A parameter the user does not pass: a layer's weight, or a model's, used by a function."""

    name: str  # readable and stable: "conv2d_0.weight"
    var: Var
    spec: ParamSpec
    model: "RelayModelFunction | None" = None  # in a @relay function: whose parameter it is


class RelayFunction:
    """What ``@relay`` returns: callable like the Python function, plus the compiler's views."""

    is_model = False

    def __init__(self, pyfunc: Callable, special_calls: type[SpecialCalls]):
        """Translate `pyfunc`, with `special_calls` translating the calls with a meaning of
        their own (special_calls.py, which knows the decorated functions and the model API:
        it is passed in by the decorators rather than imported, as it is built on this
        module)."""
        functools.update_wrapper(self, pyfunc)
        self.pyfunc = pyfunc
        self.source = Source.of(pyfunc)
        self.global_var = GlobalVar(_unique_global_name(pyfunc.__name__),
                                    span=self.source.span(self.source.tree))
        self.callees: list[RelayFunction] = []
        # the callees whose variants in a mode it calls (relay.grad in a training loop)
        self.mode_callees: list[tuple[RelayFunction, Mode]] = []
        self.hidden: list[HiddenParam] = []
        # the layer calls that differ in training, by id: (inference call, training form)
        self.training_forms: dict[Call, TrainingForm] = {}
        self._mode_global_vars: dict[Mode, GlobalVar] = {Mode.INFERENCE: self.global_var}
        evaluated = {k: v for k, v in getattr(self.pyfunc, "__annotations__", {}).items()
                     if not isinstance(v, str)}
        self._resolver = Resolver(self._lookup, self.global_of, self._annotation_type,
                                  special_calls(self).translate, signature=evaluated)
        with deep_recursion():
            fn = Translator(self.source, self._resolver).function(self.source.tree)
        if self.hidden:
            fn = Function((*fn.params, *(h.var for h in self.hidden)), fn.body, fn.ret_type,
                          fn.type_params, fn.attrs, span=fn.span)
        self.function: Function = fn
        self.num_user_params = len(self.source.tree.args.args)
        self._modules: dict[Mode, IRModule] = {}
        self._executables: dict[tuple, Executable] = {}
        self._check_names_can_be_defined()
        if self._names_defined():
            self.mod  # noqa: B018  # type errors now, at the `def`, not at the first call

    def _check_names_can_be_defined(self) -> None:
        """A name not defined yet may be a function defined further down; one that the
        function's file binds nowhere never will be: report it now, at the `def`."""
        bound = names_bound_in(self.source.file)
        if bound is None:
            return
        for name, placeholder in self._resolver.forward_refs.items():
            if name not in bound:
                known = [*self.pyfunc.__globals__, *bound]
                raise DSLSyntaxError(f"name {name!r} is not defined.{suggest(name, known)}",
                                     placeholder.span)

    def _names_defined(self) -> bool:
        """Whether every name this function and the functions it calls use is defined now.
        A name that is not may be a function defined further down (checked at first use, as
        Python looks names up when a function runs); until then, types are not checked."""
        for f in self._reachable(lambda callee: True):
            for name in f._resolver.forward_refs:
                try:
                    f._lookup(name)
                except KeyError:
                    return False
        return True

    def _reachable(self, follow: Callable[[RelayFunction], bool]) -> Iterator[RelayFunction]:
        """This function and the decorated functions it calls, transitively, through the
        callees `follow` accepts; each once."""
        pending, seen = [self], set()
        while pending:
            f = pending.pop()
            if f not in seen:
                seen.add(f)
                yield f
                pending.extend(c for c in f.callees if follow(c))

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

    def global_of(self, value: AnyValue) -> GlobalVar | None:
        """The global of `value` if it is a decorated function, which this one then calls;
        None for anything else."""
        if isinstance(value, RelayFunction):
            if value is not self and value not in self.callees:
                self.callees.append(value)
            return value.global_var
        return None

    @staticmethod
    def _annotation_type(ann: AnyValue, symbols: dict) -> Type:
        return annotations.annotation_to_type(ann, symbols=symbols)

    def resolve_forward_refs(self) -> ReplaceGlobals:
        """Names used before their decorated function existed: find them now.

        The result rewrites this function's body with them. A function with hidden parameters
        (a model, or a function using one) may call itself, as a TreeLSTM applies its cell to
        each subtree: the recursive call passes the same hidden parameters on (shared weights).
        A call of another one must see its hidden parameters at translation time.
        """
        mapping, self_calls = {}, {}
        for name, placeholder in self._resolver.forward_refs.items():
            try:
                value = self._lookup(name)
            except KeyError:
                raise DSLSyntaxError(f"name {name!r} is not defined", placeholder.span) from None
            if value is self and self.hidden:
                self_calls[placeholder] = tuple(h.var for h in self.hidden)
                mapping[placeholder] = self.global_var
                continue
            if isinstance(value, RelayFunction) and (value.is_model or value.hidden):
                raise DSLSyntaxError(
                    f"{name!r} uses model parameters, so it must be defined before the functions "
                    "that call it (its hidden parameters are passed at each call)",
                    placeholder.span)
            gv = self.global_of(value)
            if gv is None:
                raise DSLSyntaxError(
                    f"{name!r} is {type(value).__name__}, not a decorated function; it was not "
                    "defined when this function was decorated, so only a decorated function "
                    "can be meant", placeholder.span)
            mapping[placeholder] = gv
        return ReplaceGlobals(mapping, self_calls)

    # ---- modes (modes.py) ------------------------------------------------------------
    @property
    def has_modes(self) -> bool:
        """Whether this function behaves differently in training: it has a mode-dependent
        layer (batch_norm, dropout), or calls a function using a model that has one."""
        return any(f.training_forms for f in self._reachable(lambda callee: bool(callee.hidden)))

    def global_var_for(self, mode: Mode) -> GlobalVar:
        """The global of this function's variant in `mode` (its own if it has no modes)."""
        if not self.has_modes:
            return self.global_var
        if mode not in self._mode_global_vars:
            self._mode_global_vars[mode] = GlobalVar(
                _unique_global_name(f"{self.global_var.name_hint}_{mode.value}"),
                span=self.global_var.span)
        return self._mode_global_vars[mode]

    # ---- the module ----------------------------------------------------------
    @property
    def mod(self) -> IRModule:
        """The typed module: this function and every decorated function it reaches."""
        return self.module_for(Mode.INFERENCE)

    def module_for(self, mode: Mode) -> IRModule:
        """The typed module holding this function's variant in `mode` (``global_var_for``)
        and every decorated function it reaches (gathering.py)."""
        mode = mode if self.has_modes else Mode.INFERENCE
        if mode not in self._modules:
            with deep_recursion():
                self._modules[mode] = resolve_getitems(infer_types(gather_module(self, mode)))
        return self._modules[mode]

    @property
    def checked_type(self) -> FuncType:
        """The inferred type of the function."""
        t = self.mod[self.global_var].checked_type
        assert isinstance(t, FuncType)
        return t

    def astext(self, *, show_types: bool = False, fused: bool = False) -> str:
        """The Relay text of the typed module; with `fused`, of the program the llvm backend
        runs (``lowered()``: fused primitive functions, in A-normal form)."""
        return astext(self.lowered() if fused else self.mod, show_types=show_types)

    def lowered(self, target: str = "llvm") -> IRModule:
        """The module as `target` runs it: after the target's pipeline, under the current
        ``relay.PassContext`` at the level a build would take (for llvm: op calls fused into
        primitive functions, in A-normal form)."""
        chosen = get_target(target)
        _, context = chosen.configure({})
        with deep_recursion():
            return pipeline.run(self.mod, chosen.name, context, self.global_var.name_hint)

    def visualize(self, *, fused: bool = False) -> Graph:
        """The dataflow graph of this function (``relay.visualize``): op calls, shapes on
        the edges, with `fused` the fused groups the llvm backend compiles as clusters."""
        return visualize(self.lowered() if fused else self.mod, self.global_var.name_hint)

    # ---- running -------------------------------------------------------------
    @user_facing
    def build(self, target: str | None = None, **options: AnyValue) -> Executable:
        chosen = get_target(target)
        options, context = chosen.configure(options)  # the current PassContext's settings
        key = (chosen.name, tuple(sorted(options.items())), context)
        exe = self._executables.get(key)
        if exe is None:
            exe = Executable(self, chosen.name, options)
            self._executables[key] = exe
        return exe

    @user_facing
    def __call__(self, *args: AnyValue, **kwargs: AnyValue) -> AnyValue:
        return self.build()(*args, **kwargs)

    def bind_arguments(self, args: tuple, kwargs: dict[str, AnyValue]) -> tuple:
        """The user's arguments in parameter order, from a Python call: positionally or by
        name, with Python's errors for a call that does not fit."""
        if not kwargs:
            return args
        try:
            bound = inspect.signature(self.pyfunc).bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"{self.__name__}(): {e}") from None
        return bound.args

    # ---- decorated functions and ops given for relay.Fn parameters (execution.py) ------
    @staticmethod
    def is_static_function(value: AnyValue) -> bool:
        """Whether `value`, given for a ``relay.Fn`` parameter, is compiled into the program
        rather than passed to it: a decorated function or a relay op (as JAX treats a callable
        argument as static)."""
        return isinstance(value, RelayFunction) or getattr(value, "relay_op", None) is not None

    def module_with(self, functions: dict[int, AnyValue]) -> tuple[IRModule, GlobalVar]:
        """The typed module of ``fn(x0, .., @g, .., xn)``, and its entry: this function with
        the decorated functions or relay ops `functions` as the arguments at their positions,
        the other parameters kept."""
        mod = self.mod.copy()
        for f in functions.values():
            if isinstance(f, RelayFunction):
                if f.hidden:
                    raise TypeError(f"{f.__name__} uses model parameters: it cannot be "
                                    "passed as a function argument")
                for gv, g in f.mod.functions.items():
                    if gv not in mod.functions:
                        mod.add(gv, g)
                for td in f.mod.type_definitions.values():
                    if td.header not in mod.type_definitions:
                        mod.add_type(td)
        params = self.function.params
        kept = [Var(p.name_hint, t) for i, (p, t) in
                enumerate(zip(params, self.checked_type.arg_types)) if i not in functions]
        rest = iter(kept)
        call = Call(self.global_var, [_function_expr(functions[i]) if i in functions
                                      else next(rest) for i in range(len(params))])
        entry = mod.add("__with_functions", Function(kept, call))
        with deep_recursion():
            infer_types(mod)
        return mod, entry

    def __reduce__(self) -> str:
        """Pickled and copied as a Python function is: by reference, its module and qualified
        name (so a Model pickles as its arrays plus this reference, and a deep copy of a Model
        keeps its function)."""
        return self.__qualname__

    def __repr__(self) -> str:
        return f"<relay function {self.global_var.name_hint}>"


class RelayModelFunction(RelayFunction):
    """What ``@relay_model`` returns: a function with hidden parameters, run through a Model."""

    is_model = True

    def __init__(self, pyfunc: Callable, special_calls: type[SpecialCalls]):
        super().__init__(pyfunc, special_calls)
        MODEL_FUNCTIONS[pyfunc.__module__, pyfunc.__qualname__] = self

    def __call__(self, *args: AnyValue) -> AnyValue:
        raise TypeError(f"{self.__name__} is a @relay_model: create its parameters first, "
                        f"model = relay.create_model({self.__name__}), then call model(...)")

    def __repr__(self) -> str:
        return f"<relay model {self.global_var.name_hint}>"


def _function_expr(value: AnyValue) -> Expr:
    """The Relay value of a function argument: a decorated function's global, or an op as
    ``fn (%data, ..) { op(%data, ..) }``."""
    if isinstance(value, RelayFunction):
        return value.global_var
    params = [Var(name) for name in value.relay_op.inputs]
    return Function(params, value.relay_op(*params))
