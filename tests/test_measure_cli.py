"""attnroof measure through the command line, as a user runs it (subprocesses, CPU only)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import SRC, assert_one_line_error, needs_torch, run_cli

CPU = {"ATTNROOF_CPU_THREADS": "1"}


def _python(code: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(SRC))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)


def test_core_and_parser_do_not_import_torch():
    code = (
        "import sys, attnroof, attnroof.cli as c; c.build_parser();"
        "import attnroof.measure.ncu, attnroof.text.measure;"
        "assert 'torch' not in sys.modules, 'torch was imported'"
    )
    proc = _python(code)
    assert proc.returncode == 0, proc.stderr


def test_missing_torch_is_one_line_naming_the_extra():
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from attnroof.cli import main\n"
        "sys.exit(main(['measure', 'linear', '-n', '4', '-k', '8', '-m', '8']))"
    )
    proc = _python(code)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert "pip install 'attnroof[measure]'" in lines[0]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["measure"], "measure what?"),
        (["measure", "attention", "-s", "0", "-d", "64"], "'0'"),
        (["measure", "attention", "-s", "64", "-d", "16", "--dtype", "fp8"], "--dtype fp8"),
        (["measure", "attention", "-s", "64", "-d", "16", "--dtype", "bogus"], "bogus"),
        (["measure", "attention", "-s", "64", "-d", "16", "--impl", "sdpa-fast"], "sdpa-fast"),
        (["measure", "decode", "-s", "64", "-d", "16", "--heads", "3", "--group", "2"], "--heads 3"),
        (["measure", "linear", "-n", "1", "-k", "8", "-m", "8", "--device", "nosuchgpu"], "nosuchgpu"),
        (
            ["measure", "linear", "-n", "1", "-k", "8", "-m", "8", "--ceilings", "missing.json"],
            "missing.json",
        ),
        (["measure", "suite", "--quick", "--impl", "nope"], "nope"),
    ],
)
def test_bad_input_is_one_line(args, needle):
    assert_one_line_error(run_cli(*args), needle)


@pytest.fixture(scope="module")
def ceilings_file(tmp_path_factory):
    """A ceilings file in the format 'measure ceilings -o' writes, with made-up figures well
    above what two CPU cores reach (5 TFLOP/s, 200 GB/s), so that no point is flagged."""
    path = tmp_path_factory.mktemp("c") / "ceilings.json"
    device = {
        "name": "measured cpu (test)",
        "kind": "measured",
        "peak_flops_per_s": {"bf16": 5e12, "fp32": 5e12},
        "bandwidth_bytes_per_s": 2e11,
        "source": "measured by attnroof on 2026-01-01 (test fixture)",
    }
    path.write_text(json.dumps({"format": "attnroof-ceilings/1", "device": device, "ceilings": []}))
    return path


def test_ceilings_file_is_a_device_for_the_analytic_commands(ceilings_file):
    res = run_cli("attention", "-s", "8k", "-d", "128", "--device", str(ceilings_file), "--json")
    assert res.returncode == 0, res.stderr
    out = res.json()
    assert out["device"] == "measured cpu (test)"


@needs_torch
def test_measure_decode_json(ceilings_file):
    res = run_cli(
        "measure", "decode", "-s", "256", "-d", "16", "--heads", "4", "--group", "2",
        "--ceilings", str(ceilings_file), "--device", "R", "--ncu", "--json", env=CPU,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    out = res.json()
    recs = {r["impl"]: r for r in out["records"]}
    assert recs["eager-gqa"]["status"] == "ok" and recs["sdpa-math"]["status"] == "ok"
    assert recs["eager-gqa"]["shape"] == {"s": 256, "d": 16, "batch": 1, "heads": 4, "group": 2}
    assert recs["eager-gqa"]["catalog_efficiency"] is not None
    assert any("ncu" in n and "not measured" in n for n in out["notes"])  # no CUDA here: one line, go on


@needs_torch
def test_measure_suite_quick_writes_jsonl_and_resumes(ceilings_file, tmp_path):
    out = tmp_path / "r.jsonl"
    args = [
        "measure",
        "suite",
        "--quick",
        "-o",
        str(out),
        "--ceilings",
        str(ceilings_file),
        "--impl",
        "linear",
    ]
    res = run_cli(*args, env=CPU)
    assert res.returncode == 0, res.stderr
    assert "| linear n=1 1024×1024" in res.stdout and "roof check" in res.stdout
    first = [json.loads(ln) for ln in out.read_text().splitlines()]
    assert [r["kind"] for r in first] == ["linear"] * 3
    res = run_cli(*args, "--resume", "--json", env=CPU)
    assert res.returncode == 0, res.stderr
    assert "resuming: 3 cases" in res.stderr
    assert [json.loads(ln) for ln in out.read_text().splitlines()] == first
    # without --resume, a file that holds measurements is never overwritten
    assert_one_line_error(run_cli(*args, env=CPU), "already holds 3 measurements", "--resume")
    assert [json.loads(ln) for ln in out.read_text().splitlines()] == first


@needs_torch
def test_single_measurements_are_appended_as_made(ceilings_file, tmp_path):
    out = tmp_path / "m.jsonl"
    common = ["--ceilings", str(ceilings_file), "-o", str(out)]
    assert run_cli("measure", "linear", "-n", "4", "-k", "64", "-m", "64", *common, env=CPU).returncode == 0
    res = run_cli(
        "measure", "attention", "-s", "64", "-d", "16", "--impl", "eager,sdpa-math", *common, env=CPU
    )
    assert res.returncode == 0, res.stderr
    recs = [json.loads(ln) for ln in out.read_text().splitlines()]
    assert [(r["kind"], r["impl"], r["status"]) for r in recs] == [
        ("linear", "linear", "ok"),
        ("attention", "eager", "ok"),
        ("attention", "sdpa-math", "ok"),
    ]


@needs_torch
def test_measure_ceilings_writes_a_device_file(tmp_path):
    path = tmp_path / "ceilings.json"
    res = run_cli("measure", "ceilings", "--quick", "--device", "R", "-o", str(path), "--json", env=CPU)
    assert res.returncode == 0, res.stderr
    out = res.json()
    whats = {(r["what"], r["dtype"]) for r in out["ceilings"]}
    assert {("read", None), ("write", None), ("copy", None), ("matmul", "bf16")} <= whats
    bf16 = next(r for r in out["ceilings"] if r["what"] == "matmul" and r["dtype"] == "bf16")
    assert bf16["catalog"] == 1200e12 and bf16["fraction"] == pytest.approx(bf16["measured"] / 1200e12)
    doc = json.loads(path.read_text())
    assert doc["device"]["bandwidth_bytes_per_s"] == max(
        r["measured"] for r in out["ceilings"] if r["what"] in ("read", "write", "copy")
    )
    assert doc["device"]["source"].startswith("measured by attnroof on")
    res = run_cli("decode", "-s", "8k", "-d", "128", "--device", str(path))
    assert res.returncode == 0 and doc["device"]["name"] in res.stdout


def test_a_file_that_is_not_a_results_file_is_never_touched(ceilings_file, tmp_path):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    res = run_cli("measure", "linear", "-n", "1", "-k", "64", "-m", "64", "--ceilings", str(ceilings_file),
                  "-o", str(notes), env=CPU)  # fmt: skip
    assert_one_line_error(res, "notes.txt", "not an attnroof measurement")
    assert notes.read_text() == "my notes\n"
