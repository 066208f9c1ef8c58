"""gpu_check's phases, one Python process each (benchmarks/gpu_check.sh runs them under its
deadline): torch starts once a phase, not once a step (~5 s each, 15 steps before).

    python benchmarks/gpu_check.py measure WORK --deadline EPOCH_S   # ceilings, kernels, timers, suite
    python benchmarks/gpu_check.py ncu WORK --deadline EPOCH_S       # --ncu, with the ceilings measured
    python benchmarks/gpu_check.py report WORK --deadline EPOCH_S    # calibrate, forecast, the verdict

Each step runs attnroof's own command line in this process (``attnroof.cli.main``), its output
in WORK/<step>.log, and says one line in WORK/summary.txt as soon as it ends: "ok", "ok, N skip"
(cases that cannot run here, each with its reason in the records), or ERRORS when a case is
wrong or errored or ncu measured nothing. A step is not started when the deadline would pass
before it could end; the names of the steps not ok go to WORK/failed.txt. The ceilings are
measured once (the ceilings step) and every later step reads them (--ceilings).

Without CUDA the same flow runs on the CPU with CPU-sized shapes; the CUDA-only steps (the
timers, ncu) are skipped, each with the reason.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.util
import json
import os
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
NCU_SHAPES = {
    "ncu-probe": ["linear", "-n", "16", "-k", "256", "-m", "256"],
    "ncu-suite": ["attention", "-s", "2048", "-d", "128", "--heads", "16"],
    "ncu-decode": ["decode", "-s", "8192", "-d", "128", "--batch", "4", "--heads", "32", "--group", "4"],
}
"""Cases under ncu: the probe (does ncu read counters here?), then prefill and decode, so that every
attention implementation has its DRAM bytes beside the model's."""
NCU_PROBE_MAX_S = 30
"""The probe (one tiny case) is given this at most: a hung probe leaves the suite its time."""
NCU_MARGIN_S = 25
"""ncu's own timeout is the step's time left less this: ncu stops, and the bytes it counted are
read and written, before the phase's limit kills the process."""

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
    """The summary, the deadline and the steps not ok, for one phase."""

    def __init__(self, work: Path, deadline: float, no_cuda: str = "", summary: Path | None = None) -> None:
        self.work, self.deadline, self.no_cuda = work, deadline, no_cuda
        self.cuda = not no_cuda
        self.summary = summary or work / "summary.txt"

    def say(self, line: str) -> None:
        with open(self.summary, "a", encoding="utf-8") as f:  # as it goes: a kill keeps it
            f.write(line + "\n")
        print(line, flush=True)

    def not_ok(self, name: str) -> None:
        with open(self.work / "failed.txt", "a", encoding="utf-8") as f:
            f.write(name + "\n")

    def left(self) -> float:
        return self.deadline - time.time()

    def step(
        self,
        name: str,
        run: Callable[[], int | None],
        *,
        records: Path | None = None,
        cuda_only: bool = False,
    ) -> str:
        """Run one step; its summary line; 'ok', 'skip', 'errors', 'failed' or 'not run'."""
        if cuda_only and not self.cuda:
            self.say(f"skipped {name}: {self.no_cuda}")
            return "skip"
        need = NEED_S["cuda" if self.cuda else "cpu"]
        if self.left() < need:
            self.not_ok(name)
            self.say(
                f"NOT RUN {name}: {max(0, self.left()):.0f} s left before the deadline, under {need:.0f} s"
            )
            return "not run"
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
        _give_back_memory()  # the next step's memory limit is read from what the GPU has free
        text = log.read_text(encoding="utf-8", errors="replace")
        if rc != 0:
            self.not_ok(name)
            first = next((ln for ln in text.splitlines() if re.search(r"error|Error", ln)), None)
            last = (text.strip().splitlines() or ["no output"])[-1]
            self.say(f"FAILED  {name} (exit {rc}, {took:.0f} s): {first or last}")
            return "failed"
        counts = statuses(text + (records.read_text() if records and records.exists() else ""))
        bad = {k: v for k, v in counts.items() if k != "skip"}
        ncu = re.search(r"ncu: .*DRAM bytes not measured", text)
        said = ", ".join(f"{v} {k}" for k, v in sorted(counts.items()))
        if bad or ncu:
            self.not_ok(name)
            self.say(f"ERRORS  {name} ({took:.0f} s): {said or 'all ok'}{'; ' + ncu.group(0) if ncu else ''}")
            return "errors"
        self.say(f"ok      {name} ({took:.0f} s){', ' + said if said else ''}")
        return "ok"


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
    w = check.work
    dev = _device_flags()
    ceilings = w / "ceilings.json"
    check.step("ceilings", cli("measure", "ceilings", "--quick", *dev, "-o", str(ceilings)), records=ceilings)
    ceil = ["--ceilings", str(ceilings)] if ceilings.exists() and ceilings.stat().st_size else []
    shapes = STEP_SHAPES["cuda" if check.cuda else "cpu"]
    for dt in ("bf16", "fp16", "fp32"):
        for kind in ("attention", "decode", "linear"):
            check.step(f"{kind}-{dt}", cli("measure", kind, *shapes[kind], "--dtype", dt, *ceil, "--json"))
    check.step("timers", _timers, cuda_only=True)
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


def _timers() -> int:
    """do_bench (triton; CUDA events when it cannot build, said once) and plain CUDA events."""
    import torch

    from attnroof.measure.env import local_device
    from attnroof.measure.timing import QUICK, time_kernel

    dev = local_device("cuda")
    x = torch.randn(1 << 24, device="cuda")
    print(time_kernel(lambda: x.sum(), dev, QUICK), time_kernel(lambda: x.sum(), dev, QUICK, flush=False))
    return 0


def phase_ncu(check: Check) -> None:
    ceilings = check.work / "ceilings.json"
    ceil = ["--ceilings", str(ceilings)] if ceilings.exists() and ceilings.stat().st_size else []
    out = check.work / "ncu.jsonl"
    for name, argv in NCU_SHAPES.items():
        # ncu's own limit under the time left: its bytes are kept before the phase is killed
        limit = check.left() - NCU_MARGIN_S
        if name == "ncu-probe":
            limit = min(limit, NCU_PROBE_MAX_S)
        os.environ["ATTNROOF_NCU_TIMEOUT_S"] = str(max(10, int(limit)))
        check.step(name, cli("measure", *argv, "--ncu", *ceil, "-o", str(out), "--json"), cuda_only=True)


def phase_report(check: Check) -> None:
    w = check.work
    results = w / "results.jsonl"
    if not results.exists():
        check.say("report: no results.jsonl (the suite did not run): nothing to calibrate")
        return
    check.step("calibrate", lambda: _calibrate(w))
    accuracy = _script("calibration")
    check.step("accuracy", lambda: accuracy.main([str(results)]))
    log = w / "accuracy.log"
    for line in log.read_text(errors="replace").splitlines() if log.exists() else []:
        check.say(f"  accuracy: {line}")
    recs = _jsonl(results) + _jsonl(w / "ncu.jsonl")
    lines = verdict(recs, _jsonl(w / "forecast.jsonl"))
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
    """Calibrate on two shapes in three, forecast the third, compare with what was measured."""
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
    lines.append(f"held-out forecasts: {s['n']}, median {s['median']}, p90 {s['p90']}, inside band {inside}")
    (w / "forecast.txt").write_text("\n".join(lines) + "\n")
    (w / "forecast.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(lines[-1])
    return 0


# ---------------------------------------------------------------- the verdict


def verdict(records: Iterable[Mapping[str, Any]], forecasts: Iterable[Mapping[str, Any]]) -> list[str]:
    """One screen: does the model hold? Per implementation, the DRAM bytes ncu counted over the
    model's (median), the efficiency (bound / measured time: median and highest) and the
    held-out forecast error (median |error|), as percentages; then one line that says yes or no,
    and why."""
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
    wrong_bytes, above, bad_forecast, ncu_seen = [], [], [], False
    errors: list[float] = []
    for (kind, impl), row in sorted(by.items()):
        b = statistics.median(row["bytes"]) if row["bytes"] else None
        e = statistics.median(row["eff"]) if row["eff"] else None
        top = max(row["eff"]) if row["eff"] else None
        f = statistics.median(row["err"]) if row["err"] else None
        errors += row["err"]
        ncu_seen |= b is not None
        if b is not None and not BYTES_BAND[0] <= b <= BYTES_BAND[1]:
            wrong_bytes.append(f"{impl} {_pct(b)}")
        if top is not None and top > EFFICIENCY_MAX:
            above.append(f"{impl} {_pct(top)}")
        eff = "—" if e is None else f"{_pct(e)} (max {_pct(top)})"
        lines.append(f"{kind:<10}{impl:<16}{_pct(b):>16}{eff:>20}{_pct(f):>16}")
    pooled = statistics.median(errors) if errors else None
    if pooled is not None and pooled > FORECAST_MEDIAN_MAX:
        bad_forecast.append(f"median {_pct(pooled)}")
    lo, hi = BYTES_BAND
    why = []
    if wrong_bytes:
        why.append(f"ncu's bytes outside {_pct(lo)}–{_pct(hi)} of the model's: {', '.join(wrong_bytes)}")
    if above:
        why.append(f"faster than the roof (over {_pct(EFFICIENCY_MAX)}): {', '.join(above)}")
    if bad_forecast:
        why.append(f"held-out forecast error over {_pct(FORECAST_MEDIAN_MAX)}: {bad_forecast[0]}")
    if not by:
        lines.append("the model holds: NOT KNOWN (no case was measured)")
    elif why:
        lines.append("the model holds: NO — " + "; ".join(why))
    else:
        checked = [
            f"bytes within {_pct(lo)}–{_pct(hi)} of ncu's" if ncu_seen else "bytes NOT checked (no ncu)",
            f"no case above its roof (≤ {_pct(EFFICIENCY_MAX)})",
            f"held-out forecasts median {_pct(pooled)}" if pooled is not None else "no held-out forecast",
        ]
        yes = "YES" if ncu_seen else "YES on time and forecasts, bytes NOT checked"
        lines.append(f"the model holds: {yes} — " + "; ".join(checked))
    return lines


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
