"""Results files, read and written: one reader and its rules for every command (issue 20).

- one writer at a time: a second run given the same ``-o`` is refused, and a single measurement
  into a file that holds it is kept, not measured again (never a duplicate key);
- one device per file: a record, a resume or a ceilings file from another device is refused,
  naming both;
- a measurement read more than once keeps its fastest ok record, and a note says so — for
  plot, report, calibrate and --resume alike;
- derived figures are recomputed from the counts; a stored one that disagrees is refused;
- the file is streamed, with a line limit and a measurement limit; a report of many
  measurements stays small, and the chart draws what the eye can tell apart;
- measured points are linked to the roof they ran under; the legend's figures have 3 digits.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from attnroof.errors import InputError
from attnroof.measure import reading
from attnroof.measure import records as R
from attnroof.measure.reading import read_results
from conftest import SRC, assert_one_line_error, run_cli, run_cli_process

DATA = Path(__file__).parent / "data"
REFERENCE = DATA / "h200-reference.jsonl"
CPU = {"ATTNROOF_CPU_THREADS": "1"}
GPU = "cuda:0 (NVIDIA H200)"


def _linear(n: int, time_s: float = 1e-5, device: str = "cpu (test)", status: str = "ok") -> dict[str, Any]:
    """A linear record of n tokens × a 64×64 weight, timed at ``time_s``: 2·n·64·64 FLOPs,
    2·(n·64 + 64·64 + n·64) bytes."""
    rec = R.new_record(f"linear/linear/bf16/n={n},k=64,m=64", "linear", "linear",
                       {"n": n, "k": 64, "m": 64}, "bf16", device, status=status)  # fmt: skip
    if status == "ok":
        R.set_time(rec, time_s, 2 * n * 64 * 64, 2 * (n * 64 + 64 * 64 + n * 64))
    return rec


def _probe(impl: str, dt: str, time_s: float, device: str = "cpu (test)") -> dict[str, Any]:
    """A ceiling probe: a 1 MiB bandwidth kernel (copy moves 2 MiB), or a 256³ matmul (2·256³ FLOPs)."""
    if impl == "matmul":
        shape, flops, nbytes = {"n": 256, "k": 256, "m": 256}, 2 * 256**3, 3 * 2 * 256**2
    else:
        shape, flops, nbytes = {"bytes": 2**20}, 0, 2**20 * (2 if impl == "copy" else 1)
    key = f"ceiling/{impl}/{dt}/" + ",".join(f"{k}={v}" for k, v in shape.items())
    return R.set_time(R.new_record(key, "ceiling", impl, shape, dt, device), time_s, flops, nbytes)


def _write(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


# ---------------------------------------------------------------- 1. one writer, each key once


HELD = (
    "import sys\n"
    "from attnroof import outfile\n"
    "from attnroof.cli import main\n"
    "class Held(outfile.Lock):\n"
    "    def __init__(self, *args, **kwargs):\n"
    "        super().__init__(*args, **kwargs)\n"
    "        print('locked', flush=True)\n"
    "        sys.stdin.readline()\n"
    "outfile.Lock = Held\n"
    "sys.exit(main(sys.argv[1:]))\n"
)
"""``attnroof ARGV`` that, once it holds its output's lock, says ``locked`` and waits for a line on
stdin before it goes on: a test runs a second writer while the first is known to hold the lock,
whatever the machine's load (no race with the first run's own pace)."""


def test_a_second_campaign_on_the_same_output_is_refused_while_the_first_runs(tmp_path: Path) -> None:
    """Two real processes: the first takes the lock and is held there (:data:`HELD`); the second,
    started then, gets one line naming the file and the holder's process; let go, the first
    measures, and the finished file holds its record once."""
    pytest.importorskip("torch")
    out = tmp_path / "r.jsonl"
    lock = tmp_path / ".r.jsonl.lock"
    argv = ["measure", "linear", "-n", "1", "-k", "64", "-m", "64", "--cpu", "-o", str(out)]
    env = {**os.environ, "PYTHONPATH": str(SRC), **CPU}
    first = subprocess.Popen(
        [sys.executable, "-c", HELD, *argv],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert first.stdout is not None
    try:
        said = first.stdout.readline()  # blocks until the first run holds the lock (or has ended)
        assert said == "locked\n", (said, first.communicate(timeout=600))
        assert lock.read_text().startswith(f"process {first.pid}, since ")
        second = run_cli_process(*argv, env=CPU)
        assert_one_line_error(
            second, str(out), "is being written by another attnroof run", f"process {first.pid}"
        )
    finally:
        _, err = first.communicate("go\n", timeout=600)  # a limit only against a hang
    assert first.returncode == 0, err
    assert [json.loads(line)["key"] for line in out.read_text().splitlines()] == [
        "linear/linear/bf16/n=1,k=64,m=64"
    ]
    assert not lock.exists()  # let go, and tidied, at the end of the run


def test_a_single_measurement_into_a_file_that_holds_it_is_kept_not_appended_again(tmp_path: Path) -> None:
    """``measure linear -o FILE`` run twice: the second run keeps the record (1 line, not 2), says
    so, and every reader still reads the file."""
    pytest.importorskip("torch")
    out = tmp_path / "r.jsonl"
    argv = ("measure", "linear", "-n", "1", "-k", "64", "-m", "64", "--cpu", "-o", str(out))
    assert run_cli(*argv, env=CPU).returncode == 0
    before = out.read_text()
    again = run_cli(*argv, env=CPU)
    assert again.returncode == 0, again
    assert "already holds 1 of the 1 measurement asked for: kept, not measured again" in again.stdout
    assert out.read_text() == before
    with (  # a writer never appends a key the file holds
        R.ResultsFile(out, resume=True) as held,
        pytest.raises(InputError, match="already holds linear/linear/bf16/n=1,k=64,m=64"),
    ):
        held.append(json.loads(before))


def test_a_lock_is_refused_in_process_too_and_let_go_on_close(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    first = R.ResultsFile(out)
    with pytest.raises(InputError, match="is being written by another attnroof run"):
        R.ResultsFile(out, resume=True)
    first.close()
    R.ResultsFile(out, resume=True).close()


# ---------------------------------------------------------------- 2. one device per file


def test_resume_onto_a_file_of_another_device_is_refused_naming_both(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    out = _write(tmp_path / "r.jsonl", [_linear(1, device=GPU)])
    before = out.read_text()
    r = run_cli("measure", "linear", "-n", "2", "-k", "64", "-m", "64", "--cpu", "-o", str(out), env=CPU)
    assert_one_line_error(r, f"holds measurements made on {GPU!r}; this run is on 'cpu (")
    assert out.read_text() == before


def test_a_file_that_mixes_devices_is_refused_by_every_reader(tmp_path: Path) -> None:
    path = _write(tmp_path / "m.jsonl", [_linear(1), _linear(2, device=GPU)])
    needle = f"{path}:2: measured on {GPU!r}, but line 1 on 'cpu (test)'"
    assert_one_line_error(run_cli("plot", "-o", str(tmp_path / "c.png"), "--measured", str(path)), needle)
    assert_one_line_error(run_cli("report", "-o", str(tmp_path / "r.html"), "--measured", str(path)), needle)
    assert_one_line_error(run_cli("calibrate", str(path)), needle)


def test_ceilings_of_another_device_are_refused_naming_both(tmp_path: Path) -> None:
    results = _write(tmp_path / "m.jsonl", [_linear(1), _linear(2)])
    device = {
        "name": f"measured {GPU}",
        "peak_flops_per_s": {"bf16": 7.9e14},
        "bandwidth_bytes_per_s": 4.2e12,
    }
    ceilings = tmp_path / "c.json"
    ceilings.write_text(json.dumps({"device": device}))
    r = run_cli(
        "plot", "-o", str(tmp_path / "c.png"), "--measured", str(results), "--ceilings", str(ceilings)
    )
    assert_one_line_error(r, f"measured on {GPU!r}, but {results} on 'cpu (test)'")


# ---------------------------------------------------------------- 3. one rule for repeats


def test_the_readme_reference_file_is_read_alike_by_every_reader(tmp_path: Path) -> None:
    """h200-reference.jsonl probes each ceiling twice (lines 1-3, again 4-6): plot, report and
    calibrate all take it, keep the fastest, and say so in one note line."""
    note = (
        f"attnroof: note: {REFERENCE}: 3 measurements appear more than once "
        "(first: ceiling/copy/bf16/bytes=1073741824, lines 1 and 4); the fastest ok record of each is kept"
    )
    runs = [
        run_cli("plot", "-o", str(tmp_path / "c.png"), "--measured", str(REFERENCE), "--device", "h200"),
        run_cli("report", "-o", str(tmp_path / "r.html"), "--measured", str(REFERENCE), "--device", "h200"),
        run_cli("calibrate", str(REFERENCE)),
    ]
    for r in runs:
        assert r.returncode == 0, r
        assert note in r.stderr.splitlines()
    held = read_results(REFERENCE)
    copy = next(r for r in held.records if r["key"] == "ceiling/copy/bf16/bytes=1073741824")
    assert copy["time_s"] == 0.000511135995388031  # line 4's 511.1 µs, not line 1's 513.1 µs
    # copy: 511.1 µs (line 4) < 513.1 µs; 8192³: 1.3853 ms (line 2) < 1.3965 ms; 16384³: 12.37 ms (line 6) < 12.50 ms
    assert held.lines[:3] == [4, 2, 6]


@pytest.mark.parametrize(
    ("statuses", "kept"),
    [
        (("error", "ok"), 1),  # a failed attempt and its retry: the retry
        (("ok", "error"), 0),  # a later failure does not undo a measurement that ran
        (("skip", "error"), 1),  # never ran: the latest
        (("ok", "wrong"), 0),
    ],
)
def test_the_rule_for_a_measurement_that_did_not_run_every_time(
    tmp_path: Path, statuses: tuple[str, str], kept: int
) -> None:
    recs = [_linear(1, status=s) for s in statuses]
    path = _write(tmp_path / "m.jsonl", recs)
    assert [r["status"] for r in read_results(path).records] == [statuses[kept]]


def test_resume_keeps_the_repeats_it_read(tmp_path: Path) -> None:
    """Two campaigns pasted into one file, then resumed: the slower repeat is not the kept record,
    but a rewrite (here: an error retried) writes it back, so nothing measured is lost."""
    slow, fast = _linear(1, time_s=2e-5), _linear(1, time_s=1e-5)
    failed = _linear(2, status="error")
    path = _write(tmp_path / "m.jsonl", [slow, failed, fast])
    with R.ResultsFile(path, resume=True) as held:
        assert [r["time_s"] for r in held.records if r["status"] == "ok"] == [1e-5]
        held.rewrite([r for r in held.records if r["status"] != "error"])
    assert sorted(json.loads(line)["time_s"] for line in path.read_text().splitlines()) == [1e-5, 2e-5]


# ---------------------------------------------------------------- 4. derived figures


def test_a_derived_figure_that_disagrees_with_the_counts_is_refused(tmp_path: Path) -> None:
    """1e30 FLOP/s from 2·64·64 = 8192 FLOPs in 10 µs (819 MFLOP/s): refused, not drawn 10¹⁵×
    above the roof."""
    path = _write(tmp_path / "m.jsonl", [{**_linear(1), "achieved_flops_per_s": 1e30}])
    needle = f"{path}:1: achieved_flops_per_s = 1e+30 is not what flops, bytes and time_s make (8.192e+08)"
    assert_one_line_error(run_cli("plot", "-o", str(tmp_path / "c.png"), "--measured", str(path)), needle)


def test_plot_draws_rates_computed_from_the_counts(tmp_path: Path) -> None:
    """A hand-written line rounded to 3 digits passes (within 1%), and the point is drawn at
    flops / time: 8192 FLOPs / 10 µs = 8.192e8 FLOP/s, not the rounded 8.19e8."""
    pytest.importorskip("matplotlib")
    from attnroof.plot import roofline_figure

    rec = {**_linear(1), "achieved_flops_per_s": 8.19e8, "intensity": 0.97}  # 8192 / 8448 = 0.9697
    path = _write(tmp_path / "m.jsonl", [rec])
    fig = roofline_figure("R", "bf16", measured=path)
    (pt,) = next(c for c in fig.axes[0].collections if c.get_gid() == "measured-linear").get_offsets()
    assert pt.tolist() == [8192 / 8448, 8192 / 1e-5]


# ---------------------------------------------------------------- 5. streamed, bounded


def test_dev_zero_is_refused_at_the_first_line_not_read_to_the_end() -> None:
    with pytest.raises(InputError, match="/dev/zero:1: a line longer than 64 KiB is not a results record"):
        read_results("/dev/zero")


def test_more_measurements_than_the_limit_are_refused_naming_the_line(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(reading, "MAX_MEASUREMENTS", 3)
    path = _write(tmp_path / "m.jsonl", [_linear(n) for n in (1, 2, 1, 3, 4)])  # line 3 repeats line 1
    with pytest.raises(InputError, match=f"{path}:5: more than 3 different measurements in one file"):
        read_results(path)


def test_many_measurements_make_a_small_report_and_an_aggregated_chart(tmp_path: Path) -> None:
    """20,000 lines: 2,000 linear shapes (n = 1..2000) measured 10 times each. 2,000 measurements
    are kept (the fastest of each), the report lists the first 200 and says how many more, and
    stays under 2 MB; the chart draws fewer markers than points (n and n+1 land in one 2.3% cell
    once n > 43)."""
    pytest.importorskip("matplotlib")
    from attnroof.plot import chart_inputs, report_html
    from attnroof.plot.chart import thin

    lines = [
        json.dumps(_linear(n, time_s=1e-5 * (1 + rep / 10))) for rep in range(10) for n in range(1, 2001)
    ]
    path = tmp_path / "m.jsonl"
    path.write_text("\n".join(lines) + "\n")
    held = read_results(path)
    assert len(held.records) == 2000 and {r["time_s"] for r in held.records} == {1e-5}
    page = report_html("R", "bf16", measured=path)
    assert len(page.encode()) < 2e6
    assert (
        page.count("<tr><td>linear</td><td>linear</td>") == 200 and "and 1,800 more measured kernels" in page
    )
    inputs = chart_inputs("R", "bf16", measured=path)
    pts = np.array([(m.intensity, m.achieved_flops_per_s) for m in inputs.measured])
    drawn = next(c for c in inputs.draw().axes[0].collections if c.get_gid() == "measured-linear")
    assert len(drawn.get_offsets()) == len(thin(pts)) < 2000


# ---------------------------------------------------------------- 6. the roof they ran under


def test_measured_points_are_linked_to_the_roof_they_ran_on(tmp_path: Path) -> None:
    """A CPU file with its own ceiling probes: a 1 MiB fp32 read in 100 µs (10.5 GB/s) and a 256³
    bf16 matmul in 68.7 µs (488 GFLOP/s). Its linear point links to that roof, not R's; the
    legend says 488 GFLOP/s, not 0.488082 TFLOP/s."""
    pytest.importorskip("matplotlib")
    from attnroof.plot import chart_inputs
    from attnroof.roofline import Roof

    matmul_s = 2 * 256**3 / 0.488082e12
    path = _write(
        tmp_path / "m.jsonl", [_probe("read", "fp32", 1e-4), _probe("matmul", "bf16", matmul_s), _linear(1)]
    )
    r = run_cli("plot", "-o", str(tmp_path / "c.png"), "--measured", str(path))
    assert r.returncode == 0 and "catalog roof" not in r.stderr, r  # no note: the roof is known
    inputs = chart_inputs("R", "bf16", measured=path)
    (roof,) = inputs.ceilings
    assert roof.peak_flops_per_s == pytest.approx(0.488082e12) and roof.bandwidth_bytes_per_s == 2**20 / 1e-4
    fig = inputs.draw()
    (seg,) = next(c for c in fig.axes[0].collections if c.get_gid() == "link-linear").get_segments()
    intensity = 8192 / 8448
    assert seg[1].tolist() == pytest.approx(
        [intensity, Roof(0.488082e12, 2**20 / 1e-4).attainable(intensity)]
    )
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "bf16 measured: 488 GFLOP/s, 10.5 GB/s" in labels
    assert not any("0.488082" in label for label in labels)
