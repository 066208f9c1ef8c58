"""The ``attnroof`` command: parse, call the library, print. Commands live in
:mod:`attnroof.commands`, one module per family; each module lists its commands in ``COMMANDS``;
the parsers and the one-line errors are :mod:`attnroof.commands._run`'s.

Every error a user can cause ends as one line on stderr and exit status 2.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from attnroof.commands._run import (
    EXIT_INTERNAL,
    EXIT_USAGE,
    FLAG_OF_PARAM,
    LONG_WORD,
    CommandParser,
    Parser,
    _with_flags,
    build_parser,
    one_line,
    run,
)

__all__ = [
    "EXIT_INTERNAL",
    "EXIT_USAGE",
    "FLAG_OF_PARAM",
    "LONG_WORD",
    "CommandParser",
    "Parser",
    "_with_flags",
    "build_parser",
    "main",
    "one_line",
]


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``attnroof ARGV``, or the process's own command line when ``argv`` is None (the
    ``attnroof`` program and ``python -m attnroof``): its exit status."""
    # The program: what start-up made (modules, classes, the parser) lives until the process
    # ends, so the garbage collector need not walk it again, in the run's collections nor in
    # the last one at exit (some 5 ms of a 60 ms `attnroof model`). Not done for main(argv)
    # called by another program, whose objects are not ours to keep.
    # Every line it prints goes through one filter: a control character from a user's file or
    # flag (a device named "\x1b[31m") is shown escaped, never sent to the terminal.
    from attnroof.escaping import escaped_streams

    with escaped_streams():
        return run(sys.argv[1:] if argv is None else argv, freeze=argv is None)


if __name__ == "__main__":
    raise SystemExit(main())
