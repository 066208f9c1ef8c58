"""gpu_check's phases, one Python process each (benchmarks/gpu_check.sh runs them under one
budget): torch starts once a phase, not once a step (~5 s each, 15 steps before).

    python benchmarks/gpu_check.py measure WORK --deadline EPOCH_S   # ceilings, kernels, timers, suite
    python benchmarks/gpu_check.py ncu WORK --deadline EPOCH_S       # one ncu launch, every ncu case
    python benchmarks/gpu_check.py report WORK --deadline EPOCH_S    # one fit: forecasts, accuracy, verdict

Each step runs attnroof's own code in this process, its output in WORK/<step>.log, and says one
line in the summary and on stdout as soon as it ends: "ok", "ok, N skip" (cases that cannot run
here, each with its reason in the records), ERRORS when a case is wrong or errored or ncu measured
nothing (or only some cases), FAILED, "skipped" (a CUDA step without CUDA) or NOT RUN (the
deadline would pass first), each with its reason. A step is not started when the deadline would
pass before it could end; the names of the steps not ok go to WORK/failed.txt, every step's
status to WORK/steps.tsv (the verdict says from it which parts were checked, and why not the
others). The ceilings are measured once (the ceilings step) and every later step reads them.

Without CUDA the same flow runs on the CPU with CPU-sized shapes; the CUDA-only steps (the
timers, ncu) are skipped, each with the reason.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.util
import json
import re
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

STEP_SHAPES = {
    "cuda": {
        "attention": ["-s", "1024", "-d", "128", "--heads", "8", "--causal"],
        "decode": ["-s", "4096", "-d", "128", "--batch", "4", "--heads", "32", "--group", "4"],
        "linear": ["-n", "1024", "-k", "4096", "-m", "4096"],
    },
    "cpu": {  # two loaded cores: fp16 matmuls run at ~0.5 GFLOP/s there, so small shapes
        "attention": ["-s", "128", "-d", "64", "--heads", "2", "--causal"],
        "decode": ["-s", "1024", "-d", "64", "--heads", "4", "--group", "2"],
        "linear": ["-n", "64", "-k", "256", "-m", "256"],
    },
}
"""Each implementation × dtype once: the shapes per device type."""
NCU_LINEAR = {"n": 16, "k": 256, "m": 256}
NCU_DECODE = {"s": 8192, "d": 128, "batch": 4, "heads": 32, "group": 4}
NCU_PREFILL = {"s": 2048, "d": 128, "heads": 16}
"""The cases under ncu, all in ONE launch (ncu, Python, torch and CUDA start once under the
profiler): the small linear first (does ncu read counters here? it costs least), then decode
and prefill taken in turn, so that a launch cut short keeps some of each; every attention
implementation has its DRAM bytes beside the model's."""
NCU_MIN_S = 60
"""An ncu launch is not started with less time than this for it: ncu, Python, torch and CUDA
start under the profiler before the first case (a shorter limit cannot finish: the step says
so instead)."""
NCU_TIMING_S = 20
"""Time the ncu step gives the timing of its cases (their records; ncu profiles those that ran)."""
NCU_MARGIN_S = 10
"""Kept after ncu's limit, inside the phase: the records written, the lines said."""
NCU_NEED_S = NCU_TIMING_S + NCU_MIN_S + NCU_MARGIN_S
"""The ncu step is not started with less than this left (gpu_check.sh keeps the phase more)."""

NEED_S = {"cuda": 20.0, "cpu": 5.0}
"""A step is not started with less time than this left before the deadline."""

BYTES_BAND = (0.8, 1.25)
"""ncu's DRAM bytes over the model's bytes counted as agreeing: ncu flushes L2 before every
kernel (--cache-control all), so a multi-kernel case reads a little more than the model says."""
EFFICIENCY_MAX = 1.05
"""A case faster than its roof by more than this says the roof or the byte count is wrong."""
FORECAST_MEDIAN_MAX = 0.15
"""Held-out forecasts hold when their median error (|forecast / measured − 1|) is under this."""


# ---------------------------------------------------------------- steps


class Check:
    """The summary, the deadline and each step's status, for one phase."""

    def __init__(self, work: Path, deadline: float, no_cuda: str = "", summary: Path | None = None) -> None:
        self.work, self.deadline, self.no_cuda = work, deadline, no_cuda
        self.cuda = not no_cuda
        self.summary = summary or work / "summary.txt"
        self.took: dict[str, float] = {}
        """The longest step of each kind so far (s; the kind: a name's part before "-", attention
        for attention-fp16): a step is not started with less left than its kind took (the phase's
        limit would kill it mid-way; NOT RUN says so instead)."""

    def say(self, line: str) -> None:
        """A line in the summary (as it goes: a kill keeps it) and on stdout (gpu_check.sh passes
        its own stdout on: the output a remote machine surely gives back is its tail)."""
        with open(self.summary, "a", encoding="utf-8") as f:
            f.write(line + "\n")
        print(line, flush=True)

    def not_ok(self, name: str) -> None:
        with open(self.work / "failed.txt", "a", encoding="utf-8") as f:
            f.write(name + "\n")

    def record(self, name: str, status: str, detail: str = "") -> str:
        """``name``'s status ('ok', 'skip', 'errors', 'failed', 'not run') and why, in steps.tsv."""
        with open(self.work / "steps.tsv", "a", encoding="utf-8") as f:
            f.write(f"{name}\t{status}\t{' '.join(detail.split())}\n")
        return status

    def not_run(self, name: str, why: str) -> str:
        self.not_ok(name)
        self.say(f"NOT RUN {name}: {why}")
        return self.record(name, "not run", why)

    def left(self) -> float:
        return self.deadline - time.time()

    def step(
        self,
        name: str,
        run: Callable[[], int | None],
        *,
        records: Path | None = None,
        cuda_only: bool = False,
        need: float | None = None,
    ) -> str:
        """Run one step; its summary line; 'ok', 'skip', 'errors', 'failed' or 'not run'."""
        if cuda_only and not self.cuda:
            self.say(f"skipped {name}: {self.no_cuda}")
            return self.record(name, "skip", self.no_cuda)
        need = NEED_S["cuda" if self.cuda else "cpu"] if need is None else need
        if self.left() < need:
            return self.not_run(
                name, f"{max(0, self.left()):.0f} s left before the deadline, under {need:.0f} s"
            )
        kind = name.split("-")[0]
        if self.left() < self.took.get(kind, 0.0):
            return self.not_run(
                name,
                f"{max(0, self.left()):.0f} s left before the deadline, under the {self.took[kind]:.0f} s "
                f"{'an' if kind[:1] in 'aeiou' else 'a'} {kind} step took",
            )
        log = self.work / f"{name}.log"
        t0 = time.monotonic()
        with (
            open(log, "w", encoding="utf-8") as f,
            contextlib.redirect_stdout(f),
            contextlib.redirect_stderr(f),
        ):
            try:
                rc = int(run() or 0)
            except SystemExit as e:  # argparse's exit on a bad flag
                rc = e.code if isinstance(e.code, int) else 2
            except Exception:
                traceback.print_exc()
                rc = 1
        took = time.monotonic() - t0
        self.took[kind] = max(self.took.get(kind, 0.0), took)
        _give_back_memory()  # the next step's memory limit is read from what the GPU has free
        text = log.read_text(encoding="utf-8", errors="replace")
        if rc != 0:
            self.not_ok(name)
            lines = text.strip().splitlines() or ["no output"]
            first = next((ln for ln in lines if re.search(r"error|Error", ln)), None)
            # a traceback's last line is the exception; otherwise the first line that says error
            why = lines[-1] if any(ln.startswith("Traceback") for ln in lines) else first or lines[-1]
            self.say(f"FAILED  {name} (exit {rc}, {took:.0f} s): {why}")
            return self.record(name, "failed", why)
        counts = statuses(text + (records.read_text() if records and records.exists() else ""))
        bad = {k: v for k, v in counts.items() if k != "skip"}
        ncu = NCU_SHORT.search(text)
        said = ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
        if bad or ncu:
            self.not_ok(name)
            self.say(f"ERRORS  {name} ({took:.0f} s): {said or 'all ok'}{'; ' + ncu.group(0) if ncu else ''}")
            return self.record(name, "errors", ncu.group(0) if ncu else said)
        self.say(f"ok      {name} ({took:.0f} s){', ' + said if said else ''}")
        return self.record(name, "ok", said)


NCU_SHORT = re.compile(r"ncu: .*DRAM bytes (not measured|for \d+ of \d+ cases? only).*")
"""A step's line that says ncu measured nothing, or only some of its cases: ERRORS."""


def read_steps(work: Path) -> dict[str, tuple[str, str]]:
    """Each step's last status and why, from WORK/steps.tsv."""
    steps: dict[str, tuple[str, str]] = {}
    path = work / "steps.tsv"
    for line in path.read_text(encoding="utf-8").splitlines() if path.exists() else []:
        name, status, detail = [*line.split("\t"), "", ""][:3]
        steps[name] = (status, detail)
    return steps


def _give_back_memory() -> None:
    """What a step's tensors held goes back to the GPU (torch's caching allocator would keep it
    reserved, in this one process for every step)."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        gc.collect()
        torch.cuda.empty_cache()


def statuses(text: str) -> dict[str, int]:
    """Every status but ok in ``text`` (JSON lines, or the pretty JSON --json prints), counted."""
    counts: dict[str, int] = {}
    for s in re.findall(r'"status": *"([a-z]+)"', text):
        if s != "ok":
            counts[s] = counts.get(s, 0) + 1
    return counts


def cli(*argv: str) -> Callable[[], int]:
    def run() -> int:
        from attnroof.cli import main

        return main(list(argv))

    return run


def _device_flags() -> list[str]:
    """``--device h200`` where the catalog has it: the measurements are placed on its roof too."""
    try:
        from attnroof.devices import get_device

        get_device("h200")
        return ["--device", "h200"]
    except Exception:
        return []


# ---------------------------------------------------------------- phases


def phase_measure(check: Check) -> None:
    """The ceilings, then the quick suite (the records the report fits and judges: first, so that
    a phase cut short still leaves them), then each implementation × dtype and the timers."""
    w = check.work
    dev = _device_flags()
    ceilings = w / "ceilings.json"
    check.step("ceilings", cli("measure", "ceilings", "--quick", *dev, "-o", str(ceilings)), records=ceilings)
    ceil = ["--ceilings", str(ceilings)] if ceilings.exists() and ceilings.stat().st_size else []
    results = w / "results.jsonl"
    check.step(
        "suite",
        cli("measure", "suite", "--quick", *ceil, *dev, "-o", str(results), "--resume"),
        records=results,
    )
    log = w / "suite.log"
    lines = log.read_text(errors="replace").strip().splitlines() if log.exists() else []
    for line in [ln for ln in lines if ln.strip()][-2:]:
        check.say(f"  suite: {line}")
    shapes = STEP_SHAPES["cuda" if check.cuda else "cpu"]
    for dt in ("bf16", "fp16", "fp32"):
        for kind in ("attention", "decode", "linear"):
            check.step(f"{kind}-{dt}", cli("measure", kind, *shapes[kind], "--dtype", dt, *ceil, "--json"))
    check.step("timers", _timers, cuda_only=True)


def _timers() -> int:
    """do_bench (triton; CUDA events when it cannot build, said once) and plain CUDA events."""
    import torch

    from attnroof.measure.env import local_device
    from attnroof.measure.timing import QUICK, time_kernel

    dev = local_device("cuda")
    x = torch.randn(1 << 24, device="cuda")
    print(time_kernel(lambda: x.sum(), dev, QUICK), time_kernel(lambda: x.sum(), dev, QUICK, flush=False))
    return 0


def ncu_cases(dt: str = "bf16") -> list[Any]:
    """The cases of the one ncu launch, in order: linear, then decode and prefill in turn."""
    from itertools import zip_longest

    from attnroof.measure.kernels import IMPLS, attention_case, decode_case, linear_case

    decode = [decode_case(i, **NCU_DECODE, dt=dt) for i in IMPLS["decode"]]
    prefill = [attention_case(i, **NCU_PREFILL, dt=dt) for i in IMPLS["attention"]]
    turns = [c for pair in zip_longest(decode, prefill) for c in pair if c is not None]
    return [linear_case(**NCU_LINEAR, dt=dt), *turns]


def phase_ncu(check: Check) -> None:
    check.step("ncu", lambda: _ncu(check), cuda_only=True, need=NCU_NEED_S)
    log = check.work / "ncu.log"
    for line in log.read_text(errors="replace").splitlines() if log.exists() else []:
        if line.startswith("ncu: "):
            check.say(f"  {line}")


def _ncu(check: Check) -> int:
    """Time every ncu case (ncu profiles those that ran), then ONE ncu launch over them, with the
    phase's time left less a margin as its limit (none started when that is under NCU_MIN_S);
    the records, with the bytes of the cases ncu finished, in WORK/ncu.jsonl."""
    from attnroof.measure import ncu
    from attnroof.measure.records import ResultsFile

    cases = ncu_cases()
    records = time_cases(check.work, cases)
    out = ResultsFile(check.work / "ncu.jsonl")
    try:
        for rec in records:
            out.append(rec)  # the timed records, kept even if ncu never ends
        ok = [c for c, r in zip(cases, records, strict=True) if r["status"] == "ok"]
        limit = check.left() - NCU_MARGIN_S
        print(json.dumps({"records": records}, indent=1, default=str))
        if ncu.ncu_path() is None:
            print("ncu: not on PATH; DRAM bytes not measured")
            return 0
        if not ok:
            print(f"ncu: none of the {len(cases)} cases ran; DRAM bytes not measured")
            return 0
        if limit < NCU_MIN_S:
            print(
                f"ncu: not started: {max(0.0, limit):.0f} s left for it, and one launch needs {NCU_MIN_S} s; "
                "DRAM bytes not measured"
            )
            return 0
        said: list[str] = []
        try:
            results = ncu.profile(ok, timeout_s=limit, say=said.append)
        except ncu.NcuError as e:
            print(f"ncu: {e}; DRAM bytes not measured")
            return 0
        ncu.attach(records, results)
        out.rewrite(records)
        for line in said:
            print(f"ncu: {line}")
        n = len(ok)
        if len(results) < n:
            print(
                f"ncu: DRAM bytes for {len(results)} of {n} case{'s' if n > 1 else ''} only (one launch, {limit:.0f} s)"
            )
        else:
            print(f"ncu: DRAM bytes of all {n} cases read from hardware counters (one launch, {limit:.0f} s)")
        return 0
    finally:
        out.close()


def time_cases(work: Path, cases: Sequence[Any]) -> list[dict[str, Any]]:
    """Each case timed on the GPU and placed on the measured ceilings (and the catalog's H200)."""
    from attnroof.devices import get_device
    from attnroof.measure.env import local_device
    from attnroof.measure.runner import measure_case
    from attnroof.measure.timing import QUICK

    ceilings = work / "ceilings.json"
    measured = get_device(str(ceilings)) if ceilings.exists() and ceilings.stat().st_size else None
    catalog = get_device(_device_flags()[1]) if _device_flags() else None
    dev = local_device("cuda")
    try:
        return [measure_case(c, dev, measured=measured, catalog=catalog, budget=QUICK) for c in cases]
    finally:
        dev.drop_inputs()  # the GPU's memory is ncu's child's now
        dev.free_memory()


def phase_report(check: Check) -> None:
    w = check.work
    results = w / "results.jsonl"
    if not results.exists():
        check.not_run("calibrate", "no results.jsonl (the suite did not run): nothing to calibrate")
    elif check.step("calibrate", lambda: _calibrate(w)) == "ok":
        for name in ("accuracy.txt", "forecast.txt"):
            lines = (w / name).read_text(errors="replace").splitlines() if (w / name).exists() else []
            for line in lines if name == "accuracy.txt" else lines[-1:]:
                check.say(f"  {name.split('.')[0]}: {line}")
    recs = _jsonl(results) + _jsonl(w / "ncu.jsonl")
    lines = verdict(recs, _jsonl(w / "forecast.jsonl"), read_steps(w))
    (w / "verdict.txt").write_text("\n".join(lines) + "\n")
    for line in lines:
        check.say(line)


def _script(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]


def _calibrate(w: Path) -> int:
    """ONE fit, on two shapes in three: the third forecast and compared with what was measured
    (forecast.txt), and the fit's own leave-one-shape-out table (accuracy.txt, the table
    benchmarks/calibration.py prints), both from that fit."""
    from attnroof import calibration
    from attnroof.calibration.fit import summary
    from attnroof.calibration.forecast import forecast

    recs = _jsonl(w / "results.jsonl")
    ok = [
        r
        for r in recs
        if r["status"] == "ok" and r["kind"] in ("attention", "decode", "linear") and r["impl"] != "sdpa-math"
    ]
    held = [r for i, r in enumerate(ok) if i % 3 == 1]
    train = [r for r in recs if r not in held]
    cals = calibration.calibrate(train)
    calibration.write(w / "cal.json", cals)
    errs, lines, rows, inside = [], [], [], 0
    for r in held:
        cal = next(c for c in cals if c.dtype == r["dtype"])
        try:
            (fc,) = forecast(cal, r["kind"], r["shape"], r["impl"])
        except Exception as e:
            lines.append(f"{r['key']}: no forecast ({e})")
            continue
        err = fc.time_s / r["time_s"] - 1
        errs.append(err)
        inside += fc.low_s <= r["time_s"] <= fc.high_s
        rows.append({"key": r["key"], "kind": r["kind"], "impl": r["impl"], "error": err})
        lines.append(f"{r['key']}: measured {r['time_s']:.3e} s forecast {fc.time_s:.3e} s ({err:+.1%})")
    s = summary(errs)
    lines.append(
        f"held-out forecasts: {s['n']}, |error| median {_pct(s['median'])}, p90 {_pct(s['p90'])}, "
        f"{inside} inside their band"
    )
    (w / "forecast.txt").write_text("\n".join(lines) + "\n")
    (w / "forecast.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (w / "accuracy.txt").write_text("\n".join(_accuracy(cals)) + "\n")
    print(lines[-1])
    return 0


def _accuracy(cals: Sequence[Any]) -> list[str]:
    """benchmarks/calibration.py's table (leave one shape out) of these calibrations."""
    rows = _script("calibration").rows
    headers = ["kind", "impl", "shapes", "held-out median", "held-out p90", "raw bound median"]
    out = []
    for cal in cals:
        out.append(f"{cal.catalog_device or cal.device} {cal.dtype} (the fit the forecasts come from)")
        table = rows(cal)
        widths = [max(len(h), *(len(r[i]) for r in table)) for i, h in enumerate(headers)]
        out += [
            "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in [headers, *table]
        ]
    return out


# ---------------------------------------------------------------- the verdict


def verdict(
    records: Iterable[Mapping[str, Any]],
    forecasts: Iterable[Mapping[str, Any]],
    steps: Mapping[str, tuple[str, str]] | None = None,
) -> list[str]:
    """One screen: does the model hold? Per implementation, the DRAM bytes ncu counted over the
    model's (median), the efficiency (bound / measured time: median and highest) and the
    held-out forecast error (median |error|), as percentages; then one line that says yes or no,
    which of the three parts it checked (bytes against ncu's, no case above its roof, the
    held-out forecasts), and why each other part was not checked (from ``steps``: each step's
    status and why, :func:`read_steps`). YES alone means all three were checked and held."""
    steps = steps or {}
    by: dict[tuple[str, str], dict[str, list[float]]] = {}
    for r in records:
        if r.get("kind") not in ("attention", "decode", "linear") or r.get("status") != "ok":
            continue
        row = by.setdefault((r["kind"], r["impl"]), {"eff": [], "bytes": [], "err": []})
        if r.get("ncu_ratio") is not None:
            row["bytes"].append(float(r["ncu_ratio"]))
        if r.get("efficiency") is not None:
            row["eff"].append(float(r["efficiency"]))
    for f in forecasts:
        by.setdefault((f["kind"], f["impl"]), {"eff": [], "bytes": [], "err": []})["err"].append(
            abs(f["error"])
        )
    head = f"{'kind':<10}{'impl':<16}{'bytes ncu/model':>16}{'efficiency':>20}{'forecast error':>16}"
    lines = ["the model against the measurements (median per implementation):", head]
    wrong_bytes, above = [], []
    errors: list[float] = []
    n_bytes = n_eff = 0
    for (kind, impl), row in sorted(by.items()):
        b = statistics.median(row["bytes"]) if row["bytes"] else None
        e = statistics.median(row["eff"]) if row["eff"] else None
        top = max(row["eff"]) if row["eff"] else None
        f = statistics.median(row["err"]) if row["err"] else None
        errors += row["err"]
        n_bytes += len(row["bytes"])
        n_eff += len(row["eff"])
        if b is not None and not BYTES_BAND[0] <= b <= BYTES_BAND[1]:
            wrong_bytes.append(f"{impl} {_pct(b)}")
        if top is not None and top > EFFICIENCY_MAX:
            above.append(f"{impl} {_pct(top)}")
        eff = "—" if e is None else f"{_pct(e)} (max {_pct(top)})"
        lines.append(f"{kind:<10}{impl:<16}{_pct(b):>16}{eff:>20}{_pct(f):>16}")
    pooled = statistics.median(errors) if errors else None
    lo, hi = BYTES_BAND
    held, failed, unchecked = [], [], []
    if not n_bytes:
        unchecked.append(("bytes", _why_not(steps, "ncu", "no case has ncu's bytes")))
    elif wrong_bytes:
        failed.append(f"ncu's bytes outside {_pct(lo)}–{_pct(hi)} of the model's: {', '.join(wrong_bytes)}")
    else:
        held.append(("bytes", f"bytes within {_pct(lo)}–{_pct(hi)} of ncu's ({_cases(n_bytes)})"))
    if not n_eff:
        unchecked.append(("the roof", "no case was placed on a measured roof"))
    elif above:
        failed.append(f"faster than the roof (over {_pct(EFFICIENCY_MAX)}): {', '.join(above)}")
    else:
        held.append(("the roof", f"no case above its roof (≤ {_pct(EFFICIENCY_MAX)}, {_cases(n_eff)})"))
    if pooled is None:
        unchecked.append(("forecasts", _why_not(steps, "calibrate", "no held-out forecast")))
    elif pooled > FORECAST_MEDIAN_MAX:
        failed.append(f"held-out forecast error over {_pct(FORECAST_MEDIAN_MAX)}: median {_pct(pooled)}")
    else:
        held.append(("forecasts", f"held-out forecasts median {_pct(pooled)} ({len(errors)})"))
    not_checked = [f"{part} NOT checked ({why})" for part, why in unchecked]
    if not by:
        lines.append("the model holds: NOT KNOWN (no case measured by the suite or the ncu step)")
    elif failed:
        lines.append("the model holds: NO — " + "; ".join(failed + not_checked))
    elif not unchecked:
        lines.append("the model holds: YES — " + "; ".join(text for _, text in held))
    else:
        on = " and ".join(part for part, _ in held)
        lines.append(
            f"the model holds: YES on {on} only; {'; '.join(not_checked)} — " + "; ".join(t for _, t in held)
        )
    return lines


def _why_not(steps: Mapping[str, tuple[str, str]], name: str, ok_but: str) -> str:
    """Why the step ``name`` gave nothing to check, from its status."""
    status, detail = steps.get(name, ("", ""))
    said = {"skip": "skipped", "not run": "NOT RUN", "failed": "FAILED", "errors": "ERRORS"}
    if status in said:
        return f"{name} {said[status]}{': ' + detail if detail else ''}"
    if status == "ok":
        return ok_but
    return f"the {name} step did not end (its phase was cut short, or never ran)"


def _cases(n: int) -> str:
    return f"{n} case" if n == 1 else f"{n} cases"


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.0f}%"


# ---------------------------------------------------------------- main


PHASES = {"measure": phase_measure, "ncu": phase_ncu, "report": phase_report}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("phase", choices=sorted(PHASES))
    ap.add_argument("work", type=Path)
    ap.add_argument(
        "--deadline", type=float, default=None, help="seconds since the epoch; default: no deadline"
    )
    ap.add_argument(
        "--summary", type=Path, default=None, help="the summary to add lines to (default WORK/summary.txt)"
    )
    ap.add_argument(
        "--no-cuda", default="", metavar="WHY", help="no CUDA here, and why: the CUDA-only steps are skipped"
    )
    args = ap.parse_args(argv)
    deadline = args.deadline if args.deadline is not None else float("inf")
    PHASES[args.phase](Check(args.work, deadline, args.no_cuda, args.summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
