"""Efficiency profiles: read with every number's origin, applied kernel by kernel, the identity
profile giving back the bound to the last digit, and no forecast below its bound."""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from attnroof import profiles
from attnroof.errors import InputError
from attnroof.model.analysis import analyse
from attnroof.model.config import builtin
from attnroof.profiles import IDENTITY, files
from attnroof.profiles.kernels import ForecastRoof, diagonal_factor, tile_factor, wave_factor
from attnroof.roofline import Roof

TOY = Path(__file__).parent / "data" / "profiles" / "toy-h100-bf16.toml"
H100 = Roof(989.4e12, 3.35e12, "H100 SXM", "bf16")


@pytest.fixture(scope="module")
def toy() -> profiles.Profile:
    return files.read(TOY)


def test_a_gemm_forecast_by_hand(toy):
    # 100 tokens × 4096 → 4096, bf16: 3.36 GFLOP; 100·4096·2 in + the same out + 4096²·2 weights
    t, k, m = 100, 4096, 4096
    flops, nbytes = 2 * t * k * m, 2 * (t * k + t * m + k * m)
    roof = ForecastRoof.over(H100, toy)
    # compute: whole 128-row tiles (100 → 128: ×1.28), 32 tiles < 132 SMs (no waves),
    # η = 0.8 · 4096/(4096 + 256); memory: 35.2 MB at 0.9 × 3.35 TB/s; + 4 µs launch
    compute = flops * 1.28 / (0.8 * 4096 / 4352 * 989.4e12)
    memory = nbytes / (0.9 * 3.35e12)
    assert memory > compute
    got = roof.kernel_time(flops, nbytes, {"kernel": "gemm", "t": t, "k": k, "m": m})
    assert got == pytest.approx(4e-6 + memory, rel=1e-12)
    assert got * 1e6 == pytest.approx(15.67, abs=0.01)


def test_waves_and_tiles_and_the_causal_diagonal():
    # 133 tiles on 132 SMs run in two waves: 264 tile-slots for 133 tiles
    assert wave_factor(133, 132) == pytest.approx(264 / 133)
    assert wave_factor(32, 132) == 1.0  # fewer tiles than SMs: a library splits the depth
    assert tile_factor(100, 4096, 128, 128) == pytest.approx(1.28)
    # 4096 keys in 128-row tiles: 32 a side, 32·33/2 = 528 of 1024 tiles computed, over 512
    assert diagonal_factor(4096, 128) == pytest.approx(528 / 512)


def test_attention_forecast_by_hand(toy):
    # Llama-3.1-8B prefill attention, 8192 tokens, 32 heads, d = 128, causal
    s, d, h = 8192, 128, 32
    flops = 4 * s * s * d * h / 2
    nbytes = 4 * s * d * h * 2
    roof = ForecastRoof.over(H100, toy)
    eta = 0.7 * s / (s + 512)
    expect = 5e-6 + flops * (65 / 64) / (eta * 989.4e12)
    got = roof.kernel_time(flops, nbytes, {"kernel": "attention", "d": d, "s": s, "causal": True})
    assert got == pytest.approx(expect, rel=1e-12)


@pytest.mark.parametrize("phase", ["prefill", "decode"])
@pytest.mark.parametrize("model", ["llama-3.1-8b", "mixtral-8x7b", "deepseek-v3"])
def test_the_identity_profile_is_the_bound_to_the_last_digit(phase, model):
    m = builtin(model)
    bound = analyse(m, phase, 4, 2048, H100)
    same = analyse(m, phase, 4, 2048, ForecastRoof.over(H100, IDENTITY))
    assert same.totals.time_s == bound.totals.time_s
    assert [o.time_s for o in same.ops] == [o.time_s for o in bound.ops]


def test_a_forecast_is_never_below_its_bound(toy):
    roof = ForecastRoof.over(H100, toy)
    for t, k, m in itertools.product((1, 7, 128, 1000, 8192), (64, 4096, 14336), (128, 4096, 128256)):
        flops, nbytes = 2 * t * k * m, 2 * (t * k + t * m + k * m)
        assert roof.kernel_time(flops, nbytes, {"kernel": "gemm", "t": t, "k": k, "m": m}) >= H100.time(
            flops, nbytes
        )
    for s, d in itertools.product((128, 1000, 32768), (64, 96, 128, 256)):
        flops, nbytes = 2 * s * s * d, 8 * s * d
        for kind in ("attention", "decode", "memory"):
            shape = {"kernel": kind, "d": d, "s": s, "causal": True}
            assert roof.kernel_time(flops, nbytes, shape) >= H100.time(flops, nbytes)
    for model, phase in itertools.product(("llama-3.1-8b", "qwen3-30b-a3b"), ("prefill", "decode")):
        m = builtin(model)
        assert (
            analyse(m, phase, 8, 4096, roof).totals.time_s >= analyse(m, phase, 8, 4096, H100).totals.time_s
        )


def test_arrays_forecast_as_numbers_do(toy):
    roof = ForecastRoof.over(H100, toy)
    t = np.array([1, 100, 5000])
    flops, nbytes = 2 * t * 4096 * 4096, 2 * (t * 4096 * 2 + 4096 * 4096)
    many = roof.kernel_time(flops, nbytes, {"kernel": "gemm", "t": t, "k": 4096, "m": 4096})
    one = [roof.kernel_time(float(f), float(b), {"kernel": "gemm", "t": int(x), "k": 4096, "m": 4096})
           for f, b, x in zip(flops, nbytes, t, strict=True)]  # fmt: skip
    assert many.tolist() == pytest.approx(one, rel=1e-12)


def test_the_profile_is_chosen_by_family_then_nearest_then_vendor(toy):
    assert files.choose("H100 SXM", "NVIDIA", "bf16", [toy]).basis == "profile toy bf16"
    assert files.choose("H800 SXM", "NVIDIA", "bf16", [toy]).basis.startswith("nearest family")
    assert "no NVIDIA family of its own" in files.choose("L4", "NVIDIA", "bf16", [toy]).basis
    assert "no fp8 profile" in files.choose("H100 SXM", "NVIDIA", "fp8", [toy]).basis
    assert files.choose("MI300X", "AMD", "bf16", [toy]) is None


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        ('ceiling = { value = 0.8, source = "made-up" }', "gemm.ceiling: must be a table"),
        ('ceiling = { value = 1.3, source = "made-up" }', "must be a fraction in (0, 1]"),
        (
            'ceiling = { value = 0.8, source = "nowhere" }',
            "source 'nowhere' is not one of the file's [sources]",
        ),
        ('ceilng = { value = 0.8, source = "made-up" }', "gemm.ceilng: unknown field"),
    ],
)
def test_a_number_without_its_origin_is_refused(tmp_path, edit, needle):
    text = TOY.read_text().replace('ceiling = { value = 0.8, source = "made-up" }', edit, 1)
    if needle.startswith("gemm.ceiling: must"):
        text = text.replace(edit, "ceiling = 0.8", 1)
    f = tmp_path / "p.toml"
    f.write_text(text)
    with pytest.raises(InputError, match=None) as e:
        files.read(f)
    assert needle in str(e.value)


def test_every_shipped_number_names_its_source():
    shipped = files.shipped()
    assert {p.name for p in shipped} >= {"a100", "h100", "h200", "b200", "mi300x"}  # package data
    for p in shipped:
        assert p.figures, p.name
        for path, fig in p.figures.items():
            src = p.sources[fig.source]
            assert src.title and (src.url or fig.source == "fit" or src.id.startswith("fit")), (p.name, path)


@pytest.mark.parametrize(
    ("phase", "plan"),
    [
        ("decode", {"tp": 8}),
        ("prefill", {"tp": 4, "pp": 2, "microbatches": 2}),
        ("train", {"tp": 8, "pp": 4, "dp": 8, "microbatches": 16, "zero": 1}),
    ],
)
def test_a_plans_identity_forecast_is_its_bound(phase, plan):
    from attnroof.devices import get_device
    from attnroof.model.forecast import forecast_links, forecast_time
    from attnroof.model.parallel import Plan
    from attnroof.model.spread import spread
    from attnroof.model.train_spread import train_spread

    dev = get_device("h100")
    p = Plan(**plan)
    m = builtin("llama-3.1-70b")
    batch = 64 * p.dp * p.microbatches // max(1, p.microbatches)
    roof = ForecastRoof.over(H100, IDENTITY)

    def run(r, links, pl):
        if phase == "train":
            return train_spread(m, 16 * p.dp, 4096, r, links, pl)
        return spread(m, phase, batch, 4096, r, links, pl)

    bound = run(H100, dev.links, p)
    serial = run(roof, forecast_links(dev.links, IDENTITY), replace(p, overlap=False))
    assert forecast_time(serial, IDENTITY) == bound.bound_time_s


def test_a_plans_forecast_hides_what_the_profile_says(toy):
    from attnroof.devices import get_device
    from attnroof.model.forecast import forecast_links, forecast_time
    from attnroof.model.parallel import Plan
    from attnroof.model.spread import spread

    dev = get_device("h100")
    m = builtin("llama-3.1-70b")
    roof = ForecastRoof.over(H100, toy)
    serial = spread(m, "decode", 64, 4096, roof, forecast_links(dev.links, toy), Plan(tp=8))
    # decode at TP 8: no once-a-step sync, so the gap between serial and bound is the layers'
    # all-reduces; the toy profile hides half of it
    gap = serial.time_s - serial.bound_time_s
    assert gap > 0
    assert forecast_time(serial, toy) == pytest.approx(serial.bound_time_s + 0.5 * gap)


@pytest.mark.parametrize(
    "words",
    [
        ["linear", "-n", "64", "-k", "4096", "-m", "4096", "--device", "h100"],
        ["attention", "-s", "1024", "-d", "128", "--heads", "8", "--causal", "--device", "h100"],
        [
            "decode",
            "-s",
            "4096",
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
        ],
        ["model", "--model", "llama-3.1-8b", "--context", "2048", "--batch", "4", "--device", "h100"],
        ["model", "--model", "llama-3.1-8b", "--context", "2048", "--phase", "prefill", "--device", "mi300x"],
        [
            "model",
            "--model",
            "llama-3.1-8b",
            "--context",
            "4096",
            "--batch",
            "8",
            "--phase",
            "train",
            "--device",
            "h100",
        ],
        [
            "model",
            "--model",
            "llama-3.1-70b",
            "--context",
            "4096",
            "--batch",
            "16",
            "--phase",
            "train",
            "--device",
            "h100",
            "--tp",
            "8",
            "--pp",
            "2",
            "--dp",
            "2",
            "--microbatches",
            "4",
            "--zero",
            "1",
        ],
    ],
)
def test_every_command_with_an_identity_profile_file_prints_its_bound(tmp_path, words):
    """The identity profile, as a file a user could write (every fraction 1, every cost 0, all
    communication hidden, tiles of one element, no SM count), through the command line: each
    forecast is its bound to the last digit, with the two-level memory of the device's cache."""
    import json

    from conftest import run_cli

    f = tmp_path / "identity.toml"
    f.write_text(IDENTITY_FILE)
    out = json.loads(run_cli(*words, "--profile", str(f), "--json").stdout)
    found = []
    for part in ("unfused", "fused"):
        if isinstance(out.get(part), dict):
            found.append((out[part]["forecast_time_s"], out[part]["time_s"]))
    if "forecast_time_s" in out:
        found.append((out["forecast_time_s"], out["time_s"]))
    if "totals" in out and "forecast_time_s" in out["totals"]:
        found.append((out["totals"]["forecast_time_s"], out["totals"]["time_s"]))
    assert found
    for forecast, bound in found:
        assert forecast == bound


IDENTITY_FILE = """
name = "identity-file"
dtype = "bf16"
[sources.none]
title = "the identity: every efficiency 1"
[gemm]
ceiling = { value = 1, source = "none" }
[overlap]
tensor = { value = 1, source = "none" }
data = { value = 1, source = "none" }
"""
