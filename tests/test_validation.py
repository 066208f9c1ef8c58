"""Every file attnroof reads is validated as data (issue 9, "Reading"): one line naming the file,
the line or field and what is wrong, exit 2, before any work starts.

Config files, results files, ceilings files and device files, through the command line as a user
gives them (subprocesses), plus the library functions that every reader shares.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from attnroof.devices import builtin_devices, get_device
from attnroof.errors import InputError
from attnroof.measure import records as R
from attnroof.model import ModelConfigError, builtin, builtin_names, from_hf, get_model
from attnroof.model.layers import params
from conftest import assert_one_line_error, needs_torch, run_cli

CONFIGS = Path(__file__).parent / "data" / "configs"
CPU = {"ATTNROOF_CPU_THREADS": "1"}

TINY = {
    "model_type": "llama",
    "hidden_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 256,
    "vocab_size": 1000,
    "rms_norm_eps": 1e-5,
}


def _model(path: Path) -> Any:
    return run_cli("model", "--model", str(path), "--context", "1024")


# ---------------------------------------------------------------- config.json: strict JSON


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('{"hidden_size": NaN}', "NaN is not a JSON number"),
        ('{"hidden_size": Infinity}', "hidden_size = inf is not a finite number"),
        ('{"hidden_size": -Infinity}', "hidden_size = -inf is not a finite number"),
        ('{"hidden_size": 1e400}', "out of range"),
        ('{"hidden_size": ' + "9" * 5000 + "}", "more digits"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ('{"hidden_size": 128, "hidden_size": 256}', "'hidden_size' appears twice"),
    ],
    ids=["nan", "infinity", "-infinity", "1e400", "5000-digit-int", "deep-nesting", "repeated-key"],
)
def test_config_that_is_not_json_data_is_one_line(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(text, encoding="utf-8")
    assert_one_line_error(_model(path), str(path), needle)


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ({"hidden_size": 10**30}, "hidden_size = 1000000000000000000000000000000 is absurdly large"),
        ({"vocab_size": 10**1000}, "vocab_size = an integer of about 1001 digits is absurdly large"),
        ({"model_type": 5}, "model_type = 5 is not a string"),
        ({"_name_or_path": ["x"]}, "_name_or_path = ['x'] is not a string"),
        ({"sliding_window": "big", "use_sliding_window": False}, "sliding_window = 'big' is not an integer"),
    ],
)
def test_config_fields_of_the_wrong_type_or_size(tmp_path: Path, override: dict, needle: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**TINY, **override}), encoding="utf-8")
    assert_one_line_error(_model(path), needle)


def test_non_finite_sizes_given_to_the_library() -> None:
    for bad in (math.nan, math.inf, -math.inf):
        with pytest.raises(ModelConfigError, match=r"hidden_size = .* is not an integer"):
            from_hf({**TINY, "hidden_size": bad})


# ---------------------------------------------------------------- config.json: what attnroof does not model


@pytest.mark.parametrize(
    "name", ["mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3", "gpt-oss-20b", "gemma-2-9b"]
)
def test_published_architectures_are_modelled_not_refused(name: str) -> None:
    """Experts, latent attention and alternating windows are modelled now (tests/test_architectures.py
    checks their numbers); their configs load instead of being refused."""
    r = _model(CONFIGS / f"{name}.json")
    assert r.returncode == 0, r.stderr


def test_dense_published_configs_still_load() -> None:
    llama = get_model(str(CONFIGS / "llama-3.1-8b.json"))
    assert params(llama) == params(builtin("llama-3.1-8b")) == 8_030_261_248
    # Phi-3-mini: one sliding window on every layer, which attnroof models (decode reads the last
    # 2047 tokens of KV cache; prefill is counted as an upper bound, and says so)
    phi = get_model(str(CONFIGS / "phi-3-mini-4k.json"))
    assert phi.sliding_window == 2047 and round(params(phi) / 1e9, 2) == 3.82
    r = run_cli("model", "--model", str(CONFIGS / "phi-3-mini-4k.json"), "--context", "4096", "--json")
    assert r.returncode == 0, r.stderr
    assert r.json()["config"]["sliding_window"] == 2047


@pytest.mark.parametrize("name", builtin_names())
def test_builtin_models_still_load(name: str) -> None:
    assert params(builtin(name)) > 0


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        (
            {"layer_types": ["linear_attention"] * 2},
            "layer_types: layers of kind 'linear_attention' are not modelled",
        ),
        ({"attention_chunk_size": 8192}, "attention_chunk_size = 8192: chunked local attention is read by"),
        ({"is_encoder_decoder": True}, "is_encoder_decoder = True: encoder-decoder"),
        ({"model_type": "jamba"}, "model_type = 'jamba': state-space (Mamba) layers are read by"),
        ({"n_routed_experts": 64}, "n_routed_experts = 64 but no experts per token"),
        ({"kv_lora_rank": 512}, "latent attention needs qk_rope_head_dim, qk_nope_head_dim, v_head_dim"),
        (
            {"sliding_window": None, "layer_types": ["sliding_attention", "full_attention"]},
            "layer_types has sliding_attention layers but no sliding_window",
        ),
    ],
)
def test_each_unmodelled_field_is_named(override: dict, needle: str) -> None:
    with pytest.raises(ModelConfigError, match="^config: " + _re(needle)):
        from_hf({**TINY, **override})


def _re(text: str) -> str:
    import re

    return re.escape(text)


@pytest.mark.parametrize(
    ("override", "window"),
    [
        ({"my_note": "hello", "rope_scaling": {"factor": 8.0}, "attention_dropout": 0.1}, None),
        ({"num_local_experts": None, "num_experts_per_tok": 0, "attn_logit_softcapping": None}, None),
        ({"sliding_window": 64}, 64),  # one window on every layer: modelled
        ({"sliding_window": 64, "layer_types": ["sliding_attention"] * 2}, 64),
        ({"sliding_window": 64, "layer_types": ["full_attention"] * 2}, None),
        ({"sliding_window": 64, "use_sliding_window": False}, None),  # Qwen2.5
        (
            {"sliding_window": 64, "use_sliding_window": True, "max_window_layers": 2},
            None,
        ),  # no layer reaches it
        ({"sliding_window": 64, "use_sliding_window": True, "max_window_layers": 0}, 64),
    ],
)
def test_harmless_and_modelled_fields_still_load(override: dict, window: int | None) -> None:
    assert from_hf({**TINY, **override}).sliding_window == window


# ---------------------------------------------------------------- device figures: too large


@pytest.mark.parametrize(
    ("flag", "needle"),
    [
        ("--peak-flops", "'1e300' is implausibly large for --peak-flops (at most 1e20 FLOP/s)"),
        ("--bandwidth", "'1e300' is implausibly large for --bandwidth (at most 1e17 B/s)"),
        ("--capacity", "'1e300' is implausibly large for --capacity (at most 1e16 B)"),
    ],
)
def test_absurdly_large_override_is_refused(flag: str, needle: str) -> None:
    assert_one_line_error(run_cli("attention", "-s", "8k", "-d", "128", flag, "1e300"), needle)
    assert_one_line_error(run_cli("sheet", flag, "1e300"), flag, "implausibly large")


def test_the_limits_admit_every_catalog_device_and_the_largest_real_chips() -> None:
    from attnroof.devices import MAX_PLAUSIBLE_BANDWIDTH, MAX_PLAUSIBLE_CAPACITY, MAX_PLAUSIBLE_FLOPS

    for dev in builtin_devices():
        assert max(dev.peak_flops_per_s.values()) < MAX_PLAUSIBLE_FLOPS / 1000
        assert dev.bandwidth_bytes_per_s < MAX_PLAUSIBLE_BANDWIDTH / 1000
        assert dev.capacity_bytes is None or dev.capacity_bytes < MAX_PLAUSIBLE_CAPACITY / 100
    r = get_device("R")
    wafer = r.with_overrides("bf16", peak_flops_per_s=1.25e17, bandwidth_bytes_per_s=2.1e16)  # WSE-3
    assert wafer.bandwidth_bytes_per_s == 2.1e16
    # an override is a parameter: the error names it (the CLI swaps in --peak-flops)
    with pytest.raises(InputError, match="peak_flops_per_s = 1e\\+21 FLOP/s is implausibly large"):
        r.with_overrides("bf16", peak_flops_per_s=1e21)
    with pytest.raises(InputError, match="an integer of about"):
        r.with_overrides("bf16", bandwidth_bytes_per_s=10**5000)  # beyond Python's int-to-str limit


def _device_toml(tmp_path: Path, bandwidth: str, extra: str = "") -> Path:
    path = tmp_path / "dev.toml"
    path.write_text(
        f'name = "X"\nbandwidth_bytes_per_s = {bandwidth}\n{extra}[peak_flops_per_s]\nbf16 = 1e15\n',
        encoding="utf-8",
    )
    return path


def test_300_digit_integer_in_a_device_file(tmp_path: Path) -> None:
    path = _device_toml(tmp_path, "9" * 300)
    assert_one_line_error(
        run_cli("attention", "-s", "8k", "-d", "128", "--device", str(path)),
        str(path),
        "bandwidth_bytes_per_s = 999…999 (a 300-digit integer) bytes/s is implausibly large",
    )


@pytest.mark.parametrize(
    ("bandwidth", "extra", "needle"),
    [
        ("9" * 5000, "", "more digits"),
        ("[" * 100_000 + "]" * 100_000, "", "nested too deeply"),
        ("4e12", "capacity_bytes = " + "9" * 400 + "\n", "capacity_bytes = 999…999 (a 400-digit integer)"),
        ("4e12", "onchip_bytes = 1e300\n", "onchip_bytes = 1e+300 bytes is implausibly large"),
    ],
    ids=["5000-digits", "deep-nesting", "400-digit-capacity", "onchip"],
)
def test_device_file_that_is_not_data_is_one_line(
    tmp_path: Path, bandwidth: str, extra: str, needle: str
) -> None:
    path = _device_toml(tmp_path, bandwidth, extra)
    assert_one_line_error(run_cli("attention", "-s", "8k", "-d", "128", "--device", str(path)), needle)


def test_ceilings_file_with_absurd_or_non_finite_figures(tmp_path: Path) -> None:
    path = tmp_path / "ceilings.json"
    path.write_text(
        '{"device": {"name": "m", "peak_flops_per_s": {"bf16": 1e15}, "bandwidth_bytes_per_s": 1e300}}',
        encoding="utf-8",
    )
    out = str(tmp_path / "c.png")
    needle = "bandwidth_bytes_per_s = 1e+300 bytes/s is implausibly large"
    assert_one_line_error(run_cli("plot", "-o", out, "--ceilings", str(path)), needle)
    assert_one_line_error(run_cli("attention", "-s", "8k", "-d", "128", "--device", str(path)), needle)
    path.write_text(
        '{"device": {"name": "m", "peak_flops_per_s": {"bf16": NaN}, "bandwidth_bytes_per_s": 4e12}}',
        encoding="utf-8",
    )
    assert_one_line_error(run_cli("plot", "-o", out, "--ceilings", str(path)), "NaN is not a JSON number")


# ---------------------------------------------------------------- results files


def _linear(n: int, status: str = "skip", **fields: Any) -> dict[str, Any]:
    """A record as attnroof measure writes it (every key), for a linear case of n tokens."""
    rec = R.new_record(f"linear/linear/bf16/n={n},k=64,m=64", "linear", "linear",
                       {"n": n, "k": 64, "m": 64}, "bf16", "cpu", status=status)  # fmt: skip
    if status == "ok":
        R.set_time(rec, 1e-5, 2 * n * 64 * 64, 2 * (n * 64 + 64 * 64 + n * 64))
    rec.update(fields)
    return rec


def _write(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_resume_onto_an_unknown_kind_is_refused_before_any_work(tmp_path: Path) -> None:
    path = _write(tmp_path / "r.jsonl", [_linear(1), {**_linear(2), "kind": "banana"}])
    before = path.read_text()
    r = run_cli("measure", "suite", "--quick", "--cpu", "--resume", "-o", str(path), env=CPU)
    assert_one_line_error(r, f"{path}:2: kind = 'banana' is not a kind attnroof measures")
    assert path.read_text() == before  # nothing measured, nothing written


def test_resume_onto_a_nan_time_is_refused_with_its_line(tmp_path: Path) -> None:
    path = _write(tmp_path / "r.jsonl", [_linear(1), _linear(2), _linear(3, "ok", time_s=math.nan)])
    assert "NaN" in path.read_text()  # what json.dumps writes for a float nan
    before = path.read_text()
    r = run_cli("measure", "suite", "--quick", "--cpu", "--resume", "-o", str(path), env=CPU)
    assert_one_line_error(r, f"{path}:3: not valid JSON data: NaN is not a JSON number")
    assert path.read_text() == before


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"time_s": 0}, "time_s = 0 must be a finite number of seconds of at least 1e-09"),
        ({"time_s": -1e-5}, "time_s = -1e-05 must be a finite number of seconds of at least 1e-09"),
        ({"time_s": None}, "status is ok but time_s is null"),
        ({"flops": -5.0}, "flops = -5.0 must be a finite number ≥ 0"),
        ({"bytes": "many"}, "bytes = 'many' must be a finite number ≥ 0"),
        ({"status": "done"}, "status = 'done' is not one of ok, skip, wrong, error"),
        ({"shape": {"n": "big", "k": 64, "m": 64}}, "shape.n = 'big' must be a positive integer"),
        ({"shape": {"n": 1, "k": 64}}, "shape has no 'm'"),
        ({"key": 7}, "key = 7 must be a non-empty string"),
        ({"impossible": "no"}, "impossible = 'no' must be true or false"),
    ],
)
def test_bad_records_are_refused_by_every_reader(tmp_path: Path, change: dict, needle: str) -> None:
    path = _write(tmp_path / "r.jsonl", [_linear(1, "ok"), {**_linear(2, "ok"), **change}])
    with pytest.raises(InputError, match=_re(f"{path}:2: {needle}")):
        R.read_records(path)
    out = str(tmp_path / "c.png")
    assert_one_line_error(run_cli("plot", "-o", out, "--measured", str(path)), f"{path}:2: {needle}")


@pytest.mark.parametrize(
    ("record", "needle"),
    [
        ({"kind": "banana"}, ":1: kind = 'banana' is not a kind attnroof measures"),
        ({"shape": {"s": "big", "d": -1}}, ":1: shape.s = 'big' must be a positive integer"),
        (
            {"shape": {"s": 1024, "d": 128, "batch": 1, "heads": 8, "group": 1, "causal": 0}},
            ":1: shape.causal = 0 must be true or false",
        ),
        (
            {"shape": {"s": 1024, "d": 128, "batch": 1, "heads": 8, "group": 3, "causal": False}},
            ":1: shape.heads = 8 is not a multiple of shape.group = 3",
        ),
        (
            {"shape": {"s": 1024, "d": 128, "batch": 1, "heads": 8, "group": 1, "causal": False, "x": 1}},
            ":1: shape has 'x', which this kind has not",
        ),
        ({"status": "oom"}, ":1: status = 'oom' is not one of ok, skip, wrong, error"),
    ],
    ids=["unknown-kind", "bad-shape", "causal-not-bool", "group", "extra-shape-key", "unknown-status"],
)
def test_plot_and_report_refuse_what_they_used_to_draw_or_drop(
    tmp_path: Path, record: dict, needle: str
) -> None:
    good = {
        "kind": "attention", "impl": "eager", "dtype": "bf16", "status": "ok",
        "shape": {"s": 1024, "d": 128, "batch": 1, "heads": 8, "group": 1, "causal": False},
        "time_s": 1e-4, "flops": 4.3e9, "bytes": 7.5e7, "intensity": 57.4, "achieved_flops_per_s": 4.3e13,
    }  # fmt: skip
    path = _write(tmp_path / "m.jsonl", [{**good, **record}])
    assert_one_line_error(run_cli("plot", "-o", str(tmp_path / "c.png"), "--measured", str(path)), needle)
    assert_one_line_error(run_cli("report", "-o", str(tmp_path / "r.html"), "--measured", str(path)), needle)
    assert not (tmp_path / "c.png").exists() and not (tmp_path / "r.html").exists()


def test_a_measurement_given_twice_keeps_the_fastest_and_says_so(tmp_path: Path) -> None:
    """(The rule, for every reader: tests/test_results_files.py.) Line 3 repeats line 1 at half
    the time (1e-5 s -> 5e-6 s): the fastest is drawn, once, and a note names both lines."""
    fast = R.set_time(_linear(1, "ok"), 5e-6, 2 * 64 * 64, 2 * (64 + 64 * 64 + 64))
    path = _write(tmp_path / "m.jsonl", [_linear(1, "ok"), _linear(2, "ok"), fast])
    r = run_cli("plot", "-o", str(tmp_path / "c.png"), "--measured", str(path))
    assert r.returncode == 0, r
    assert (
        f"{path}: a measurement appears more than once (first: linear/linear/bf16/n=1,k=64,m=64, lines 1 and 3)"
        in r.stderr
    )
    assert [r["time_s"] for r in R.read_records(path)] == [5e-6, 1e-5]
    # hand-written lines without a key: the same kind, impl, dtype and shape is the same measurement
    unkeyed = [{k: v for k, v in _linear(1, "ok").items() if k != "key"}] * 2
    path = _write(tmp_path / "u.jsonl", unkeyed)
    r = run_cli("plot", "-o", str(tmp_path / "c.png"), "--force", "--measured", str(path))
    assert r.returncode == 0 and "lines 1 and 2" in r.stderr, r


def test_a_failed_attempt_is_replaced_by_its_retry_and_drawn_once(tmp_path: Path) -> None:
    from attnroof.plot import read_measured

    failed = _linear(1, "error", reason="RuntimeError: planted")
    path = _write(tmp_path / "m.jsonl", [failed, _linear(2, "ok"), _linear(1, "ok")])
    assert [(r["key"][-13:], r["status"]) for r in R.read_records(path)] == [
        ("n=1,k=64,m=64", "ok"),
        ("n=2,k=64,m=64", "ok"),
    ]
    assert sorted(m.shape["n"] for m in read_measured(path)) == [1, 2]


@pytest.mark.parametrize(
    ("records", "needle"),
    [
        ([], "no measurements to draw: it is empty"),
        ([_linear(1, "skip")], "none of its 1 record is an ok operator measurement"),
    ],
    ids=["empty", "only-skips"],
)
def test_plot_and_report_of_a_file_with_no_measurements(tmp_path: Path, records: list, needle: str) -> None:
    path = _write(tmp_path / "m.jsonl", records)
    assert_one_line_error(run_cli("plot", "-o", str(tmp_path / "c.png"), "--measured", str(path)), needle)
    assert_one_line_error(run_cli("report", "-o", str(tmp_path / "r.html"), "--measured", str(path)), needle)


@needs_torch
def test_ceiling_records_of_a_ceilings_file_are_validated_before_any_work(tmp_path: Path) -> None:
    probe = R.new_record(
        "ceiling/read/fp32/bytes=1048576", "ceiling", "read", {"bytes": 2**20}, "fp32", "cpu"
    )
    R.set_time(probe, 1e-4, 0, 2**20)
    device = {"name": "m", "peak_flops_per_s": {"bf16": 1e12}, "bandwidth_bytes_per_s": 1e10}
    ceilings = tmp_path / "ceilings.json"
    ceilings.write_text(json.dumps({"device": device, "ceilings": [probe, {**probe, "kind": "banana"}]}))
    out = tmp_path / "r.jsonl"
    r = run_cli("measure", "suite", "--quick", "--cpu", "--ceilings", str(ceilings), "-o", str(out), env=CPU)
    assert_one_line_error(r, f"{ceilings}: ceilings[1]: kind = 'banana'")
    assert not out.exists() or out.read_text() == ""


# ---------------------------------------------------------------- the one validation


def test_what_measure_writes_is_what_the_schema_accepts() -> None:
    from attnroof.measure import ceilings as C
    from attnroof.measure import kernels as K
    from attnroof.measure import schema as S
    from attnroof.measure.suite import plan_cases

    assert {R.OK, R.SKIP, R.WRONG, R.ERROR} == set(S.STATUSES) and R.CEILING == S.CEILING
    from attnroof.measure import collectives as CO

    assert set(K.IMPLS) | {CO.KIND} == set(S.SHAPES)
    for case in plan_cases("cuda", quick=False) + plan_cases("cpu", quick=True):
        rec = R.new_record(case.key, case.kind, case.impl, case.shape, case.dtype, "cuda:0", status="skip")
        S.validate_record(rec, "x", keyed=True)
        assert tuple(case.shape) == S.SHAPES[case.kind]
    for item in CO.plan(S.COLLECTIVE_OPS, [1024, 2**20], world=8, backend="nccl", dt="bf16"):
        for rec in (
            CO.collective_record(item, "cuda:0", time_s=1e-4),
            CO.collective_record(item, "cuda:0", status="skip"),
        ):
            S.validate_record(rec, "x", keyed=True)
            assert tuple(rec["shape"]) == S.SHAPES[CO.KIND]
    assert set(C.BANDWIDTHS) | {C.MATMUL} == set(S.CEILING_SHAPES)


def test_a_cut_short_last_line_is_ignored_but_not_a_bad_one(tmp_path: Path) -> None:
    line = json.dumps(_linear(1, "ok"))
    path = tmp_path / "r.jsonl"
    path.write_text(line + "\n" + line[:40], encoding="utf-8")  # an interrupted run
    assert len(R.read_records(path)) == 1
    path.write_text(line + "\n" + json.dumps({**_linear(2), "kind": "banana"}), encoding="utf-8")
    with pytest.raises(InputError, match=":2: kind = 'banana'"):
        R.read_records(path)
