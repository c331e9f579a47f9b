"""CLI sub-commands. Each module defines ``register(subparsers)`` and a ``run(args) -> int`` bound by it."""

from vitroll.commands import evaluate, models, overlay, sanity

COMMANDS = (overlay, evaluate, sanity, models)
