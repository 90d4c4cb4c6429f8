"""The constraint solver of type inference (2019 paper §3.2).

Unification variables ("flexible" TypeVars made by ``fresh``) live in a
union-find structure; every other TypeVar is rigid (a type parameter of the
function being checked) and equals only itself. Type relations wait in a
queue; a bipartite dependency graph maps each unresolved variable to the
relations that mention it, so binding a variable moves exactly those
relations to the front of the queue. Relations whose arguments are fully
known run first; ones that would only see partially symbolic arguments run
when nothing else can make progress. Solving reaches a fixpoint; relations
that never became ready mean the program is underconstrained.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any as AnyValue, Callable, Iterable

from relaydsl.errors import RelayTypeError
from relaydsl.ir.attrs import Attrs
from relaydsl.ir.span import Span
from relaydsl.ir.types import (
    AnyDim, Dim, DType, FuncType, GlobalTypeVar, Kind, RefType, TensorType, TupleType, Type,
    TypeCall, TypeVar, type_to_str,
)
from relaydsl.ir.visitor import TypeMutator, substitute_types


class UnifyError(Exception):
    """Internal: two types (or dims) disagree. The caller turns it into a located
    RelayTypeError."""

    def __init__(self, detail: str):
        super().__init__(detail)
        self.detail = detail


@dataclass(eq=False)
class PendingRelation:
    """A relation instantiated at one call site."""

    name: str
    func: Callable[..., Type | None]
    args: tuple[Type, ...]
    out: Type
    attrs: Attrs | None  # None for the solver's own relations (grad, tuple projection)
    span: Span | None
    call: AnyValue  # the expression that instantiated it, rendered in errors without a span
    shallow: bool = False  # ready as soon as the arguments' outer constructors are known
    inferable: tuple[int, ...] = ()  # arguments the relation itself assigns when unknown
    done: bool = field(default=False)


class Solver:
    def __init__(self) -> None:
        self._parent: dict[TypeVar, TypeVar] = {}
        self._binding: dict[TypeVar, AnyValue] = {}  # root -> Type | Dim | dtype
        self._flexible: set[TypeVar] = set()
        self._waiting: dict[TypeVar, list[PendingRelation]] = {}
        self._queue: deque[PendingRelation] = deque()
        self.relations: list[PendingRelation] = []

    # ---- variables -------------------------------------------------------
    def fresh(self, kind: Kind = Kind.Type, hint: str = "t") -> TypeVar:
        tv = TypeVar(f"?{hint}", kind)
        self._flexible.add(tv)
        return tv

    def is_flexible(self, tv: TypeVar) -> bool:
        return tv in self._flexible

    def _find(self, tv: TypeVar) -> TypeVar:
        root = tv
        while root in self._parent:
            root = self._parent[root]
        while tv in self._parent and self._parent[tv] is not root:  # path compression
            self._parent[tv], tv = root, self._parent[tv]
        return root

    def head(self, t: AnyValue) -> AnyValue:
        """Follow bindings at the top only."""
        while isinstance(t, TypeVar) and t in self._flexible:
            root = self._find(t)
            bound = self._binding.get(root)
            if bound is None:
                return root
            t = bound
        return t

    def resolve(self, t: AnyValue) -> AnyValue:
        """Substitute every bound variable (types, dims and dtypes alike)."""
        if isinstance(t, TypeVar):
            head = self.head(t)
            return head if isinstance(head, TypeVar) else self.resolve(head)
        if isinstance(t, TensorType) and t.is_ground:
            return t  # the common case, without a walk
        if isinstance(t, Type):
            return _Resolver(self).visit(t)
        return t

    def resolve_many(self, types: Iterable[AnyValue]) -> list[AnyValue]:
        """``[resolve(t) for t in types]``, each variable's value resolved once for all."""
        resolver = _Resolver(self)
        return [resolver.resolve(t) for t in types]

    def resolve_dim(self, d: Dim) -> Dim:
        return self.resolve(d)

    def _wake(self, root: TypeVar) -> None:
        for rel in self._waiting.pop(root, []):
            if not rel.done:
                self._queue.appendleft(rel)

    def _bind(self, tv: TypeVar, value: AnyValue) -> None:
        root = self._find(tv)
        if isinstance(value, TypeVar) and value in self._flexible:
            other = self._find(value)
            if other is root:
                return
            if other.kind is not root.kind:
                raise UnifyError(
                    f"{type_to_str(root)} and {type_to_str(other)} are of different kinds")
            self._parent[root] = other
            self._waiting.setdefault(other, []).extend(self._waiting.pop(root, []))
            self._wake(other)
            return
        self._check_kind(root, value)
        if isinstance(value, Type) and root in _Occurs(self).vars(value):
            raise UnifyError(f"{type_to_str(root)} occurs in {type_to_str(self.resolve(value))} "
                             "(infinite type)")
        self._binding[root] = value
        self._wake(root)

    @staticmethod
    def _check_kind(tv: TypeVar, value: AnyValue) -> None:
        var_kind = value.kind if isinstance(value, TypeVar) else None
        ok = {
            Kind.Shape: isinstance(value, (int, AnyDim)) or var_kind is Kind.Shape,
            Kind.BaseType: isinstance(value, str) or var_kind is Kind.BaseType,
            Kind.Type: isinstance(value, Type) and var_kind in (None, Kind.Type),
        }[tv.kind]
        if not ok:
            raise UnifyError(f"cannot use {type_to_str(value)} as a {tv.kind.name}")

    # ---- unification -----------------------------------------------------
    def _bind_either(self, a: AnyValue, b: AnyValue) -> AnyValue | None:
        """If either side is an unbound flexible variable, bind it to the other; the result."""
        if isinstance(a, TypeVar) and a in self._flexible:
            self._bind(a, b)
            return b
        if isinstance(b, TypeVar) and b in self._flexible:
            self._bind(b, a)
            return a
        return None

    def unify(self, a: Type, b: Type, instantiable: tuple[bool, bool] = (False, True)) -> Type:
        """Make `a` and `b` equal or raise UnifyError; returns the unified type.

        `a` is the type a context expects and `b` the type of the value given to it.
        `instantiable` says which side holds a value that may be used at an instance of its
        type: there a polymorphic function (``fn<a>(a) -> a``) meeting a less polymorphic one
        is instantiated with fresh variables, as HM instantiates a polymorphic value at each
        use. By default only the given value may be; both sides of a join (the branches of an
        if) may be; an argument position swaps the sides (a function's parameter receives
        what the other side passes) and a reference's contents are neither (a reference is
        read and written, so its type must match exactly).
        """
        a, b = self.head(a), self.head(b)
        if a is b:
            return a
        bound = self._bind_either(a, b)
        if bound is not None:
            return bound
        if isinstance(a, TensorType) and isinstance(b, TensorType):
            if a.ndim != b.ndim:
                raise UnifyError(f"rank {a.ndim} vs rank {b.ndim}")
            for i, (x, y) in enumerate(zip(a.shape, b.shape)):
                try:
                    self.unify_dim(x, y)
                except UnifyError as e:
                    raise UnifyError(f"dimension {i}: {e.detail}") from None
            self.unify_dtype(a.dtype, b.dtype)
            return a
        if isinstance(a, TupleType) and isinstance(b, TupleType):
            if len(a.fields) != len(b.fields):
                raise UnifyError(f"a tuple of {len(a.fields)} vs a tuple of {len(b.fields)}")
            for i, (x, y) in enumerate(zip(a.fields, b.fields)):
                try:
                    self.unify(x, y, instantiable)
                except UnifyError as e:
                    raise UnifyError(f"tuple field {i}: {e.detail}") from None
            return a
        if isinstance(a, FuncType) and isinstance(b, FuncType):
            if len(a.arg_types) != len(b.arg_types):
                raise UnifyError(f"a function of {len(a.arg_types)} arguments "
                                 f"vs one of {len(b.arg_types)}")
            if len(a.type_params) != len(b.type_params):
                # The more polymorphic side, if it may be, is used at an instance of its type;
                # the other side's own parameters stay rigid.
                if len(b.type_params) > len(a.type_params) and instantiable[1]:
                    b = self.instantiate(b)
                elif len(a.type_params) > len(b.type_params) and instantiable[0]:
                    a = self.instantiate(a)
                else:
                    poly, mono = (a, b) if len(a.type_params) > len(b.type_params) else (b, a)
                    raise UnifyError(f"{type_to_str(self.resolve(mono))} is less polymorphic "
                                     f"than {type_to_str(self.resolve(poly))}")
            elif b.type_params:
                renamed = substitute_types(b, dict(zip(b.type_params, a.type_params)))
                assert isinstance(renamed, FuncType)  # renaming type parameters keeps a function
                b = renamed
            swapped = (instantiable[1], instantiable[0])
            for i, (x, y) in enumerate(zip(a.arg_types, b.arg_types)):
                try:
                    self.unify(x, y, swapped)
                except UnifyError as e:
                    raise UnifyError(f"function argument {i}: {e.detail}") from None
            try:
                self.unify(a.ret_type, b.ret_type, instantiable)
            except UnifyError as e:
                raise UnifyError(f"function result: {e.detail}") from None
            return a
        if isinstance(a, RefType) and isinstance(b, RefType):
            self.unify(a.value, b.value, (False, False))
            return a
        if isinstance(a, TypeCall) and isinstance(b, TypeCall):
            if a.func is not b.func or len(a.args) != len(b.args):
                same_name = " (two different types of that name)" \
                    if a.func is not b.func and a.func.name == b.func.name else ""
                raise UnifyError(f"{a.func.name} vs {b.func.name}{same_name}")
            for x, y in zip(a.args, b.args):  # an ADT may use its parameters contravariantly
                self.unify(x, y, (False, False))
            return a
        if isinstance(a, GlobalTypeVar) and isinstance(b, GlobalTypeVar) and a is b:
            return a
        raise UnifyError(f"{type_to_str(self.resolve(a))} vs {type_to_str(self.resolve(b))}")

    def instantiate(self, t: FuncType) -> FuncType:
        """`t` with fresh unification variables for its type parameters."""
        mapping = {p: self.fresh(p.kind, p.name) for p in t.type_params}
        inst = substitute_types(FuncType(t.arg_types, t.ret_type, (), t.relations), mapping)
        assert isinstance(inst, FuncType)  # substituting type variables keeps a function
        return inst

    def unify_dim(self, a: Dim, b: Dim) -> Dim:
        a, b = self.head(a), self.head(b)
        if a is b or (isinstance(a, int) and isinstance(b, int) and a == b):
            return a
        bound = self._bind_either(a, b)
        if bound is not None:
            return bound
        if isinstance(a, AnyDim):
            return b
        if isinstance(b, AnyDim):
            return a
        if isinstance(a, TypeVar) or isinstance(b, TypeVar):
            rigid = a if isinstance(a, TypeVar) else b
            raise UnifyError(
                f"{type_to_str(a)} vs {type_to_str(b)} "
                f"({type_to_str(rigid)} is a shape parameter: it stands for any size)"
            )
        raise UnifyError(f"{a} vs {b}")

    def unify_dtype(self, a: DType, b: DType) -> DType:
        a, b = self.head(a), self.head(b)
        if a is b or a == b:
            return a
        bound = self._bind_either(a, b)
        if bound is not None:
            return bound
        raise UnifyError(f"dtype {type_to_str(a)} vs {type_to_str(b)}")

    # ---- relations -------------------------------------------------------
    def add_relation(self, rel: PendingRelation) -> None:
        self.relations.append(rel)
        self._queue.append(rel)

    def _unknowns(self, rel: PendingRelation) -> tuple[list[TypeVar], list[TypeVar]]:
        """(blocking, partial): the variables that keep `rel` from running / that it would see
        symbolically."""
        blocking: list[TypeVar] = []
        partial: list[TypeVar] = []
        for i, arg in enumerate(rel.args):
            head = self.head(arg)
            if isinstance(head, TypeVar) and head in self._flexible:
                if i not in rel.inferable:
                    blocking.append(head)
                continue
            if rel.shallow:
                continue
            if isinstance(head, TupleType):
                for f in head.fields:
                    fh = self.head(f)
                    if isinstance(fh, TypeVar) and fh in self._flexible:
                        blocking.append(fh)
            partial.extend(v for v in _Occurs(self).vars(head) if v.kind is not Kind.Type)
        return blocking, partial

    def unbound_root(self, t: Type) -> TypeVar | None:
        """The unbound flexible variable `t` stands for, if it stands for one."""
        head = self.head(t)
        return head if isinstance(head, TypeVar) and head in self._flexible else None

    def root(self, tv: TypeVar) -> TypeVar:
        """The representative of `tv`'s class: the variable a binding of the class is under."""
        return self._find(tv)

    def solve(self, fail: Callable[[PendingRelation, str], None],
              contradicted: Callable[[PendingRelation, Type, str], None] | None = None) -> None:
        """Run relations to a fixpoint. `fail(rel, message)` raises the located error.
        `contradicted(rel, result, detail)`, when given, is first offered a relation whose
        result disagrees with what its output was already bound to: it raises a better error
        if it knows where that binding came from."""
        deferred: list[PendingRelation] = []
        while self._queue or deferred:
            if not self._queue:
                # Nothing fully known is left: let one partially symbolic relation propagate.
                self._queue.append(deferred.pop(0))
                force_partial = True
            else:
                force_partial = False
            rel = self._queue.popleft()
            if rel.done:
                continue
            blocking, partial = self._unknowns(rel)
            if blocking:
                for v in blocking:
                    self._waiting.setdefault(self._find(v), []).append(rel)
                continue
            if partial and not force_partial:
                if rel not in deferred:
                    deferred.append(rel)
                continue
            if rel in deferred:
                deferred.remove(rel)
            args = [self.resolve(a) for a in rel.args]
            ctx = _Context(self, rel, fail)
            result = rel.func(args, rel.attrs, ctx)
            if result is None:
                for v in partial or blocking:
                    self._waiting.setdefault(self._find(v), []).append(rel)
                continue
            rel.done = True
            try:
                self.unify(rel.out, result)
            except UnifyError as e:
                if contradicted is not None:
                    contradicted(rel, result, e.detail)
                fail(rel, f"result type {type_to_str(self.resolve(result))} does not match "
                          f"the expected {type_to_str(self.resolve(rel.out))}: {e.detail}")

    def unsolved(self) -> list[PendingRelation]:
        return [r for r in self.relations if not r.done]


class _Context:
    """The RelationContext a relation sees (relaydsl/typing/relations.py)."""

    def __init__(self, solver: Solver, rel: PendingRelation,
                 fail: Callable[[PendingRelation, str], None]):
        self._solver, self._rel, self._fail = solver, rel, fail

    def unify_dims(self, a: Dim, b: Dim, what: str) -> Dim:
        try:
            return self._solver.resolve(self._solver.unify_dim(a, b))
        except UnifyError as e:
            self.fail(f"{what}: {e.detail}")

    def unify_dtypes(self, a: DType, b: DType, what: str) -> DType:
        try:
            return self._solver.resolve(self._solver.unify_dtype(a, b))
        except UnifyError:
            self.fail(what)

    def unify_types(self, a: Type, b: Type, what: str) -> Type:
        try:
            return self._solver.resolve(self._solver.unify(a, b))
        except UnifyError as e:
            self.fail(f"{what}: {e.detail}")

    def resolve_dim(self, d: Dim) -> Dim:
        return self._solver.resolve(d)

    def fail(self, message: str):
        self._fail(self._rel, message)
        # `fail` raises; this keeps type checkers honest
        raise RelayTypeError(message, self._rel.span)


class _Resolver(TypeMutator):
    """Substitutes bound variables; each variable's value is resolved once per resolver (a
    value shared by many variables, such as a closure's function type, is walked once), so a
    resolver is valid while no binding changes."""

    def __init__(self, solver: Solver):
        self.solver = solver
        self.resolved: dict[TypeVar, Type] = {}

    def visit_type_var(self, tv: TypeVar) -> Type:
        done = self.resolved.get(tv)
        if done is None:
            head = self.solver.head(tv)
            done = head if isinstance(head, TypeVar) else self.visit(head)
            self.resolved[tv] = done
        return done

    def resolve(self, t: AnyValue) -> AnyValue:
        """As Solver.resolve."""
        if isinstance(t, TypeVar):
            return self.visit_type_var(t)
        if isinstance(t, TensorType) and t.is_ground:
            return t
        return self.visit(t) if isinstance(t, Type) else t


class _Occurs(TypeMutator):
    """Collects the unresolved flexible variables of a type."""

    def __init__(self, solver: Solver):
        self.solver = solver
        self.found: list[TypeVar] = []

    def vars(self, t: Type) -> list[TypeVar]:
        self.visit(t)
        return self.found

    def visit_type_var(self, tv: TypeVar) -> Type:
        head = self.solver.head(tv)
        if isinstance(head, TypeVar):
            if self.solver.is_flexible(head) and head not in self.found:
                self.found.append(head)
        elif isinstance(head, Type):
            self.visit(head)
        return tv
