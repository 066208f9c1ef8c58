"""benchmarks/gpu_check.sh and its phases (benchmarks/gpu_check.py), on the CPU: the whole flow
for real (CUDA steps skipped, said why) within two minutes, leaving one archive and one summary;
an interrupted run and a run past its deadline leave them too; each step's line and the verdict
from stand-ins."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GPU_CHECK = str(ROOT / "benchmarks" / "gpu_check.sh")
CPU_FLOW_LIMIT_S = 120
"""The issue's aim: the whole CPU flow in CI within two minutes."""


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


def _fake_python(folder: Path, body: str) -> str:
    """A stand-in interpreter: the CUDA check (a here-doc on stdin, ``-``) answers at once that
    torch is here and CUDA is not (no torch to import on a loaded machine), the phases run
    ``body`` (``$3`` is the work folder)."""
    check = (
        'cat > /dev/null; echo "torch 0 torch.version.cuda None"; echo "CUDA: not usable: stand-in"; exit 1'
    )
    fake = folder / "fakepy"
    fake.write_text(f'#!/usr/bin/env bash\nif [ "$1" = "-" ]; then {check}; fi\n{body}')
    fake.chmod(0o755)
    return str(fake)


def test_gpu_check_runs_the_whole_flow_on_the_cpu_within_two_minutes(tmp_path):
    """The Done-when: ``PYTHON=python3 bash benchmarks/gpu_check.sh OUTDIR`` without CUDA runs
    every phase for real, the CUDA-only steps skipped with the reason, and leaves exactly the
    archive and the summary, which ends with the verdict."""
    pytest.importorskip("torch")
    pytest.importorskip("scipy")
    assert subprocess.run(["bash", "-n", GPU_CHECK]).returncode == 0
    out = tmp_path / "out"
    env = dict(os.environ, PYTHON="python3", CUDA_VISIBLE_DEVICES="", ATTNROOF_CPU_THREADS="1")
    t0 = time.monotonic()
    res = subprocess.run(
        ["bash", GPU_CHECK, str(out)], capture_output=True, text=True, env=env, timeout=CPU_FLOW_LIMIT_S + 60
    )
    took = time.monotonic() - t0
    text = (out / "summary.txt").read_text()
    assert res.returncode == 0, text + res.stderr
    assert took < CPU_FLOW_LIMIT_S, f"{took:.0f} s"
    assert _top_level(out) == ["gpu_check.tar.gz", "summary.txt"]
    # the CUDA check says why: the interpreter (python3), torch's versions, the error
    assert "  env: interpreter " in text and "(Python 3." in text
    import torch

    assert f"  env: torch {torch.__version__} torch.version.cuda {torch.version.cuda}" in text
    assert "  env: CUDA: not usable: " in text
    for name in ("timers", "ncu-probe", "ncu-suite", "ncu-decode"):
        assert f"skipped {name}: no CUDA here (CUDA: not usable: " in text
    steps = ["ceilings", "suite", "calibrate", "accuracy"] + [
        f"{k}-{dt}" for dt in ("bf16", "fp16", "fp32") for k in ("attention", "decode", "linear")
    ]
    for name in steps:
        assert f"ok      {name} (" in text, name
    assert "\nthe model holds: " in text and "bytes ncu/model" in text
    assert (
        "; every step ok; the model holds: YES on time and forecasts, bytes NOT checked; "
        in (text.splitlines()[-1])
        or "; every step ok; the model holds: NO;" in text.splitlines()[-1]
    )  # CPU timings may not hold
    names = _archived(out)
    for f in ("summary.txt", "env.txt", "ceilings.json", "results.jsonl", "cal.json", "verdict.txt"):
        assert f in names, f
    assert {f"{s}.log" for s in steps} <= set(names)
    assert {"phase-measure.log", "phase-ncu.log", "phase-report.log"} <= set(names)


def test_gpu_check_interrupted_still_leaves_one_archive_and_the_summary(tmp_path):
    out, bin_ = tmp_path / "out", tmp_path / "bin"
    bin_.mkdir()
    started = tmp_path / "started"
    py = _fake_python(bin_, f'case "$*" in *"gpu_check.py measure"*) touch {started}; exec sleep 60;; esac\n')
    env = dict(os.environ, OUT=str(out), PYTHON=py, CUDA_VISIBLE_DEVICES="")
    proc = subprocess.Popen(["bash", GPU_CHECK], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not started.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    assert started.exists()
    proc.terminate()
    proc.communicate(timeout=60)
    assert proc.returncode == 143
    assert _top_level(out) == ["gpu_check.tar.gz", "summary.txt"]
    names = _archived(out)
    assert "summary.txt" in names and "env.txt" in names and "phase-measure.log" in names


def test_gpu_check_keeps_its_deadline_and_names_what_did_not_run(tmp_path):
    """A phase that hangs is stopped at the deadline; the phases after it are not started; the
    steps the phases marked not ok and the phases cut short are named in the last line."""
    out, bin_ = tmp_path / "out", tmp_path / "bin"
    bin_.mkdir()
    py = _fake_python(
        bin_,
        'case "$*" in *"gpu_check.py measure"*) echo linear-fp32 >> "$3/failed.txt"; exec sleep 60;; esac\n',
    )
    env = dict(os.environ, PYTHON=py, CUDA_VISIBLE_DEVICES="", GPU_CHECK_DEADLINE_S="20")
    t0 = time.monotonic()
    res = subprocess.run(["bash", GPU_CHECK, str(out)], capture_output=True, text=True, env=env, timeout=90)
    took = time.monotonic() - t0
    text = (out / "summary.txt").read_text()
    assert res.returncode == 1, text
    assert took < 20 + 10, f"{took:.0f} s"  # 20 s, less 10 kept for packing, + timeout's grace
    assert "TIMEOUT phase measure after " in text
    assert "NOT RUN phase ncu: the deadline (20 s) has passed" in text
    assert "NOT RUN phase report: the deadline (20 s) has passed" in text
    last = text.splitlines()[-1]
    assert "4 step(s) not ok: linear-fp32 measure ncu report" in last
    assert "the model holds: NOT KNOWN (no verdict)" in last
    assert _top_level(out) == ["gpu_check.tar.gz", "summary.txt"]


# ---------------------------------------------------------------- one phase's steps, in-process


def test_each_step_says_ok_skip_or_errors_from_its_cases(tmp_path):
    """ "ok" is exit 0 with every case ok; skipped cases are counted beside it; a wrong or
    errored case, or ncu that measured nothing, marks the step ERRORS and not ok."""
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
    assert check.step("bad-flag", lambda: sys.exit(2)) == "failed"
    assert check.step("crash", lambda: 1 / 0) == "failed"
    check2 = gc.Check(tmp_path, deadline=float("inf"), no_cuda="no CUDA here (why)")
    assert check2.step("timers", printing("x"), cuda_only=True) == "skip"
    lines = (tmp_path / "summary.txt").read_text().splitlines()
    assert lines[0].startswith("ok      attention-bf16 (") and lines[0].endswith(" s)")
    assert lines[1].startswith("ok      decode-bf16 (") and lines[1].endswith(" s), 2 skip")
    assert lines[2].startswith("ERRORS  linear-fp32 (") and lines[2].endswith(" s): 1 error, 1 skip, 1 wrong")
    assert lines[3].startswith("ERRORS  ncu-probe (") and "DRAM bytes not measured" in lines[3]
    assert lines[4].startswith("FAILED  bad-flag (exit 2, ")
    assert lines[5].startswith("FAILED  crash (exit 1, ") and "ZeroDivisionError" in lines[5]
    assert lines[6] == "skipped timers: no CUDA here (why)"
    assert (tmp_path / "failed.txt").read_text().split() == ["linear-fp32", "ncu-probe", "bad-flag", "crash"]
    assert "ZeroDivisionError" in (tmp_path / "crash.log").read_text()  # the traceback, in the step's log


def test_a_step_is_not_started_when_the_deadline_would_pass(tmp_path):
    gc = _module()
    check = gc.Check(tmp_path, deadline=time.time() + 3)  # 3 s left; a CUDA step needs 20
    ran = []
    assert check.step("suite", lambda: ran.append(1)) == "not run"
    assert ran == []
    line = (tmp_path / "summary.txt").read_text().strip()
    assert line.startswith("NOT RUN suite: ") and line.endswith("s left before the deadline, under 20 s")
    assert (tmp_path / "failed.txt").read_text().split() == ["suite"]


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
        "the model holds: YES — bytes within 80%–125% of ncu's; no case above its roof (≤ 105%); "
        "held-out forecasts median 4%"
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
    no_ncu = gc.verdict([_rec("linear", "linear", 0.7)], [])[-1]
    assert no_ncu == (
        "the model holds: YES on time and forecasts, bytes NOT checked — bytes NOT checked (no ncu); "
        "no case above its roof (≤ 105%); no held-out forecast"
    )
    assert gc.verdict([], [])[-1] == "the model holds: NOT KNOWN (no case was measured)"


def test_ncu_is_given_a_limit_inside_its_phase(tmp_path, monkeypatch):
    """ncu's own timeout ends before its phase is killed, so that the bytes it counted are read
    and written: the probe at most 30 s, the suite the phase's time left less 25 s."""
    gc = _module()
    limits = {}

    def fake_cli(*argv):
        return lambda: limits.setdefault(argv[1], float(os.environ["ATTNROOF_NCU_TIMEOUT_S"])) and 0

    monkeypatch.setattr(gc, "cli", fake_cli)
    monkeypatch.setenv("ATTNROOF_NCU_TIMEOUT_S", "0")
    gc.phase_ncu(gc.Check(tmp_path, deadline=time.time() + 100))
    assert limits["linear"] == 30  # the probe
    assert 100 - 25 - 5 <= limits["attention"] <= 100 - 25  # the suite: ~75 s of the 100 left
    assert 100 - 25 - 5 <= limits["decode"] <= 100 - 25  # (the stand-ins take no time)


def test_every_cuda_step_command_line_parses():
    """The CUDA steps never run here: their command lines are at least attnroof's own flags (a
    typo would fail the first GPU run)."""
    from attnroof.cli import build_parser

    gc = _module()
    parser = build_parser()
    lines = [
        ["measure", k, *a, "--dtype", "fp32", "--ceilings", "c.json", "--json"]
        for k, a in gc.STEP_SHAPES["cuda"].items()
    ]
    lines += [
        ["measure", *a, "--ncu", "--ceilings", "c.json", "-o", "n.jsonl", "--json"]
        for a in gc.NCU_SHAPES.values()
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
    ncu_decode = parser.parse_args(lines[3 + 2])
    assert (ncu_decode.s, ncu_decode.batch, ncu_decode.heads, ncu_decode.group, ncu_decode.ncu) == (
        8192,
        4,
        32,
        4,
        True,
    )
