"""The JSON-lines results file of ``attnroof measure suite``, ``measure collectives`` and the
single measurements (``measure attention|decode|linear -o``): kept with ``--resume``, started
over with ``--force``, never overwritten otherwise, written by one run at a time, continued only
on the device it was measured on; and what an interrupted run leaves in it."""

from __future__ import annotations

import argparse
from typing import Any

from attnroof.errors import InputError
from attnroof.escaping import escaped
from attnroof.text.render import plural


def results_file(path: str, *, keep: bool = True) -> Any:
    """The JSON-lines results file at ``path``, with the measurements already in it loaded
    (``keep=False``: emptied)."""
    from attnroof.measure.records import ResultsFile

    try:
        return ResultsFile(path, resume=keep)
    except OSError as e:
        raise InputError(f"-o {path!r}: {e.strerror or e}") from None


def same_device(results: Any, label: str, path: str) -> None:
    """Refuse to add measurements of the device ``label`` to a file measured on another one (see
    :mod:`attnroof.measure.reading`: one results file, one device)."""
    if results.device is not None and results.device != label:
        results.close()
        raise InputError(
            f"-o {path!r} holds measurements made on {results.device!r}; this run is on {label!r}: a "
            "results file holds one device's measurements (choose another -o)"
        )


def interrupted(results: Any, path: str) -> str:
    """What an interrupted suite leaves, and how to finish it (the line after "interrupted")."""
    from attnroof import outfile

    if results.stream:
        return f"{plural(len(results.records), 'measurement')} written to {escaped(path)}"
    kept = outfile.measurements_in(path) or "no measurements"  # the file, not memory: it is what counts
    return f"{kept} kept in {escaped(path)} — rerun with --resume to finish"


def suite_file(args: argparse.Namespace) -> Any:
    """The suite's results file: kept (``--resume``), started over (``--force``), or new; a file
    that holds measurements is refused without one of them, and left as it was."""
    from attnroof import outfile

    if args.resume and args.force:
        raise InputError("--resume keeps what -o holds and --force starts it over: choose one")
    held = None if args.resume or args.force else outfile.measurements_in(args.output)
    if held is None:
        results = results_file(args.output, keep=not args.force)
        if args.resume or not results.records:
            return results
        held = plural(len(results.records), "measurement")
        results.close()
    raise InputError(
        f"-o {args.output!r} already holds {held}: pass --resume to continue it, --force to start "
        "it over, or name another file (nothing measured is overwritten)"
    )
