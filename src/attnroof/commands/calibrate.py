"""calibrate: fit a calibration to measured results files and print the fit."""

from __future__ import annotations

import argparse
import sys

from attnroof.commands._common import Command, add_force_arg, add_json_arg, emit_json, path_arg


def _setup(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "results",
        nargs="+",
        type=path_arg,
        metavar="RESULTS.jsonl",
        help="results files (attnroof measure -o)",
    )
    p.add_argument("-o", "--output", type=path_arg, metavar="FILE", help="write the calibration (JSON) here")
    p.add_argument(
        "--device",
        default=None,
        help="catalog device the results were measured on (default: the one named in the results)",
    )
    add_force_arg(p)
    add_json_arg(p)


def _run(args: argparse.Namespace) -> int:
    from attnroof import calibration
    from attnroof.devices import get_device
    from attnroof.measure.reading import read_results
    from attnroof.text.calibration import fit_text

    if args.output:  # before any work: a path that cannot or must not be written
        _check_output(args.output, args.force)
    records = []
    for path in args.results:
        held = read_results(path)  # each measurement once, the fastest kept; one device
        if held.note:
            print(f"attnroof: note: {held.note}", file=sys.stderr)
        records += held.records
    device = get_device(args.device) if args.device else None
    cals = calibration.calibrate(
        records, device=device, source=f"the results in {', '.join(map(repr, args.results))}"
    )
    if args.output:
        calibration.write(args.output, cals)
    if args.json:
        emit_json({**calibration.to_json(cals), "output": args.output})
    else:
        print(fit_text(cals, args.output))
    return 0


CALIBRATION_FORMAT = '"format": "attnroof-calibration/'
"""How a calibration file begins: one of these may be replaced without --force."""


def _check_output(path: str, force: bool) -> None:
    """Refuse to replace measurements or any other file that is not an earlier calibration."""
    from attnroof import outfile

    outfile.target(path)
    hint = " (pass --force to overwrite it, or choose another -o)"
    outfile.check_overwrite(path, force=force, foreign=False, hint=hint, own_marker=CALIBRATION_FORMAT)


COMMANDS = (Command("calibrate", _setup, _run),)
