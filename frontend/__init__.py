"""Python AST -> Relay: annotations, translation, decorators, errors (users import relaydsl)."""
import relaydsl  # noqa: F401  (relaydsl's IR first; relaydsl then re-exports this package's names)
