"""``@relay``: a Python function translated to Relay, type-checked and run.

Decorating translates the function at once (so a construct outside the
subset is reported where it is defined); references to decorated functions
not defined yet (recursion, mutual recursion, any order of definition) are
resolved when the function is first compiled. Calling it type-checks the
module of every function it reaches, compiles once per (target, options, PassContext),
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

import ast
import builtins
import contextlib
import functools
import inspect
import itertools
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any as AnyValue, Callable, ClassVar


from relaydsl.backend.interpreter import Closure
from relaydsl.backend.target import Program, get_target
from relaydsl.errors import DSLSyntaxError
from relaydsl.frontend import annotations, references
from relaydsl.frontend.adt import USER_TYPES
from relaydsl.frontend.autodiff import grad
from relaydsl.frontend.layers import (
    LAYERS, PARAMETER_FREE, LayerContext, ParamSpec, TrainingForm, is_layer_call,
)
from relaydsl.frontend.source import Source, names_bound_in
from relaydsl.frontend.tracebacks import user_facing
from relaydsl.frontend.translate import Resolver, Translator
from relaydsl.frontend.translate.getitem import resolve_getitems
from relaydsl.ir.adt import TypeData
from relaydsl.ir.expr import Call, Expr, Function, GlobalVar, Grad, Var, suggest
from relaydsl.ir.module import IRModule
from relaydsl.ir.printer import astext
from relaydsl.ir.adt import PatternVar
from relaydsl.ir.types import FuncType, GlobalTypeVar, RefType, TensorType, Type, TypeCall
from relaydsl.ir.visitor import ExprMutator, ExprVisitor, TypeMutator, deep_recursion
from relaydsl.prelude import prelude_definitions
from relaydsl.tools.visualize import Graph, visualize
from relaydsl.transform import pipeline
from relaydsl.typing import infer_types

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

    def __init__(self, pyfunc: Callable):
        functools.update_wrapper(self, pyfunc)
        self.pyfunc = pyfunc
        self.source = Source.of(pyfunc)
        self.global_var = GlobalVar(_unique_global_name(pyfunc.__name__),
                                    span=self.source.span(self.source.tree))
        self.callees: list[RelayFunction] = []
        # the callees whose training variants it calls (relay.grad in a training loop)
        self.mode_callees: list[tuple[RelayFunction, str]] = []
        self.hidden: list[HiddenParam] = []
        # the layer calls that differ in training, by id: (inference call, training form)
        self._training_forms: dict[int, tuple[Call, TrainingForm]] = {}
        self._mode_global_vars: dict[str, GlobalVar] = {"inference": self.global_var}
        self._model_vars: dict[tuple[RelayModelFunction, str], Var] = {}
        self._call_sites: Counter[str] = Counter()
        evaluated = {k: v for k, v in getattr(self.pyfunc, "__annotations__", {}).items()
                     if not isinstance(v, str)}
        self._resolver = Resolver(self._lookup, self._to_global, self._annotation_type,
                                  self._special_call, signature=evaluated)
        with deep_recursion():
            fn = Translator(self.source, self._resolver).function(self.source.tree)
        if self.hidden:
            fn = Function((*fn.params, *(h.var for h in self.hidden)), fn.body, fn.ret_type,
                          fn.type_params, fn.attrs, span=fn.span)
        self.function: Function = fn
        self.num_user_params = len(self.source.tree.args.args)
        self._modules: dict[str, IRModule] = {}  # by mode
        self._executables: dict[tuple, AnyValue] = {}
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

    def _to_global(self, value: AnyValue) -> GlobalVar | None:
        if isinstance(value, RelayFunction):
            if value is not self and value not in self.callees:
                self.callees.append(value)
            return value.global_var
        return None

    @staticmethod
    def _annotation_type(ann: AnyValue, symbols: dict) -> Type:
        return annotations.annotation_to_type(ann, symbols=symbols)

    def _resolve_forward_refs(self) -> "_ReplaceGlobals":
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
            gv = self._to_global(value)
            if gv is None:
                raise DSLSyntaxError(
                    f"{name!r} is {type(value).__name__}, not a decorated function; it was not "
                    "defined when this function was decorated, so only a decorated function "
                    "can be meant", placeholder.span)
            mapping[placeholder] = gv
        return _ReplaceGlobals(mapping, self_calls)

    # ---- calls with a meaning of their own ------------------------------------
    def _special_call(self, translator: Translator, target: AnyValue, node: ast.Call, args: list,
                      kwargs: dict[str, ast.expr]) -> Expr | None:
        """Relay operators and layers, prelude functions, models, and Python builtins."""
        from relaydsl.frontend.namespace import PreludeFunction

        relay_op = getattr(target, "relay_op", None)  # relay.<op>
        layer = getattr(target, "relay_layer", None)  # relay.<layer>
        name = relay_op.name if relay_op is not None else layer
        if name is not None and is_layer_call(name, args, kwargs):
            return self._layer(translator, name, node, args, kwargs)
        if relay_op is not None:
            return translator.op_call(relay_op, node, args, kwargs)
        if target in references.ARITY:
            name = target.__name__
            if kwargs or len(args) != references.ARITY[target]:
                raise translator.error(node, f"relay.{name} takes {references.ARITY[target]} "
                                             "positional argument(s)")
            return references.translate(target, translator.materialize_all(args),
                                        translator.span(node))
        training = self._training_call(translator, target, node, args, kwargs)
        if training is not None:
            return training
        if target is grad:
            if kwargs or len(args) != 1:
                raise translator.error(node, "inside decorated code relay.grad takes one function: "
                                             "relay.grad(f)(args) is (f(args), gradients)")
            return Grad(translator.materialize(args[0]), span=translator.span(node))
        if isinstance(target, PreludeFunction):
            if kwargs:
                raise translator.error(node, f"relay.{target.name} takes no keyword arguments")
            return Call(target.global_var, translator.materialize_all(args),
                        span=translator.span(node))
        if isinstance(target, RelayFunction) and (target.is_model or target.hidden):
            if kwargs:
                raise translator.error(node, "keyword arguments are only for relay operators")
            self._to_global(target)
            hidden = self._hidden_arguments(translator, target, node)
            return Call(target.global_var, [*translator.materialize_all(args), *hidden],
                        span=translator.span(node))
        if target is range:
            raise translator.error(node, "range(...) can only be iterated by a `for` loop")
        if getattr(builtins, getattr(target, "__name__", ""), None) is target:
            raise translator.error(node, f"the Python builtin {target.__name__}() cannot run "
                                         "inside decorated code; use relay operators")
        return None

    def _training_call(self, translator: Translator, target: AnyValue, node: ast.Call,
                       args: list, kwargs: dict[str, ast.expr]) -> Expr | None:
        """create_model, grad(model, loss, data), update_model_params, export_model."""
        from relaydsl.frontend import training
        from relaydsl.frontend import model as model_api

        env = translator.current_env
        if target is model_api.create_model:
            model_fn = self._python_arg(translator, node, 0)
            if not isinstance(model_fn, RelayModelFunction) or len(args) != 1:
                raise translator.error(node, "relay.create_model takes one @relay_model function")
            static = {k: translator._static(v) for k, v in kwargs.items()}
            return training.create_model(translator, self, node, model_fn, static)
        if target is grad and len(args) == 3:
            loss = self._python_arg(translator, node, 1)
            return training.grad(translator, self, node, [args[0], loss, args[2]], env)
        if target is model_api.update_model_params:
            static = {k: translator._static(v) for k, v in kwargs.items()}
            return training.update(translator, node, args, static, env)
        if target is model_api.export_model:
            return training.export(translator, self, node, args, env)
        return None

    @staticmethod
    def _python_arg(translator: Translator, node: ast.Call, i: int) -> AnyValue:
        if len(node.args) <= i:
            raise translator.error(node, f"missing argument {i + 1}")
        return translator.python_value(node.args[i])

    def _layer(self, translator: Translator, name: str, node: ast.Call, args: list,
               kwargs: dict[str, ast.expr]) -> Expr:
        if not self.is_model and name not in PARAMETER_FREE:
            op_form = ("; or, as the op, give it a key: relay.dropout(x, key, rate=, "
                       "training=True)" if name == "dropout" else "")
            raise translator.error(node, f"relay.{name}(...) here is a layer with hidden "
                                         f"parameters: use it inside a @relay_model function"
                                         f"{op_form}")
        static = {k: translator._static(v) for k, v in kwargs.items()}
        site = self._call_sites[name]
        if name not in PARAMETER_FREE:
            self._call_sites[name] += 1

        def new_param(layer: str, pname: str, annotation, spec: ParamSpec) -> Var:
            full = f"{layer}_{site}.{pname}"
            var = Var(full, annotation, span=translator.span(node))
            self.hidden.append(HiddenParam(full, var, spec))
            return var

        def modal(call: Call, training: TrainingForm) -> None:
            self._training_forms[id(call)] = (call, training)

        ctx = LayerContext(new_param, modal, translator.span(node), self._unbatched())
        return LAYERS[name](ctx, translator.materialize_all(args), static)

    def _unbatched(self) -> bool:
        """A model whose first input is one example (a CHW image or a vector)."""
        args = self.source.tree.args.args
        if not args or args[0].annotation is None:
            return False
        ann = self._lookup_annotation(args[0].annotation)
        return isinstance(ann, TensorType) and ann.ndim in (1, 3)

    def _lookup_annotation(self, node: ast.expr) -> Type | None:
        try:
            value = eval(compile(ast.Expression(node), "<annotation>", "eval"),
                         self.pyfunc.__globals__, _closure_dict(self.pyfunc))
            return annotations.annotation_to_type(value, symbols={})
        except Exception:  # an annotation error is reported by the translation itself
            return None

    def _hidden_arguments(self, translator: Translator, target: "RelayFunction",
                          node: ast.Call) -> list[Var]:
        """The parameters a call of a model (or of a function using one) passes on."""
        if self.is_model:
            if not target.is_model:
                raise translator.error(node, f"a @relay_model cannot call {target.__name__}, a "
                                             "@relay function that uses another model")
            site = self._call_sites[target.__name__]
            self._call_sites[target.__name__] += 1
            out = []
            for h in target.hidden:  # a sub-model: its own parameters at each call site
                full = f"{target.__name__}_{site}.{h.name}"
                var = Var(full, h.var.type_annotation, span=translator.span(node))
                self.hidden.append(HiddenParam(full, var, h.spec))
                out.append(var)
            return out
        pairs = [(target, h.name) for h in target.hidden] if target.is_model else \
            [(h.model, h.name) for h in target.hidden]
        out = []
        for model, pname in pairs:
            var = self._model_vars.get((model, pname))
            if var is None:
                var = Var(pname)
                self._model_vars[(model, pname)] = var
                spec = next(h.spec for h in model.hidden if h.name == pname)
                self.hidden.append(HiddenParam(pname, var, spec, model))
            out.append(var)
        return out

    # ---- modes ---------------------------------------------------------------
    # A function using a model with a mode-dependent layer has three variants, each its own
    # global: "inference" (the function as written: running statistics, no dropout),
    # "training" (batch statistics, dropout with the step's key, pure: what gradients are
    # taken of) and "update" (training, and the state parameters are references that the
    # layers update: the running statistics, the dropout keys advanced).
    @property
    def has_modes(self) -> bool:
        """Whether this function behaves differently in training: it has a mode-dependent
        layer (batch_norm, dropout), or calls a function using a model that has one."""
        return any(f._training_forms for f in self._reachable(lambda callee: bool(callee.hidden)))

    def global_var_for(self, mode: str) -> GlobalVar:
        """The global of this function's variant in `mode` (its own if it has no modes)."""
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if not self.has_modes:
            return self.global_var
        if mode not in self._mode_global_vars:
            self._mode_global_vars[mode] = GlobalVar(
                _unique_global_name(f"{self.global_var.name_hint}_{mode}"),
                span=self.global_var.span)
        return self._mode_global_vars[mode]

    # ---- the module ----------------------------------------------------------
    @property
    def mod(self) -> IRModule:
        """The typed module: this function and every decorated function it reaches."""
        return self.module_for("inference")

    def module_for(self, mode: str) -> IRModule:
        """The typed module holding this function's variant in `mode` (``global_var_for``)
        and every decorated function it reaches."""
        mode = mode if self.has_modes else "inference"
        if mode not in self._modules:
            with deep_recursion():
                self._modules[mode] = resolve_getitems(infer_types(self._gather_module(mode)))
        return self._modules[mode]

    def _gather_module(self, mode: str) -> IRModule:
        mod = IRModule()
        pending, seen = [(self, mode)], set()
        while pending:
            f, m = pending.pop()
            m = m if f.has_modes else "inference"
            if (f, m) in seen:
                continue
            seen.add((f, m))
            resolve = f._resolve_forward_refs()
            if m == "inference":
                out = resolve.visit(f.function)
            else:
                variants = {c.global_var: c.global_var_for(m) for c in [f, *f.callees]}
                state = {h.var for h in f.hidden if h.spec.state}
                out = _ModeVariant(f._training_forms, state if m == "update" else set(),
                                   resolve.followed_by(variants), resolve.self_calls
                                   ).visit(f.function)
            assert isinstance(out, Function)
            fn = out
            for td in _user_types_in(fn):
                if td.header not in mod.type_definitions:
                    mod.add_type(td)
            mod.add(f.global_var_for(m), fn)
            pending.extend((c, m) for c in f.callees)
            pending.extend(f.mode_callees)
        return mod

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
            return pipeline.run(self.mod, chosen.name, context)

    def visualize(self, *, fused: bool = False) -> "Graph":
        """The dataflow graph of this function (``relay.visualize``): op calls, shapes on
        the edges, with `fused` the fused groups the llvm backend compiles as clusters."""
        return visualize(self.lowered() if fused else self.mod, self.global_var.name_hint)

    # ---- running -------------------------------------------------------------
    @user_facing
    def build(self, target: str | None = None, **options: AnyValue) -> "Executable":
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

    def __reduce__(self) -> str:
        """Pickled and copied as a Python function is: by reference, its module and qualified
        name (so a Model pickles as its arrays plus this reference, and a deep copy of a Model
        keeps its function)."""
        return self.__qualname__

    def __repr__(self) -> str:
        return f"<relay function {self.global_var.name_hint}>"


class Executable:
    """A compiled function for one target: checks its arguments, runs, returns NumPy values."""

    def __init__(self, fn: RelayFunction, target: str, options: dict[str, AnyValue]):
        self.fn, self.target, self.options = fn, target, options
        self.program = get_target(target).build(fn.mod, fn.global_var.name_hint, options)
        self.type = fn.checked_type
        # the `relay.Fn` parameters, which may take a decorated function or a relay op; the
        # programs with such arguments bound, by their positions and identities (kept alive)
        self._function_params = [i for i, t in enumerate(self.type.arg_types[
            :fn.num_user_params]) if isinstance(t, FuncType)]
        self._with_functions: dict[tuple, tuple[Program, FuncType, tuple]] = {}

    @user_facing
    def __call__(self, *args: AnyValue, **kwargs: AnyValue) -> AnyValue:
        if self.fn.hidden:
            models = sorted({h.model.__name__ for h in self.fn.hidden if h.model} or
                            {self.fn.__name__})
            raise TypeError(f"{self.fn.__name__} uses the parameters of the model "
                            f"{', '.join(models)}: create one with relay.create_model and run "
                            f"it under that model (model(...), model.apply({self.fn.__name__}, "
                            "...), relay.grad(model, ...))")
        return self.run(args, [], kwargs)

    def run(self, args: tuple, hidden_values: list[AnyValue],
            kwargs: dict[str, AnyValue] | None = None) -> AnyValue:
        """Check the user's arguments (positional, or by name in `kwargs`), then run with the
        hidden parameters' values appended."""
        args = self.fn.bind_arguments(args, kwargs or {})
        params = self.fn.function.params[:self.fn.num_user_params]
        if len(args) != len(params):
            raise TypeError(f"{self.fn.__name__}() takes {len(params)} argument(s) "
                            f"({', '.join(p.name_hint for p in params)}), got {len(args)}")
        functions = {i: args[i] for i in self._function_params if _is_function_argument(args[i])}
        program, type_ = self.program, self.type
        if functions:  # run a program calling fn with those functions in their places
            program, type_ = self._program_with(functions)
            params = [p for i, p in enumerate(params) if i not in functions]
            args = tuple(a for i, a in enumerate(args) if i not in functions)
        bindings: dict = {}
        values = [annotations.check_argument(p.name_hint, t, a, bindings)
                  for p, t, a in zip(params, type_.arg_types, args)]
        hidden_types = type_.arg_types[len(params):]
        values += [annotations.check_argument(h.name, t, v, bindings)
                   for h, t, v in zip(self.fn.hidden, hidden_types, hidden_values)]
        return to_python(program(*values), program)

    @property
    def report(self) -> AnyValue:
        """The accelerator's report of the last call (``AccelReport``; the accel target)."""
        from relaydsl.frontend.frozen import program_report

        return program_report(self.program, self.target)

    def _program_with(self, functions: dict[int, AnyValue]) -> tuple[Program, FuncType]:
        """The program of ``fn(x0, .., @g, .., xn)``: fn with decorated functions or relay
        ops as the arguments at the positions of `functions` (the others stay parameters),
        as JAX treats a callable argument as static."""
        key = tuple((i, id(f)) for i, f in functions.items())
        if key not in self._with_functions:
            mod = self.fn.mod.copy()
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
            params = self.fn.function.params
            kept = [Var(p.name_hint, t) for i, (p, t) in enumerate(zip(params, self.type.arg_types))
                    if i not in functions]
            rest = iter(kept)
            call = Call(self.fn.global_var, [_function_expr(functions[i]) if i in functions
                                             else next(rest) for i in range(len(params))])
            entry = mod.add("__with_functions", Function(kept, call))
            with deep_recursion():
                infer_types(mod)
            program = get_target(self.target).build(mod, entry.name_hint, self.options)
            fn_type = mod[entry].checked_type
            assert isinstance(fn_type, FuncType)
            self._with_functions[key] = (program, fn_type, tuple(functions.values()))
        program, fn_type, _ = self._with_functions[key]
        return program, fn_type


def _is_function_argument(value: AnyValue) -> bool:
    """A decorated function or a relay op given for a ``relay.Fn`` parameter."""
    return isinstance(value, RelayFunction) or getattr(value, "relay_op", None) is not None


def _function_expr(value: AnyValue) -> Expr:
    """The Relay value of a function argument: a decorated function's global, or an op as
    ``fn (%data, ..) { op(%data, ..) }``."""
    if isinstance(value, RelayFunction):
        return value.global_var
    params = [Var(name) for name in value.relay_op.inputs]
    return Function(params, value.relay_op(*params))


def to_python(value: AnyValue, program: "Program") -> AnyValue:
    """Results for Python: arrays, tuples, and closures as plain callables (NumPy in and out)."""
    if isinstance(value, tuple):
        return tuple(to_python(v, program) for v in value)
    if isinstance(value, Closure):
        params = value.function.params

        def call(*args: AnyValue) -> AnyValue:
            if len(args) != len(params):
                raise TypeError(f"the function takes {len(params)} argument(s), got {len(args)}")
            bindings: dict = {}
            checked = [annotations.check_argument(p.name_hint, p.checked_type, a, bindings)
                       for p, a in zip(params, args)]
            return to_python(program.call_closure(value, checked), program)

        call.relay_closure = value  # type: ignore[attr-defined]  # passed back to a program
        return call
    return value


class _ReplaceGlobals(ExprMutator):
    """Replaces globals by `mapping`; a call of a global in `self_calls` (a function's call
    of itself) also passes those hidden parameters on."""

    def __init__(self, mapping: dict[GlobalVar, GlobalVar],
                 self_calls: dict[GlobalVar, tuple[Var, ...]] | None = None) -> None:
        super().__init__()
        self.mapping = mapping
        self.self_calls = self_calls or {}

    def followed_by(self, mapping: dict[GlobalVar, GlobalVar]) -> dict[GlobalVar, GlobalVar]:
        """This mutator's replacements, each followed by `mapping`, and `mapping`'s."""
        return {**mapping, **{k: mapping.get(v, v) for k, v in self.mapping.items()}}

    def visit_global_var(self, gv: GlobalVar) -> Expr:
        if gv in self.self_calls:
            raise DSLSyntaxError(f"{gv.name_hint} has hidden parameters, so it can only be "
                                 "called, not used as a value", gv.span)
        return self.mapping.get(gv, gv)

    def visit_call(self, call: Call) -> Expr:
        hidden = self.self_calls.get(call.op) if isinstance(call.op, GlobalVar) else None
        if hidden is None:
            return super().visit_call(call)
        args = [self.visit(a) for a in (*call.args, *hidden)]
        return Call(self.mapping[call.op], args, call.attrs, call.type_args, span=call.span)


MODES = ("inference", "training", "update")


class _ModeVariant(_ReplaceGlobals):
    """A function's training (or update) variant, from its inference form: each
    mode-dependent layer call in its training form, the calls of functions with modes to
    their variants in the same mode. Every variable is bound anew: the variants share no
    binder (a state parameter is a tensor in one, a reference in another: `refs` are the
    state parameters of the update variant, their annotations wrapped in Ref)."""

    def __init__(self, forms: dict[int, tuple[Call, TrainingForm]], refs: set[Var],
                 globals_: dict[GlobalVar, GlobalVar],
                 self_calls: dict[GlobalVar, tuple[Var, ...]]) -> None:
        super().__init__(globals_, self_calls)
        self.forms, self.refs = forms, refs
        self.update = bool(refs)
        self.renamed: dict[Var, Var] = {}

    def bind(self, v: Var) -> Var:
        if v not in self.renamed:
            annotation = v.type_annotation
            if v in self.refs and annotation is not None:
                annotation = RefType(annotation)
            self.renamed[v] = Var(v.name_hint, annotation, span=v.span)
        return self.renamed[v]

    def visit_var(self, v: Var) -> Expr:
        return self.renamed.get(v, v)

    def visit_let_var(self, v: Var) -> Var:
        return self.bind(v)

    def visit_function(self, f: Function) -> Expr:
        for p in f.params:
            self.bind(p)
        return super().visit_function(f)

    def visit_pattern(self, p):
        if isinstance(p, PatternVar):
            self.bind(p.var)
        return super().visit_pattern(p)

    def visit_call(self, call: Call) -> Expr:
        form = self.forms.get(id(call))
        if form is not None and form[0] is call:
            return form[1]([self.visit(a) for a in call.args], self.update)
        return super().visit_call(call)


class RelayModelFunction(RelayFunction):
    """What ``@relay_model`` returns: a function with hidden parameters, run through a Model."""

    is_model = True
    defined: ClassVar[dict[str, RelayModelFunction]] = {}  # by qualified name, for load_model

    def __init__(self, pyfunc: Callable):
        super().__init__(pyfunc)
        RelayModelFunction.defined[pyfunc.__qualname__] = self

    def __call__(self, *args: AnyValue) -> AnyValue:
        raise TypeError(f"{self.__name__} is a @relay_model: create its parameters first, "
                        f"model = relay.create_model({self.__name__}), then call model(...)")

    def __repr__(self) -> str:
        return f"<relay model {self.global_var.name_hint}>"


def _user_types_in(fn: Function) -> list[TypeData]:
    """The ADTs declared in Python that `fn` constructs, matches or mentions in annotations."""
    collect = _CollectUserTypes(USER_TYPES)
    collect.visit(fn)
    return collect.found


class _CollectUserTypes(ExprVisitor):
    """The user ADTs an expression mentions, and those their constructors' fields mention."""

    def __init__(self, user_types: dict[GlobalTypeVar, TypeData]) -> None:
        super().__init__()
        self.user_types = user_types
        self.found: list[TypeData] = []

    def note_header(self, header: GlobalTypeVar) -> None:
        td = self.user_types.get(header)
        if td is not None and td not in self.found:
            self.found.append(td)
            for c in td.constructors:
                for t in c.inputs:
                    self.note_type(t)

    def note_type(self, t: Type | None) -> None:
        if t is None:
            return
        for sub in _type_calls(t):
            self.note_header(sub.func)

    def visit_constructor(self, c) -> None:
        self.note_header(c.belong_to)

    def visit_var(self, v: Var) -> None:
        self.note_type(v.type_annotation)

    def visit_function(self, f: Function) -> None:
        self.note_type(f.ret_type)
        super().visit_function(f)


def _type_calls(t: Type) -> list[TypeCall]:
    find = _FindTypeCalls()
    find.visit(t)
    return find.found


class _FindTypeCalls(TypeMutator):
    def __init__(self) -> None:
        super().__init__()
        self.found: list[TypeCall] = []

    def visit(self, x: Type) -> Type:
        if isinstance(x, TypeCall):
            self.found.append(x)
        return super().visit(x)


def _closure_dict(pyfunc: Callable) -> dict[str, AnyValue]:
    out = {}
    for name, cell in zip(pyfunc.__code__.co_freevars, pyfunc.__closure__ or ()):
        with contextlib.suppress(ValueError):  # an empty cell: a name not bound yet
            out[name] = cell.cell_contents
    return out


@user_facing
def relay_model_decorator(pyfunc: Callable) -> RelayModelFunction:
    """``@relay_model``: a function whose layer calls own hidden parameters (Figure 4)."""
    if not callable(pyfunc):
        raise TypeError(f"@relay_model decorates a function, got {type(pyfunc).__name__}")
    return RelayModelFunction(pyfunc)


@user_facing
def relay_decorator(pyfunc: Callable) -> RelayFunction:
    """``@relay``: see the module docstring."""
    if isinstance(pyfunc, RelayFunction):
        return pyfunc
    if not callable(pyfunc):
        raise TypeError(f"@relay decorates a function, got {type(pyfunc).__name__}")
    return RelayFunction(pyfunc)
