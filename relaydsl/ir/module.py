"""IRModule: the unit passes transform. Global functions, ADT definitions, and the prelude.

>>> from relaydsl.ir.expr import Var, Function
>>> mod = IRModule()
>>> x = Var("x")
>>> gv = mod.add("identity", Function([x], x))
>>> mod["identity"].params[0] is x
True
"""
from __future__ import annotations

from collections.abc import Callable, Iterator

from relaydsl.errors import IRError
from relaydsl.ir.adt import Constructor, TypeData
from relaydsl.ir.expr import Expr, Function, GlobalVar, installed_printer, suggest
from relaydsl.ir.node import conforms
from relaydsl.ir.types import GlobalTypeVar, Type, TypeCall
from relaydsl.ir.visitor import substitute_types

Prelude = tuple[tuple[TypeData, ...], dict[GlobalVar, Function]]
"""The prelude's ADTs and global functions."""

# The prelude calls ops, so it is defined above the op layer (relaydsl/prelude.py) and installs
# itself here: the IR knows it only through this slot, as it knows ops only through Op's table.
_prelude: Callable[[], Prelude] | None = None


def install_prelude(definitions: Callable[[], Prelude]) -> None:
    """Make `definitions()` the prelude every ``IRModule()`` starts with (relaydsl.prelude calls
    this once, when imported; ``import relaydsl`` imports it)."""
    global _prelude
    _prelude = definitions


def installed_prelude() -> Prelude:
    """The installed prelude's ADTs and global functions (the same nodes for every module)."""
    if _prelude is None:
        raise IRError("the prelude is not installed: import relaydsl (relaydsl.prelude) first")
    return _prelude()


def is_prelude_function(gv: GlobalVar) -> bool:
    """Whether `gv` names one of the prelude's functions (by identity: a user's own ``@length``
    is another GlobalVar)."""
    return _prelude is not None and gv in installed_prelude()[1]


def is_prelude_type(header: GlobalTypeVar) -> bool:
    """Whether `header` is one of the prelude's ADTs (by identity: a user's own ``type List``
    is another GlobalTypeVar)."""
    return _prelude is not None and any(td.header is header for td in installed_prelude()[0])


class IRModule:
    """A mutable container built once, then treated as a value: passes return new modules."""

    def __init__(self, functions: dict[GlobalVar, Function] | None = None,
                 type_definitions: dict[GlobalTypeVar, TypeData] | None = None,
                 *, prelude: bool = True):
        self.functions: dict[GlobalVar, Function] = {}
        self.type_definitions: dict[GlobalTypeVar, TypeData] = {}
        self._global_vars: dict[str, GlobalVar] = {}
        self._type_names: dict[str, GlobalTypeVar] = {}
        self._constructors: dict[str, Constructor] = {}
        if prelude:
            types, funcs = installed_prelude()
            for td in types:
                self.add_type(td)
            for gv, fn in funcs.items():
                self.add(gv, fn)
        for td in (type_definitions or {}).values():
            self.add_type(td)
        for gv, fn in (functions or {}).items():
            self.add(gv, fn)

    # ---- functions -------------------------------------------------------
    def add(self, name: str | GlobalVar, fn: Function, *, replace: bool = True) -> GlobalVar:
        """Add or replace a global function; returns its GlobalVar. A definition named like
        one of the prelude's takes its name under a GlobalVar of its own (the prelude's nodes
        are shared by every module); the prelude's function stays, unnamed, for the prelude
        functions that call it (a user's ``@sum`` leaves the prelude's ``@size`` working)."""
        if not conforms(fn, Function):
            raise IRError(f"a global must be a Function, got {type(fn).__name__}")
        if isinstance(name, GlobalVar):
            gv = name
            existing = self._global_vars.get(gv.name_hint)
            if existing is not None and existing is not gv:
                if is_prelude_function(gv) and not is_prelude_function(existing):
                    self.functions[gv] = fn  # a shadowed prelude function, copied over
                    return gv
                if not replace:
                    raise IRError(f"global {gv.name_hint} is already defined")
                if not is_prelude_function(existing):
                    del self.functions[existing]
        else:
            existing = self._global_vars.get(name)
            if existing is not None and not replace:
                raise IRError(f"global {name} is already defined")
            gv = existing if existing is not None and not is_prelude_function(existing) \
                else GlobalVar(name)
        self._global_vars[gv.name_hint] = gv
        self.functions[gv] = fn
        return gv

    def remove(self, gv: GlobalVar) -> None:
        """Drop the global function `gv` (a pass that inlined it everywhere)."""
        if gv not in self.functions:
            raise IRError(f"global {gv.name_hint} is not in this module")
        del self.functions[gv]
        if self._global_vars.get(gv.name_hint) is gv:  # not a prelude function a user's shadows
            del self._global_vars[gv.name_hint]

    def get_global_var(self, name: str) -> GlobalVar:
        try:
            return self._global_vars[name]
        except KeyError:
            raise IRError(f"no global function named {name!r}."
                          f"{suggest(name, self._global_vars)}") from None

    def has_global(self, name: str) -> bool:
        return name in self._global_vars

    def __getitem__(self, key: str | GlobalVar) -> Function:
        gv = self.get_global_var(key) if isinstance(key, str) else key
        try:
            return self.functions[gv]
        except KeyError:
            raise IRError(f"global {gv.name_hint} is not in this module") from None

    def __setitem__(self, key: str | GlobalVar, fn: Function) -> None:
        self.add(key, fn)

    def __contains__(self, key: str | GlobalVar) -> bool:
        if isinstance(key, str):
            return key in self._global_vars
        return key in self.functions

    def __iter__(self) -> Iterator[GlobalVar]:
        return iter(self.functions)

    def user_functions(self) -> dict[GlobalVar, Function]:
        """The globals that are not from the prelude, in definition order."""
        return {gv: f for gv, f in self.functions.items() if not is_prelude_function(gv)}

    # ---- types -----------------------------------------------------------
    def add_type(self, td: TypeData) -> GlobalTypeVar:
        if not conforms(td, TypeData):
            raise IRError(f"add_type takes a TypeData, got {type(td).__name__}")
        old = self._type_names.get(td.header.name)
        if old is not None and old is not td.header and not is_prelude_type(old):
            # A prelude type a user type shadows stays: the prelude's functions use it.
            del self.type_definitions[old]
        self.type_definitions[td.header] = td
        self._type_names[td.header.name] = td.header
        for c in td.constructors:
            self._constructors[c.name] = c
        return td.header

    def get_type(self, name: str) -> TypeData:
        try:
            return self.type_definitions[self._type_names[name]]
        except KeyError:
            raise IRError(f"no type named {name!r}.{suggest(name, self._type_names)}") from None

    def has_type(self, name: str) -> bool:
        return name in self._type_names

    def has_constructor(self, name: str) -> bool:
        return name in self._constructors

    def get_constructor(self, name: str) -> Constructor:
        try:
            return self._constructors[name]
        except KeyError:
            raise IRError(f"no constructor named {name!r}."
                          f"{suggest(name, self._constructors)}") from None

    def type_data_of(self, c: Constructor) -> TypeData:
        return self.type_definitions[c.belong_to]

    def field_types(self, c: Constructor, t: TypeCall) -> list[Type]:
        """The types of constructor `c`'s fields in a value of the ADT instance `t` (``Cons``
        in ``List[Tensor[(3,)]]``: ``Tensor[(3,)]``, then ``List[Tensor[(3,)]]``)."""
        td = self.type_definitions[c.belong_to]
        mapping = dict(zip(td.type_vars, t.args))
        return [substitute_types(f, mapping) for f in c.inputs]

    def user_types(self) -> dict[GlobalTypeVar, TypeData]:
        return {h: td for h, td in self.type_definitions.items() if not is_prelude_type(h)}

    # ---- construction helpers -------------------------------------------
    @classmethod
    def from_expr(cls, expr: Expr, *, prelude: bool = True) -> "IRModule":
        """A module whose ``main`` is `expr` (wrapped in a nullary function unless it is one)."""
        mod = cls(prelude=prelude)
        fn = expr if isinstance(expr, Function) else Function((), expr)
        mod.add("main", fn)
        return mod

    def copy(self) -> "IRModule":
        """A shallow copy: same nodes, new dictionaries. Passes start from this."""
        new = IRModule(prelude=False)
        new.type_definitions = dict(self.type_definitions)
        new._type_names = dict(self._type_names)
        new._constructors = dict(self._constructors)
        new.functions = dict(self.functions)
        new._global_vars = dict(self._global_vars)
        return new

    def astext(self, *, include_prelude: bool = False) -> str:
        return installed_printer()(self, include_prelude=include_prelude)

    def __repr__(self) -> str:
        return self.astext()
