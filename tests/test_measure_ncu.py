"""The ncu CSV parser and marker attribution, on a copy of a real ncu report (no torch, no GPU)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from attnroof.measure.ncu import (
    DURATION,
    READ,
    WRITE,
    NcuError,
    attach,
    between_markers,
    parse_csv,
    summarize,
    to_si,
)

SAMPLE = Path(__file__).parent / "data" / "ncu-sample.csv"


def test_units_and_thousands_separators():
    assert to_si("34,391,552", "byte") == 34391552
    assert to_si("2,208", "ns") == pytest.approx(2208e-9)
    assert to_si("1.5", "Kbyte") == 1500
    assert to_si("3", "MB") == 3e6
    assert to_si("0.5", "GB") == 5e8
    assert to_si("2.5", "usecond") == pytest.approx(2.5e-6)
    assert to_si("1.25", "ms") == pytest.approx(1.25e-3)
    assert to_si("n/a", "byte") is None
    assert to_si("7", "furlong") is None  # an unknown unit gives no number, never a guessed scale
    assert to_si("7", "") == 7


def test_sample_kernels_in_order_with_si_metrics():
    kernels = parse_csv(SAMPLE.read_text())  # starts with ==WARNING== and ==PROF== lines
    assert [k.id for k in kernels] == [0, 1, 2, 3, 4]
    assert "spin_kernel" in kernels[0].name and "spin_kernel" in kernels[4].name
    assert "SoftMaxForward" in kernels[2].name
    assert kernels[1].metrics[READ] == 34_391_552
    assert kernels[1].metrics[WRITE] == 507_348_992
    assert kernels[1].metrics[DURATION] == pytest.approx(173_152e-9)


def test_sample_one_case_between_markers():
    groups = between_markers(parse_csv(SAMPLE.read_text()))
    assert len(groups) == 1 and len(groups[0]) == 3  # Q·Kᵀ GEMM, softmax, P·V GEMM
    res = summarize(groups[0])
    assert res.bytes_read == 34_391_552 + 536_887_552 + 556_054_016
    assert res.bytes_written == 507_348_992 + 516_424_704 + 8_956_672
    assert res.time_s == pytest.approx((173_152 + 829_920 + 139_328) * 1e-9)
    assert res.kernels == 3


def test_setup_kernels_outside_marker_pairs_are_dropped():
    text = SAMPLE.read_text()
    lines = text.splitlines()
    header = next(i for i, ln in enumerate(lines) if ln.startswith('"ID"'))
    rows = lines[header + 1 :]
    # a second case: the same three kernels, after a set-up kernel (ID 5) outside the markers
    extra = []
    for new_id, old in ((5, 1), (6, 0), (7, 1), (8, 2), (9, 3), (10, 4)):
        extra += [
            r.replace(f'"{old}","484"', f'"{new_id}","484"', 1) for r in rows if r.startswith(f'"{old}",')
        ]
    groups = between_markers(parse_csv("\n".join([*lines, *extra])))
    assert [len(g) for g in groups] == [3, 3]


def test_no_header_is_an_error():
    with pytest.raises(NcuError):
        parse_csv("==PROF== Connected to process 1\n==ERROR== ERR_NVGPUCTRPERM\n")


def test_attach_ratio_to_model_bytes():
    res = summarize(between_markers(parse_csv(SAMPLE.read_text()))[0])
    recs = [{"key": "a", "bytes": res.bytes / 2}, {"key": "b", "bytes": 1.0, "ncu_bytes": None}]
    attach(recs, {"a": res})
    assert recs[0]["ncu_bytes"] == res.bytes and recs[0]["ncu_ratio"] == pytest.approx(2.0)
    assert recs[1]["ncu_bytes"] is None


def test_profile_runs_ncu_and_maps_marked_cases_to_keys(tmp_path, monkeypatch):
    """A stand-in ``ncu`` on PATH: it checks the command line, marks the one case done the way the
    child does, and prints the sample report."""
    from attnroof.measure import ncu
    from attnroof.measure.kernels import linear_case

    fake = tmp_path / "ncu"
    fake.write_text(
        "#!/usr/bin/env python3\n"
        "import json, sys\n"
        "args = sys.argv[1:]\n"
        "assert args[args.index('--metrics') + 1] == "
        "'dram__bytes_read.sum,dram__bytes_write.sum,gpu__time_duration.sum', args\n"
        "assert '--csv' in args and args[args.index('--clock-control') + 1] == 'none', args\n"
        "assert args[-4:-2] == ['-m', 'attnroof.measure.ncu'], args\n"
        "cases = json.load(open(args[-2]))\n"
        "c = cases[0]\n"
        "key = '{kind}/{impl}/{dtype}/'.format(**c) + ','.join(f'{k}={v}' for k, v in c['shape'].items())\n"
        "json.dump({'marked': [[key, True]], 'end': 'finished'}, open(args[-1], 'w'))\n"
        f"sys.stdout.write(open({str(SAMPLE)!r}).read())\n"
    )
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    case = linear_case(16, 64, 64)
    results = ncu.profile([case], timeout_s=600)  # a limit the stand-in meets unless stuck
    assert list(results) == [case.key]
    assert results[case.key].bytes == (34_391_552 + 536_887_552 + 556_054_016) + (
        507_348_992 + 516_424_704 + 8_956_672
    )


def test_a_report_cut_short_keeps_the_whole_cases_only():
    """A report that ends mid-row (ncu killed while it printed) parses; a case whose last kernel
    lost its counters gets no bytes rather than too few."""
    from attnroof.measure import ncu

    text = SAMPLE.read_text()
    lines = text.rstrip("\n").splitlines()
    cut = "\n".join(lines[:-4]) + "\n" + lines[-4][:20]  # the closing marker gone, a row torn
    assert between_markers(parse_csv(cut)) == []  # an open marker: no case
    kernels = parse_csv(text)
    torn = [*kernels[:3], ncu.Kernel(kernels[3].id, kernels[3].name, {READ: 1.0}), kernels[4]]
    said: list[str] = []
    with pytest.raises(NcuError, match="no case's DRAM bytes came out"):
        ncu._results(
            [object()], None, _csv_of(torn), "", {"marked": [["a", True]], "end": None}, 60.0, said.append
        )
    assert said == ["ncu ran past 60 s; 1 case cut short in the report; DRAM bytes for 0 of 1 case only"]


def _csv_of(kernels) -> str:
    rows = ['"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"']
    for k in kernels:
        rows += [f'"{k.id}","{k.name}","{m}","byte","{v}"' for m, v in k.metrics.items()]
    return "\n".join(rows) + "\n"


def test_profile_without_ncu_says_so(monkeypatch, tmp_path):
    from attnroof.measure import ncu

    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(NcuError, match="not on PATH"):
        ncu.profile([])
