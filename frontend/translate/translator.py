"""`Translator`: the translation of one function definition, composed of its parts."""
from __future__ import annotations

from relaydsl.frontend.translate.expressions import Expressions
from relaydsl.frontend.translate.functions import Functions
from relaydsl.frontend.translate.kinds import ValueKinds
from relaydsl.frontend.translate.loops import Loops
from relaydsl.frontend.translate.python_values import PythonValues
from relaydsl.frontend.translate.statements import Statements


class Translator(Functions, Statements, Loops, Expressions, PythonValues, ValueKinds):
    """Translates one function definition; see the `frontend.translate` package docstring.

    Each part is a mixin over `TranslatorBase` (state and shared helpers): `Functions`
    (definitions and closures), `Statements` (blocks, assignments, if/match), `Loops`,
    `Expressions`, `PythonValues` (objects and constants of the enclosing scope) and
    `ValueKinds` (what is known statically of a value)."""
