"""CLI sub-commands. Each module defines ``register(subparsers)`` and a ``run(args) -> int`` bound by it."""

from vitroll.commands import annotate, app, audit, caption, compare, evaluate, methods, models, overlay, sanity, text

COMMANDS = (overlay, annotate, audit, compare, evaluate, sanity, text, caption, app, models, methods)
