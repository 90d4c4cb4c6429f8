"""The Relay IR: expressions, types, ADTs, modules, traversal, equality, text format."""
from relaydsl.ir.adt import (
    Constructor, Pattern, PatternConstructor, PatternTuple, PatternVar, PatternWildcard, TypeData,
    define_adt, pattern_vars,
)
from relaydsl.ir.attrs import Attrs
from relaydsl.ir.expr import (
    Call, Clause, Constant, Expr, Function, GlobalVar, Grad, If, Let, Match, Op, RefCreate, RefRead,
    RefWrite, Tuple, TupleGetItem, Var, const, install_printer,
)
from relaydsl.ir.module import IRModule
from relaydsl.ir.printer import astext
from relaydsl.ir.span import Span
from relaydsl.ir.types import (
    Any, AnyDim, FuncType, GlobalTypeVar, Kind, RefType, TensorType, TupleType, Type, TypeCall,
    TypeRelation, TypeVar, scalar_type, type_to_str,
)
from relaydsl.ir.visitor import ExprMutator, ExprVisitor, free_vars, post_order

# Nodes print in the text format (their repr, IRModule.astext), which is built on them.
install_printer(astext)

__all__ = [
    "Any", "AnyDim", "Attrs", "Call", "Clause", "Constant", "Constructor", "Expr", "ExprMutator",
    "ExprVisitor", "FuncType", "Function", "GlobalTypeVar", "GlobalVar", "Grad", "IRModule", "If",
    "Kind",
    "Let", "Match", "Op", "Pattern", "PatternConstructor", "PatternTuple", "PatternVar",
    "PatternWildcard", "RefCreate", "RefRead", "RefType", "RefWrite", "Span", "TensorType", "Tuple",
    "TupleGetItem", "TupleType", "Type", "TypeCall", "TypeData", "TypeRelation", "TypeVar", "Var",
    "const", "define_adt", "free_vars", "pattern_vars", "post_order", "scalar_type", "type_to_str",
]
