"""The command line's machinery, below ``cli.py``: the parsers built from the command index,
one-line errors, and :func:`run`, which parses a command's words, runs its handler and turns
every error a user can cause into one line and exit status 2. ``attnroof`` (``cli.main``) and
``attnroof explore``'s server both run commands through :func:`run`, so a page's JSON is the
command line's JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from attnroof import __version__

if TYPE_CHECKING:
    from attnroof.errors import AttnroofError

EXIT_USAGE = 2
EXIT_INTERNAL = 1


LATER_NOTES = "later_notes"
"""The arguments' attribute where a command leaves lines for stderr after a successful answer (a
default it chose, such as the device when ``--device`` is left out); never printed beside an error,
which stays one line."""

LONG_WORD = 200
"""A word of an error longer than this (a 5,000-digit number given as a flag) is shown cut."""


def one_line(message: str) -> str:
    """``message`` on one line: a newline, tab or other control character is shown escaped
    (``\\n``), so that every error is exactly one line on stderr; a word longer than
    :data:`LONG_WORD` characters is shown by its ends and its length.

    >>> one_line("bad value '" + "9" * 5000 + "'")
    "bad value '99999999999999999999999999999999999999999999999999999999999…9999999999999999999' (5,002 characters)"
    """
    line = "".join(ch if ch.isprintable() or ch == " " else ascii(ch)[1:-1] for ch in message.strip())
    return " ".join(_cut(word) for word in line.split(" "))


def _cut(word: str) -> str:
    if len(word) <= LONG_WORD:
        return word
    return f"{word[:60]}…{word[-20:]} ({len(word):,} characters)"


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (no usage dump) and exit status 2; an unknown
    choice says which one was meant; ``--flag=--`` is refused instead of becoming an empty list."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {one_line(message)}\n")

    def _get_values(self, action: argparse.Action, arg_strings: list[str]) -> Any:
        if action.nargs is None and action.option_strings and arg_strings == ["--"]:
            flag = "/".join(action.option_strings)
            self.error(f"argument {flag}: expected a value, got '--'")
        return super()._get_values(action, arg_strings)

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        if action.choices is None or value in action.choices:
            return
        import difflib

        names = [str(c) for c in action.choices]
        close = difflib.get_close_matches(str(value), names, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        what = "/".join(action.option_strings) or action.metavar or action.dest
        self.error(f"argument {what}: invalid choice {value!r}{hint} (choose from {', '.join(names)})")


class CommandParser(Parser):
    """A command's parser, made from the command index with its name alone: its module is
    imported, and its arguments added, when it is first used (parsing its words, or
    :meth:`load`). So ``attnroof --help`` lists every command and imports none of them."""

    def __init__(self, *args: Any, command: str | None = None, module: str | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._pending = None if command is None or module is None else (command, module)

    def load(self) -> CommandParser:
        if self._pending is not None:
            command, module = self._pending
            self._pending = None
            defined = importlib.import_module(f"attnroof.commands.{module}").COMMANDS
            next(c for c in defined if c.name == command).fill(self)
        return self

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        self.load()  # the subcommand action parses the command's words through this method
        return super().parse_known_args(args, namespace)


def build_parser(command: str | None = None, *, lazy: bool = False) -> Parser:
    """The parser of every command. Each command's module is imported and its arguments added
    at once, or, with ``lazy``, only for ``command`` (when it is known), the others when they
    are parsed: start-up then imports the one module a run needs (none for ``--help``)."""
    from attnroof.commands import COMMAND_INDEX

    parser = Parser(
        prog="attnroof",
        description="Roofline analysis of attention and transformer operators.",
        epilog="Run 'attnroof sheet' for the whole worked analysis; 'attnroof COMMAND -h' for each command.",
        formatter_class=lambda prog: argparse.HelpFormatter(prog, max_help_position=18, width=100),
    )
    parser.add_argument("--version", action="version", version=f"attnroof {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=CommandParser)
    for name, module, summary in COMMAND_INDEX:
        p = sub.add_parser(name, help=summary, command=name, module=module)
        if not lazy or name == command:
            p.load()
    return parser


FLAG_OF_PARAM = {
    "peak_flops_per_s": "--peak-flops",
    "bandwidth_bytes_per_s": "--bandwidth",
    "capacity_bytes": "--capacity",
    "board_power_w": "--board-power",
    "device": "--device",
    "dtype": "--dtype",
    "heads": "--heads",
    "group": "--group",
    "weight_dtype": "--weight-dtype",
    "warmup": "--warmup",
    "rate": "--rate",
    "burstiness": "--burstiness",
    "seed": "--seed",
}
"""The flag that sets each library parameter an error may name (see ``AttnroofError.param``)."""


def _with_flags(e: AttnroofError) -> str:
    """The error's message, with the library parameter it names replaced by its flag
    (:func:`attnroof.errors.with_flag`: the parameter's own word, never a file's name)."""
    from attnroof.errors import with_flag

    text = str(e)
    flag = FLAG_OF_PARAM.get(e.param or "")
    return with_flag(text, e.param, flag) if flag and e.param else text


def run(words: Sequence[str], *, freeze: bool = False) -> int:
    """Run ``attnroof WORDS`` in this process: its exit status, its output on ``sys.stdout`` and
    its errors on ``sys.stderr`` (a usage error raises ``SystemExit(2)`` after its one line, as
    argparse does). ``freeze``: keep what start-up made out of the garbage collector's walks
    (for the program, whose objects live until it ends)."""
    words = list(words)
    parser = build_parser(words[0] if words else None, lazy=True)
    args = parser.parse_args(words)
    if not getattr(args, "handler", None):
        parser.print_help()
        return EXIT_USAGE
    from attnroof.errors import AttnroofError

    if freeze:
        gc.freeze()
    try:
        status = int(args.handler(args) or 0)
    except AttnroofError as e:
        print(f"attnroof: error: {one_line(_with_flags(e))}", file=sys.stderr)
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
            one_line(
                f"attnroof: internal error: {type(e).__name__}: {e} (ATTNROOF_DEBUG=1 shows the traceback)"
            ),
            file=sys.stderr,
        )
        return EXIT_INTERNAL
    notes = getattr(args, LATER_NOTES, ()) if status == 0 else ()
    if notes:
        with contextlib.suppress(BrokenPipeError, ValueError):  # `| head` closed it: the notes still go
            sys.stdout.flush()  # the answer first, in a log that takes both streams
        for line in notes:
            print(one_line(line), file=sys.stderr)
    return status
