"""Imports every op family so each registers its ops (the registry loads this on first lookup)."""
import relaydsl.op.nn  # noqa: F401
import relaydsl.op.reduce  # noqa: F401
import relaydsl.op.tensor  # noqa: F401
import relaydsl.op.transform  # noqa: F401
import relaydsl.op.gradients  # noqa: F401,E402  (the gradient rules, registered onto the ops)
