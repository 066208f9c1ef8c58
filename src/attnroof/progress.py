"""A progress line for work that may run for more than a second (a plan search): a bar on the
terminal's stderr that appears once the work has run for :data:`AFTER_S`, is redrawn at most
every :data:`EVERY_S`, and is erased when the work ends, so that what the command prints after
it starts on a clean line. Nothing at all is written when stderr is not a terminal (piped, a
file, a test) or when the caller turns it off (``--json``, whose reader is a program).

>>> import io
>>> with Progress(io.StringIO()) as p:   # not a terminal: silent
...     p("judging", 5, 10)
>>> p.drawn
False
"""

from __future__ import annotations

import math
import os
import shutil
import sys
import time
from collections.abc import Callable
from types import TracebackType
from typing import TextIO

from attnroof.errors import InputError
from attnroof.escaping import unescaped

AFTER_S = 1.0
"""Work shorter than this shows no bar: a flash of one is noise."""
AFTER_ENV = "ATTNROOF_PROGRESS_AFTER_S"
"""Sets :data:`AFTER_S` (seconds; 0 draws from the first report, as the tests do)."""
EVERY_S = 0.1
"""The most often the line is redrawn (a bar redrawn for each of 100,000 plans would cost more
than judging them)."""
BAR = 24
"""Cells of the bar."""


class Progress:
    """``progress(stage, done, total)``: where the work is (``total`` None: a count alone). A
    context manager: the line is erased on leaving, however the work ended."""

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        enabled: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream = unescaped(sys.stderr if stream is None else stream)  # its \r is its own
        isatty = getattr(self.stream, "isatty", None)
        self.enabled = enabled and bool(isatty and isatty())
        self.clock = clock
        self.after_s = after_s()
        self.start = clock()
        self.last = -EVERY_S
        self.drawn = False
        self.width = 0

    def __call__(self, stage: str, done: int, total: int | None = None) -> None:
        if not self.enabled:
            return
        now = self.clock()
        if now - self.start < self.after_s or now - self.last < EVERY_S:
            return
        self.last = now
        self._write(line(stage, done, total, shutil.get_terminal_size((80, 24)).columns - 1))

    def _write(self, text: str) -> None:
        pad = " " * max(0, self.width - len(text))
        self.width, self.drawn = max(self.width, len(text)), True  # first: a ^C mid-write still erases
        self.stream.write(f"\r{text}{pad}")
        self.stream.flush()

    def close(self) -> None:
        """Erase the line, if one was drawn."""
        if self.drawn:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()
            self.drawn, self.width = False, 0

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def after_s() -> float:
    """:data:`AFTER_S`, or ``$ATTNROOF_PROGRESS_AFTER_S``; :class:`InputError` for a value that is not
    a number of seconds ≥ 0."""
    raw = os.environ.get(AFTER_ENV)
    if raw is None:
        return AFTER_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 0):
        raise InputError(f"{AFTER_ENV}={raw!r} must be a number of seconds ≥ 0")
    return value


def line(stage: str, done: int, total: int | None, columns: int = 80) -> str:
    """The progress line itself, at most ``columns`` wide.

    >>> line("judging", 137_000, 434_682)
    'judging  [#######.................] 32%  137,000 of 434,682'
    >>> line("enumerating", 120_000, None)
    'enumerating  120,000'
    """
    if total is None:
        text = f"{stage}  {done:,}"
    else:
        share = min(1.0, done / total) if total else 1.0
        cells = int(share * BAR)
        text = f"{stage}  [{'#' * cells}{'.' * (BAR - cells)}] {share:.0%}  {done:,} of {total:,}"
    return text[:columns]
