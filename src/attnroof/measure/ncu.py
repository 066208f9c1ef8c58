"""DRAM bytes from Nsight Compute: run the kernels again under ``ncu``, one case between two
marker kernels, and read the counters back from its CSV.

    ncu --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum \\
        --csv --clock-control none  python -m attnroof.measure.ncu CASES.json DONE.json

The child process runs each case once to warm up, then ``torch.cuda._sleep`` (a kernel named
``spin_kernel``), the case, and another ``spin_kernel``: the kernels between a pair of markers are
that case's. The parser needs no torch.

All the cases go to one ncu launch (ncu, Python, torch and CUDA start once under the profiler).
ncu prints its report only when the child ends, so the child stops before its deadline on its
own, and at the time limit the child is killed first and ncu given a grace to print: the cases
profiled until then keep their bytes. ncu stays in the caller's process group, so that a
``timeout`` (its TERM, then KILL) or a machine ending a command's processes ends it too.

Length: the ncu command, the child that runs the cases, the CSV parser, and running ncu's process
tree so that a timeout or a stop signal leaves nothing of it holding the GPU and keeps what it
counted — one tool's whole round trip, each part reading the others' markers and files.
"""

from __future__ import annotations

import csv
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnroof import outfile
from attnroof.errors import AttnroofError
from attnroof.measure.processes import kill_tree, read_pid, tree, tree_dies_with_us

METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum", "gpu__time_duration.sum")
READ, WRITE, DURATION = METRICS
MARKER = re.compile(r"spin|sleep", re.IGNORECASE)
"""A kernel whose name matches this separates cases (``cuda::<unnamed>::spin_kernel(long)``)."""
MARKER_CYCLES = 1000
NCU_TIMEOUT_S = 240.0
"""Longest ncu run (s) of the command line's ``--ncu``; ``$ATTNROOF_NCU_TIMEOUT_S`` overrides it
(benchmarks/gpu_check.py gives :func:`profile` the time its phase has left instead)."""

UNITS = {
    "byte": 1.0, "bytes": 1.0, "b": 1.0,
    "kbyte": 1e3, "kb": 1e3, "mbyte": 1e6, "mb": 1e6, "gbyte": 1e9, "gb": 1e9, "tbyte": 1e12, "tb": 1e12,
    "kib": 2.0**10, "mib": 2.0**20, "gib": 2.0**30,
    "ns": 1e-9, "nsecond": 1e-9, "us": 1e-6, "usecond": 1e-6, "µs": 1e-6, "ms": 1e-3, "msecond": 1e-3,
    "s": 1.0, "second": 1.0,
}  # fmt: skip
"""ncu's units to SI (bytes, seconds). ncu's K/M/G prefixes on bytes are decimal."""

CACHE_CONTROL = "all"
"""ncu's ``--cache-control``, given explicitly: ``all`` flushes every cache before each profiled
kernel, so a case of several kernels reads more (nothing is left in L2 by the kernel before) and
writes less than when it is timed. Records say so beside the bytes (``ncu_cache_control``)."""
CACHE_CONTROL_NOTE = (
    "all: L2 flushed before each kernel (multi-kernel cases read more, write less than timed)"
)
PERMISSION = "ERR_NVGPUCTRPERM"
PERMISSION_HINT = (
    "no permission to read GPU performance counters: run as root, or load the driver with "
    "NVreg_RestrictProfilingToAdminUsers=0 (in a container: --cap-add SYS_ADMIN)"
)


class NcuError(AttnroofError):
    """ncu could not be run or its output not read."""


@dataclass
class Kernel:
    """One profiled kernel: its name and metrics in SI units (bytes, seconds)."""

    id: int
    name: str
    metrics: dict[str, float] = field(default_factory=dict)


def to_si(value: str, unit: str) -> float | None:
    """``("34,391,552", "byte")`` → 34391552.0; ``("2.5", "us")`` → 2.5e-06; ``None`` for n/a
    or for a unit not in :data:`UNITS` (never a guessed scale)."""
    text = value.strip().replace(",", "")
    try:
        number = float(text)
    except ValueError:
        return None
    key = unit.strip().lower()
    if key in ("", "none", "n/a"):
        return number
    if key not in UNITS:
        return None  # a unit we cannot convert: no number rather than a wrong one
    return number * UNITS[key]


def parse_csv(text: str) -> list[Kernel]:
    """Kernels of an ``ncu --csv`` report, in launch order, skipping ``==PROF==`` and
    ``==WARNING==`` lines and anything else before the header."""
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("==")]
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID"')), None)
    if start is None:
        raise NcuError('no CSV header (a line starting with "ID") in the ncu output')
    rows = csv.DictReader(lines[start:])
    kernels: dict[int, Kernel] = {}
    for row in rows:
        try:
            kid = int(row["ID"].replace(",", ""))
            name, metric = row["Kernel Name"], row["Metric Name"]
            value, unit = row["Metric Value"], row.get("Metric Unit") or ""
        except (KeyError, AttributeError, ValueError):
            continue  # a stray line from the profiled program
        if not isinstance(name, str) or not isinstance(metric, str) or not isinstance(value, str):
            continue  # a row cut short (a report that ended mid-line)
        k = kernels.setdefault(kid, Kernel(kid, name))
        si_value = to_si(value, unit)
        if si_value is not None:
            k.metrics[metric] = si_value
    return [kernels[i] for i in sorted(kernels)]


def between_markers(kernels: Iterable[Kernel]) -> list[list[Kernel]]:
    """The kernels between each opening and closing marker; those outside a pair (input set-up,
    warm-up) are dropped."""
    groups: list[list[Kernel]] = []
    current: list[Kernel] | None = None
    for k in kernels:
        if MARKER.search(k.name):
            if current is None:
                current = []
            else:
                groups.append(current)
                current = None
        elif current is not None:
            current.append(k)
    return groups


@dataclass(frozen=True)
class NcuResult:
    """DRAM bytes read and written (bytes) and kernel time (s) of one case, summed over its kernels."""

    bytes_read: float
    bytes_written: float
    time_s: float
    kernels: int

    @property
    def bytes(self) -> float:
        return self.bytes_read + self.bytes_written


def summarize(group: Sequence[Kernel]) -> NcuResult:
    total = {m: sum(k.metrics.get(m, 0.0) for k in group) for m in METRICS}
    return NcuResult(total[READ], total[WRITE], total[DURATION], len(group))


def ncu_path() -> str | None:
    return shutil.which("ncu")


PRINT_GRACE_S = 15.0
"""ncu prints its report only once the profiled child has ended: when the time is up, the child
is stopped first and ncu given this long (at most a quarter of its time) to print the cases it
finished, before it is killed."""
CASE_MARGIN = 1.5
"""The child starts a case only with this many times its longest case so far left before its
deadline, so that it ends on its own, and ncu prints, before the time is up."""
CHILD_DEADLINE = "ATTNROOF_NCU_CHILD_DEADLINE"
"""The child's deadline (seconds since the epoch), set by :func:`profile`."""
CHILD_PID = "ATTNROOF_NCU_CHILD_PID"
"""The file the child writes its process id to, set by :func:`profile`: the process stopped
first when the time is up."""


def _say_stderr(line: str) -> None:
    print(f"attnroof: {line}", file=sys.stderr)


def profile(
    cases: Sequence[Any], *, timeout_s: float | None = None, say: Callable[[str], None] | None = None
) -> dict[str, NcuResult]:
    """Run ``cases`` (:class:`~attnroof.measure.kernels.Case`) under one ncu launch; results by
    case key. What came out is kept, however the run ended: the cases profiled before ncu ran out
    of time, or before the child stopped at its deadline, or beside an ``==ERROR==`` line; each
    such note is handed to ``say`` (default: a line on stderr). :class:`NcuError` when no case's
    bytes came out."""
    if timeout_s is None:
        timeout_s = float(os.environ.get("ATTNROOF_NCU_TIMEOUT_S") or NCU_TIMEOUT_S)
    say = say or _say_stderr
    exe = ncu_path()
    if exe is None:
        raise NcuError("ncu is not on PATH")
    if not cases:
        return {}
    src = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, PYTHONPATH=src + os.pathsep + os.environ.get("PYTHONPATH", ""))
    grace = min(PRINT_GRACE_S, timeout_s / 4)
    with tempfile.TemporaryDirectory(prefix="attnroof-ncu-") as tmp:
        todo, done, pid_file = Path(tmp, "cases.json"), Path(tmp, "done.json"), Path(tmp, "child.pid")
        todo.write_text(
            json.dumps(
                [{"kind": c.kind, "impl": c.impl, "shape": dict(c.shape), "dtype": c.dtype} for c in cases]
            )
        )
        env[CHILD_DEADLINE] = f"{time.time() + timeout_s - grace:.3f}"
        env[CHILD_PID] = str(pid_file)
        cmd = [
            exe,
            "--metrics",
            ",".join(METRICS),
            "--csv",
            "--clock-control",
            "none",
            "--cache-control",
            CACHE_CONTROL,
            "--profile-from-start",  # only what the child brackets with cudaProfilerStart/Stop:
            "off",  # the marked runs, not the set-up kernels (random inputs, warm-up)
            sys.executable,
            "-m",
            "attnroof.measure.ncu",
            str(todo),
            str(done),
        ]
        code, out, err = run_group(cmd, env, timeout_s, stop_first=pid_file, grace_s=grace)
        progress = _read_progress(done)  # written after every case: as far as the child got
    return _results(cases, code, out, err, progress, timeout_s, say)


def _read_progress(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _results(
    cases: Sequence[Any],
    code: int | None,
    out: str,
    err: str,
    progress: Mapping[str, Any] | None,
    timeout_s: float,
    say: Callable[[str], None],
) -> dict[str, NcuResult]:
    """The bytes of every case ncu's report holds whole, and a note for each case it does not."""
    text = out + "\n" + err
    check_errors(text, code)  # no profile, or no permission: nothing to keep
    ran_past = f"ncu ran past {timeout_s:.0f} s"
    try:
        kernels = parse_csv(out)
    except NcuError:
        tail = (err or out).strip().splitlines()[-1:] or ["no output"]
        if code is None:
            got = f" ({len(progress['marked'])} of {len(cases)} cases had run)" if progress else ""
            raise NcuError(f"{ran_past} and printed no profile{got}") from None
        if progress is None:
            raise NcuError(f"ncu run failed (exit {code}): {tail[0]}") from None
        raise NcuError(f"ncu printed no profile (exit {code}): {tail[0]}") from None
    marked = [tuple(m) for m in (progress or {}).get("marked", [])]
    end = (progress or {}).get("end")
    groups = between_markers(kernels)
    if code == 0 and end == "finished" and len(groups) != len(marked):
        raise NcuError(f"ncu reported {len(groups)} marked cases, the run made {len(marked)}")
    results: dict[str, NcuResult] = {}
    torn = []
    for (key, ok), group in zip(marked, groups, strict=False):  # a group past the last mark: cut off
        if not ok:
            continue
        if all(READ in k.metrics and WRITE in k.metrics for k in group):
            results[key] = summarize(group)
        else:
            torn.append(key)  # a kernel's counters missing (a report cut short): no number
    errors = _error_lines(text)
    if len(results) < len(cases):
        if code is None:
            why = ran_past
        elif end not in (None, "finished"):
            why = f"the profiled child {end}"
        elif code != 0:
            why = f"ncu exited with {code}" + (f" ({errors[0]})" if errors else "")
        else:
            why = "the other cases failed under ncu or were left out"
        if torn:
            why += f"; {_n_cases(len(torn))} cut short in the report"
        say(f"{why}; DRAM bytes for {len(results)} of {_n_cases(len(cases))} only")
    elif errors:
        say(f"ncu said {errors[0]!r}, but its report holds every case: kept")
    if not results:
        raise NcuError(f"no case's DRAM bytes came out ({why})")
    return results


def _n_cases(n: int) -> str:
    return f"{n} case" if n == 1 else f"{n} cases"


def run_group(
    cmd: Sequence[str],
    env: Mapping[str, str],
    timeout_s: float,
    *,
    stop_first: Path | None = None,
    grace_s: float = 0.0,
) -> tuple[int | None, str, str]:
    """Run ``cmd`` (ncu): (exit status, stdout, stderr), status ``None`` when it ran past
    ``timeout_s``; what it printed until then is returned.

    It runs in **this process's group**, never a session of its own: a signal to the group (a
    step's ``timeout``, its KILL after the grace, Ctrl-C) reaches ncu and the profiled child as
    it reaches this process, and a machine that ends a command's processes ends them too (a new
    session outlives both). When the time is up, the process whose id ``stop_first`` holds (the
    profiled child) is killed first, ``grace_s`` before the end, so that ncu prints what it has;
    then ncu and every process under it. They are killed too when this process is told to stop
    (SIGTERM, SIGINT, SIGHUP) or leaves by an exception; the signal then takes its usual course."""
    with tree_dies_with_us() as started:  # set before ncu starts: no signal slips past
        proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=dict(env),
        )  # fmt: skip
        try:
            started(proc.pid)
            try:
                out, err = proc.communicate(timeout=max(0.0, timeout_s - grace_s))
                return proc.returncode, out, err
            except subprocess.TimeoutExpired:
                pass
            child = read_pid(stop_first) if stop_first is not None and grace_s > 0 else None
            if child is not None and child in tree(proc.pid):  # ncu's own child, not a reused id
                kill_tree(child)
                try:
                    out, err = proc.communicate(timeout=grace_s)
                    return None, out, err
                except subprocess.TimeoutExpired:
                    pass
            kill_tree(proc.pid)
            try:
                out, err = proc.communicate(timeout=10)
            except subprocess.TimeoutExpired:  # a process ncu left holds its pipes: let them go
                proc.kill()
                out, err = "", ""
            return None, out or "", err or ""
        finally:
            if proc.poll() is None:  # left by an exception or a signal: nothing of it lives on
                kill_tree(proc.pid)
                proc.wait()


def _error_lines(text: str) -> list[str]:
    return [
        ln.strip().removeprefix("==ERROR==").strip()
        for ln in text.splitlines()
        if ln.lstrip().startswith("==ERROR==")
    ]


def check_errors(text: str, code: int | None) -> None:
    """Raise :class:`NcuError` with ncu's own ``==ERROR==`` line when it printed one and no
    profile came out (no counter permission is the common case in containers). A profile that
    came out is kept, whatever else ncu said: :func:`profile` says the line beside the bytes."""
    errors = _error_lines(text)
    if not errors:
        return
    if any(PERMISSION in e for e in errors):
        raise NcuError(f"ncu: {PERMISSION}: {PERMISSION_HINT}")
    if not _has_profile(text):
        raise NcuError(f"ncu: {errors[0]}")


def _has_profile(text: str) -> bool:
    try:
        return bool(between_markers(parse_csv(text)))
    except NcuError:
        return False


def attach(records: Iterable[dict[str, Any]], results: Mapping[str, NcuResult]) -> None:
    """``ncu_bytes`` (DRAM read + written) and ``ncu_ratio`` (measured / model bytes) into records,
    and ``ncu_cache_control``: how ncu treated the caches while it counted."""
    for rec in records:
        res = results.get(rec["key"])
        if res is None:
            continue
        rec["ncu_cache_control"] = CACHE_CONTROL_NOTE
        rec["ncu_bytes"] = res.bytes
        rec["ncu_ratio"] = res.bytes / rec["bytes"] if rec.get("bytes") else None


def _child(cases_path: str, done_path: str) -> int:
    """Inside ncu: each case warmed up, then run once between two marker kernels. DONE.json says,
    after every case, which were marked (``marked``: [key, whether the marked run succeeded])
    and how the run ended (``end``: null while it runs, ``"finished"``, or why it stopped). A case
    is not started when the deadline (``$ATTNROOF_NCU_CHILD_DEADLINE``) would pass before it
    could end: the child ends on its own, and ncu prints the report of the cases it finished."""
    from attnroof.measure.env import local_device
    from attnroof.measure.kernels import Case, prepare

    pid_file = os.environ.get(CHILD_PID)
    if pid_file:
        outfile.write_text(pid_file, str(os.getpid()))  # the process stopped first at the time limit
    deadline = float(os.environ.get(CHILD_DEADLINE) or "inf")
    dev = local_device()
    torch = dev.torch
    progress: dict[str, Any] = {"marked": [], "end": None}
    longest = 0.0
    for spec in json.loads(Path(cases_path).read_text()):
        case = Case(spec["kind"], spec["impl"], spec["shape"], spec["dtype"])
        left = deadline - time.time()
        if longest and left < CASE_MARGIN * longest:
            progress["end"] = (
                f"stopped before {case.key}: {max(0.0, left):.0f} s left before its deadline, and a case "
                f"took up to {longest:.0f} s"
            )
            break
        t0 = time.monotonic()
        prepared = None
        try:
            prepared = prepare(case, dev)
            prepared.run()
            dev.sync()
        except Exception as e:  # the timed run already recorded why; skip it here
            print(f"attnroof ncu: {case.key}: {type(e).__name__}", file=sys.stderr)
            prepared = None  # its tensors go before the memory is given back
            dev.free_memory()
            continue
        dev.sync()
        torch.cuda.profiler.start()  # ncu profiles from here (--profile-from-start off) ...
        torch.cuda._sleep(MARKER_CYCLES)
        ok = True
        try:
            prepared.run()
        except Exception as e:
            ok = False
            print(f"attnroof ncu: {case.key}: {type(e).__name__}", file=sys.stderr)
        finally:
            torch.cuda._sleep(MARKER_CYCLES)
            dev.sync()
            torch.cuda.profiler.stop()  # ... to here
        progress["marked"].append([case.key, ok])
        outfile.write_text(done_path, json.dumps(progress))  # after each case, atomic: never half-read
        del prepared
        dev.free_memory()
        longest = max(longest, time.monotonic() - t0)
    else:
        progress["end"] = "finished"
    outfile.write_text(done_path, json.dumps(progress))
    return 0


if __name__ == "__main__":
    raise SystemExit(_child(*sys.argv[1:3]))
