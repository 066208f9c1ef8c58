"""The ``attnroof`` command: parse, call the library, print. Commands live in
:mod:`attnroof.commands`, one module per family; each module lists its commands in ``COMMANDS``.

Every error a user can cause ends as one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
from collections.abc import Sequence
from typing import NoReturn

from attnroof import __version__
from attnroof.errors import AttnroofError

EXIT_USAGE = 2
EXIT_INTERNAL = 1


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (no usage dump) and exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def build_parser() -> Parser:
    import attnroof.commands as pkg

    parser = Parser(
        prog="attnroof",
        description="Roofline analysis of attention and transformer operators.",
        epilog="Run 'attnroof sheet' for the whole worked analysis; 'attnroof COMMAND -h' for each command.",
        formatter_class=lambda prog: argparse.HelpFormatter(prog, max_help_position=18, width=100),
    )
    parser.add_argument("--version", action="version", version=f"attnroof {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    modules = [
        importlib.import_module(f"attnroof.commands.{m.name}")
        for m in pkgutil.iter_modules(pkg.__path__)
        if not m.name.startswith("_")
    ]
    commands = [c for mod in modules for c in getattr(mod, "COMMANDS", ())]
    for command in sorted(commands, key=lambda c: c.order):
        command.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return EXIT_USAGE
    try:
        return int(args.handler(args) or 0)
    except AttnroofError as e:
        print(f"attnroof: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt as e:  # a command may say what was kept and how to go on
        print(f"attnroof: interrupted{f'; {e}' if str(e) else ''}", file=sys.stderr)
        return 130
    except BrokenPipeError:
        sys.stderr.close()  # `attnroof sheet | head` is not an error
        return 0
    except Exception as e:  # a bug, not bad input: still one line, unless asked for the traceback
        if os.environ.get("ATTNROOF_DEBUG"):
            raise
        print(
            f"attnroof: internal error: {type(e).__name__}: {e} (ATTNROOF_DEBUG=1 shows the traceback)",
            file=sys.stderr,
        )
        return EXIT_INTERNAL


if __name__ == "__main__":
    raise SystemExit(main())
