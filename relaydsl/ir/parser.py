"""Reads the Relay text format that printer.py writes (and hand-written variations of it).

A recursive-descent parser over the tokens of lexer.py. Grammar (``?`` optional,
``*`` repeated, ``|`` alternatives; ``//`` and ``/* */`` comments are skipped)::

    module   := header? (typedef | def)* metadata?
    header   := '#[version = "0.0.5"]'
    typedef  := 'type' NAME ('[' tparam (',' tparam)* ']')? '{' (ctor ','?)* '}'
    ctor     := NAME ('(' type (',' type)* ')')?
    def      := 'def' '@'NAME fnrest
    fnrest   := ('<' tparam (',' tparam)* '>')? '(' (param | NAME '=' lit) ,* ')'
                ('->' type)? '{' block '}'
    tparam   := NAME (':' ('Type' | 'Shape' | 'BaseType'))?
    param    := '%'NAME (':' type)?
    block    := (let | temp)* expr
    let      := 'let' param '=' expr ';'?            -- the rest of the block is its body
    temp     := '%'NAME '=' expr ';'?                -- names a graph node; no let is built
    expr     := primary ('(' args ')' | '<' type,* '>' '(' args ')' | '.' INT)*
    args     := (expr | NAME '=' lit) ,*             -- NAME=lit are operator attributes
    primary  := '%'NAME | '@'NAME | OPNAME | CTOR | 'constructor' '(' CTOR ')'
              | LITERAL | 'True' | 'False' | 'meta' '[' 'Constant' ']' '[' INT ']'
              | '(' ')' | '(' block ')' | '(' expr ',' (expr ,*)? ')'
              | 'fn' fnrest | 'if' '(' expr ')' '{' block '}' 'else' ('{' block '}' | if)
              | 'match' '?'? '(' expr ')' '{' (pattern '=>' ('{' block '}' | expr) ,)* '}'
              | 'ref' '(' expr ')' | 'ref_read' '(' expr ')' | 'ref_write' '(' expr ',' expr ')'
              | 'grad' '(' expr ')'
    pattern  := '_' | param | CTOR ('(' pattern,* ')')? | '(' pattern,* ')'
    type     := 'Tensor' '[' (dim | '(' dim,* ')') ',' dtype ']' | DTYPE | '(' type,* ')'
              | 'fn' ('<' tparam,* '>')? '(' type,* ')' '->' type | 'Ref' '[' type ']'
              | ADT ('[' type,* ']')? | NAME          -- a type variable
    dim      := INT | '?' | NAME                     -- NAME is a Shape type variable
    dtype    := DTYPE | NAME                         -- NAME is a BaseType type variable
    LITERAL  := '-'? digits ('.' digits)? (e digits)? ('f'|'f16'|'f32'|'f64'|'i8'|...|'u8')?
    lit      := number | string | 'True' | 'False' | 'None' | 'inf' | 'nan' | '[' lit,* ']'
    metadata := '#[metadata]' JSON                   -- {"Constant": [{dtype, shape, data}]}

A literal without a suffix is int32 or float32; a nullary constructor alone
(``Nil``) is its call. A name not declared as a type parameter is a type
variable free in its global function: the same name means the same variable
throughout one function. In ``parse_expr`` free ``%x`` are allowed, and the
first use may carry the annotation (``%x: float32``), as the printer writes it.
Every error is a ParseError located at ``<source_name>:line:col`` with a caret; among
them a number out of its dtype's range, and nesting deeper than MAX_NESTING levels.
"""
from __future__ import annotations

import ast
import contextlib
import gc
import math
import sys
from typing import Any as AnyValue, Callable, Generator, TypeVar as PyTypeVar

import numpy as np

from relaydsl.errors import IRError, ParseError
from relaydsl.ir.adt import (
    Constructor, Pattern, PatternConstructor, PatternTuple, PatternVar, PatternWildcard, TypeData,
)
from relaydsl.ir.expr import (
    Call, Clause, Constant, Expr, Function, GlobalVar, Grad, If, Let, Match, Op, RefCreate, RefRead,
    RefWrite, Tuple, TupleGetItem, Var, op_names, suggest,
)
from relaydsl.ir.lexer import NUMBER, Source, Token, split_metadata, tokenize
from relaydsl.ir.module import IRModule
from relaydsl.ir.node import conforms
from relaydsl.ir.printer import (
    DTYPE_LIKE, FRAMES_PER_LEVEL, LITERAL_SUFFIX, MAX_NESTING, VERSION,
)
from relaydsl.ir.span import Span
from relaydsl.ir.types import (
    DTYPES, Any, FuncType, GlobalTypeVar, Kind, RefType, TensorType, TupleType, Type, TypeCall,
    TypeVar,
)
from relaydsl.ir.visitor import deep_recursion

_SUFFIX_DTYPE = {v: k for k, v in LITERAL_SUFFIX.items()} | {"f32": "float32"}
_KINDS = {k.name: k for k in Kind}
_T = PyTypeVar("_T")
_POSTFIX = frozenset("(<.")  # what may follow an expression to extend it

# The parser recurses once per nested expression, type, pattern or attribute list. A program
# nested deeper than MAX_NESTING (printer.py: the text format's limit, which the printer
# prints) is refused with a located error (Python's own parser refuses 200 nested
# parentheses); within it, Python's recursion limit is raised to make room.


def _nests(method: Callable[[_Parser], _T]) -> Callable[[_Parser], _T]:
    """Counts a parser method as one level of nesting, refusing to go beyond MAX_NESTING."""
    def nested(self: _Parser) -> _T:
        if self.depth == MAX_NESTING:
            raise self.error(f"nesting too deep (limit {MAX_NESTING})")
        self.depth += 1
        try:
            return method(self)  # a plain call: Python 3.11 runs it without C stack
        finally:
            self.depth -= 1

    nested.__name__, nested.__doc__ = method.__name__, method.__doc__
    return nested


# ---------------------------------------------------------------------------
# The parser
# ---------------------------------------------------------------------------
class _Parser:
    def __init__(self, src: Source, tokens: list[Token], constants: list[Constant],
                 mod: IRModule, *, free_names: bool):
        self.src = src
        self.toks = tokens
        self.pos = 0
        self.constants = constants
        self.free_names = free_names  # parse_expr: free %vars and unknown @globals allowed
        self.globals: dict[str, GlobalVar] = {gv.name_hint: gv for gv in mod.functions}
        self.adts: dict[str, GlobalTypeVar] = {h.name: h for h in mod.type_definitions}
        self.ctors: dict[str, Constructor] = {
            c.name: c for td in mod.type_definitions.values() for c in td.constructors}
        self.scopes: list[dict[str, Expr]] = [{}]
        self.type_scopes: list[dict[str, TypeVar]] = []
        self.free_type_vars: dict[str, TypeVar] | None = {}
        self.free_vars: dict[str, Var] = {}
        self.literals: dict[str, np.ndarray] = {}
        self.depth = 0  # of nested expressions, types, patterns and attribute lists

    # ---- token helpers -------------------------------------------------------------
    def peek(self, ahead: int = 0) -> Token:
        return self.toks[self.pos + ahead]

    def next(self) -> Token:
        tok = self.toks[self.pos]
        if tok.kind != "eof":
            self.pos += 1
        return tok

    def at(self, text: str, ahead: int = 0) -> bool:
        tok = self.toks[self.pos + ahead]
        return tok.text == text and (tok.kind == "punct" or tok.kind == "ident")

    def accept(self, text: str) -> bool:
        if self.at(text):
            self.pos += 1
            return True
        return False

    def expect(self, text: str, context: str = "") -> Token:
        if not self.at(text):
            where = f" {context}" if context else ""
            raise self.error(f"expected '{text}'{where}, got {self.describe(self.peek())}")
        return self.next()

    def expect_kind(self, kind: str, what: str) -> Token:
        if self.peek().kind != kind:
            raise self.error(f"expected {what}, got {self.describe(self.peek())}")
        return self.next()

    @staticmethod
    def describe(tok: Token) -> str:
        return "the end of the input" if tok.kind == "eof" else f"'{tok.text}'"

    def error(self, message: str, tok: Token | None = None) -> ParseError:
        return self.src.error(message, tok or self.peek())

    def integer(self, tok: Token, digits: str | None = None) -> int:
        """The value of `digits` (by default the token's text), which are decimal digits."""
        try:
            return int(tok.text if digits is None else digits)
        except ValueError:  # beyond Python's limit on the digits of an int
            raise self.error(f"{tok.text[:20]}... has too many digits", tok) from None

    def span_from(self, start: Token) -> Span:
        return self.src.token_span(start, self.toks[max(self.pos - 1, 0)])

    def build(self, start: Token, make: Callable[..., _T], *args: AnyValue, **kw: AnyValue) -> _T:
        """Construct an IR node spanning from `start`; its IRErrors become ParseErrors there."""
        span = self.span_from(start)
        try:
            return make(*args, span=span, **kw)
        except IRError as e:
            raise ParseError(e.raw_message, span) from None

    def comma_list(self, close: str, item: Callable[[], _T]) -> list[_T]:
        """`item (, item)* ,? close`, or just `close`; consumes the closing token."""
        out: list[_T] = []
        while not self.accept(close):
            out.append(item())
            if not self.accept(","):
                self.expect(close)
                break
        return out

    # ---- scopes -----------------------------------------------------------------------
    def bind(self, name: str, value: Expr) -> None:
        self.scopes[-1][name] = value

    def lookup_local(self, tok: Token) -> Expr:
        name = tok.text[1:]
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        if self.free_names:
            if name not in self.free_vars:  # its first use may carry its annotation
                ann = self.type() if self.accept(":") else None
                self.free_vars[name] = self.build(tok, Var, name, ann)
            return self.free_vars[name]
        known = [n for scope in self.scopes for n in scope]
        raise self.error(f"unknown variable %{name}.{suggest(name, known)}", tok)

    # ---- module -----------------------------------------------------------------------
    def module(self, mod: IRModule) -> IRModule:
        self.header()
        items = self.scan_items()
        for kind, name_tok, _ in items:
            if kind == "type":
                self.adts[name_tok.text] = GlobalTypeVar(name_tok.text)
            else:  # a definition of its own, even one named like a prelude function's
                self.globals[name_tok.text[1:]] = GlobalVar(name_tok.text[1:])
        for kind, _, start in items:
            if kind == "type":
                self.pos = start
                mod.add_type(self.type_definition())
        for kind, name_tok, start in items:
            if kind == "def":
                self.pos = start
                gv = self.globals[name_tok.text[1:]]
                mod.add(gv, self.definition())
        return mod

    def header(self) -> None:
        tok = self.peek()
        if tok.kind == "version":
            version = tok.text.split('"')[1]
            if version != VERSION:
                raise self.error(f"unsupported text format version {version!r}; "
                                 f"this reader knows {VERSION!r}", tok)
            self.next()

    def scan_items(self) -> list[tuple[str, Token, int]]:
        """(kind, name token, start) of each top-level item; skips bodies by brace matching,
        so globals and types may be used before they are defined."""
        items: list[tuple[str, Token, int]] = []
        seen: dict[str, Token] = {}
        while self.peek().kind != "eof":
            start, tok = self.pos, self.next()
            if tok.text not in ("def", "type") or tok.kind != "ident":
                raise self.error(f"expected 'def' or 'type' at the top level, got "
                                 f"{self.describe(tok)} (use parse_expr for an expression)", tok)
            name = self.expect_kind("global" if tok.text == "def" else "ident",
                                    "a global name like @main" if tok.text == "def"
                                    else "a type name")
            key = f"{tok.text} {name.text}"
            if key in seen:
                first_line = self.src.line_col(seen[key].start)[0]
                raise self.error(f"{name.text} is defined twice (first at line {first_line})", name)
            seen[key] = name
            items.append((tok.text, name, start))
            self.skip_braced_body()
        return items

    def skip_braced_body(self) -> None:
        while not self.at("{"):
            if self.peek().kind == "eof":
                raise self.error("expected '{' to open the body")
            self.next()
        depth = 0
        while True:
            tok = self.next()
            if tok.kind == "eof":
                raise self.error("unbalanced braces: missing '}'", tok)
            depth += tok.text == "{" and tok.kind == "punct"
            depth -= tok.text == "}" and tok.kind == "punct"
            if depth == 0:
                return

    def type_definition(self) -> TypeData:
        self.expect("type")
        name = self.next().text
        header = self.adts[name]
        params = self.type_params("]") if self.accept("[") else []
        self.type_scopes.append({tv.name: tv for tv in params})
        saved, self.free_type_vars = self.free_type_vars, None
        self.expect("{", f"to open the constructors of {name}")
        ctors = self.comma_list("}", lambda: self.constructor(header))
        self.type_scopes.pop()
        self.free_type_vars = saved
        return TypeData(header, tuple(params), tuple(ctors))

    def constructor(self, header: GlobalTypeVar) -> Constructor:
        tok = self.expect_kind("ident", "a constructor name")
        if tok.text in _KEYWORDS or tok.text in op_names():
            what = "an operator" if tok.text in op_names() else "a keyword"
            raise self.error(f"a constructor cannot be named {tok.text!r}: in an expression "
                             f"{tok.text!r} is {what}", tok)
        inputs = self.comma_list(")", self.type) if self.accept("(") else []
        if tok.text in self.ctors and self.ctors[tok.text].belong_to.name != header.name:
            raise self.error(f"constructor {tok.text} is already defined by "
                             f"{self.ctors[tok.text].belong_to.name}", tok)
        ctor = self.build(tok, Constructor, tok.text, tuple(inputs), header)
        self.ctors[tok.text] = ctor
        return ctor

    def definition(self) -> Function:
        start = self.expect("def")
        self.next()  # the @name, already recorded
        self.free_type_vars = {}
        return self.function_rest(start)

    # ---- expressions -------------------------------------------------------------------
    def block(self) -> tuple[Expr, bool]:
        """``(let | temp)* expr``; also says whether any binding was seen. Lets nest to the
        right, so the chain is collected in a loop and built bottom-up."""
        self.scopes.append({})
        lets: list[tuple[Var, Expr, Token]] = []
        bound = False
        while True:
            tok = self.peek()
            if tok.kind == "ident" and tok.text == "let":
                self.next()
                var = self.param()
                self.bind(var.name_hint, var)  # before the value: a let-bound fn may recurse
                self.expect("=", "after the let-bound variable")
                lets.append((var, self.expr(), tok))
            elif tok.kind == "local" and self.at("=", 1):
                self.pos += 2
                self.bind(tok.text[1:], self.expr())
            else:
                break
            bound = True
            self.accept(";")
        result = self.expr()
        self.scopes.pop()
        for var, value, start in reversed(lets):
            result = Let(var, value, result, span=self.src.token_span(start, start))
        return result, bound

    def braced_block(self, context: str) -> Expr:
        self.expect("{", context)
        body, _ = self.block()
        self.expect("}", f"to close the block {context}")
        return body

    @_nests
    def expr(self) -> Expr:
        start = self.peek()
        e = self.primary()
        while True:
            if self.toks[self.pos].text not in _POSTFIX:
                return e
            if self.at("("):
                e = self.call(start, e, [])
            elif self.at("<"):
                self.next()
                type_args = self.comma_list(">", self.type)
                if not self.at("("):
                    raise self.error("expected '(' after explicit type arguments")
                e = self.call(start, e, type_args)
            elif self.accept("."):
                index = self.expect_kind("number", "a tuple index after '.'")
                if not index.text.isdigit():
                    raise self.error("a tuple index must be a non-negative integer", index)
                e = self.build(start, TupleGetItem, e, self.integer(index))
            else:
                return e

    def call(self, start: Token, callee: Expr, type_args: list[Type]) -> Expr:
        self.expect("(")
        args: list[Expr] = []
        attrs: dict[str, AnyValue] = {}

        def item() -> None:
            if self.peek().kind == "ident" and self.at("=", 1):
                key = self.next()
                self.next()
                if key.text in attrs:
                    raise self.error(f"attribute {key.text} is given twice", key)
                attrs[key.text] = self.literal()
            elif attrs:
                raise self.error("positional arguments must come before attributes")
            else:
                args.append(self.expr())

        self.comma_list(")", item)
        return self.build(start, Call, callee, tuple(args), attrs, tuple(type_args))

    def primary(self) -> Expr:
        tok = self.peek()
        if tok.kind == "local":
            self.next()
            return self.lookup_local(tok)
        if tok.kind == "global":
            return self.global_var(self.next())
        if tok.kind == "number":
            return self.number(self.next())
        if tok.kind == "ident":
            return self.word(tok)
        if self.at("("):
            return self.parenthesised()
        raise self.error(f"expected an expression, got {self.describe(tok)}")

    def global_var(self, tok: Token) -> GlobalVar:
        name = tok.text[1:]
        if name not in self.globals:
            if not self.free_names:
                raise self.error(f"unknown global @{name}.{suggest(name, self.globals)}", tok)
            self.globals[name] = GlobalVar(name)
        return self.globals[name]

    def word(self, tok: Token) -> Expr:
        keyword = _KEYWORDS.get(tok.text)
        if keyword is not None:
            return keyword(self)
        self.next()
        ctor = self.ctors.get(tok.text)
        if ctor is not None:
            if ctor.inputs:
                return ctor  # called by the postfix loop, or passed as a function
            type_args = self.comma_list(">", self.type) if self.accept("<") else []
            if type_args or (self.at("(") and self.at(")", 1)):
                self.expect("(", "after the type arguments")
                self.expect(")", f"{tok.text} takes no arguments")  # `Nil()` reads as `Nil`
            return self.build(tok, Call, ctor, (), {}, tuple(type_args))
        try:
            return Op.get(tok.text)
        except IRError:
            hint = suggest(tok.text, [*op_names(), *self.ctors])
            raise self.error(f"unknown operator or constructor {tok.text!r}.{hint}", tok) from None

    def number(self, tok: Token) -> Constant:
        value = self.literals.get(tok.text)
        if value is None:
            value = self.literals[tok.text] = self.number_value(tok)
        return self.build(tok, Constant, value)

    def number_value(self, tok: Token) -> np.ndarray:
        m = NUMBER.match(tok.text)
        if m is None:
            raise self.error(f"malformed number {tok.text!r}", tok)
        digits, suffix = m.groups()
        is_float = any(c in digits for c in ".eE")
        if suffix is None:
            dtype = "float32" if is_float else "int32"
        elif suffix in _SUFFIX_DTYPE:
            dtype = _SUFFIX_DTYPE[suffix]
        else:
            raise self.error(f"unknown literal suffix {suffix!r}; expected one of "
                             f"{', '.join(sorted(_SUFFIX_DTYPE))}", tok)
        np_dtype = np.dtype(dtype)
        if np_dtype.kind == "f":
            with np.errstate(over="ignore"):
                value = np_dtype.type(float(digits))
            if not np.isfinite(value):  # digits are finite: rounding overflowed
                raise self.error(f"{digits} is out of range for {dtype} (its largest value is "
                                 f"{np.finfo(np_dtype).max})", tok)
            return np.array(value)
        if is_float:
            raise self.error(f"{digits} is not an integer, but the suffix says {dtype}", tok)
        info = np.iinfo(np_dtype)
        if not info.min <= self.integer(tok, digits) <= info.max:
            raise self.error(f"{digits} is out of range for {dtype}", tok)
        return np.array(int(digits), dtype=np_dtype)

    def parenthesised(self) -> Expr:
        start = self.expect("(")
        if self.accept(")"):
            return self.build(start, Tuple, ())
        first, bound = self.block()
        if bound or self.accept(")"):
            if bound:
                self.expect(")", "to close the parenthesised block")
            return first
        self.expect(",", "or ')' in a tuple")
        rest = self.comma_list(")", self.expr)
        return self.build(start, Tuple, (first, *rest))

    def function_rest(self, start: Token) -> Function:
        type_params = self.type_params(">") if self.accept("<") else []
        self.type_scopes.append({tv.name: tv for tv in type_params})
        self.scopes.append({})
        params: list[Var] = []
        attrs: dict[str, AnyValue] = {}

        def item() -> None:
            if self.peek().kind == "ident" and self.at("=", 1):
                key = self.next().text
                self.next()
                attrs[key] = self.literal()
                return
            tok = self.peek()
            var = self.param()
            if var.name_hint in self.scopes[-1]:
                raise self.error(f"parameter %{var.name_hint} is listed twice", tok)
            self.bind(var.name_hint, var)
            params.append(var)

        self.expect("(", "to open the parameter list")
        self.comma_list(")", item)
        ret = self.type() if self.accept("->") else None
        body = self.braced_block("of the function")
        self.scopes.pop()
        self.type_scopes.pop()
        return self.build(start, Function, tuple(params), body, ret, tuple(type_params), attrs)

    def param(self) -> Var:
        tok = self.expect_kind("local", "a variable like %x")
        ann = self.type() if self.accept(":") else None
        return self.build(tok, Var, tok.text[1:], ann)

    @_nests
    def if_expr(self) -> Expr:
        start = self.expect("if")
        self.expect("(", "after 'if'")
        cond = self.expr()
        self.expect(")", "to close the condition")
        then = self.braced_block("of the true branch")
        self.expect("else", "after the true branch")
        other = self.if_expr() if self.at("if") else self.braced_block("of the false branch")
        return self.build(start, If, cond, then, other)

    def match_expr(self) -> Expr:
        start = self.expect("match")
        complete = not self.accept("?")
        self.expect("(", "after 'match'")
        data = self.expr()
        self.expect(")", "to close the matched value")
        self.expect("{", "to open the match clauses")
        clauses = self.comma_list("}", self.clause)
        return self.build(start, Match, data, tuple(clauses), complete)

    def clause(self) -> Clause:
        self.scopes.append({})
        lhs = self.pattern()
        self.expect("=>", "after the pattern")
        rhs = self.braced_block("of the match clause") if self.at("{") else self.expr()
        self.scopes.pop()
        return Clause(lhs, rhs)

    @_nests
    def pattern(self) -> Pattern:
        tok = self.peek()
        if tok.kind == "local":
            var = self.param()
            self.bind(var.name_hint, var)
            return PatternVar(var, span=var.span)
        if self.accept("_"):
            return self.build(tok, PatternWildcard)
        if self.accept("("):
            subs = self.comma_list(")", self.pattern)
            if len(subs) == 1 and self.toks[self.pos - 2].text != ",":
                return subs[0]  # `(p)` is p; a one-tuple is `(p,)`
            return self.build(tok, PatternTuple, tuple(subs))
        if tok.kind == "ident":
            self.next()
            ctor = self.ctors.get(tok.text)
            if ctor is None:
                hint = suggest(tok.text, self.ctors)
                raise self.error(f"unknown constructor {tok.text!r}.{hint}", tok)
            subs = self.comma_list(")", self.pattern) if self.accept("(") else []
            return self.build(tok, PatternConstructor, ctor, tuple(subs))
        raise self.error(f"expected a pattern, got {self.describe(tok)}")

    def ref_expr(self) -> Expr:
        start = self.next()
        self.expect("(", f"after '{start.text}'")
        args = self.comma_list(")", self.expr)
        nodes = {"ref": RefCreate, "ref_read": RefRead, "ref_write": RefWrite, "grad": Grad}
        node = nodes[start.text]
        arity = 2 if node is RefWrite else 1
        if len(args) != arity:
            raise self.error(f"{start.text} takes {arity} argument(s), got {len(args)}", start)
        return self.build(start, node, *args)

    def meta(self) -> Expr:
        self.expect("meta")
        self.expect("[")
        section = self.expect_kind("ident", "'Constant'")
        if section.text != "Constant":
            raise self.error(f"unknown metadata section {section.text!r}; expected Constant",
                             section)
        self.expect("]")
        self.expect("[")
        index = self.expect_kind("number", "a constant index")
        self.expect("]")
        if not index.text.isdigit() or self.integer(index) >= len(self.constants):
            raise self.error(f"meta[Constant][{index.text}] is not in the metadata section "
                             f"({len(self.constants)} constants)", index)
        return self.constants[int(index.text)]

    def bool_literal(self) -> Expr:
        tok = self.next()
        return self.build(tok, Constant, np.array(tok.text == "True"))

    def constructor_ref(self) -> Expr:
        self.expect("constructor")
        self.expect("(", "after 'constructor'")
        tok = self.expect_kind("ident", "a constructor name")
        self.expect(")")
        if tok.text not in self.ctors:
            raise self.error(f"unknown constructor {tok.text!r}.{suggest(tok.text, self.ctors)}",
                             tok)
        return self.ctors[tok.text]

    def let_in_expression(self) -> Expr:
        raise self.error("a let inside an expression must be parenthesised: (let %x = ...; body)")

    # ---- attribute literals ----------------------------------------------------------------
    @_nests
    def literal(self) -> AnyValue:
        tok = self.next()
        if self.at_value(tok, "[") or self.at_value(tok, "("):
            close = "]" if tok.text == "[" else ")"
            return tuple(self.comma_list(close, self.literal))
        if tok.kind == "string":
            try:
                return ast.literal_eval(tok.text)
            except (SyntaxError, ValueError) as e:
                reason = e.msg if isinstance(e, SyntaxError) else str(e)
                raise self.error(f"bad string literal: {reason}", tok) from None
        if tok.kind == "ident" and tok.text in _LITERAL_WORDS:
            return _LITERAL_WORDS[tok.text]
        negative = self.at_value(tok, "-")
        if negative:
            tok = self.next()
            if tok.kind == "ident" and tok.text == "inf":
                return float("-inf")
        if tok.kind == "number" and (number := NUMBER.match(tok.text)) and not number[2]:
            if any(c in tok.text for c in ".eE"):
                value: float | int = float(tok.text)
                if math.isinf(value):
                    raise self.error(f"{tok.text} is out of range for a float", tok)
            else:
                value = self.integer(tok)
            return -value if negative else value
        raise self.error(f"expected an attribute value (a number, string, True, False, None "
                         f"or [...]), got {self.describe(tok)}", tok)

    @staticmethod
    def at_value(tok: Token, text: str) -> bool:
        return tok.kind == "punct" and tok.text == text

    # ---- types ------------------------------------------------------------------------
    def type_params(self, close: str) -> list[TypeVar]:
        def one() -> TypeVar:
            tok = self.expect_kind("ident", "a type parameter name")
            self.not_a_dtype(tok)
            kind = Kind.Type
            if self.accept(":"):
                k = self.expect_kind("ident", "a kind (Type, Shape or BaseType)")
                if k.text not in _KINDS:
                    raise self.error(f"unknown kind {k.text!r}; expected Type, Shape or BaseType",
                                     k)
                kind = _KINDS[k.text]
            return TypeVar(tok.text, kind)

        params = self.comma_list(close, one)
        names = [p.name for p in params]
        for p in params:
            if names.count(p.name) > 1:
                raise self.error(f"type parameter {p.name} is declared twice")
        return params

    @_nests
    def type(self) -> Type:
        tok = self.peek()
        if self.accept("("):
            fields = self.comma_list(")", self.type)
            if len(fields) == 1 and self.toks[self.pos - 2].text != ",":
                return fields[0]
            return self.build(tok, _no_span(TupleType), tuple(fields))
        if tok.kind != "ident":
            raise self.error(f"expected a type, got {self.describe(tok)}")
        self.next()
        special = _TYPE_WORDS.get(tok.text)
        if special is not None:
            return special(self, tok)
        if tok.text in DTYPES:
            return TensorType((), tok.text)
        if tok.text in self.adts:
            args = self.comma_list("]", self.type) if self.accept("[") else []
            return self.build(tok, _no_span(TypeCall), self.adts[tok.text], tuple(args))
        if self.at("["):
            raise self.error(f"unknown type {tok.text!r}.{suggest(tok.text, self.adts)}", tok)
        return self.type_var(tok, Kind.Type)

    def not_a_dtype(self, tok: Token) -> None:
        """A type variable may not be named like a dtype: `int` or `float33` is a typo (TVM
        reads no dtype `int` either) and the printer never names a variable so."""
        if DTYPE_LIKE.fullmatch(tok.text):
            family = tok.text.rstrip("0123456789")
            options = ", ".join(d for d in DTYPES if d.startswith(family))
            raise self.error(f"unknown dtype {tok.text!r}; the {family} dtypes are {options}",
                             tok)

    def tensor_type(self, tok: Token) -> Type:
        self.expect("[", "after Tensor")
        if self.accept("("):
            shape = self.comma_list(")", self.dim)
        else:
            shape = [self.dim()]
        self.expect(",", "between the shape and the dtype")
        dtype_tok = self.expect_kind("ident", "a dtype")
        dtype: str | TypeVar = dtype_tok.text
        if dtype_tok.text not in DTYPES:
            dtype = self.type_var(dtype_tok, Kind.BaseType)
        self.expect("]", "to close the tensor type")
        return self.build(tok, _no_span(TensorType), tuple(shape), dtype)

    def dim(self) -> AnyValue:
        tok = self.next()
        if self.at_value(tok, "?"):
            return Any
        if tok.kind == "number" and tok.text.isdigit():
            return self.integer(tok)
        if tok.kind == "ident":
            return self.type_var(tok, Kind.Shape)
        raise self.error(f"expected a dimension (an integer, a name or ?), got "
                         f"{self.describe(tok)}", tok)

    def func_type(self, tok: Token) -> Type:
        params = self.type_params(">") if self.accept("<") else []
        self.type_scopes.append({tv.name: tv for tv in params})
        self.expect("(", "to open the argument types")
        args = self.comma_list(")", self.type)
        self.expect("->", "before the return type")
        ret = self.type()
        self.type_scopes.pop()
        return self.build(tok, _no_span(FuncType), tuple(args), ret, tuple(params))

    def ref_type(self, tok: Token) -> Type:
        self.expect("[", "after Ref")
        value = self.type()
        self.expect("]", "to close Ref[...]")
        return RefType(value)

    def type_var(self, tok: Token, kind: Kind) -> TypeVar:
        self.not_a_dtype(tok)
        found = None
        for scope in reversed(self.type_scopes):
            if tok.text in scope:
                found = scope[tok.text]
                break
        if found is None:
            if self.free_type_vars is None:
                known = [*self.adts, *(n for s in self.type_scopes for n in s)]
                raise self.error(f"unknown type {tok.text!r}.{suggest(tok.text, known)}", tok)
            found = self.free_type_vars.setdefault(tok.text, TypeVar(tok.text, kind))
        if found.kind is not kind:
            raise self.error(f"type variable {tok.text} has kind {found.kind.name}, "
                             f"but is used as a {kind.name}", tok)
        return found


def _no_span(make: Callable[..., _T]) -> Callable[..., _T]:
    """Types carry no span; this drops the one `build` passes."""
    def build(*args: AnyValue, span: Span | None) -> _T:
        return make(*args)

    return build


_KEYWORDS: dict[str, Callable[[_Parser], Expr]] = {
    "fn": lambda p: p.function_rest(p.next()),
    "if": _Parser.if_expr,
    "match": _Parser.match_expr,
    "ref": _Parser.ref_expr,
    "ref_read": _Parser.ref_expr,
    "ref_write": _Parser.ref_expr,
    "grad": _Parser.ref_expr,
    "meta": _Parser.meta,
    "True": _Parser.bool_literal,
    "False": _Parser.bool_literal,
    "constructor": _Parser.constructor_ref,
    "let": _Parser.let_in_expression,
}
_TYPE_WORDS: dict[str, Callable[[_Parser, Token], Type]] = {
    "Tensor": _Parser.tensor_type,
    "fn": _Parser.func_type,
    "Ref": _Parser.ref_type,
}
_LITERAL_WORDS = {"True": True, "False": False, "None": None,
                  "inf": float("inf"), "nan": float("nan")}


@contextlib.contextmanager
def _bulk_allocation() -> Generator[None, None, None]:
    """Pause the cycle collector while a parse allocates its (acyclic) tokens and nodes:
    with a large program alive, its full-heap passes would otherwise dominate."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _room_to_nest() -> contextlib.AbstractContextManager[None]:
    """Python's recursion limit raised for MAX_NESTING levels above the caller's frames."""
    return deep_recursion(sys.getrecursionlimit() + FRAMES_PER_LEVEL * MAX_NESTING)


def _prepare(text: str, source_name: str) -> tuple[Source, list[Token], list[Constant]]:
    if not conforms(text, str):
        raise TypeError(f"parse takes a str, got {type(text).__name__}")
    src = Source(text, source_name)
    program, constants = split_metadata(src)
    return src, tokenize(src, program), constants


def parse(text: str, *, source_name: str = "<string>") -> IRModule:
    """A module from its Relay text (the prelude is included, as in ``IRModule()``).

    >>> mod = parse('def @main(%x: float32) -> float32 { add(%x, 1f) }')
    >>> print(mod.astext())
    #[version = "0.0.5"]
    def @main(%x: Tensor[(), float32]) -> Tensor[(), float32] {
      add(%x, 1f)
    }
    """
    with _bulk_allocation():
        src, tokens, constants = _prepare(text, source_name)
        mod = IRModule()
        with _room_to_nest():
            return _Parser(src, tokens, constants, mod, free_names=False).module(mod)


def parse_expr(text: str, *, source_name: str = "<string>") -> Expr:
    """An expression from its Relay text; free ``%vars`` become fresh Vars (one per name).

    >>> e = parse_expr("%0 = add(%x, %x); multiply(%0, %0)")
    >>> e.args[0] is e.args[1]
    True
    """
    with _bulk_allocation():
        src, tokens, constants = _prepare(text, source_name)
        p = _Parser(src, tokens, constants, IRModule(), free_names=True)
        p.header()
        with _room_to_nest():
            expr, _ = p.block()
        if p.peek().kind != "eof":
            raise p.error(f"expected the end of the expression, got {p.describe(p.peek())}")
        return expr


__all__ = ["parse", "parse_expr", "Token"]
