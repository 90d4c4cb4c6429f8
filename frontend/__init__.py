"""Python AST -> Relay: annotations, translation, decorators, errors (users import relaydsl)."""
