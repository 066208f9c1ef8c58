"""DRAM bytes from Nsight Compute: run the kernels again under ``ncu``, one case between two
marker kernels, and read the counters back from its CSV.

    ncu --metrics dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum \\
        --csv --clock-control none  python -m attnroof.measure.ncu CASES.json DONE.json

The child process runs each case once to warm up, then ``torch.cuda._sleep`` (a kernel named
``spin_kernel``), the case, and another ``spin_kernel``: the kernels between a pair of markers are
that case's. The parser needs no torch.

Length: the ncu command, the child that runs the cases, the CSV parser, and running ncu's process
group so that a timeout or a stop signal leaves nothing of it holding the GPU — one tool's whole
round trip, each part reading the others' markers and files.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnroof import outfile
from attnroof.errors import AttnroofError

METRICS = ("dram__bytes_read.sum", "dram__bytes_write.sum", "gpu__time_duration.sum")
READ, WRITE, DURATION = METRICS
MARKER = re.compile(r"spin|sleep", re.IGNORECASE)
"""A kernel whose name matches this separates cases (``cuda::<unnamed>::spin_kernel(long)``)."""
MARKER_CYCLES = 1000
NCU_TIMEOUT_S = 240.0
"""Longest ncu run (s); ``$ATTNROOF_NCU_TIMEOUT_S`` overrides it (benchmarks/gpu_check.sh sets it
below its step's limit, so that ncu stops and its bytes are read before the step is killed)."""

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


def profile(cases: Sequence[Any], *, timeout_s: float | None = None) -> dict[str, NcuResult]:
    """Run ``cases`` (:class:`~attnroof.measure.kernels.Case`) under ncu; results by case key."""
    if timeout_s is None:
        timeout_s = float(os.environ.get("ATTNROOF_NCU_TIMEOUT_S") or NCU_TIMEOUT_S)
    exe = ncu_path()
    if exe is None:
        raise NcuError("ncu is not on PATH")
    src = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ, PYTHONPATH=src + os.pathsep + os.environ.get("PYTHONPATH", ""))
    with tempfile.TemporaryDirectory(prefix="attnroof-ncu-") as tmp:
        todo, done = Path(tmp, "cases.json"), Path(tmp, "done.json")
        todo.write_text(
            json.dumps(
                [{"kind": c.kind, "impl": c.impl, "shape": dict(c.shape), "dtype": c.dtype} for c in cases]
            )
        )
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
        code, out, err = run_group(cmd, env, timeout_s)
        complete = code is not None
        check_errors(out + "\n" + err, code)
        if not done.exists():
            if code is None:
                raise NcuError(f"ncu ran past {timeout_s:.0f} s before any case finished") from None
            tail = (err or out).strip().splitlines()[-1:] or ["no output"]
            raise NcuError(f"ncu run failed (exit {code}): {tail[0]}")
        keys = json.loads(done.read_text())  # written after every case: as far as the child got
    groups = between_markers(parse_csv(out))
    if complete and len(groups) != len(keys):
        raise NcuError(f"ncu reported {len(groups)} marked cases, the run made {len(keys)}")
    if not complete:
        print(
            f"attnroof: ncu ran past {timeout_s:.0f} s; DRAM bytes for the first {min(len(groups), len(keys))} "
            f"of {len(cases)} cases only",
            file=sys.stderr,
        )
    return {k: summarize(g) for (k, ok), g in zip(keys, groups, strict=False) if ok}


def run_group(cmd: Sequence[str], env: Mapping[str, str], timeout_s: float) -> tuple[int | None, str, str]:
    """Run ``cmd`` in a session of its own: (exit status, stdout, stderr), status ``None`` when it
    ran past ``timeout_s``. Then the **whole process group** is killed, so that the profiled child
    does not live on holding GPU memory; what it printed until then is returned.

    The group is killed too when this process is told to stop (SIGTERM, SIGINT, SIGHUP: a step's
    ``timeout`` reaches only its own group, not ncu's new session) or leaves by an exception; the
    signal then takes its usual course."""
    with _group_dies_with_us() as started:  # set before the group starts: no signal slips past
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(env),
            start_new_session=True,
        )  # fmt: skip
        try:
            started(proc.pid)
            try:
                out, err = proc.communicate(timeout=timeout_s)
                return proc.returncode, out, err
            except subprocess.TimeoutExpired:
                _kill_group(proc.pid)
                out, err = proc.communicate()
                return None, out or "", err or ""
        finally:
            if proc.poll() is None:  # left by an exception or a signal: nothing of it lives on
                _kill_group(proc.pid)
                proc.wait()


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


@contextlib.contextmanager
def _group_dies_with_us() -> Iterator[Callable[[int], None]]:
    """While inside: a stop signal kills the process group handed to the ``started`` callable it
    yields, then does what it did before (the default handler: this process ends by that signal;
    Python's SIGINT handler: KeyboardInterrupt). A signal that comes before the group is known
    (its process still starting) waits for it, then kills it. Signal handlers can be set only in
    the main thread: elsewhere, nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield lambda pgid: None
        return
    before = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    group: list[int] = []
    pending: list[int] = []

    def stop(signum: int, frame: Any) -> None:
        _kill_group(group[0])
        for sig, old in before.items():
            if old is not None:
                signal.signal(sig, old)
        old = before[signal.Signals(signum)]
        if callable(old):
            old(signum, frame)
        else:
            os.kill(os.getpid(), signum)  # the default again: this process ends by the signal

    def handler(signum: int, frame: Any) -> None:
        if group:
            stop(signum, frame)
        else:  # the group is not started yet: it is stopped as soon as it is
            pending.append(signum)

    def started(pgid: int) -> None:
        group.append(pgid)
        if pending:
            stop(pending[0], None)

    for sig, old in before.items():
        if old not in (signal.SIG_IGN, None):  # None: a handler not set from Python, left alone
            signal.signal(sig, handler)
    try:
        yield started
    finally:
        for sig, old in before.items():
            if old is not None:
                signal.signal(sig, old)


def check_errors(text: str, code: int | None) -> None:
    """Raise :class:`NcuError` with ncu's own ``==ERROR==`` line when it printed one and no
    profile came out (no counter permission is the common case in containers)."""
    errors = [ln.strip() for ln in text.splitlines() if ln.lstrip().startswith("==ERROR==")]
    if not errors:
        return
    if any(PERMISSION in e for e in errors):
        raise NcuError(f"ncu: {PERMISSION}: {PERMISSION_HINT}")
    if not _has_profile(text) or code not in (0, None):
        raise NcuError(f"ncu: {errors[0].removeprefix('==ERROR==').strip()}")


def _has_profile(text: str) -> bool:
    try:
        return bool(parse_csv(text))
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
    """Inside ncu: each case warmed up, then run once between two marker kernels."""
    from attnroof.measure.env import local_device
    from attnroof.measure.kernels import Case, prepare

    dev = local_device()
    torch = dev.torch
    done: list[list[Any]] = []  # [key, whether the marked run succeeded]
    for spec in json.loads(Path(cases_path).read_text()):
        case = Case(spec["kind"], spec["impl"], spec["shape"], spec["dtype"])
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
        done.append([case.key, ok])
        outfile.write_text(done_path, json.dumps(done))  # after each case, atomic: never half-read
        del prepared
        dev.free_memory()
    outfile.write_text(done_path, json.dumps(done))
    return 0


if __name__ == "__main__":
    raise SystemExit(_child(*sys.argv[1:3]))
