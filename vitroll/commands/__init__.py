"""CLI sub-commands. Each module defines ``register(subparsers)`` and a ``run(args) -> int`` bound by it."""

from vitroll.commands import audit, models, overlay

COMMANDS = (overlay, audit, models)
