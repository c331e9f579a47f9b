"""The progress bar of the long runs (annotate, text, audit) on stderr: a live bar in a terminal; written into a file
or a CI log, where a bar's carriage-return updates pile up as one endless line, a plain line now and then instead."""

from __future__ import annotations

import sys
import time
from typing import Optional, TextIO

from tqdm import tqdm

from vitroll.io.names import single_line

PLAIN_EVERY = 30.0
"""Seconds between two plain progress lines when stderr is no terminal; a run shorter than that writes none."""


class PlainProgress(tqdm):
    """A :class:`~tqdm.tqdm` for a stream that is no terminal: ``vitroll: progress: 40/300 files (13 %), 01:02
    elapsed, about 06:40 left; <postfix>`` on a line of its own at most every ``every`` seconds (default
    :data:`PLAIN_EVERY`; none before), never a carriage return, nothing when it is cleared or closed."""

    def __init__(self, *args: object, every: Optional[float] = None, **kwargs: object) -> None:
        self.every = PLAIN_EVERY if every is None else every
        self._shown_at = time.monotonic()  # tqdm displays from its __init__: the first line waits ``every`` too
        super().__init__(*args, mininterval=self.every, miniters=1, leave=False, **kwargs)

    def display(self, msg: Optional[str] = None, pos: Optional[int] = None) -> bool:
        now = time.monotonic()
        if msg is not None or now - self._shown_at < self.every:  # msg "": the close, which would clear a bar
            return False
        self._shown_at = now
        print(plain_line(self.format_dict), file=self.fp, flush=True)
        return True

    def clear(self, nolock: bool = False) -> None:
        """Nothing to clear: the lines written stay."""


def plain_line(meter: dict) -> str:
    """The plain progress line of a tqdm ``format_dict``: counts, share, time elapsed and left (once something is
    done), and the postfix."""
    done, total, elapsed = meter["n"], meter["total"], meter["elapsed"]
    line = f"vitroll: progress: {done}/{total} {meter['unit']}s"
    if total:
        line += f" ({100 * done / total:.0f} %)"
    line += f", {tqdm.format_interval(elapsed)} elapsed"
    rate = meter["rate"] or (done / elapsed if elapsed > 0 else None)
    if total and done and rate:
        line += f", about {tqdm.format_interval(max(0, total - done) / rate)} left"
    if meter.get("postfix"):
        line += f"; {meter['postfix']}"
    return single_line(line)


def progress_bar(total: int, unit: str, *, shown: bool = True, stream: Optional[TextIO] = None) -> tqdm:
    """A progress bar of ``total`` ``unit`` s (singular: ``"file"``) on ``stream`` (default stderr): a tqdm bar if the
    stream is a terminal, else a :class:`PlainProgress`; one that shows nothing unless ``shown``."""
    stream = sys.stderr if stream is None else stream
    if shown and not stream.isatty():
        return PlainProgress(total=total, unit=unit, file=stream, smoothing=0.1)
    return tqdm(total=total, unit=unit, file=stream, disable=not shown, smoothing=0.1)
