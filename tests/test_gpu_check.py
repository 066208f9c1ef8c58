"""benchmarks/gpu_check.sh and its phases (benchmarks/gpu_check.py), on the CPU: the whole flow
for real (CUDA steps skipped, said why), leaving one archive and one summary, every line of it on
stdout too; an interrupted run, a hung phase and a budget too small leave them too and say so;
one budget, the time a phase leaves going to the next; every outside tool under a limit; each
step's line, the one ncu launch and its limit, the one fit and the verdict from stand-ins.

No test here asserts how long anything takes (benchmarks/speed.py times the CPU flow); each
waits for a state (a file a stand-in wrote, a process's end), never for a time."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GPU_CHECK = str(ROOT / "benchmarks" / "gpu_check.sh")
HANG_S = 7200 + 600
"""A run not ended after this is a hang (never a time the code must meet)."""


def _module():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks" / "gpu_check.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _top_level(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def _archived(folder: Path) -> list[str]:
    with tarfile.open(folder / "gpu_check.tar.gz") as tar:
        return sorted(os.path.normpath(n) for n in tar.getnames() if n not in (".", "./"))


def _fake_python(folder: Path, body: str, *, cuda: bool = False) -> str:
    """A stand-in interpreter: the CUDA check (a here-doc on stdin, ``-``) answers at once that
    torch is here and CUDA is not (``cuda=True``: that it is), with no torch to import on a
    loaded machine; the phases run ``body`` (``$2`` is the phase, ``$3`` the work folder)."""
    if cuda:
        check = (
            'cat > /dev/null; echo "torch 0 torch.version.cuda 13.0"; echo "CUDA device: stand-in"; exit 0'
        )
    else:
        check = 'cat > /dev/null; echo "torch 0 torch.version.cuda None"; echo "CUDA: not usable: stand-in"; exit 1'
    fake = folder / "fakepy"
    fake.write_text(f'#!/usr/bin/env bash\nif [ "$1" = "-" ]; then {check}; fi\n{body}')
    fake.chmod(0o755)
    return str(fake)


def _run(out: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", GPU_CHECK, str(out)], capture_output=True, text=True, env=env, timeout=HANG_S
    )


def test_gpu_check_runs_the_whole_flow_on_the_cpu(tmp_path):
    """The Done-when: ``PYTHON=python3 bash benchmarks/gpu_check.sh OUTDIR`` without CUDA runs
    every phase for real, the CUDA-only steps skipped with the reason, says each phase's status,
    prints every summary line on stdout as well, and leaves exactly the archive and the summary,
    which ends with the verdict: which parts were checked, and why bytes were not. (How long it
    takes is benchmarks/speed.py's: a target, not a test.)"""
    pytest.importorskip("torch")
    pytest.importorskip("scipy")
    assert subprocess.run(["bash", "-n", GPU_CHECK]).returncode == 0
    out = tmp_path / "out"
    # a budget no loaded machine runs out of: the flow is checked here, its time by speed.py (a
    # step past the 420 s meant for a GPU would be NOT RUN, the check's answer, not this test's)
    env = dict(
        os.environ,
        PYTHON="python3",
        CUDA_VISIBLE_DEVICES="",
        ATTNROOF_CPU_THREADS="1",
        GPU_CHECK_DEADLINE_S="7200",
    )
    res = _run(out, env)
    text = (out / "summary.txt").read_text()
    assert res.returncode == 0, text + res.stderr
    assert _top_level(out) == ["gpu_check.tar.gz", "summary.txt"]
    # every summary line on stdout, in order (the tail a remote machine surely gives back)
    printed = iter(res.stdout.splitlines())
    for line in text.splitlines():
        assert any(p == line for p in printed), f"not on stdout: {line!r}"
    # the CUDA check says why: the interpreter (python3), torch's versions, the error
    assert "  env: interpreter " in text and "(Python 3." in text
    import torch

    assert f"  env: torch {torch.__version__} torch.version.cuda {torch.version.cuda}" in text
    assert "  env: CUDA: not usable: " in text
    for name in ("timers", "ncu"):
        assert f"skipped {name}: no CUDA here (CUDA: not usable: " in text
    steps = ["ceilings", "suite", "calibrate"] + [
        f"{k}-{dt}" for dt in ("bf16", "fp16", "fp32") for k in ("attention", "decode", "linear")
    ]
    for name in steps:
        assert f"ok      {name} (" in text, name
    phase_said = {"measure": r"ok \(11 ok, 1 skip\)", "ncu": r"skipped \(1 skip\)", "report": r"ok \(1 ok\)"}
    for name, status in phase_said.items():
        assert re.search(
            rf"^phase {name}: {status} in \d+ s of the \d+ s it had; \d+ s of the budget left$", text, re.M
        )
    assert re.search(
        r"^phases: measure ok \(11 ok, 1 skip; \d+ s of \d+\); ncu skipped \(1 skip; \d+ s of \d+\); "
        r"report ok \(1 ok; \d+ s of \d+\); \d+ s of the 7200 s budget used$",
        text,
        re.M,
    )
    assert "  accuracy: kind" in text and "  forecast: held-out forecasts: " in text
    assert "\nthe model holds: " in text and "bytes ncu/model" in text
    last = text.splitlines()[-1]
    assert "; every step ok; the model holds: " in last
    # CPU timings may or may not hold (a CPU's caches can beat the copy ceiling it measured); the
    # verdict says what was checked either way, and that bytes were not; the last line repeats it
    # in full when it holds, and says NO, pointing at the summary, when it does not
    verdict = next(ln for ln in text.splitlines() if ln.startswith("the model holds: "))
    assert "bytes NOT checked (ncu skipped: no CUDA here (CUDA: not usable: " in verdict
    assert (
        "; the model holds: YES on the roof and forecasts only; " in last and "bytes NOT checked" in last
    ) or ("; the model holds: NO" in last and verdict.startswith("the model holds: NO — "))
    names = _archived(out)
    for f in (
        "summary.txt",
        "env.txt",
        "ceilings.json",
        "results.jsonl",
        "cal.json",
        "verdict.txt",
        "steps.tsv",
    ):
        assert f in names, f
    assert {"accuracy.txt", "forecast.txt"} <= set(names)
    assert {f"{s}.log" for s in steps} <= set(names)
    assert {"phase-measure.log", "phase-ncu.log", "phase-report.log"} <= set(names)


def test_gpu_check_interrupted_still_leaves_one_archive_and_the_summary(tmp_path):
    """SIGTERM once the measure phase has started (a file it wrote says so): the phase is
    stopped, the archive and the summary are left, and the exit says the signal."""
    out, bin_ = tmp_path / "out", tmp_path / "bin"
    bin_.mkdir()
    started = tmp_path / "started"
    py = _fake_python(
        bin_, f'case "$*" in *"gpu_check.py measure"*) touch {started}; exec sleep 600;; esac\n'
    )
    env = dict(os.environ, OUT=str(out), PYTHON=py, CUDA_VISIBLE_DEVICES="")
    proc = subprocess.Popen(["bash", GPU_CHECK], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    end = time.monotonic() + HANG_S
    while not started.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < end, "the measure phase never started (a hang)"
        time.sleep(0.02)
    proc.terminate()
    proc.communicate(timeout=HANG_S)
    assert proc.returncode == 143
    assert _top_level(out) == ["gpu_check.tar.gz", "summary.txt"]
    names = _archived(out)
    assert "summary.txt" in names and "env.txt" in names and "phase-measure.log" in names


def test_a_hung_phase_is_stopped_at_its_limit_and_named(tmp_path):
    """A phase that hangs is stopped at its limit (``timeout``'s exit, not a clock read here);
    the steps it marked not ok and the phase are named in the last line."""
    out, bin_ = tmp_path / "out", tmp_path / "bin"
    bin_.mkdir()
    py = _fake_python(
        bin_,
        'case "$*" in *"gpu_check.py measure"*) echo linear-fp32 >> "$3/failed.txt"; exec sleep 600;; esac\n',
    )
    # 68 s: 10 for packing, 5 kept for ncu (skipped without CUDA) and 40 for the report: 13 s
    env = dict(os.environ, PYTHON=py, CUDA_VISIBLE_DEVICES="", GPU_CHECK_DEADLINE_S="68")
    res = _run(out, env)
    text = (out / "summary.txt").read_text()
    assert res.returncode == 1, text
    assert re.search(
        r"^TIMEOUT phase measure after \d+ s \(the steps after the last line above did not end\)$", text, re.M
    )
    assert re.search(r"^phases: measure TIMEOUT after \d+ s \(no step before it\); ", text, re.M)
    last = text.splitlines()[-1]
    assert re.search(r"\d step\(s\) not ok: linear-fp32 measure\b", last), last
    assert "the model holds: NOT KNOWN (no verdict)" in last
    assert _top_level(out) == ["gpu_check.tar.gz", "summary.txt"]


def test_a_budget_too_small_runs_no_phase_and_says_why(tmp_path):
    """10 s, all of it kept for packing: no phase starts, each says why, and the last line
    names them."""
    out, bin_ = tmp_path / "out", tmp_path / "bin"
    bin_.mkdir()
    ran = tmp_path / "ran"
    py = _fake_python(bin_, f'echo "$2" >> {ran}\n')
    env = dict(os.environ, PYTHON=py, CUDA_VISIBLE_DEVICES="", GPU_CHECK_DEADLINE_S="10")
    res = _run(out, env)
    text = (out / "summary.txt").read_text()
    assert res.returncode == 1, text
    assert not ran.exists()
    for name, keep in (("measure", 45), ("ncu", 40), ("report", 0)):
        assert re.search(
            rf"^NOT RUN phase {name}: -?\d+ s left of the 10 s budget, {keep} s of it kept for the phases after it$",
            text,
            re.M,
        ), name
    last = text.splitlines()[-1]
    assert "3 step(s) not ok: measure ncu report; the model holds: NOT KNOWN (no verdict)" in last


def test_one_budget_the_time_a_phase_leaves_goes_to_the_next(tmp_path):
    """Each phase may run until the deadline less what the phases after it are kept (ncu 100 s
    with CUDA, the report 40 s): the phase before leaving early gives the next all the rest, not
    a fixed share. The stand-in phases end at once and write the deadline each was given."""
    out, bin_ = tmp_path / "out", tmp_path / "bin"
    bin_.mkdir()
    py = _fake_python(
        bin_,
        'for a in "$@"; do [ "$prev" = --deadline ] && echo "$a" > "$3/../$2.deadline"; prev=$a; done\n',
        cuda=True,
    )
    env = dict(os.environ, PYTHON=py, PATH=f"{bin_}:{os.environ['PATH']}")
    res = _run(out, env)
    text = (out / "summary.txt").read_text()
    assert res.returncode == 0, text
    given = {p: int((out / f"{p}.deadline").read_text()) for p in ("measure", "ncu", "report")}
    assert given["report"] - given["ncu"] == 40 and given["ncu"] - given["measure"] == 100
    said = {
        m[0]: (int(m[1]), int(m[2]))
        for m in re.findall(r"^phase (\w+): ok \(no step\) in (\d+) s of the (\d+) s it had", text, re.M)
    }
    # the ncu phase had the measure phase's unused time: all but the report's 40 s and packing's 10
    assert said["ncu"][1] > 120, said  # the old fixed share; here ~370 s


def test_every_outside_tool_has_a_time_limit(tmp_path):
    """``ncu --version`` and ``nvidia-smi`` ran without a limit: a stand-in of each that hangs
    now costs its limit (here 2 s), said in the summary, and the check goes on."""
    out, bin_ = tmp_path / "out", tmp_path / "bin"
    bin_.mkdir()
    for tool in ("ncu", "nvidia-smi"):
        (bin_ / tool).write_text("#!/bin/sh\nexec sleep 600\n")
        (bin_ / tool).chmod(0o755)
    py = _fake_python(bin_, "")
    env = dict(os.environ, PYTHON=py, PATH=f"{bin_}:{os.environ['PATH']}", GPU_CHECK_TOOL_TIMEOUT_S="2")
    res = _run(out, env)
    text = (out / "summary.txt").read_text()
    assert "  env: ncu --version: no answer within 2 s (stopped)" in text, text
    assert "  env: nvidia-smi: no answer within 2 s (stopped)" in text, text
    assert "phase report: ok (no step) in " in text and res.returncode == 0, text


# ---------------------------------------------------------------- one phase's steps, in-process


def test_each_step_says_ok_skip_or_errors_from_its_cases(tmp_path, capsys):
    """ "ok" is exit 0 with every case ok; skipped cases are counted beside it; a wrong or
    errored case, or ncu that measured nothing or only some cases, marks the step ERRORS and not
    ok. Each line goes to the summary and to stdout; each status, and why, to steps.tsv."""
    gc = _module()
    check = gc.Check(tmp_path, deadline=float("inf"))

    def printing(text):
        return lambda: print(text) or 0

    assert check.step("attention-bf16", printing('{"status": "ok"}')) == "ok"
    assert (
        check.step("decode-bf16", printing('{"status": "ok"}\n{"status": "skip"}\n{"status": "skip"}'))
        == "ok"
    )
    assert (
        check.step("linear-fp32", printing('{"status": "wrong"}\n{"status": "error"}\n{"status": "skip"}'))
        == "errors"
    )
    assert (
        check.step("ncu-probe", printing("ncu: ERR_NVGPUCTRPERM: no permission; DRAM bytes not measured"))
        == "errors"
    )
    assert (
        check.step("ncu", printing("ncu: DRAM bytes for 3 of 11 cases only (one launch, 60 s)")) == "errors"
    )
    assert check.step("bad-flag", lambda: sys.exit(2)) == "failed"
    assert check.step("crash", lambda: 1 / 0) == "failed"
    check2 = gc.Check(tmp_path, deadline=float("inf"), no_cuda="no CUDA here (why)")
    assert check2.step("timers", printing("x"), cuda_only=True) == "skip"
    lines = (tmp_path / "summary.txt").read_text().splitlines()
    assert lines[0].startswith("ok      attention-bf16 (") and lines[0].endswith(" s)")
    assert lines[1].startswith("ok      decode-bf16 (") and lines[1].endswith(" s), 2 skip")
    assert lines[2].startswith("ERRORS  linear-fp32 (") and lines[2].endswith(" s): 1 error, 1 skip, 1 wrong")
    assert lines[3].startswith("ERRORS  ncu-probe (") and "DRAM bytes not measured" in lines[3]
    assert lines[4].startswith("ERRORS  ncu (") and lines[4].endswith(
        "DRAM bytes for 3 of 11 cases only (one launch, 60 s)"
    )
    assert lines[5].startswith("FAILED  bad-flag (exit 2, ")
    assert lines[6].startswith("FAILED  crash (exit 1, ") and lines[6].endswith(
        " s): ZeroDivisionError: division by zero"
    )
    assert lines[7] == "skipped timers: no CUDA here (why)"
    assert capsys.readouterr().out.splitlines() == lines  # every line on stdout as well
    assert (tmp_path / "failed.txt").read_text().split() == [
        "linear-fp32",
        "ncu-probe",
        "ncu",
        "bad-flag",
        "crash",
    ]
    assert "ZeroDivisionError" in (tmp_path / "crash.log").read_text()  # the traceback, in the step's log
    steps = gc.read_steps(tmp_path)
    assert steps["timers"] == ("skip", "no CUDA here (why)")
    assert steps["ncu"] == ("errors", "ncu: DRAM bytes for 3 of 11 cases only (one launch, 60 s)")
    assert steps["decode-bf16"] == ("ok", "2 skip") and steps["crash"][0] == "failed"


def test_a_step_is_not_started_when_the_deadline_would_pass(tmp_path):
    gc = _module()
    check = gc.Check(tmp_path, deadline=time.time() + 3)  # 3 s left; a CUDA step needs 20
    ran = []
    assert check.step("suite", lambda: ran.append(1)) == "not run"
    assert ran == []
    line = (tmp_path / "summary.txt").read_text().strip()
    assert line.startswith("NOT RUN suite: ") and line.endswith("s left before the deadline, under 20 s")
    assert (tmp_path / "failed.txt").read_text().split() == ["suite"]
    assert gc.read_steps(tmp_path)["suite"][0] == "not run"


def test_a_step_is_not_started_with_less_left_than_its_kind_took(tmp_path, monkeypatch):
    """On loaded cores an attention step took ~50 s and the next started with 40 s left: the
    phase's limit killed it mid-way (TIMEOUT, and every later step unnamed). A step is not
    started with less left than a step of its kind took (attention-fp16 after attention-bf16);
    NOT RUN says so, and a quicker kind still runs. A clock that moves as the steps say."""
    gc = _module()
    clock = [0.0]
    monkeypatch.setattr(gc, "time", types.SimpleNamespace(time=lambda: clock[0], monotonic=lambda: clock[0]))
    check = gc.Check(tmp_path, deadline=120.0, no_cuda="no CUDA here (stand-in)")  # CPU steps: 5 s

    def taking(seconds):
        return lambda: clock.__setitem__(0, clock[0] + seconds)

    assert check.step("attention-bf16", taking(50)) == "ok"  # 120 s left
    assert check.step("linear-bf16", taking(10)) == "ok"  # 70 s left
    assert check.step("attention-fp16", taking(50)) == "ok"  # 60 s left, 50 s needed
    assert check.step("attention-fp32", taking(50)) == "not run"  # 10 s left
    assert check.step("linear-fp16", taking(10)) == "ok"  # 10 s left, 10 s needed: a quicker kind
    lines = (tmp_path / "summary.txt").read_text().splitlines()
    assert [ln.split()[0] for ln in lines] == ["ok", "ok", "ok", "NOT", "ok"]
    assert (
        lines[3]
        == "NOT RUN attention-fp32: 10 s left before the deadline, under the 50 s an attention step took"
    )


# ---------------------------------------------------------------- the ncu phase: one launch


class _Scripted:
    """A Check whose time left is scripted: each call of left() gives the next figure."""

    def __init__(self, gc, work, *left):
        self.check = gc.Check(work, deadline=float("inf"))
        self.figures = list(left)
        self.check.left = lambda: self.figures.pop(0) if len(self.figures) > 1 else self.figures[0]


def _ncu_stand_ins(gc, monkeypatch, *, results_for=None, said=()):
    """time_cases gives every case an ok record; ncu.profile is recorded, answers with the bytes
    of ``results_for`` cases (all, by default) and says ``said``."""
    from attnroof.measure import ncu

    calls = []

    def time_cases(work, cases):
        return [
            {"key": c.key, "kind": c.kind, "impl": c.impl, "status": "ok", "bytes": 1e6, "device": "stand-in"}
            for c in cases
        ]

    def profile(cases, *, timeout_s, say):
        calls.append(([c.key for c in cases], timeout_s))
        for line in said:
            say(line)
        n = len(cases) if results_for is None else results_for
        return {c.key: ncu.NcuResult(1e6, 0.0, 1e-3, 1) for c in cases[:n]}

    monkeypatch.setattr(gc, "time_cases", time_cases)
    monkeypatch.setattr(ncu, "profile", profile)
    monkeypatch.setattr(ncu, "ncu_path", lambda: "/stand-in/ncu")
    return calls


def test_ncu_is_one_launch_over_every_case_with_the_phase_time_left(tmp_path, monkeypatch):
    """The probe, prefill and decode were three launches, each paying ncu's, Python's, torch's and
    CUDA's start under the profiler, decode last (the first to lose its bytes), a fixed share of
    the phase each: now ONE launch over every case, the small linear first, decode and prefill in
    turn, its limit the phase's time left less a 10 s margin."""
    gc = _module()
    calls = _ncu_stand_ins(gc, monkeypatch)
    scripted = _Scripted(gc, tmp_path, 300.0, 290.0)  # at the start of the step, then before ncu
    gc.phase_ncu(scripted.check)
    assert len(calls) == 1
    keys, limit = calls[0]
    assert keys == [c.key for c in gc.ncu_cases()] and len(keys) == 11
    assert (
        keys[0].startswith("linear/") and [k.split("/")[0] for k in keys[1:5]] == ["decode", "attention"] * 2
    )
    assert limit == 290.0 - gc.NCU_MARGIN_S
    text = (tmp_path / "summary.txt").read_text()
    assert text.startswith("ok      ncu (")
    assert "  ncu: DRAM bytes of all 11 cases read from hardware counters (one launch, 280 s)" in text
    recs = [json.loads(ln) for ln in (tmp_path / "ncu.jsonl").read_text().splitlines()]
    assert len(recs) == 11 and all(r["ncu_ratio"] == 1.0 for r in recs)


def test_an_ncu_launch_that_could_not_finish_is_not_started_and_says_why(tmp_path, monkeypatch):
    """A step that started with 20–35 s left gave ncu 10 s, too little to start it: now the step
    is not started under 90 s left, and ncu not launched under 60 s for it, each said."""
    gc = _module()
    calls = _ncu_stand_ins(gc, monkeypatch)
    (tmp_path / "a").mkdir()
    gc.phase_ncu(_Scripted(gc, tmp_path / "a", 80.0).check)
    assert calls == []
    assert (
        (tmp_path / "a" / "summary.txt")
        .read_text()
        .startswith("NOT RUN ncu: 80 s left before the deadline, under 90 s")
    )
    (tmp_path / "b").mkdir()
    gc.phase_ncu(_Scripted(gc, tmp_path / "b", 95.0, 65.0).check)  # the cases took 30 s to time
    assert calls == []
    line = (tmp_path / "b" / "summary.txt").read_text().splitlines()[0]
    assert line.startswith("ERRORS  ncu (") and line.endswith(
        "ncu: not started: 55 s left for it, and one launch needs 60 s; DRAM bytes not measured"
    )


def test_ncu_cut_short_keeps_its_bytes_and_says_so(tmp_path, monkeypatch):
    gc = _module()
    _ncu_stand_ins(
        gc, monkeypatch, results_for=3, said=["ncu ran past 190 s; DRAM bytes for 3 of 11 cases only"]
    )
    gc.phase_ncu(_Scripted(gc, tmp_path, 200.0).check)
    lines = (tmp_path / "summary.txt").read_text().splitlines()
    assert lines[0].startswith("ERRORS  ncu (") and "DRAM bytes for 3 of 11 cases only" in lines[0]
    assert "  ncu: ncu ran past 190 s; DRAM bytes for 3 of 11 cases only" in lines
    recs = [json.loads(ln) for ln in (tmp_path / "ncu.jsonl").read_text().splitlines()]
    assert sum(r.get("ncu_bytes") is not None for r in recs) == 3


def test_ncu_that_cannot_count_costs_one_launch_and_says_why(tmp_path, monkeypatch):
    """A probe that failed (no counter permission, say) did not stop the two launches after it,
    each paying ncu's start again to fail the same way: the one launch fails once, said."""
    from attnroof.measure import ncu

    gc = _module()
    calls = _ncu_stand_ins(gc, monkeypatch)

    def no_permission(cases, *, timeout_s, say):
        calls.append(([c.key for c in cases], timeout_s))
        raise ncu.NcuError(f"ncu: {ncu.PERMISSION}: {ncu.PERMISSION_HINT}")

    monkeypatch.setattr(ncu, "profile", no_permission)
    gc.phase_ncu(_Scripted(gc, tmp_path, 200.0).check)
    assert len(calls) == 1
    line = (tmp_path / "summary.txt").read_text().splitlines()[0]
    assert (
        line.startswith("ERRORS  ncu (")
        and "ERR_NVGPUCTRPERM" in line
        and line.endswith("DRAM bytes not measured")
    )
    assert gc.read_steps(tmp_path)["ncu"][0] == "errors"


# ---------------------------------------------------------------- the report: one fit


def test_the_report_fits_once_and_says_accuracy_forecasts_and_verdict(tmp_path, monkeypatch):
    """The calibrate and accuracy steps each fitted the results (the same fit twice): one fit
    now gives the held-out forecasts, the accuracy table and the verdict."""
    pytest.importorskip("scipy")
    from attnroof import calibration

    gc = _module()
    shutil.copy(ROOT / "tests" / "data" / "h200-reference.jsonl", tmp_path / "results.jsonl")  # ceilings too
    fits = []
    real = calibration.calibrate
    monkeypatch.setattr(calibration, "calibrate", lambda *a, **k: fits.append(1) or real(*a, **k))
    check = gc.Check(tmp_path, deadline=float("inf"))
    check.record("ncu", "skip", "no CUDA here (stand-in)")
    gc.phase_report(check)
    assert len(fits) == 1
    text = (tmp_path / "summary.txt").read_text()
    assert text.startswith("ok      calibrate (")
    assert "  accuracy: kind  " in text and "  accuracy: **pooled**" in text
    assert "  forecast: held-out forecasts: " in text
    last = text.splitlines()[-1]
    assert (
        last.startswith("the model holds: ")
        and "bytes NOT checked (ncu skipped: no CUDA here (stand-in))" in last
    )
    assert {"cal.json", "forecast.txt", "forecast.jsonl", "accuracy.txt", "verdict.txt"} <= {
        p.name for p in tmp_path.iterdir()
    }


# ---------------------------------------------------------------- the verdict


def _rec(kind, impl, eff, ncu_ratio=None, status="ok"):
    return {"kind": kind, "impl": impl, "status": status, "efficiency": eff, "ncu_ratio": ncu_ratio}


def test_the_verdict_shows_bytes_efficiency_and_forecast_error_per_implementation():
    gc = _module()
    records = [
        _rec("attention", "sdpa-flash", 0.60),
        _rec("attention", "sdpa-flash", 0.70, ncu_ratio=1.04),
        _rec("attention", "sdpa-flash", 0.80),
        _rec("decode", "sdpa-cudnn", 0.90, ncu_ratio=0.98),
        _rec("decode", "sdpa-cudnn", 0.95),
        _rec("linear", "linear", 0.50, status="skip"),  # not measured: not in the table
        {"kind": "ceiling", "impl": "read", "status": "ok"},
    ]
    forecasts = [
        {"kind": "attention", "impl": "sdpa-flash", "error": -0.04},
        {"kind": "attention", "impl": "sdpa-flash", "error": 0.08},
        {"kind": "decode", "impl": "sdpa-cudnn", "error": 0.02},
    ]
    lines = gc.verdict(records, forecasts)
    assert lines[1].split() == ["kind", "impl", "bytes", "ncu/model", "efficiency", "forecast", "error"]
    # sdpa-flash: efficiency median of 60, 70, 80% = 70%, max 80%; bytes 104%; |−4%|, |8%| → 6%
    assert lines[2].split() == ["attention", "sdpa-flash", "104%", "70%", "(max", "80%)", "6%"]
    # sdpa-cudnn: median of 90 and 95% = 92.5% (shown 92%, round half to even); bytes 98%; 2%
    assert lines[3].split() == ["decode", "sdpa-cudnn", "98%", "92%", "(max", "95%)", "2%"]
    assert len(lines) == 5
    # every |error| pooled: 4, 8, 2% → median 4%
    assert lines[4] == (
        "the model holds: YES — bytes within 80%–125% of ncu's (2 cases); no case above its roof "
        "(≤ 105%, 5 cases); held-out forecasts median 4% (3)"
    )


def test_the_verdict_says_no_and_why():
    gc = _module()
    records = [
        _rec("attention", "eager", 0.5, ncu_ratio=0.6),  # ncu counted 60% of the model's bytes
        _rec("decode", "sdpa-cudnn", 1.09),  # above the roof
    ]
    forecasts = [{"kind": "attention", "impl": "eager", "error": 0.30}]
    last = gc.verdict(records, forecasts)[-1]
    assert last == (
        "the model holds: NO — ncu's bytes outside 80%–125% of the model's: eager 60%; "
        "faster than the roof (over 105%): sdpa-cudnn 109%; held-out forecast error over 15%: median 30%"
    )
    assert (
        gc.verdict([], [])[-1] == "the model holds: NOT KNOWN (no case measured by the suite or the ncu step)"
    )


def test_the_verdict_says_exactly_which_parts_were_checked_and_why_not_the_others():
    """It said "YES on time and forecasts" when calibrate and accuracy had FAILED (no forecast at
    all): now YES names the parts checked, and each part not checked says why, from the steps."""
    gc = _module()
    steps = {
        "ncu": ("skip", "no CUDA here (stand-in)"),
        "calibrate": ("failed", "ValueError: no shape to fit"),
    }
    last = gc.verdict([_rec("linear", "linear", 0.7)], [], steps)[-1]
    assert last == (
        "the model holds: YES on the roof only; bytes NOT checked (ncu skipped: no CUDA here (stand-in)); "
        "forecasts NOT checked (calibrate FAILED: ValueError: no shape to fit) — no case above its roof "
        "(≤ 105%, 1 case)"
    )
    forecasts = [{"kind": "linear", "impl": "linear", "error": 0.05}]
    steps = {"ncu": ("not run", "70 s left before the deadline, under 90 s"), "calibrate": ("ok", "")}
    last = gc.verdict([_rec("linear", "linear", 0.7)], forecasts, steps)[-1]
    assert last.startswith(
        "the model holds: YES on the roof and forecasts only; bytes NOT checked (ncu NOT RUN: 70 s left "
        "before the deadline, under 90 s) — "
    )
    # a step that never ended (its phase killed): said so; a part that failed beside one not checked
    last = gc.verdict([_rec("linear", "linear", 1.2)], [], {})[-1]
    assert last == (
        "the model holds: NO — faster than the roof (over 105%): linear 120%; bytes NOT checked (the ncu "
        "step did not end (its phase was cut short, or never ran)); forecasts NOT checked (the calibrate "
        "step did not end (its phase was cut short, or never ran))"
    )
    assert not any(
        "on time and forecasts" in ln for ln in gc.verdict([_rec("linear", "linear", 0.7)], [], steps)
    )


def test_every_cuda_step_command_line_parses():
    """The CUDA steps never run here: their command lines are at least attnroof's own flags (a
    typo would fail the first GPU run), and the ncu cases are built as the ncu step builds them."""
    from attnroof.cli import build_parser

    gc = _module()
    parser = build_parser()
    lines = [
        ["measure", k, *a, "--dtype", "fp32", "--ceilings", "c.json", "--json"]
        for k, a in gc.STEP_SHAPES["cuda"].items()
    ]
    lines += [
        [
            "measure",
            "suite",
            "--quick",
            "--ceilings",
            "c.json",
            "--device",
            "h200",
            "-o",
            "r.jsonl",
            "--resume",
        ]
    ]
    lines += [["measure", "ceilings", "--quick", "--device", "h200", "-o", "c.json"]]
    for argv in lines:
        args = parser.parse_args(argv)
        assert args.handler is not None, argv
    cases = gc.ncu_cases()
    decode = next(c for c in cases if c.kind == "decode")
    assert dict(decode.shape) == {"s": 8192, "d": 128, "batch": 4, "heads": 32, "group": 4}
    assert {c.kind for c in cases} == {"linear", "decode", "attention"} and len({c.key for c in cases}) == 11
