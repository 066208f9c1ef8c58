"""Measured kernels on the CPU at tiny sizes: outputs checked, records complete, failures become
records, resume, the roof check. torch (CPU) is needed; no GPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from attnroof.devices import device_from_record, get_device  # noqa: E402
from attnroof.measure import ceilings as C  # noqa: E402
from attnroof.measure import kernels as K  # noqa: E402
from attnroof.measure.env import local_device  # noqa: E402
from attnroof.measure.records import (  # noqa: E402
    IMPOSSIBLE_TEXT,
    RECORD_KEYS,
    ResultsFile,
    new_record,
    place_record,
    read_records,
    set_time,
)
from attnroof.measure.runner import measure_case  # noqa: E402
from attnroof.measure.suite import plan_cases, run_suite  # noqa: E402
from attnroof.measure.timing import Budget  # noqa: E402
from attnroof.text.measure import roof_check, summary  # noqa: E402

TINY = Budget(seconds=0.001, min_reps=2, max_reps=2, warmup=0)
# a made-up roof: 1 TFLOP/s in every dtype, 100 GB/s
ROOF = device_from_record(
    {
        "name": "test roof",
        "peak_flops_per_s": {"bf16": 1e12, "fp16": 1e12, "fp32": 1e12},
        "bandwidth_bytes_per_s": 1e11,
    }
)


@pytest.fixture(scope="module")
def dev():
    return local_device("cpu")


def _all_cases() -> list[K.Case]:
    cases = []
    for causal in (False, True):
        cases += [K.attention_case(i, 64, 16, batch=2, heads=2, causal=causal) for i in K.IMPLS["attention"]]
    for group in (1, 2):
        cases += [K.decode_case(i, 96, 16, batch=2, heads=4, group=group) for i in K.IMPLS["decode"]]
    cases.append(K.linear_case(8, 32, 48))
    cases.append(K.attention_case("eager", 64, 16, heads=2, causal=True, dt="fp32"))
    return cases


def test_every_implementation_checked_timed_and_placed(dev):
    records = [
        measure_case(c, dev, measured=ROOF, catalog=get_device("R"), budget=TINY) for c in _all_cases()
    ]
    for rec in records:
        assert set(RECORD_KEYS) <= set(rec), rec["key"]
        assert rec["status"] in ("ok", "skip"), (rec["key"], rec["reason"])
        assert rec["flops"] > 0 and rec["bytes"] > 0  # the model's counts, even for skips
        if rec["status"] == "skip":
            assert rec["impl"] in ("sdpa-cudnn", "sdpa-efficient") and rec["reason"]
            assert rec["time_s"] is None
            continue
        assert rec["rel_error"] <= K.TOLERANCE[rec["dtype"]]
        assert rec["time_s"] > 0
        assert rec["achieved_flops_per_s"] == pytest.approx(rec["flops"] / rec["time_s"])
        if rec["impl"] == "sdpa-math":  # not modelled as it runs: a bound, no efficiency claimed
            assert rec["efficiency"] is None and rec["catalog_efficiency"] is None
            continue
        assert rec["efficiency"] == pytest.approx(rec["bound_time_s"] / rec["time_s"])
        if rec["dtype"] == "bf16":  # device R has a bf16 peak only
            assert rec["catalog_efficiency"] == pytest.approx(rec["catalog_bound_time_s"] / rec["time_s"])
        else:
            assert rec["catalog_efficiency"] is None
        assert rec["ncu_bytes"] is None
    ok = {(r["kind"], r["impl"]) for r in records if r["status"] == "ok"}
    assert {
        ("attention", "eager"),
        ("attention", "sdpa-math"),
        ("decode", "eager-gqa"),
        ("linear", "linear"),
    } <= ok
    assert len({r["key"] for r in records}) == len(records)
    json.dumps(records)  # plain JSON


def test_model_cost_follows_the_implementation():
    eager = K.model_cost(K.attention_case("eager", 1024, 64))
    flash = K.model_cost(K.attention_case("sdpa-flash", 1024, 64))
    math_ = K.model_cost(K.attention_case("sdpa-math", 1024, 64))
    assert eager.flops == flash.flops
    # unfused/fused traffic = 1 + s/d = 17
    assert eager.bytes == 17 * flash.bytes == math_.bytes
    # decode, GQA: 8 query heads on 2 KV heads read K and V twice, not eight times
    gqa = K.model_cost(K.decode_case("sdpa-flash", 4096, 128, heads=8, group=4))
    mha = K.model_cost(K.decode_case("sdpa-flash", 4096, 128, heads=8, group=1))
    assert gqa.bytes < mha.bytes / 3


def test_wrong_output_gets_no_time(dev, monkeypatch):
    real = K.BUILDERS["linear"]

    def broken(case, d):
        p = real(case, d)
        return K.Prepared(lambda: p.run() * 1.5, p.error)

    monkeypatch.setitem(K.BUILDERS, "linear", broken)
    rec = measure_case(K.linear_case(8, 32, 48), dev, measured=ROOF, budget=TINY)
    assert rec["status"] == "wrong" and rec["time_s"] is None and rec["efficiency"] is None
    assert rec["rel_error"] == pytest.approx(0.5, rel=0.05) and "relative error" in rec["reason"]


@pytest.mark.parametrize(
    "exc",
    [
        lambda: torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 64.00 GiB"),
        lambda: RuntimeError("[enforce fail] DefaultCPUAllocator: can't allocate memory"),
    ],
)
def test_out_of_memory_is_a_skip(dev, monkeypatch, exc):
    def oom(case, d):
        raise exc()

    monkeypatch.setitem(K.BUILDERS, "attention", oom)
    rec = measure_case(K.attention_case("eager", 64, 16), dev, measured=ROOF, budget=TINY)
    assert rec["status"] == "skip" and rec["reason"].startswith("out of memory")


def test_other_failures_are_errors_not_crashes(dev, monkeypatch):
    def bad(case, d):
        raise ValueError("kaputt")

    monkeypatch.setitem(K.BUILDERS, "linear", bad)
    rec = measure_case(K.linear_case(8, 32, 48), dev, measured=ROOF, budget=TINY)
    assert rec["status"] == "error" and rec["reason"] == "ValueError: kaputt"


def test_memory_estimate_over_the_limit_skips_before_allocating(dev, monkeypatch):
    monkeypatch.setitem(K.BUILDERS, "attention", lambda c, d: pytest.fail("must not build"))
    case = K.attention_case("eager", 4096, 128, heads=32)
    # S and P: 2 · 32 · 4096² · 2 bytes = 2.1 GB, plus Q, K, V, O
    assert K.estimate_bytes(case) > 2 * 32 * 4096**2 * 2
    rec = measure_case(case, dev, measured=ROOF, memory_limit_bytes=1e6)
    assert rec["status"] == "skip" and "needs about" in rec["reason"]


def test_planted_impossible_point_is_flagged():
    fine = new_record("ok-point", "linear", "linear", {"n": 1}, "bf16", "cpu")
    set_time(fine, 1.0, 1e9, 1e9)  # bound: max(1e9/1e12, 1e9/1e11) = 10 ms ≤ 1 s
    fast = new_record("planted", "linear", "linear", {"n": 1}, "bf16", "cpu")
    set_time(fast, 1e-3, 1e9, 1e9)  # 10 ms of traffic in 1 ms: 10× above the roof
    for rec in (fine, fast):
        place_record(rec, ROOF)
    assert not fine["impossible"] and fine["efficiency"] == pytest.approx(0.01)
    assert fast["impossible"] and fast["efficiency"] == pytest.approx(10)
    check = roof_check([fine, fast])
    assert IMPOSSIBLE_TEXT in check and "planted" in check and "ok-point" not in check
    fine["shape"] = fast["shape"] = {"n": 1, "k": 2, "m": 3}
    assert "IMPOSSIBLE" in summary([fine, fast])
    assert "IMPOSSIBLE" not in roof_check([fine])


def test_results_file_resume_skips_done_keys(dev, tmp_path):
    path = tmp_path / "results.jsonl"
    cases = [K.linear_case(n, 32, 32) for n in (1, 2, 3, 4)]
    ran: list[str] = []

    def run(resume: bool) -> list[dict]:
        results = ResultsFile(path, resume=resume)
        records, _ = run_suite(
            results, dev, quick=True, ceilings=ROOF, cases=cases, progress=lambda r: ran.append(r["key"])
        )
        return records

    run(False)
    assert ran == [c.key for c in cases]
    lines = path.read_text().splitlines()
    assert len(lines) == 4 and all(set(RECORD_KEYS) <= set(json.loads(ln)) for ln in lines)
    # an interrupted run: two records written, the third cut off mid-line
    path.write_text(lines[0] + "\n" + lines[1] + "\n" + lines[2][:40])
    assert [r["key"] for r in read_records(path)] == [cases[0].key, cases[1].key]
    ran.clear()
    records = run(True)
    assert ran == [cases[2].key, cases[3].key]
    keys = [json.loads(ln)["key"] for ln in path.read_text().splitlines()]
    assert keys == [c.key for c in cases] == [r["key"] for r in records]
    # a case that ended in an error is tried again on --resume, and its error record replaced
    recs = [json.loads(ln) for ln in path.read_text().splitlines()]
    recs[1].update(status="error", reason="RuntimeError: planted", time_s=None)
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    ran.clear()
    records = run(True)
    assert ran == [cases[1].key]
    assert sorted(r["key"] for r in records) == sorted(c.key for c in cases)
    assert all(json.loads(ln)["status"] == "ok" for ln in path.read_text().splitlines())
    ran.clear()
    run(False)  # a fresh ResultsFile (the CLI refuses a file with measurements without --resume)
    assert len(ran) == 4 and len(path.read_text().splitlines()) == 4


def test_ceilings_device_and_file(dev, tmp_path, monkeypatch):
    monkeypatch.setattr(C, "CPU_BUFFER_BYTES", 8 * 2**20)
    monkeypatch.setitem(C.MATMUL_SIZES, ("cpu", True), (64, 128))
    records = C.measure_ceilings(dev, quick=True, dtypes=["bf16", "fp32"])
    impls = [(r["impl"], r["dtype"]) for r in records]
    assert impls[:3] == [("read", "fp32"), ("write", "fp32"), ("copy", "fp32")]
    assert ("matmul", "bf16") in impls and ("matmul", "fp32") in impls
    copy = records[2]
    assert copy["bytes"] == 2 * copy["shape"]["bytes"]  # STREAM: read + written
    device = C.measured_device(records, dev)
    best_bw = max(r["achieved_bytes_per_s"] for r in records[:3])
    assert device.bandwidth_bytes_per_s == best_bw
    assert "measured by attnroof on" in device.source
    for r in records:
        assert set(RECORD_KEYS) <= set(r) and r["kind"] == "ceiling"
        assert r["efficiency"] <= 1 + 1e-9  # nothing beats the best of itself
    path = tmp_path / "ceilings.json"
    C.write_ceilings(path, device, records)
    loaded = get_device(str(path))
    assert loaded.bandwidth_bytes_per_s == pytest.approx(best_bw)
    assert set(loaded.peak_flops_per_s) <= {"bf16", "fp32"}


def test_quick_plan_fits_a_small_cpu():
    cases = plan_cases("cpu", quick=True)
    kinds = {c.kind for c in cases}
    assert kinds == {"attention", "decode", "linear"}
    assert max(K.estimate_bytes(c) for c in cases) < 256 * 2**20
    assert len({c.key for c in cases}) == len(cases)
    gpu = plan_cases("cuda", quick=False)
    assert any(K.estimate_bytes(c) > 100e9 for c in gpu)  # some eager cases will be skipped, with a reason


def test_ceilings_file_without_device_object(tmp_path):
    from attnroof.errors import DeviceFileError

    bad = tmp_path / "c.json"
    bad.write_text(json.dumps({"ceilings": []}))
    with pytest.raises(DeviceFileError, match="no 'device' object"):
        get_device(str(bad))
    assert Path(bad).exists()
