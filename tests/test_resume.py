"""An interrupted campaign always completes: the quick CPU suite is stopped (SIGKILL, or SIGINT as
Ctrl-C sends) after k records for k = 1, 3, 7, 20 — the first three while the ceilings are being
measured, the last among the kernels — and each time resumed with --resume. The finished file
holds exactly the keys of an uninterrupted run, each once.

The stops are made one after another on the same file: a fresh run stopped at 1 record, then
``--resume`` runs stopped at 3, 7 and 20, then a last ``--resume`` that finishes. Every resumed run
must get past the point where the previous one stopped (the old code could not: resumed after a
stop among the ceilings it exited with "no matmul ceiling was measured", every time), and the
whole chain measures the campaign about once, so the test stays fast.

No window: each stopped run is the real command line, whose results file says on a pipe when
the file holds its k-th record and then waits; the signal is sent once that line is read, so it
always finds the run between two records, whatever the machine's load (a signal sent on seeing
the file grow could come after the run had finished, or be lost on the way), and SIGINT is set to
raise KeyboardInterrupt first, as a terminal's Ctrl-C finds it (a shell's background job would
have it ignored). The run's end is waited for, not timed.
"""

from __future__ import annotations

import copy
import json
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SRC, run_cli

CPU = {"ATTNROOF_CPU_THREADS": "1"}
STOPS = (1, 3, 7, 20)
SUITE = ["measure", "suite", "--quick", "--cpu"]


def _keys(path: Path) -> list[str]:
    return [json.loads(line)["key"] for line in path.read_text().splitlines() if line.strip()]


def _lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


@pytest.fixture(scope="module")
def reference() -> list[str]:
    """The keys of the whole quick campaign on this CPU, from its plan (nothing measured). The
    plan is timing-free: a matmul size that is not tried is a skip record, not a missing one."""
    pytest.importorskip("torch")
    from attnroof.measure.env import local_device
    from attnroof.measure.suite import campaign_keys

    keys = campaign_keys(local_device("cpu"), quick=True)
    assert len(keys) == len(set(keys))
    assert [k.split("/", 1)[0] for k in keys[:3]] == ["ceiling"] * 3 and keys[-1].startswith("linear/")
    assert sum(k.startswith("ceiling/") for k in keys) > 7 and len(keys) > max(STOPS) + 10
    return keys


HANG_S = 900
"""A run not ended, or not ready, after this is a hang (never a time the code must meet)."""

STOPPED = r"""
import os, signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)  # as a terminal's Ctrl-C finds it
from attnroof.cli import main
from attnroof.measure.records import ResultsFile

stop_at, ready = int(sys.argv[1]), int(sys.argv[2])
append = ResultsFile.append


def append_then_wait(self, rec):
    append(self, rec)  # on disk before this returns
    if self.path.read_bytes().count(b"\n") >= stop_at:
        os.write(ready, b"ready\n")  # the k-th record is on disk: the signal may come
        os.close(ready)
        while True:
            time.sleep(3600)  # until the signal (SIGINT: KeyboardInterrupt here, between records)


ResultsFile.append = append_then_wait
sys.exit(main(sys.argv[3:]))
"""
"""The suite's own command line, in a process whose results file, once it holds ``stop_at``
lines, says so on the pipe ``ready`` and waits there for the signal."""


def _stopped_run(out: Path, k: int, sig: signal.Signals, resume: bool) -> subprocess.CompletedProcess:
    """Start the suite; once ``out`` holds ``k`` records and one more than it held before (the run
    got past where the last one stopped, however many records that one wrote), the run says so
    and waits: send ``sig``; the finished process."""
    env = dict(os.environ, PYTHONPATH=str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", ""), **CPU)
    argv = [*SUITE, "-o", str(out), *(["--resume"] if resume else [])]
    stop_at = max(k, _lines(out) + 1)
    read_end, write_end = os.pipe()
    args = [sys.executable, "-c", STOPPED, str(stop_at), str(write_end), *argv]
    proc = subprocess.Popen(
        args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
        pass_fds=(write_end,),
    )  # fmt: skip
    os.close(write_end)  # the run holds the only write end: its end (or "ready") ends the read
    with os.fdopen(read_end, "rb") as ready:
        said = _read_line(ready)
    assert said == b"ready\n", (k, proc.poll(), said)  # not ended on its own first
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=HANG_S)
    return subprocess.CompletedProcess(args, proc.returncode, stdout, stderr)


def _read_line(pipe) -> bytes:
    """The line on ``pipe``, waited for by ``select`` (a hang after :data:`HANG_S`); b"" when the
    writer ended without one."""
    if not select.select([pipe], [], [], HANG_S)[0]:
        raise AssertionError(f"the run said nothing in {HANG_S} s (a hang)")
    return pipe.readline()


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["SIGKILL", "SIGINT"])
def test_a_campaign_stopped_anywhere_resumes_to_exactly_the_full_campaign(tmp_path, reference, sig):
    out = tmp_path / "r.jsonl"
    for i, k in enumerate(STOPS):
        before = _lines(out)
        res = _stopped_run(out, k, sig, resume=i > 0)
        # it was still running when stopped: neither finished nor failed on its own
        expected = -signal.SIGKILL if sig == signal.SIGKILL else 130
        assert res.returncode == expected, (k, res.returncode, res.stderr[-2000:])
        keys = _keys(out)
        assert len(keys) >= k and len(keys) == len(set(keys)), (k, keys)
        assert len(keys) > before, (k, before, keys)  # past the point where the last run stopped
        if sig == signal.SIGINT:  # one line that says what was kept and how to go on
            last = res.stderr.strip().splitlines()[-1]
            kept = f"{len(keys)} measurement{'s' if len(keys) > 1 else ''} kept in {out}"
            assert last == f"attnroof: interrupted; {kept} — rerun with --resume to finish"
    res = run_cli(*SUITE, "-o", str(out), "--resume", env=CPU, timeout=300)
    assert res.returncode == 0, res.stderr
    keys = _keys(out)
    assert len(keys) == len(set(keys))  # each key once
    assert sorted(keys) == sorted(reference)  # and every key of the campaign, ceilings included
    records = [json.loads(line) for line in out.read_text().splitlines()]
    ceilings = [r for r in records if r["kind"] == "ceiling" and r["status"] == "ok"]
    # placed on the roofs they make, as a run never stopped places them (a measured rate is kept
    # however low a loaded CPU's fp16 matmul runs — ~1 GFLOP/s and below — down to
    # MIN_MEASURED_RATE): compare with placing them again rather than with timing-free expectations.
    from attnroof.measure.ceilings import measured_device
    from attnroof.measure.env import local_device

    again = copy.deepcopy(ceilings)
    measured_device(again, local_device("cpu"))
    assert [r["bound_time_s"] for r in ceilings] == [r["bound_time_s"] for r in again]
    assert all(r["bound_time_s"] is not None for r in ceilings if r["impl"] != "matmul")  # bandwidth
    assert any(r["bound_time_s"] is not None for r in ceilings if r["impl"] == "matmul")


def test_resumed_ceilings_measure_only_the_missing_keys_and_decide_as_the_first_run(monkeypatch):
    """In-process, at tiny sizes: a run that already holds some ceilings measures the rest, and a
    size judged too slow is a skip record (so the keys never depend on timing)."""
    pytest.importorskip("torch")
    from attnroof.measure import ceilings as C
    from attnroof.measure.env import local_device

    dev = local_device("cpu")
    monkeypatch.setattr(C, "CPU_BUFFER_BYTES", 8 * 2**20)
    monkeypatch.setitem(C.MATMUL_SIZES, ("cpu", True), (32, 64, 128))
    keys = C.ceiling_keys(dev, quick=True, dtypes=["fp32"])
    assert keys == [
        "ceiling/read/fp32/bytes=8388608",
        "ceiling/write/fp32/bytes=8388608",
        "ceiling/copy/fp32/bytes=8388608",
        "ceiling/matmul/fp32/n=32",
        "ceiling/matmul/fp32/n=64",
        "ceiling/matmul/fp32/n=128",
    ]
    first = C.measure_ceilings(dev, quick=True, dtypes=["fp32"])
    assert [r["key"] for r in first] == keys and all(r["status"] == "ok" for r in first)

    kept = first[:4]  # stopped after the first matmul size
    new: list[dict] = []
    again = C.measure_ceilings(dev, quick=True, dtypes=["fp32"], kept=kept, on_record=new.append)
    assert [r["key"] for r in new] == keys[4:]  # only the missing ones are measured (and written)
    assert again[:4] == kept and [r["key"] for r in again] == keys

    # every size after the first "would take too long": skips with the reason, same keys
    monkeypatch.setitem(C.MATMUL_MAX_CALL_S, True, 0.0)
    slow = C.measure_ceilings(dev, quick=True, dtypes=["fp32"], kept=first[:3])
    assert [r["key"] for r in slow] == keys
    assert [r["status"] for r in slow[3:]] == ["ok", "skip", "skip"]
    assert all(r["reason"].startswith("not tried: one call would take") for r in slow[4:])
    # resumed after the first skip, the next size is judged the same way and not measured
    resumed = C.measure_ceilings(dev, quick=True, dtypes=["fp32"], kept=slow[:5])
    assert resumed[5]["status"] == "skip" and resumed[5]["reason"].startswith("not tried")
