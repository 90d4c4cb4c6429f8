"""`Translator`: the translation of one function definition, composed of its parts."""
from __future__ import annotations

from frontend.translate.expressions import Expressions
from frontend.translate.functions import Functions
from frontend.translate.kinds import ValueKinds
from frontend.translate.loops import Loops
from frontend.translate.python_values import PythonValues
from frontend.translate.statements import Statements


class Translator(Functions, Statements, Loops, Expressions, PythonValues, ValueKinds):
    """Translates one function definition; see the `frontend.translate` package docstring.

    Each part is a mixin over `TranslatorBase` (state and shared helpers): `Functions`
    (definitions and closures), `Statements` (blocks, assignments, if/match), `Loops`,
    `Expressions`, `PythonValues` (objects and constants of the enclosing scope) and
    `ValueKinds` (what is known statically of a value)."""
