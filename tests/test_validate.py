"""benchmarks/validate.py (issue 34): the published end-to-end table run through attnroof, its
conversions worked by hand on one training and one serving row, and a handful of rows end to end.

The measured figures are the sources' (data/validation/); the arithmetic here is theirs:
Narayanan et al. (2021) eq. (3) for Megatron-LM's TFLOP/s, tokens over tokens/s for IBM's FSDP
table, vllm bench serve's totals for the GPUStack runs, the vLLM blog's fitted ITL line."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOY = str(ROOT / "tests" / "data" / "profiles" / "toy-h100-bf16.toml")


def _module():
    spec = importlib.util.spec_from_file_location("validate_bench", ROOT / "benchmarks" / "validate.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["validate_bench"] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


V = _module()


def _row(level: str, row_id: str) -> dict:
    return next(r for r in V.TABLE.rows(level) if r["id"] == row_id)


def test_narayanan_eq3_step_by_hand():
    """Table 1's 1.7 B row: 137 TFLOP/s per GPU on 32 A100s, batch 512 of 2,048 tokens."""
    cfg = {"layers": 24, "hidden_size": 2304, "vocab_size": 51200}
    flops = V.narayanan_eq3(cfg, 512, 2048)
    # 96·B·s·l·h² = 96·512·2048·24·2304² = 12,824,703,626,379,264
    # 1 + s/(6h) + V/(16·l·h) = 1 + 2048/13824 + 51200/884736 = 1 + 4/27 + 25/432 = 521/432
    assert flops == pytest.approx(12_824_703_626_379_264 * 521 / 432)  # 1.5467e16 FLOPs
    step, how = V.measured_step(_row("training", "narayanan2021-001"), cfg, 512)
    assert step == pytest.approx(flops / (32 * 137e12))  # F / (GPUs × TFLOP/s per GPU)
    assert step == pytest.approx(3.528, abs=5e-4)
    assert flops / 4.4e15 == pytest.approx(step, rel=0.01)  # the table's 4.4 PFLOP/s aggregate agrees
    assert "narayanan_eq3" in how


def test_ibm_tokens_step_and_mfu_by_hand():
    """IBM's Llama 2 7B on 128 A100s: 3,700 tokens/s per GPU, batch 2 × 4,096 per GPU, MFU 0.57."""
    row = _row("training", "ibm_fsdp_2024-001")
    cfg = {"params": 6_738_415_616, "layers": 32, "heads": 32, "head_dim": 128}  # Llama-2-7b-hf
    step, _ = V.measured_step(row, cfg, 256)
    assert step == pytest.approx(256 * 4096 / (128 * 3700))  # 1,048,576 tokens / 473,600 tokens/s = 2.214 s
    # PaLM's count per token: 6 · 6.738e9 + 12 · 32 · 4096 · 4096 = 4.687e10 FLOPs
    per_token = V.six_n(cfg, 1, 4096) / 4096
    assert per_token == pytest.approx(6 * 6_738_415_616 + 12 * 32 * 4096 * 4096)
    assert 3700 * per_token / 312e12 == pytest.approx(row["measured_mfu"], abs=0.02)  # 0.556 beside 0.57


def test_sharegpt_row_maps_to_its_mean_lengths():
    """GPUStack's vLLM run: 1,000 ShareGPT prompts, 215,312 input and 193,979 output tokens."""
    row = _row("serving", "gpustack_gptoss20b_h100-001")
    words, assumed = V.serving_words(row, 1000)
    at = {w: words[i + 1] for i, w in enumerate(words[:-1]) if w.startswith("--")}
    assert (at["--input-len"], at["--output-len"]) == ("215", "194")  # 215.312 and 193.979, rounded
    assert (at["--rate"], at["--num-requests"]) == ("inf", "1000")
    assert any("ShareGPT not reproduced" in a for a in assumed)
    capped, said = V.serving_words(row, 300)
    assert capped[capped.index("--num-requests") + 1] == "300"
    assert any("1000 prompts capped at 300" in a for a in said)


def test_error_and_stats_formulas():
    f = V.Figure("serving throughput", "output_tokens_per_s", 7817.03, 9000.0, 12000.0, rate=True)
    assert f.error == pytest.approx(9000 / 7817.03 - 1)  # +15.1%: the forecast is faster
    assert f.bound_error == pytest.approx(12000 / 7817.03 - 1)
    s = V.stats([0.1, -0.2, 0.3])
    # |e| sorted 0.1, 0.2, 0.3: median 0.2; p90 at 0.9 · 2 = 1.8 → 0.2 + 0.8 · 0.1 = 0.28
    assert s == {"n": 3, "median": pytest.approx(0.2), "p90": pytest.approx(0.28), "bias": pytest.approx(0.1)}


def test_a_handful_of_rows_end_to_end(tmp_path, capsys):
    out = tmp_path / "v.json"
    rows = (
        "narayanan2021-001,lmdeploy_a100_v020-006,vllm_fp8kv_2026-006,rocm_te_issue79-001,ibm_fsdp_2024-005"
    )
    assert V.main(["--profile", TOY, "--rows", rows, "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "Per level" in text and "Rows that did not run (2)" in text
    assert "toy bf16   10.0%" in text  # the profile's own held-out kernel error, as its file states it
    doc = json.loads(out.read_text())
    got = {r["id"]: r for r in doc["rows"]}
    assert set(got) == {"narayanan2021-001", "lmdeploy_a100_v020-006", "vllm_fp8kv_2026-006"}
    failed = {f["id"]: f["reason"] for f in doc["failed"]}
    assert "context not stated" in failed["rocm_te_issue79-001"]
    assert failed["ibm_fsdp_2024-005"].startswith("unresolvable")
    step = got["narayanan2021-001"]["figures"][0]
    assert step["metric"] == "step_s" and step["measured"] == pytest.approx(3.528, abs=5e-4)
    assert step["error"] == pytest.approx(step["forecast"] / step["measured"] - 1)
    # the fitted line at the ends of its range: 6.44 ms + 4.37e-8 s/token × 256 = 6.4512 ms
    itl = got["vllm_fp8kv_2026-006"]["figures"]
    assert [f["metric"] for f in itl] == ["itl_s at 256", "itl_s at 125000"]
    assert itl[0]["measured"] == pytest.approx(0.00644 + 4.37e-8 * 256)
    for r in doc["rows"]:
        assert r["basis"] == f"profile file {TOY}"
        for f in r["figures"]:  # a forecast is never faster than its bound
            assert f["forecast"] <= f["bound"] if f["rate"] else f["forecast"] >= f["bound"]


def test_bad_input_is_one_line(capsys):
    assert V.main(["--rows", "no-such-row"]) == 2
    assert V.main(["--max-requests", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "validate: error: --rows 'no-such-row': no such row or source",
        "validate: error: --max-requests 0: must be at least 1",
    ]
