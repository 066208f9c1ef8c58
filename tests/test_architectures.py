"""Mixture-of-experts, latent attention and alternating windows: parameter counts against the
published figures, and the arithmetic of each new operator worked by hand.

Convention for "active" parameters: the distinct parameters one token runs through — its top_k
experts and the shared ones, every dense weight, and the embedding table (``active_params()``);
gpt-oss's model card leaves the input embedding out (``active_params(embedding=False)``), and we
report both.
"""

from __future__ import annotations

import math

import pytest

from attnroof.model import builtin
from attnroof.model.costs import model_ops
from attnroof.model.layers import active_params, layer_table, params
from attnroof.model.memory import kv_cache_bytes_per_sequence, kv_cache_bytes_per_token
from attnroof.ops.attention import attention, causal_half
from attnroof.ops.experts import expert_gemm, touched_experts
from attnroof.ops.latent import latent_attention
from attnroof.roofline import Roof

# name: (total, active, active without the input embedding) as published; None: not published
PUBLISHED = {
    "mixtral-8x7b": (46.7e9, 12.9e9, None),
    "deepseek-v3": (671e9, 37e9, None),
    "qwen3-30b-a3b": (30.5e9, 3.3e9, None),
    "gpt-oss-20b": (20.9e9, None, 3.6e9),
    "gpt-oss-120b": (116.8e9, None, 5.1e9),
    "gemma-2-9b": (9.24e9, None, None),
    "phi-3-mini": (3.82e9, None, None),
}


def _close(got: float, published: float) -> bool:
    """Within 1%, or within the published figure's last digit: publishers round (DeepSeek's
    "37 B" is 36.5–37.5) or truncate (Qwen3-30B-A3B's "3.3 B" activated is 3.35 B counted)."""
    digits = len(str(int(published)).rstrip("0"))  # 37e9 → "37": two significant digits
    unit = 10 ** (math.floor(math.log10(published)) - digits + 1)
    return abs(got - published) <= 0.01 * published or published - unit / 2 <= got < published + unit


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameters_match_the_published_figures(name: str) -> None:
    total, active, active_no_embedding = PUBLISHED[name]
    m = builtin(name)
    assert _close(params(m), total), params(m)
    if active is not None:
        assert _close(active_params(m), active) or _close(active_params(m, embedding=False), active)
    if active_no_embedding is not None:
        assert _close(active_params(m, embedding=False), active_no_embedding), active_params(
            m, embedding=False
        )


def test_mixtral_parameters_by_hand() -> None:
    h, i, v, L, E, k = 4096, 14336, 32000, 32, 8, 2
    attn = h * (4096 + 2 * 1024) + 4096 * h  # q, k, v (8 KV heads × 128), o
    expert = 3 * h * i  # gate, up, down of one expert
    per_layer = attn + E * expert + h * E + 2 * h  # experts, router, two norms
    total = L * per_layer + 2 * v * h + h
    m = builtin("mixtral-8x7b")
    assert params(m) == total
    assert active_params(m) == total - L * (E - k) * expert  # 6 of 8 experts idle per token


def test_deepseek_v3_latent_cache_per_token() -> None:
    # (kv_lora_rank 512 + rope 64) elements × 61 layers × 2 bytes
    assert kv_cache_bytes_per_token(builtin("deepseek-v3"), 2) == 576 * 61 * 2 == 70_272


def test_gemma2_kv_cache_alternates() -> None:
    # 21 global layers keep all 8192 tokens, 21 local ones the last 4096: 2 × 8 KV heads × 256 × 2 B each
    per_token_layer = 2 * 8 * 256 * 2
    expected = 21 * 8192 * per_token_layer + 21 * 4096 * per_token_layer
    assert kv_cache_bytes_per_sequence(builtin("gemma-2-9b"), 8192, 2) == expected  # ≈ 2.11 GB
    assert round(expected / 1e9, 2) == 2.11
    assert builtin("gemma-2-9b").tied  # Gemma2Config ties the head by default: 9.24 B, not 10.2 B


def test_gemma2_rows_say_which_layers_they_run_in() -> None:
    rows = {r.name: r for r in layer_table(builtin("gemma-2-9b"))}
    local, glob = rows["attention (window 4096)"], rows["attention (global)"]
    assert (local.count, glob.count) == (21, 21)
    assert (local.layer_kind, glob.layer_kind) == ("local attention", "global attention")
    assert rows["QKV projection"].count == 42


def test_windowed_prefill_counts_only_the_band() -> None:
    # s = 8192, w = 4096: ½·8192² − ½·4096² scores per head, not ½·8192²
    s, w, d = 8192, 4096, 128
    band = attention(s, d, causal=True, window=w, fused=True)
    full = attention(s, d, causal=True, fused=True)
    assert band.flops == (causal_half(s * s) - causal_half((s - w) ** 2)) * (4 * d + 5)
    assert band.flops / full.flops == pytest.approx(0.75)


def test_experts_touched_and_the_batch_they_need() -> None:
    # Mixtral at batch 1: exactly top_k = 2 experts' weights; at batch 64 essentially all 8
    assert touched_experts(1, 8, 2) == 2
    assert touched_experts(64, 8, 2) == pytest.approx(8, rel=1e-6)
    # Once every expert is touched, each sees n·k/E tokens: intensity ≈ n·k/E against a dense
    # layer's ≈ n, so the expert GEMM needs E/k = 4× the batch for the same intensity (bf16)
    n, K, M = 4096, 4096, 14336
    dense_like = expert_gemm(n, K, M, experts=1, top_k=1).intensity
    expert = expert_gemm(4 * n, K, M, experts=8, top_k=2).intensity
    assert expert == pytest.approx(dense_like, rel=0.02)


def test_latent_decode_reads_the_latent_once_for_all_heads() -> None:
    mla = dict(heads=128, kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128)
    s = 8192
    absorbed = latent_attention(1, s, form="absorbed", **mla)
    naive = latent_attention(1, s, form="naive", **mla)
    # absorbed: the cache (s × 576 × 2 B) is read once; naive: the latent, then K and V of 128 heads
    cache = s * 576 * 2
    assert absorbed.stages[1].reads[1].bytes == cache
    assert naive.bytes > 100 * cache
    # GQA with g = heads: the middle stage's intensity is ~H·(2(r+ρ) + 2r + 5)/((r+ρ)·2)
    mid = absorbed.stages[1]
    assert mid.flops / mid.bytes == pytest.approx(128 * (2 * 576 + 2 * 512 + 5) / (576 * 2), rel=0.03)


def test_moe_decode_step_reads_only_touched_experts() -> None:
    m = builtin("mixtral-8x7b")
    ops = {o.name: o for o in model_ops(m, "decode", 1, 4096)}
    gate_up = ops["expert gate/up"].cost
    # one token: its 2 experts' 4096 × 28672 weights in bf16 (+ the token's rows)
    assert gate_up.stages[0].reads[1].bytes == 2 * 4096 * 28672 * 2
    assert gate_up.flops == 2 * 2 * 4096 * 28672


def test_every_builtin_architecture_analyses_both_phases() -> None:
    roof = Roof(989e12, 4.8e12)
    from attnroof.model.analysis import analyse

    for name in PUBLISHED:
        for phase in ("prefill", "decode"):
            a = analyse(builtin(name), phase, 2, 2048, roof)
            assert a.totals.time_s > 0 and a.totals.flops > 0


MLA_FLAGS = [
    "--kv-lora-rank",
    "512",
    "--qk-rope-head-dim",
    "64",
    "--qk-nope-head-dim",
    "128",
    "--v-head-dim",
    "128",
]


def test_decode_latent_variant_from_the_command_line() -> None:
    from conftest import run_cli

    r = run_cli("decode", "-s", "8192", "--heads", "128", *MLA_FLAGS, "--device", "h200", "--json")
    assert r.returncode == 0, r.stderr
    j = r.json()
    # absorbed: Q absorb 2·128·128·512, attention 128·8192·(2·576 + 5 + 2·512), V absorb 2·128·512·128
    assert (
        j["absorbed"]["flops"]
        == 2 * 128 * 128 * 512 + 128 * 8192 * (2 * 576 + 5 + 2 * 512) + 2 * 128 * 512 * 128
    )
    # naive: the up-projection of all 8192 cached latents to 128 heads of K_nope and V, then MHA
    up = 2 * 8192 * 512 * 128 * (128 + 128)
    assert j["naive"]["flops"] == up + 128 * 8192 * (2 * 192 + 5 + 2 * 128)
    assert set(j["crossover"]) == {"naive", "absorbed"}


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--kv-lora-rank", "512"], "latent attention needs --qk-rope-head-dim"),
        ([*MLA_FLAGS, "-d", "128"], "-d/--head-dim is for ordinary attention"),
        ([*MLA_FLAGS, "--group", "4", "--heads", "8"], "--group is for ordinary attention"),
        ([], "the following arguments are required: -d/--head-dim"),
        ([*MLA_FLAGS, "--pass", "bwd"], "--pass: the latent variant compares its two forward forms"),
    ],
)
def test_latent_flags_are_all_or_none(extra: list[str], needle: str) -> None:
    from conftest import assert_one_line_error, run_cli

    assert_one_line_error(run_cli("decode", "-s", "8192", *extra), needle)


def test_model_options_route_and_decode_latent() -> None:
    from conftest import run_cli

    base = ["model", "--model", "deepseek-v3", "--context", "4096", "--batch", "8", "--json"]
    uniform = run_cli(*base).json()
    every = run_cli(*base, "--routing", "all").json()
    naive = run_cli(*base, "--mla", "naive").json()
    assert every["totals"]["bytes"] > uniform["totals"]["bytes"]  # all 256 experts read, not ~57
    assert naive["totals"]["flops"] > uniform["totals"]["flops"]  # the cache re-expanded each step
    assert uniform["routing"] == "uniform" and naive["latent_attention"] == "naive"
    kinds = {op["layer_kind"] for op in uniform["ops"]}
    assert {"dense MLP", "MoE", "layer", "embedding", "head"} <= kinds


def test_training_steps_cover_experts_and_latent_attention() -> None:
    """The backward of every row is counted: experts (2× their forward FLOPs) and latent attention
    (naive: the heads' backward, then the up-projection's dX and dW)."""
    from attnroof.model.training import BACKWARD, FORWARD, TrainPrecision, train_ops

    ops = train_ops(builtin("deepseek-v3"), 1, 1024, TrainPrecision())
    fwd = {o.name: o for p, o in ops if p == FORWARD}
    bwd = {o.name: o for p, o in ops if p == BACKWARD}
    assert set(fwd) == set(bwd) and "KV-cache write" not in fwd  # training keeps no KV cache
    for name in ("expert gate/up", "expert down"):
        assert bwd[name].cost.flops == 2 * fwd[name].cost.flops
    stages = [s.name for s in bwd["attention (latent)"].cost]
    assert "KV up-projection dX" in stages and "KV up-projection dW" in stages


@pytest.mark.parametrize("phase", ["prefill", "decode", "train"])
def test_unfused_latent_and_expert_models_place_their_score_matrices(phase: str) -> None:
    """Found by the CLI fuzz: unfused latent attention's score matrices are counted per head
    (128 for DeepSeek-V3) in the memory estimate, for every phase."""
    from conftest import run_cli

    r = run_cli("model", "--model", "deepseek-v3", "--phase", phase, "--context", "64", "--unfused", "--json")
    assert r.returncode == 0, r.stderr
    assert r.json()["memory"]["activation_bytes"] > 0
