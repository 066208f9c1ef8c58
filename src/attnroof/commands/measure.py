"""measure: real kernels on the local torch device, placed on the roofline of its measured
ceilings (and of a catalog device with ``--device``). torch is imported inside the handlers only.

    attnroof measure ceilings [--quick] [--device h200] [-o ceilings.json]
    attnroof measure attention -s 4096 -d 128 [--causal] [--ceilings ceilings.json]
    attnroof measure decode -s 32768 -d 128 --heads 32 --group 8
    attnroof measure linear -n 16 -k 8192 -m 8192
    attnroof measure suite [--quick] [-o results.jsonl] [--resume] [--ncu]
    attnroof measure collectives [--ops all-reduce] [--sizes 1K..256M] [--world N] [--device h100]
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from attnroof.commands import _measure_flags as flags
from attnroof.commands._common import (
    Command,
    emit_json,
    require,
    resolve_heads,
)
from attnroof.commands._results import interrupted, results_file, same_device, suite_file
from attnroof.devices import Device, get_device
from attnroof.errors import InputError, read_json
from attnroof.escaping import escaped
from attnroof.text.render import plural

# ---------------------------------------------------------------- shared steps


def _catalog(args: argparse.Namespace) -> Device | None:
    return get_device(args.device) if args.device else None


def _impls(args: argparse.Namespace, kind: str) -> list[str] | None:
    from attnroof.measure.kernels import IMPLS

    if not getattr(args, "impl", None):
        return None
    known = {i for k in ((kind,) if kind != "suite" else IMPLS) for i in IMPLS[k]}
    wanted = [x.strip() for x in args.impl.split(",") if x.strip()]
    for x in wanted:
        require(x in known, f"--impl {x!r}: known implementations: {', '.join(sorted(known))}")
    return wanted


def _validate(args: argparse.Namespace) -> tuple[str, Device | None, Device | None]:
    """dtype, catalog device and ceilings device: checked before torch is imported."""
    from attnroof.measure.kernels import check_dtype

    dt = check_dtype(args.dtype)
    catalog = _catalog(args)
    ceilings = None
    if getattr(args, "ceilings", None):
        require(
            args.ceilings.endswith(".json"), f"--ceilings {args.ceilings!r}: expected a .json ceilings file"
        )
        ceilings = get_device(args.ceilings)
    return dt, catalog, ceilings


def _saved_ceilings(path: str) -> list[dict[str, Any]]:
    """The ceiling records kept in a ceilings file (none if it has none), each validated as a
    results record is (they are copied into the results file)."""
    from attnroof.measure.schema import ceiling_records

    return ceiling_records(read_json(path, "ceilings file", InputError), path)


def _torch_device(args: argparse.Namespace) -> Any:
    from attnroof.measure.env import local_device

    return local_device("cpu" if args.cpu else "auto")


def _ceilings_for(dev: Any, dt: str, given: Device | None) -> Device:
    if given is not None:
        return given
    from attnroof.measure.ceilings import measure_ceilings, measured_device

    print("measuring ceilings (quick); pass --ceilings FILE.json to reuse saved ones", file=sys.stderr)
    return measured_device(measure_ceilings(dev, quick=True, dtypes=[dt]), dev)


def _ncu(args: argparse.Namespace, dev: Any, records: list[dict[str, Any]], cases: list[Any]) -> str:
    """Attach ncu bytes to ``records`` when asked and possible; one line saying what happened."""
    if not getattr(args, "ncu", False):
        return ""
    from attnroof.measure import ncu

    if not dev.is_cuda:
        return "ncu: no CUDA device here; DRAM bytes not measured"
    if ncu.ncu_path() is None:
        return "ncu: not on PATH; DRAM bytes not measured"
    ok = {r["key"] for r in records if r["status"] == "ok"}
    try:
        results = ncu.profile([c for c in cases if c.key in ok])
    except ncu.NcuError as e:
        return f"ncu: {e}; DRAM bytes not measured"
    ncu.attach(records, results)
    return f"ncu: DRAM bytes of {plural(len(results), 'case')} read from hardware counters"


def _output(
    args: argparse.Namespace,
    dev: Any,
    measured: Device,
    catalog: Device | None,
    records: list[dict[str, Any]],
    notes: list[str],
    extra: dict[str, Any] | None = None,
) -> int:
    from attnroof.measure.records import impossible
    from attnroof.text.measure import roof_check, summary

    check = roof_check(records)
    if args.json:
        emit_json(
            {
                "torch_device": dev.label,
                "measured_device": measured.to_json(),
                "catalog_device": catalog.name if catalog else None,
                **(extra or {}),
                "records": records,
                "impossible": [r["key"] for r in impossible(records)],
                "roof_check": check,
                "notes": [n for n in notes if n],
            }
        )
        return 0
    print(f"on {dev.label}; roof: {measured.name}" + (f"; catalog: {catalog.name}" if catalog else ""))
    print()
    print(summary(records))
    print()
    for n in notes:
        if n:
            print(n)
    print(check)
    return 0


# ---------------------------------------------------------------- handlers


_FORCE_HINT = " (pass --force to overwrite it, or choose another -o)"


def _ceilings_run(args: argparse.Namespace) -> int:
    from attnroof import outfile
    from attnroof.measure.kernels import check_dtype

    check_dtype(args.dtype)
    catalog = _catalog(args)
    if args.output:  # before anything is measured: a path that cannot or must not be written
        outfile.target(args.output)
        outfile.check_overwrite(args.output, force=args.force, foreign=False, hint=_FORCE_HINT)
    dev = _torch_device(args)
    from attnroof.measure.ceilings import ceiling_rows, measure_ceilings, measured_device, write_ceilings

    records = measure_ceilings(dev, quick=args.quick)
    device = measured_device(records, dev)
    rows = ceiling_rows(records, catalog)
    if args.output:
        write_ceilings(args.output, device, records)
    if args.json:
        emit_json(
            {
                "torch_device": dev.label,
                "device": device.to_json(),
                "catalog_device": catalog.name if catalog else None,
                "ceilings": rows,
                "records": records,
                "output": args.output,
            }
        )
        return 0
    from attnroof.text.measure import ceilings_table

    print(f"ceilings of {dev.label}" + (f", beside {catalog.name}" if catalog else ""), "", sep="\n")
    print(ceilings_table(rows), "", sep="\n")
    print(f"roof: {device.notes}; peaks per dtype = best matmul")
    if args.output:
        out = escaped(args.output)
        print(f"written to {out} (use it as --ceilings {out} or --device {out})")
    return 0


def _kernels_run(args: argparse.Namespace, kind: str) -> int:
    from attnroof.measure import kernels as K

    dt, catalog, given = _validate(args)
    impls = _impls(args, kind)
    if kind == "attention":
        cases = [
            K.attention_case(i, args.s, args.d, batch=args.batch, heads=args.heads, causal=args.causal, dt=dt)
            for i in impls or K.IMPLS[kind]
        ]
    elif kind == "decode":
        resolve_heads(args)
        cases = [
            K.decode_case(i, args.s, args.d, batch=args.batch, heads=args.heads, group=args.group, dt=dt)
            for i in impls or K.IMPLS[kind]
        ]
    else:
        cases = [K.linear_case(args.n, args.k, args.m, dt=dt)]
    results = results_file(args.output) if args.output else None  # a bad -o fails before any work
    try:
        return _measure_into(args, results, cases, dt, catalog, given)
    finally:
        if results is not None:
            results.close()


def _measure_into(
    args: argparse.Namespace,
    results: Any,
    cases: list[Any],
    dt: str,
    catalog: Device | None,
    given: Device | None,
) -> int:
    """Measure ``cases`` (those ``results`` holds already are kept, not measured again) and print."""
    dev = _torch_device(args)
    if results is not None:
        same_device(results, dev.label, args.output)
    held = {r["key"]: r for r in results.records if r.get("status") != "error"} if results else {}
    notes = []
    have = held.keys() & {c.key for c in cases}
    if have:
        asked = plural(len(cases), "measurement")
        notes.append(
            f"{args.output} already holds {len(have)} of the {asked} asked for: kept, not measured again"
        )
    measured = _ceilings_for(dev, dt, given)
    from attnroof.measure.runner import measure_case

    records = []
    for c in cases:
        if c.key in held:
            records.append(held[c.key])
            continue
        rec = measure_case(c, dev, measured=measured, catalog=catalog)
        if results is not None:
            results.append(rec)  # on disk before the next case starts
        records.append(rec)
    notes.append(_ncu(args, dev, records, cases))
    if results is not None and any(r.get("ncu_bytes") is not None for r in records):
        results.rewrite(results.records)  # the same records, now with their DRAM bytes
    return _output(args, dev, measured, catalog, records, notes)


def _suite_run(args: argparse.Namespace) -> int:
    dt, catalog, given = _validate(args)
    impls = _impls(args, "suite")
    results = suite_file(args)  # a file that must not be touched is refused before torch loads
    try:
        return _suite_into(args, results, dt, catalog, given, impls)
    finally:
        results.close()


def _suite_into(
    args: argparse.Namespace,
    results: Any,
    dt: str,
    catalog: Device | None,
    given: Device | None,
    impls: list[str] | None,
) -> int:
    dev = _torch_device(args)
    same_device(results, dev.label, args.output)
    from attnroof.measure.suite import plan_cases, run_suite
    from attnroof.text.measure import case_label

    cases = plan_cases(dev.device.type, quick=args.quick, dt=dt, impls=impls)
    skipped = len(results.done & {c.key for c in cases})
    if skipped:
        print(f"resuming: {skipped} cases already in {args.output}", file=sys.stderr)

    def progress(rec: dict[str, Any]) -> None:
        print(f"  {rec['status']:5} {case_label(rec)} {rec['impl']}", file=sys.stderr, flush=True)

    try:
        records, measured = run_suite(
            results,
            dev,
            quick=args.quick,
            dt=dt,
            catalog=catalog,
            ceilings=given,
            ceiling_records=_saved_ceilings(args.ceilings) if args.ceilings else (),
            cases=cases,
            progress=None if args.json else progress,
        )
    except KeyboardInterrupt:
        raise KeyboardInterrupt(interrupted(results, args.output)) from None
    note = _ncu(args, dev, records, cases)
    if note and any(r.get("ncu_bytes") is not None for r in records):
        results.rewrite(records)
    notes = [note, f"results: {args.output} ({plural(len(records), 'record')})"]
    return _output(args, dev, measured, catalog, records, notes, {"results": args.output})


def _collectives_run(args: argparse.Namespace) -> int:
    from attnroof.commands import _collectives  # its own module: loaded only for this subcommand

    return _collectives.run(args)


# ---------------------------------------------------------------- the command

SUBCOMMANDS = (
    (
        "ceilings",
        "bandwidth (read, write, copy) and best matmul rate per dtype",
        flags.ceilings_setup,
        _ceilings_run,
    ),
    (
        "attention",
        "time eager attention and every SDPA backend",
        flags.attention_setup,
        lambda a: _kernels_run(a, "attention"),
    ),
    (
        "decode",
        "time one-token decode against a KV cache, grouped-query",
        flags.decode_setup,
        lambda a: _kernels_run(a, "decode"),
    ),
    ("linear", "time a linear layer over n tokens", flags.linear_setup, lambda a: _kernels_run(a, "linear")),
    ("suite", "the whole campaign into a JSON-lines file, with a summary", flags.suite_setup, _suite_run),
    (
        "collectives",
        "time torch.distributed collectives over message sizes: nccl-tests' algbw and busbw",
        flags.collectives_setup,
        _collectives_run,
    ),
)


def _setup(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="measure_command", metavar="WHAT", parser_class=type(p))
    for name, help_text, setup, handler in SUBCOMMANDS:
        sp = sub.add_parser(name, help=help_text, description=help_text)
        setup(sp)
        sp.set_defaults(measure_handler=handler)


def _run(args: argparse.Namespace) -> int:
    handler = getattr(args, "measure_handler", None)
    if handler is None:
        raise InputError("measure what? one of: " + ", ".join(s[0] for s in SUBCOMMANDS))
    return int(handler(args) or 0)


COMMANDS = (Command("measure", _setup, _run),)
