"""Python AST -> Relay: the translation of one decorated function.

Statements are translated in continuation style: each assignment becomes a
``let`` whose body is the rest of the block, so rebinding a Python name makes
a new Relay variable. Control flow follows the 2019 paper's conversion of
loops into tail-recursive functions:

- ``if`` without a ``return`` inside joins its branches: the names either
  branch assigns come back as a tuple (``let (a, b) = if c {...; (a, b)} else {...}``);
  an ``if`` with a ``return`` inside takes the rest of the block into each branch;
- ``for``/``while`` become a local recursive function over the loop state (the
  names the body reassigns), called once; the call's result rebinds them;
- nested ``def`` and ``lambda`` become closures (``let f = fn ...``, recursive).

Straight-line statements are iterated, not recursed into, so long functions translate.
Names follow Python's scoping: a name assigned anywhere in a function is local to it, so a
use where it is not bound (before its assignment, after an ``if`` that assigns it in one
branch only, after the loop that first assigns it) is an error, never a global. Closures
capture values, so a name a nested function reads may not be rebound after it (Python's
closure would see the new value). Python numbers fold as Python computes them; a number
meeting a tensor in an elementwise operator takes its dtype (``cast_like(0.1f64, %x)``, with
``%x`` let-bound when it is not a variable, so it is computed once); elsewhere it is an Int,
a Float or a Bool. What is known statically of each value (its kind, kinds.py: a tensor, a
tuple and its fields, a list, a function) decides what ``t[0]`` and ``for`` mean; where nothing
is known, type inference decides whether ``x[0]`` projects a tuple or slices a tensor
(getitem.py).

The `Translator` (translator.py) is the context of one function's translation: the parts,
one per family of constructs (functions, statements, loops, expressions, calls, Python
values), each hold it and call each other through it.

Every node gets the span of the Python node it comes from, so type errors
point at the user's line. Anything outside the subset is a DSLSyntaxError
located at the construct, saying what to write instead where that is clear.
"""
from relaydsl.frontend.translate.bindings import Binding
from relaydsl.frontend.translate.python_values import Resolver
from relaydsl.frontend.translate.translator import Translator

__all__ = ["Binding", "Resolver", "Translator"]
