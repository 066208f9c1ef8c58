"""Hostile input, as a table: each case is files to write, a command to run on them, and what
must come back — exit 2 with one line on stderr that names the bad value, or a correct answer.

Each module of this package holds one area's table (``CASES``); ``tests/test_hostile.py`` runs
them all. A case's ``files`` are written into a fresh folder and ``{dir}`` in its arguments is
replaced by that folder, so a case reads as the command a user typed::

    Case("calibration sharpness 0",
         files={"cal.json": ...},
         argv=("model", "--calibration", "{dir}/cal.json"),
         error=("sharpness",))
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple


class Case(NamedTuple):
    """One hostile input and the answer it must get."""

    id: str
    argv: tuple[str, ...]
    files: Mapping[str, str | bytes] = {}
    error: tuple[str, ...] | None = ()
    """Exit 2 and one line on stderr holding each of these; None: the command must succeed."""
    check: Callable[[Any, Path], None] | None = None
    """For a case that must succeed (or an error that also must leave files intact): called with
    the :class:`conftest.CLIResult` and the folder."""
    env: Mapping[str, str] = {}
    needs_torch: bool = False
    """A case that torch answers (``measure`` refuses everything but its usage without torch): it
    skips where torch is not installed."""
    setup: Callable[[Path], None] | None = None
    """Called with the folder after ``files`` are written, for what a mapping of contents cannot
    make (a symbolic link, an earlier run's output)."""
