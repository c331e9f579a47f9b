"""Ctrl-C in a test: a real SIGINT sent to the test's own process from inside the run, as a terminal sends it."""

from __future__ import annotations

import os
import signal
from typing import Any, Callable, Optional


def pressing_ctrl_c(function: Callable[..., Any], *, on_calls: Optional[tuple[int, ...]] = None) -> Callable[..., Any]:
    """``function``, with Ctrl-C pressed as its calls numbered ``on_calls`` (from 1; None: every call) start."""
    calls = []

    def pressed(*args: Any, **kwargs: Any) -> Any:
        calls.append(None)
        if on_calls is None or len(calls) in on_calls:
            os.kill(os.getpid(), signal.SIGINT)
        return function(*args, **kwargs)

    return pressed
