"""Calibration: the fit recovers known parameters, reports its errors on the H200 reference
file, and forecasts through the CLI; a CPU run of the whole loop (measure, calibrate, forecast)."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

from attnroof import calibration
from attnroof.calibration.fit import Point, fit_points, leave_one_shape_out, summary, t0_prior
from attnroof.calibration.forecast import forecast, select
from attnroof.calibration.physics import (
    Params,
    Roofs,
    call_features,
    diagonal_factor,
    features,
    predict,
    smooth_max,
)
from attnroof.devices import get_device
from attnroof.errors import InputError, MissingExtra
from attnroof.measure.reading import parse_results
from conftest import assert_one_line_error, run_cli

pytestmark = pytest.mark.xdist_group("calibration")  # one worker: its module fixtures run once

pytest.importorskip("scipy")

DATA = Path(__file__).resolve().parent / "data" / "h200-reference.jsonl"
ROOFS = Roofs(800e12, 4e12, sms=132, l2_bytes=60e6)


def _truth(**kw):
    base = dict(
        t0_s=8e-6, eta_compute={0: 0.8}, eta_memory=0.7, eta_pass={0: 0.7}, sharpness=4.0, l2_speedup=1.0,
        causal_block=128,
    )  # fmt: skip
    base.update(kw)
    return Params(**base)


def _synthetic(kind, impl, shapes, params, roofs=ROOFS):
    return [
        Point(
            kind,
            impl,
            sh,
            "bf16",
            predict(call_features(kind, impl, sh, "bf16", roofs, params), params, roofs),
        )
        for sh in shapes
    ]


# ---------------------------------------------------------------- the physics, by hand


def test_causal_diagonal_tiles_and_smooth_max_by_hand():
    # s = 1024 in 128-tiles: 8 a side, 8·9/2 = 36 of 64 tiles computed = 0.5625 = ½ · 9/8
    assert diagonal_factor(1024, 128) == 9 / 8
    assert smooth_max(3.0, 4.0, 2.0) == 5.0  # √(9 + 16)
    assert smooth_max(3.0, 4.0, math.inf) == 4.0


def test_predict_linear_by_hand():
    # n = 1024, k = m = 8192: 2·1024·8192² FLOPs = 1.374e11; 8·64 = 512 tiles over 132 SMs = 4 waves of 528
    p = _truth(sharpness=math.inf)
    f = features("linear", "linear", {"n": 1024, "k": 8192, "m": 8192}, "bf16", ROOFS, 128)
    work = 2 * 1024 * 8192 * 8192 * (528 / 512)
    assert predict(f, p, ROOFS) == pytest.approx(8e-6 + work / (0.8 * 800e12))


def test_eager_passes_by_hand():
    # causal eager, s = 512, d = 64, 1 head: S is 512² bf16 = 524288 B. The mask pass reads S and
    # the bool mask and writes S (2.5 × 524288 B) at η_mask; the softmax reads S, writes P
    # (2 × 524288 B) at η_pass of its row length 512 (halfway in log between 256 and 1024)
    p = _truth(t0_s=0.0, eta_pass={256: 0.4, 1024: 0.9}, eta_mask=0.25, sharpness=math.inf)
    shape = {"s": 512, "d": 64, "batch": 1, "heads": 1, "group": 1, "causal": True}
    f = features("attention", "eager", shape, "bf16", ROOFS, 128)
    mask, softmax = f.kernels[1], f.kernels[2]
    assert (mask.role, softmax.role, softmax.row) == ("mask", "pass", 512)
    assert mask.bytes == 2.5 * 524288 and softmax.bytes == 2 * 524288
    eta = math.sqrt(0.4 * 0.9)  # log-linear: 512 is halfway between 256 and 1024
    assert p.eta_of(softmax) == pytest.approx(eta)
    one = _truth(t0_s=0.0, sharpness=math.inf)
    rest = predict(f, one, ROOFS) - (2.5 * 524288 + 2 * 524288) / (0.7 * 4e12)
    assert predict(f, p, ROOFS) == pytest.approx(
        rest + 2.5 * 524288 / (0.25 * 4e12) + 2 * 524288 / (eta * 4e12)
    )


def test_fused_decode_tiles_and_split_kv_by_hand():
    # batch 8, 32 query heads in groups of 4: 64 KV heads, each one 64-row tile of FlashAttention's
    # split-KV kernel. 64 tiles < 0.8 × 264 slots (2 per SM): split the 16384 keys (128 blocks of
    # 128) 4 ways, 256 of 264 slots busy (97%). Work: 64 rows per KV head, not 4.
    shape = {"s": 16384, "d": 128, "batch": 8, "heads": 32, "group": 4}
    main, combine = features("decode", "sdpa-flash", shape, "bf16", ROOFS, 128).kernels
    assert main.flops == 64 * 64 * 16384 * (4 * 128 + 5)
    kv, qo = 2 * 64 * 16384 * 128 * 2, 2 * 256 * 128 * 2
    partial = 4 * 256 * (128 + 1) * 4  # per split and query head: a float32 d-vector and its LSE
    assert (main.bytes, combine.bytes, combine.flops) == (kv + qo + partial, partial, 0.0)
    # group 1: 256 KV heads fill 0.8 × 264 slots, one split, the 128-row tile
    (one,) = features("decode", "sdpa-flash", {**shape, "group": 1}, "bf16", ROOFS, 128).kernels
    assert one.flops == 256 * 128 * 16384 * (4 * 128 + 5)
    # an implementation whose kernels are not known: 4 rows of real work, split only if fitted so
    (plain,) = features("decode", "sdpa-cudnn", shape, "bf16", ROOFS, 128).kernels
    assert plain.flops == 64 * 4 * 16384 * (4 * 128 + 5) and plain.bytes == kv + qo
    assert len(features("decode", "sdpa-cudnn", shape, "bf16", ROOFS, 128, split_kv=True).kernels) == 2


# ---------------------------------------------------------------- the fit recovers what made the data


def test_fit_recovers_a_gemm():
    truth = _truth(t0_s=6e-6, eta_compute={0: 0.85}, eta_memory=0.65, sharpness=3.0)
    shapes = [{"n": n, "k": 8192, "m": 8192} for n in (1, 4, 16, 64, 128, 256, 512, 1024, 4096, 16384)]
    fit = fit_points(_synthetic("linear", "linear", shapes, truth), ROOFS)
    p = fit.params
    assert p.t0_s == pytest.approx(6e-6, rel=0.02)
    assert p.eta_compute[0] == pytest.approx(0.85, rel=0.01)
    assert p.eta_memory == pytest.approx(0.65, rel=0.01)
    assert p.sharpness == pytest.approx(3.0, rel=0.05)
    assert {"t0_s", "eta_compute", "eta_memory", "sharpness"} <= set(fit.fitted)


def test_fit_recovers_fused_attention_per_head_dim_and_block():
    truth = _truth(
        t0_s=20e-6, eta_compute={64: 0.4, 128: 0.6}, eta_memory=0.8, sharpness=2.0, causal_block=256
    )
    shapes = [
        {"s": s, "d": d, "batch": 1, "heads": 2**27 // (s * d * 3 * 2) or 1, "group": 1, "causal": c}
        for s in (512, 2048, 8192)
        for d in (64, 128)
        for c in (False, True)
    ]
    fit = fit_points(_synthetic("attention", "sdpa-flash", shapes, truth), ROOFS)
    assert fit.params.causal_block == 256
    assert fit.params.eta_compute[64] == pytest.approx(0.4, rel=0.02)
    assert fit.params.eta_compute[128] == pytest.approx(0.6, rel=0.02)
    held = leave_one_shape_out(_synthetic("attention", "sdpa-flash", shapes, truth), ROOFS)
    assert summary([h.error for h in held])["p90"] < 0.02  # exact data: held-out shapes forecast exactly


def test_parameters_the_data_cannot_pin_down_are_not_fitted_and_said_so():
    truth = _truth(t0_s=10e-6, eta_compute={128: 1.0}, eta_memory=0.9)
    shapes = [{"s": s, "d": 128, "batch": 8, "heads": 32, "group": g} for s in (1024, 16384) for g in (1, 4)]
    fit = fit_points(
        _synthetic("decode", "sdpa-cudnn", shapes, truth, Roofs(800e12, 4e12)), Roofs(800e12, 4e12)
    )
    assert "eta_compute@128" not in fit.fitted  # unpadded decode never nears the ridge
    assert any(n.startswith("eta_compute at d=128") for n in fit.notes)
    assert any(n.startswith("sharpness") for n in fit.notes)
    assert any(n.startswith("split_kv: 0 point(s)") for n in fit.notes)  # no SM count: no plan
    assert fit.params.eta_memory == pytest.approx(0.9, rel=0.01)


DECODE_SHAPES = [
    {"s": s, "d": 128, "batch": b, "heads": 32, "group": g}
    for s in (1024, 4096, 16384)
    for g in (1, 4, 8)
    for b in (2, 8)
]


@pytest.mark.parametrize("split", [False, True])
def test_fit_recovers_whether_decode_splits_the_cache(split):
    truth = _truth(t0_s=15e-6, eta_compute={128: 1.0}, eta_memory=0.9, split_kv=split)
    fit = fit_points(_synthetic("decode", "sdpa-cudnn", DECODE_SHAPES, truth), ROOFS)
    assert fit.params.split_kv is split and "split_kv" in fit.fitted
    assert fit.params.t0_s == pytest.approx(15e-6, rel=0.02)


def test_few_points_hold_the_finer_parameters_first():
    # padded flash decode nears the ridge: with 4 points of 5 free parameters, p and L2× are held
    truth = _truth(t0_s=15e-6, eta_compute={128: 0.5}, eta_memory=0.9, sharpness=4.0)
    fit = fit_points(_synthetic("decode", "sdpa-flash", DECODE_SHAPES[9:13], truth), ROOFS)
    assert fit.fitted[:3] == ["t0_s", "eta_memory", "eta_compute@128"]
    assert any(n.startswith("4 point(s): only t0_s, eta_memory, eta_compute@128") for n in fit.notes)


def test_a_thin_fit_holds_the_devices_fixed_cost(reference):
    # SDPA's efficient kernel decodes group 1 only: 2 shapes, so each held-out fit has one point
    # and holds t0 at the median of the other decode fits' (flash, cuDNN, eager)
    (cal,) = reference
    prior = t0_prior([cal.fits[("decode", i)].fit for i in ("sdpa-flash", "sdpa-cudnn", "eager-gqa")])
    assert 10e-6 < prior < 30e-6
    eff = cal.fits[("decode", "sdpa-efficient")]
    one = fit_points(eff.points[:1], cal.roofs, prior)
    assert one.params.t0_s == prior and any(n.startswith("t0: held at") for n in one.notes)
    assert max(abs(h.error) for h in eff.held) < 0.1


def test_missing_scipy_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "scipy.optimize", None)
    with pytest.raises(MissingExtra, match=r"attnroof\[calibrate\]"):
        fit_points(_synthetic("linear", "linear", [{"n": 1, "k": 64, "m": 64}] * 3, _truth()), ROOFS)


# ---------------------------------------------------------------- the reference file


@pytest.fixture(scope="module")
def reference():
    return calibration.calibrate(parse_results(DATA.read_text(), str(DATA)))


def test_reference_calibration_errors_as_reported(reference):
    (cal,) = reference
    assert cal.catalog_device == "H200 SXM" and cal.dtype == "bf16"
    assert cal.roofs.peak_flops_per_s == pytest.approx(793.67e12, rel=1e-4)  # best 8192³ matmul
    assert cal.roofs.bandwidth_bytes_per_s == pytest.approx(4.2014e12, rel=1e-4)  # best 1 GiB copy
    assert {impl for _, impl in cal.fits} == {
        "eager",
        "eager-gqa",
        "sdpa-flash",
        "sdpa-cudnn",
        "sdpa-efficient",
        "linear",
    }
    pooled = cal.pooled()
    assert pooled["n"] == 75  # 48 prefill + 20 decode + 7 linear shapes
    # what docs/forecasts.md reports (benchmarks/calibration.py): pooled median 3.1%, p90 21.2%, within
    # the targets (8%, 25%)
    assert pooled["median"] == pytest.approx(0.031, abs=0.005)
    assert pooled["p90"] == pytest.approx(0.212, abs=0.01)
    assert pooled["median"] <= 0.08 and pooled["p90"] <= 0.25
    readme = (Path(__file__).resolve().parents[1] / "docs" / "forecasts.md").read_text()
    assert (
        f"| **pooled** | all modelled | 75 | {100 * pooled['median']:.1f}% | {100 * pooled['p90']:.1f}% |"
        in readme
    )
    # fused prefill: cuDNN beats flash beats efficient in compute efficiency at d = 128
    eta = {
        impl: cal.fits[("attention", impl)].fit.params.eta_compute[128]
        for impl in ("sdpa-cudnn", "sdpa-flash", "sdpa-efficient")
    }
    assert eta["sdpa-cudnn"] > eta["sdpa-flash"] > eta["sdpa-efficient"]


def test_calibration_file_round_trips(reference, tmp_path):
    path = tmp_path / "cal.json"
    calibration.write(path, reference)
    (back,) = calibration.read(path)
    shape = {"s": 4096, "d": 128, "batch": 1, "heads": 128, "group": 1, "causal": True}
    assert forecast(back, "attention", shape) == forecast(reference[0], "attention", shape)
    with pytest.raises(InputError, match="fitted on H200 SXM bf16, not on H100 SXM"):
        select([back], get_device("h100"), "bf16")


# ---------------------------------------------------------------- the commands


@pytest.fixture(scope="module")
def cal_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("cal") / "cal.json"
    res = run_cli("calibrate", str(DATA), "-o", str(path))
    assert res.returncode == 0, res.stderr
    assert "held-out" in res.stdout and "t0" in res.stdout and "not fitted" in res.stdout
    return path


@pytest.mark.parametrize(
    "args, impl",
    [
        (["attention", "-s", "4096", "-d", "128", "--heads", "128", "--causal"], "sdpa-cudnn"),
        (
            ["decode", "-s", "8192", "-d", "128", "--batch", "8", "--heads", "32", "--group", "4"],
            "sdpa-flash",
        ),
        (["decode", "-s", "8192", "-d", "128", "--batch", "8", "--heads", "32"], "sdpa-efficient"),
        (["decode", "-s", "8192", "-d", "128", "--batch", "8", "--heads", "32", "--group", "8"], "eager-gqa"),
        (["linear", "-n", "512", "-k", "8192", "-m", "8192"], "linear"),
    ],
)
def test_forecast_with_impl(cal_file, args, impl):
    res = run_cli(*args, "--device", "h200", "--calibration", str(cal_file), "--impl", impl, "--json")
    assert res.returncode == 0, res.stderr
    pred = res.json()["predicted"]
    assert pred["impl"] == impl and pred["low_s"] <= pred["time_s"] <= pred["high_s"]


def test_forecast_without_impl_is_a_list_fastest_first_and_text_beside_the_bound(cal_file):
    args = [
        "decode",
        "-s",
        "8192",
        "-d",
        "128",
        "--batch",
        "8",
        "--heads",
        "32",
        "--group",
        "4",
        "--device",
        "h200",
    ]
    res = run_cli(*args, "--calibration", str(cal_file), "--json")
    pred = res.json()["predicted"]
    assert [p["time_s"] for p in pred] == sorted(p["time_s"] for p in pred)
    assert "sdpa-efficient" not in {p["impl"] for p in pred}  # measured on group 1 only: cannot run GQA
    text = run_cli(*args, "--calibration", str(cal_file)).stdout
    assert "forecast (calibrated on H200 SXM bf16" in text and "× the bound" in text


def test_model_forecast(cal_file):
    res = run_cli(
        "model", "--model", "llama-3.1-8b", "--context", "8192", "--batch", "16", "--device", "h200",
        "--calibration", str(cal_file), "--json",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    out = res.json()
    pred = out["predicted"]
    assert pred["time_s"] == pytest.approx(sum(o["count"] * o["time_s"] for o in pred["ops"]))
    assert pred["tokens_per_s"] == pytest.approx(16 / pred["time_s"])
    assert pred["time_s"] > out["totals"]["time_s"]  # the forecast lies above the bound
    assert {o["by"] for o in pred["ops"]} >= {"gemm linear", "memory pass"}


@pytest.mark.parametrize(
    "args, needle",
    [
        (
            ["linear", "-n", "8", "-k", "64", "-m", "64", "--device", "h100", "--calibration", "CAL"],
            "not on H100 SXM bf16",
        ),
        (
            [
                "linear",
                "-n",
                "8",
                "-k",
                "64",
                "-m",
                "64",
                "--device",
                "h200",
                "--dtype",
                "fp16",
                "--calibration",
                "CAL",
            ],
            "not on H200 SXM fp16",
        ),
        (
            [
                "linear",
                "-n",
                "8",
                "-k",
                "64",
                "-m",
                "64",
                "--device",
                "h200",
                "--calibration",
                "CAL",
                "--impl",
                "eager",
            ],
            "'eager' is not calibrated for linear",
        ),
        (["linear", "-n", "8", "-k", "64", "-m", "64", "--impl", "linear"], "--impl needs --calibration"),
        (
            ["linear", "-n", "8", "-k", "64", "-m", "64", "--calibration", "/nonexistent.json"],
            "cannot read calibration file",
        ),
        (["linear", "-n", "8", "-k", "64", "-m", "64", "--calibration", str(DATA)], "calibration"),
        (["calibrate", "/nonexistent.jsonl"], "cannot read results file"),
    ],
)
def test_bad_input_is_one_line(cal_file, args, needle):
    assert_one_line_error(run_cli(*[str(cal_file) if a == "CAL" else a for a in args]), needle)


# ---------------------------------------------------------------- the whole loop, on the CPU


CPU_DATA = Path(__file__).resolve().parent / "data" / "cpu-quick-suite.jsonl"
"""The quick suite's GEMMs and eager attention as measured on a two-core test machine (one
thread) by the command in :func:`test_measure_calibrate_forecast_loop_on_cpu`."""


def _cpu_ceilings(path: Path) -> Path:
    device = {
        "name": "measured cpu (test)", "kind": "measured", "peak_flops_per_s": {"bf16": 5e12, "fp32": 5e12},
        "bandwidth_bytes_per_s": 2e11, "source": "measured by attnroof on 2026-01-01 (test fixture)",
    }  # fmt: skip
    path.write_text(json.dumps({"format": "attnroof-ceilings/1", "device": device, "ceilings": []}))
    return path


def _held_out_forecasts(results: Path, ceilings: Path) -> list[tuple[dict, object]]:
    """Calibrate on all but one interior shape of each kind and implementation (three shapes or
    more); each shape left out with its forecast."""
    records = [r for r in parse_results(results.read_text(), str(results)) if r["status"] == "ok"]
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in records:
        groups.setdefault((r["kind"], r["impl"]), []).append(r)
    held = [rs[len(rs) // 2] for rs in groups.values() if len(rs) >= 3]  # an interior shape of each
    train = [r for r in records if r not in held]
    (cal,) = calibration.calibrate(train, device=get_device(str(ceilings)))
    out = []
    for r in held:
        (fc,) = forecast(cal, r["kind"], r["shape"], r["impl"])
        out.append((r, fc))
    return out


def test_held_out_cpu_shapes_are_forecast_inside_the_band(tmp_path):
    """On the CPU's measurements (recorded: a live run's times depend on the machine's load; a
    live check of the error is ``python benchmarks/calibration.py RESULTS.jsonl``), the shapes
    left out of the fit are forecast to the right order of magnitude and inside the band the fit
    reports."""
    held = _held_out_forecasts(CPU_DATA, _cpu_ceilings(tmp_path / "ceilings.json"))
    assert {(r["kind"], r["impl"]) for r, _ in held} == {
        ("attention", "eager"), ("attention", "sdpa-flash"), ("decode", "eager-gqa"),
        ("decode", "sdpa-flash"), ("linear", "linear"),
    }  # fmt: skip
    inside = 0
    for r, fc in held:
        inside += fc.low_s <= r["time_s"] <= fc.high_s
        assert 0.1 < fc.time_s / r["time_s"] < 10, (r["key"], fc)  # the right order of magnitude
    assert inside >= len(held) - 1, f"{inside} of {len(held)} held-out shapes inside the band"


def test_measure_calibrate_forecast_loop_on_cpu(tmp_path):
    """Measure the quick suite's GEMMs and eager attention on this CPU, calibrate on all but one
    shape of each, forecast the shapes left out. How close the forecasts come depends on the
    machine's load; it is checked on recorded CPU times above."""
    pytest.importorskip("torch")
    ceilings = _cpu_ceilings(tmp_path / "ceilings.json")
    results = tmp_path / "r.jsonl"
    res = run_cli(
        "measure", "suite", "--quick", "--impl", "linear,eager,eager-gqa,sdpa-flash", "-o", str(results),
        "--ceilings", str(ceilings), env={"ATTNROOF_CPU_THREADS": "1"}, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    recorded = [json.loads(line)["key"] for line in CPU_DATA.read_text().splitlines()]
    measured = [json.loads(line)["key"] for line in results.read_text().splitlines()]
    assert measured == recorded, f"the suite's plan changed: record {CPU_DATA.name} again with this command"
    held = _held_out_forecasts(results, ceilings)
    assert len(held) == 5
    for r, fc in held:
        assert r["time_s"] > 0 and math.isfinite(r["time_s"]), r
        assert 0 < fc.low_s <= fc.time_s <= fc.high_s < math.inf, (r["key"], fc)


def test_calibrate_never_overwrites_measurements_or_foreign_files(tmp_path: Path) -> None:
    """-o is checked before any fitting: a results file (or any file that is not an earlier
    calibration) is left byte for byte, unless --force; an earlier calibration is replaced."""
    results = tmp_path / "results.jsonl"  # the reference's ceilings and GEMMs: a fit of a moment
    lines = DATA.read_text().splitlines(keepends=True)
    results.write_text("".join(ln for ln in lines if json.loads(ln)["kind"] in ("ceiling", "linear")))
    before = results.read_bytes()
    assert_one_line_error(run_cli("calibrate", str(results), "-o", str(results)), "holds", "--force")
    assert results.read_bytes() == before
    other = tmp_path / "notes.json"
    other.write_text('{"mine": 1}\n')
    assert_one_line_error(run_cli("calibrate", str(results), "-o", str(other)), "not an attnroof file")
    assert other.read_text() == '{"mine": 1}\n'
    cal = tmp_path / "cal.json"
    for _ in range(2):  # a calibration replaces its own earlier file
        assert run_cli("calibrate", str(results), "-o", str(cal)).returncode == 0
    assert run_cli("calibrate", str(results), "-o", str(other), "--force").returncode == 0
    assert json.loads(other.read_text())["format"] == "attnroof-calibration/1"


def test_model_forecast_across_devices(cal_file):
    """A plan's forecast: the device's own kernels forecast on its shard, plus its collectives at
    their link-roof time; one device's plan is the single-device forecast."""
    base = ["model", "--model", "llama-3.1-8b", "--context", "8192", "--batch", "8", "--device", "h200",
            "--calibration", str(cal_file), "--json"]  # fmt: skip
    single = run_cli(*base).json()["predicted"]
    one = run_cli(*base, "--tp", "1").json()["predicted"]
    assert one["time_s"] == pytest.approx(single["time_s"], rel=1e-12) and one["comm_time_s"] == 0
    out = run_cli(*base, "--tp", "8").json()
    pred = out["predicted"]
    kernels = sum(o["count"] * o["time_s"] for o in pred["ops"])
    assert pred["time_s"] == pytest.approx(kernels + out["totals"]["comm_time_s"])
    assert pred["comm_time_s"] == out["totals"]["comm_time_s"] > 0
    assert pred["bound_time_s"] == out["totals"]["time_s"] < pred["time_s"]
    gemm = next(o for o in pred["ops"] if o["name"] == "gate/up projection")
    assert gemm["time_s"] < next(o for o in single["ops"] if o["name"] == "gate/up projection")["time_s"]
    train = run_cli(*base[:-1], "--phase", "train", "--tp", "2")
    assert_one_line_error(train, "--phase train")
