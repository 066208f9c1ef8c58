"""Control characters in text output, shown escaped: a device file's ``name = "a\\u001b[31mRED"``
must print as ``a\\x1b[31mRED``, never turn a terminal red, move its cursor or end a line.

Two places see to it. Every write of the program to stdout and stderr goes through
:func:`escaped_streams` (``attnroof`` runs its commands inside it), which escapes every control
character but the newline, the output's own structure. A string from a user's file or flag that
is set into a line (a device's or model's name in a header) is passed through :func:`escaped`,
which escapes the newline too. JSON stays JSON: ``json.dumps`` already escapes C0 controls, and the
DEL and C1 controls it leaves (``ensure_ascii=False``) are written ``\\u007f``..``\\u009f``, which
a JSON reader reads back as the same character.

>>> escaped("a\\nb\\x1b[31mRED")
'a\\\\nb\\\\x1b[31mRED'
>>> escape_output("line 1\\nline 2\\r\\x9b")
'line 1\\nline 2\\\\r\\\\u009b'
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Iterator
from typing import Any, TextIO

_ANY = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
"""C0 controls, DEL, C1 controls and lone surrogates (a file name's undecodable bytes)."""
_BUT_NEWLINE = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    ch = match.group()
    if ord(ch) < 0x20:
        return ascii(ch)[1:-1]  # \n, \t, \r, \x1b: as Python and the one-line errors write them
    return f"\\u{ord(ch):04x}"  # valid inside a JSON string, which may hold these raw


def escaped(text: str) -> str:
    """``text`` with every control character escaped, the newline included: for a user's string
    set into a line of output (a name in a header)."""
    return _ANY.sub(_escape, text) if _ANY.search(text) else text


def escape_output(text: str) -> str:
    """``text`` with every control character but the newline escaped: for whole output."""
    return _BUT_NEWLINE.sub(_escape, text) if _BUT_NEWLINE.search(text) else text


class EscapingStream:
    """A text stream that writes to ``inner`` through :func:`escape_output`; everything else
    (``flush``, ``isatty``, ``close``, ``encoding`` …) is ``inner``'s."""

    def __init__(self, inner: TextIO) -> None:
        self.inner = inner

    def write(self, text: str) -> int:
        self.inner.write(escape_output(text))
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def unescaped(stream: TextIO) -> TextIO:
    """The stream under the escaping, for output whose control characters are the program's own
    and nobody else's (:mod:`attnroof.progress`'s carriage returns, around its own words)."""
    return stream.inner if isinstance(stream, EscapingStream) else stream


@contextlib.contextmanager
def escaped_streams() -> Iterator[None]:
    """``sys.stdout`` and ``sys.stderr`` escaped (:class:`EscapingStream`) until the block ends;
    a stream that the block replaced by its own is left as the block left it."""
    out, err = EscapingStream(sys.stdout), EscapingStream(sys.stderr)
    sys.stdout, sys.stderr = out, err  # type: ignore[assignment]
    try:
        yield
    finally:
        if sys.stdout is out:
            sys.stdout = out.inner
        if sys.stderr is err:
            sys.stderr = err.inner
