"""Whole-model analysis (issue 6): configs, operators, phases, memory, the ``model`` command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnroof.model import ModelConfigError, UnknownModel, builtin, builtin_names, from_hf, get_model
from attnroof.model.analysis import analyse
from attnroof.model.batching import compute_bound_batch, gemm_crossovers
from attnroof.model.costs import model_ops
from attnroof.model.layers import Precision, params, params_read
from attnroof.model.memory import kv_cache_bytes_per_token, memory
from attnroof.ops import attention, decode, linear
from attnroof.ops.elementwise import activation, add, copy, norm
from attnroof.roofline import Roof
from attnroof.solve import crossover
from conftest import assert_one_line_error, run_cli

H200 = Roof(989e12, 4.8e12, "H200 SXM", "bf16")  # dense bf16, HBM3e
H200_CAPACITY = 141e9
H200_TOML = """\
name = "H200 SXM"
bandwidth_bytes_per_s = 4.8e12
capacity_bytes = 141e9
source = "test"

[peak_flops_per_s]
bf16 = 989e12
"""

# Published parameter counts (model cards / safetensors totals).
PUBLISHED = {
    "llama-3.1-8b": 8.03e9,
    "llama-3.1-70b": 70.6e9,
    "llama-3.1-405b": 405.9e9,  # the Hub's safetensors count, 406B; Meta says 405B
    "mistral-7b": 7.24e9,
    "qwen2.5-7b": 7.62e9,
    "gpt2": 124.4e6,
    "mixtral-8x7b": 46.7e9,
    "deepseek-v3": 671e9,
    "qwen3-30b-a3b": 30.5e9,
    "gpt-oss-20b": 20.9e9,
    "gpt-oss-120b": 116.8e9,
    "gemma-2-9b": 9.24e9,
    "phi-3-mini": 3.82e9,
    # issue 23's hybrids: the totals of their cards (shared/data/configs/README.md), or where a card
    # rounds further than 1%, transformers' count on the meta device (tests/test_hybrid_transformers.py)
    "qwen3-next-80b-a3b": 80e9,
    "nemotron-h-8b": 8.10e9,  # card: "8B"; transformers: 8,100,852,736
    "granite-4.0-h-tiny": 7e9,
    "jamba-mini-1.5": 52e9,
    "llama-4-scout": 107.77e9,  # the text model; the card's 109 B includes the vision encoder
    "mamba2-2.7b": 2.7e9,
    "falcon-h1-7b": 7.6e9,
    "deepseek-v3.2-exp": 671e9,
}


def tiny(**over: object) -> dict[str, object]:
    """One layer, one head of 128: the core's single-head numbers must come through unchanged."""
    cfg: dict[str, object] = {
        "model_type": "llama",
        "hidden_size": 128,
        "num_hidden_layers": 1,
        "num_attention_heads": 1,
        "intermediate_size": 256,
        "vocab_size": 1000,
        "rms_norm_eps": 1e-5,
    }
    cfg.update(over)
    return cfg


@pytest.fixture
def h200_file(tmp_path: Path) -> str:
    p = tmp_path / "h200.toml"
    p.write_text(H200_TOML)
    return str(p)


# ---------------------------------------------------------------- configs


def test_builtin_names() -> None:
    assert builtin_names() == sorted(PUBLISHED)


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_parameter_count_matches_published_size(name: str) -> None:
    n_params = params(builtin(name))
    assert abs(n_params - PUBLISHED[name]) / PUBLISHED[name] < 0.01, n_params


def test_parameter_count_llama_8b_by_hand() -> None:
    h, i, v, layers = 4096, 14336, 128256, 32
    attn = h * h + 2 * h * 1024 + h * h  # q, k, v (8 KV heads × 128), o
    mlp = 3 * h * i  # gate, up, down
    per_layer = attn + mlp + 2 * h  # two RMSNorm scales
    total = layers * per_layer + 2 * v * h + h  # untied embedding and LM head, final norm
    assert total == 8_030_261_248
    assert params(builtin("llama-3.1-8b")) == total


def test_parameter_count_gpt2_by_hand() -> None:
    h, v, pos = 768, 50257, 1024
    per_layer = (h * 3 * h + 3 * h) + (h * h + h) + (h * 4 * h + 4 * h) + (4 * h * h + h) + 2 * 2 * h
    total = 12 * per_layer + v * h + pos * h + 2 * h  # tied LM head: no extra matrix
    assert params(builtin("gpt2")) == total == 124_439_808


def test_config_facts() -> None:
    llama, mistral, qwen, gpt2 = (builtin(n) for n in ("llama-3.1-8b", "mistral-7b", "qwen2.5-7b", "gpt2"))
    assert (llama.kv_heads, llama.head_dim, llama.group, llama.gated, llama.tied) == (8, 128, 4, True, False)
    assert mistral.sliding_window == 4096
    assert qwen.sliding_window is None  # use_sliding_window: false
    assert (qwen.qkv_bias, qwen.o_bias, qwen.group) == (True, False, 7)
    assert (gpt2.gated, gpt2.norm, gpt2.tied) == (False, "layer", True)
    assert (gpt2.intermediate, gpt2.kv_heads, gpt2.learned_positions) == (3072, 12, 1024)


@pytest.mark.parametrize("name", ["Llama-3.1-8B", "LLAMA-3.1-8b", "meta-llama/Llama-3.1-8B", "GPT-2", "gpt2"])
def test_names_are_case_insensitive(name: str) -> None:
    assert get_model(name).name in builtin_names()


def test_defaults_follow_transformers() -> None:
    m = from_hf(tiny(hidden_size=512, num_attention_heads=4))
    assert (m.kv_heads, m.head_dim) == (4, 128)  # KV heads default to heads; head_dim = 512 / 4
    g = from_hf({"n_embd": 64, "n_layer": 2, "n_head": 4, "n_inner": None, "vocab_size": 10})
    assert g.intermediate == 4 * 64 and not g.gated and g.tied


def test_config_file_and_folder(tmp_path: Path) -> None:
    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(tiny()))
    assert get_model(str(folder)).name == "my-model"
    assert get_model(str(folder / "config.json")).hidden == 128


@pytest.mark.parametrize(
    ("override", "needle"),
    [
        ({"hidden_size": None}, "missing required field 'hidden_size'"),
        ({"num_hidden_layers": 0}, "num_hidden_layers = 0 must be positive"),
        ({"vocab_size": -5}, "vocab_size = -5"),
        ({"intermediate_size": 2.5}, "intermediate_size = 2.5 is not an integer"),
        ({"num_attention_heads": 3}, "num_attention_heads = 3 does not divide hidden_size = 128"),
        ({"num_attention_heads": 4, "num_key_value_heads": 3}, "num_key_value_heads = 3 does not divide"),
        ({"tie_word_embeddings": "yes"}, "tie_word_embeddings"),
    ],
)
def test_bad_configs(override: dict[str, object], needle: str) -> None:
    cfg = tiny(**override)
    cfg = {k: v for k, v in cfg.items() if v is not None}
    with pytest.raises(ModelConfigError, match=needle):
        from_hf(cfg)


def test_head_dim_given_needs_no_divisibility() -> None:
    assert from_hf(tiny(num_attention_heads=3, head_dim=64)).q_width == 192


def test_unknown_model_suggests() -> None:
    with pytest.raises(UnknownModel, match=r"did you mean llama-3\.1-8b"):
        get_model("llama-3.1-8")


# ---------------------------------------------------------------- formulas


def test_elementwise_arithmetic() -> None:
    # RMSNorm: 4 FLOPs per element; reads X and the scale, writes Y (bf16).
    assert (norm(2, 10).flops, norm(2, 10).bytes) == (4 * 2 * 10, 2 * (20 + 10 + 20))
    # LayerNorm: 7 per element, scale and shift.
    assert (norm(2, 10, kind="layer").flops, norm(2, 10, kind="layer").bytes) == (140, 2 * (20 + 20 + 20))
    assert (add(3, 5).flops, add(3, 5).bytes) == (15, 2 * 3 * 15)
    # SwiGLU: (4 + 1) per element, reads gate and up; GELU: 8, reads one.
    assert activation(1, 100, gated=True).flops == 500 and activation(1, 100, gated=True).bytes == 600
    assert activation(1, 100, gated=False).flops == 800 and activation(1, 100, gated=False).bytes == 400
    assert (copy(10, write_itemsize=1).flops, copy(10, write_itemsize=1).bytes) == (0, 20 + 10)
    assert len(norm(1, 1).stages) == 1


def test_one_head_one_layer_prefill_is_the_core_formula() -> None:
    m = from_hf(tiny())
    s, d = 2048, 128
    for fused in (False, True):
        ops = {o.name: o for o in model_ops(m, "prefill", 1, s, fused=fused)}
        core = attention(s, d, causal=True, fused=fused)
        assert ops["attention"].cost.flops == core.flops
        assert ops["attention"].cost.bytes == core.bytes
        assert ops["attention"].count == 1


def test_one_head_one_layer_decode_is_the_core_formula() -> None:
    m = from_hf(tiny())
    s, d = 8192, 128
    for fused in (False, True):
        op = next(o for o in model_ops(m, "decode", 1, s, fused=fused) if o.attention)
        core = decode(s, d, fused=fused)
        assert (op.cost.flops, op.cost.bytes) == (core.flops, core.bytes)
    unfused = next(o for o in model_ops(m, "decode", 1, s, fused=False) if o.attention)
    assert (unfused.cost.flops, unfused.cost.bytes) == (4235264, 4260352)  # 4sd + 5s, 2·(2sd + 4s + 2d)


def test_gqa_attention_uses_group_and_kv_heads() -> None:
    m = builtin("llama-3.1-8b")
    op = next(o for o in model_ops(m, "decode", 16, 8192) if o.attention)
    expected = decode(8192, 128, fused=True, group=4, kv_heads=8, batch=16)
    assert (op.cost.flops, op.cost.bytes) == (expected.flops, expected.bytes)


def test_fp8_kv_cache_and_weights() -> None:
    m = builtin("llama-3.1-8b")
    prec = Precision(itemsize=2, weight_itemsize=1, kv_itemsize=1)
    ops = {o.name: o for o in model_ops(m, "decode", 1, 4096, prec)}
    core = decode(4096, 128, fused=True, group=4, kv_heads=8, kv_itemsize=1)
    assert ops["attention"].cost.bytes == core.bytes
    assert ops["down projection"].cost.bytes == linear(1, 14336, 4096, weight_itemsize=1).bytes
    assert kv_cache_bytes_per_token(m, 1) == 32 * 2 * 8 * 128 * 1


def test_sliding_window_caps_decode_reads() -> None:
    m = builtin("mistral-7b")
    op = next(o for o in model_ops(m, "decode", 1, 32768) if o.attention)
    assert op.cost.bytes == decode(4096, 128, fused=True, group=4, kv_heads=8).bytes
    mem = memory(m, "decode", 1, 32768, Precision(), None)
    assert mem.kv_cache_bytes == 32 * 2 * 8 * 128 * 2 * 4096


def test_decode_writes_the_new_tokens_kv() -> None:
    m, b = builtin("llama-3.1-8b"), 4
    op = next(o for o in model_ops(m, "decode", b, 1000) if o.name == "KV-cache write")
    # reads the new K and V (bf16) and writes them to the cache: b × 2 × 8 heads × 128 × (2 + 2) bytes
    assert op.count == 32 and op.cost.bytes == b * 2 * 8 * 128 * (2 + 2)


def test_lm_head_runs_once_on_the_last_tokens() -> None:
    m = builtin("llama-3.1-8b")
    op = next(o for o in model_ops(m, "prefill", 2, 512) if o.name == "LM head")
    assert op.count == 1 and op.cost.flops == linear(2, 4096, 128256).flops


# ---------------------------------------------------------------- phases and memory


def test_kv_cache_bytes_per_token_llama_8b() -> None:
    # layers × 2 × kv_heads × head_dim × bytes = 32 × 2 × 8 × 128 × 2
    assert kv_cache_bytes_per_token(builtin("llama-3.1-8b"), 2) == 131072


@pytest.mark.parametrize("name", sorted(PUBLISHED))
@pytest.mark.parametrize("batch", [1, 8, 64])
def test_decode_time_at_least_weights_and_kv_over_bandwidth(name: str, batch: int) -> None:
    m = builtin(name)
    a = analyse(m, "decode", batch, 1024, H200, capacity_bytes=H200_CAPACITY)
    # Every weight is read once per step, except the tables only gathered a row per token (an
    # untied token embedding, GPT-2's learned positions).
    gathered = (0 if m.tied else m.vocab * m.hidden) + m.learned_positions * m.hidden
    if m.experts is None and not m.sinks:  # experts: only those touched (test_architectures.py)
        assert a.memory.weights_read_bytes == a.memory.weights_bytes - 2 * gathered
    assert a.totals.time_s >= (a.memory.weights_read_bytes + a.memory.kv_cache_bytes) / 4.8e12


MIXER_WEIGHTS = ("conv taps", "A, dt bias", "A, D, dt bias", "A, D")
"""A recurrent mixer's own weights (issue 23): its conv's taps and bias, its per-head scalars."""


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_ops_read_every_streamed_weight_once(name: str) -> None:
    m = builtin(name)
    read = sum(
        op.count * acc.bytes
        for op in model_ops(m, "decode", 1, 64)
        for st in op.cost
        for acc in st.reads
        if acc.tensor in ("W", "scale", "bias", "W_UKV", "W_UK", "W_UV", *MIXER_WEIGHTS)
    )
    step_reads = analyse(m, "decode", 1, 64, H200).memory.weights_read_bytes
    assert read == pytest.approx(step_reads, rel=1e-12)
    if m.experts is None and m.latent is None and not m.sinks:
        assert read == params_read(m) * 2


def test_totals_add_up() -> None:
    a = analyse(builtin("llama-3.1-8b"), "decode", 8, 4096, H200)
    assert a.totals.time_s == pytest.approx(sum(o.count * o.time_s for o in a.ops))
    assert a.totals.tokens_per_s == pytest.approx(8 / a.totals.time_s)
    assert a.totals.ttft_s is None
    attn = a.op("attention")
    assert a.totals.attention_share == pytest.approx(32 * attn.time_s / a.totals.time_s)
    p = analyse(builtin("llama-3.1-8b"), "prefill", 1, 4096, H200)
    assert p.totals.ttft_s == p.totals.time_s and p.totals.tokens_per_s is None


def test_batching_raises_gemm_intensity_not_attentions() -> None:
    m = builtin("llama-3.1-8b")
    one, many = (analyse(m, "decode", b, 4096, H200) for b in (1, 64))
    assert many.op("gate/up projection").intensity > 50 * one.op("gate/up projection").intensity
    assert many.op("attention").intensity == pytest.approx(one.op("attention").intensity)  # ≈ group = 4
    assert one.totals.tokens_per_s < many.totals.tokens_per_s


def test_gemm_crossover_is_the_linear_crossover() -> None:
    m = builtin("llama-3.1-8b")
    got = {g.name: g.batch for g in gemm_crossovers(m, H200, Precision())}
    direct = crossover(lambda n: linear(n, 14336, 4096).intensity, 989e12, 4.8e12, variable="n")
    assert got["down projection"] == direct.s_min
    assert analyse(m, "decode", direct.s_min, 128, H200).op("down projection").limiter == "compute"
    assert analyse(m, "decode", direct.s_min - 1, 128, H200).op("down projection").limiter == "memory"


def test_decode_compute_bound_batch() -> None:
    m = builtin("llama-3.1-8b")
    # Long context: the private KV reads dominate at any batch.
    never, share = compute_bound_batch(m, 8192, H200, Precision())
    assert never is None and share > 0.5
    # Short context: past the GEMMs' crossover the step turns compute-bound.
    b, _ = compute_bound_batch(m, 128, H200, Precision())
    assert b is not None
    assert analyse(m, "decode", b, 128, H200).totals.memory_bound_share < 0.5
    assert analyse(m, "decode", b - 1, 128, H200).totals.memory_bound_share >= 0.5


def test_unfused_prefill_materialises_scores() -> None:
    m, b, s = builtin("llama-3.1-8b"), 2, 4096
    fused = memory(m, "prefill", b, s, Precision(), H200_CAPACITY)
    unfused = memory(m, "prefill", b, s, Precision(), H200_CAPACITY, fused=False)
    # b × heads × s² × 2 bytes of one layer's scores, beside the b·s × hidden residual stream
    assert unfused.activation_bytes == (b * s * 4096 + b * 32 * s * s) * 2
    assert fused.activation_bytes < unfused.activation_bytes
    assert unfused.max_batch < fused.max_batch


def test_max_batch_and_context_fit() -> None:
    m = builtin("llama-3.1-8b")
    mem = memory(m, "decode", 1, 8192, Precision(), H200_CAPACITY)
    assert mem.fits and mem.max_batch > 1
    assert memory(m, "decode", mem.max_batch, 8192, Precision(), H200_CAPACITY).fits
    assert not memory(m, "decode", mem.max_batch + 1, 8192, Precision(), H200_CAPACITY).fits
    c = mem.max_context_by_memory
    assert memory(m, "decode", 1, c, Precision(), H200_CAPACITY).fits
    assert not memory(m, "decode", 1, c + 1, Precision(), H200_CAPACITY).fits
    assert c > 131072 and mem.max_context == 131072  # the model's own limit is the smaller
    # The 70B model's 141 GB of bf16 weights alone overflow 141 GB.
    big = memory(builtin("llama-3.1-70b"), "decode", 1, 1, Precision(), H200_CAPACITY)
    assert not big.fits and big.max_batch == 0
    # A sliding window and fused attention: memory stops growing with context; the model's 32768 remains.
    windowed = memory(builtin("mistral-7b"), "decode", 1, 8192, Precision(), H200_CAPACITY)
    assert windowed.max_context_by_memory is None and windowed.max_context == 32768


# ---------------------------------------------------------------- command line


def test_cli_decode_json(h200_file: str) -> None:
    r = run_cli(
        "model",
        "--model",
        "llama-3.1-8b",
        "--context",
        "8192",
        "--batch",
        "4",
        "--device",
        h200_file,
        "--json",
    )
    assert r.returncode == 0, r.stderr
    out = r.json()
    for key in ("model", "phase", "batch", "context", "device", "dtype", "ops", "totals", "memory"):
        assert key in out
    assert (out["model"], out["phase"], out["batch"], out["device"]) == (
        "llama-3.1-8b",
        "decode",
        4,
        "H200 SXM",
    )
    op = next(o for o in out["ops"] if o["name"] == "QKV projection")
    assert (
        set(op) >= {"name", "flops", "bytes", "intensity", "time_s", "limiter", "count"} and op["count"] == 32
    )
    t = out["totals"]
    assert t["tokens_per_s"] == pytest.approx(4 / t["time_s"]) and t["ttft_s"] is None
    assert 0 < t["attention_share"] < 1
    mem = out["memory"]
    assert mem["kv_cache_bytes_per_token_written"] == mem["kv_cache_bytes_per_token_held"] == 131072
    assert mem["kv_cache_bytes"] == 131072 * 8192 * 4
    assert mem["fits"] is True and mem["max_batch"] == 116


def test_cli_tiny_config_matches_core(tmp_path: Path) -> None:
    cfg = tmp_path / "tiny.json"
    cfg.write_text(json.dumps(tiny()))
    r = run_cli(
        "model", "--model", str(cfg), "--phase", "prefill", "--context", "1024", "--unfused", "--json"
    )
    assert r.returncode == 0, r.stderr
    op = next(o for o in r.json()["ops"] if o["name"] == "attention")
    core = attention(1024, 128, causal=True)
    assert (op["flops"], op["bytes"], op["count"]) == (core.flops, core.bytes, 1)
    assert r.json()["totals"]["ttft_s"] > 0


def test_cli_table_and_sweep(h200_file: str) -> None:
    r = run_cli("model", "--model", "llama-3.1-8b", "--context", "4096", "--device", h200_file)
    assert r.returncode == 0, r.stderr
    assert "| gate/up projection" in r.stdout and "×32" in r.stdout and "tokens/s" in r.stdout
    s = run_cli(
        "model",
        "--model",
        "llama-3.1-8b",
        "--context",
        "4096",
        "--device",
        h200_file,
        "--sweep-batch",
        "1,256",
    )
    assert s.returncode == 0, s.stderr
    assert "GEMMs compute-bound from batch" in s.stdout
    sj = run_cli(
        "model",
        "--model",
        "llama-3.1-8b",
        "--context",
        "4096",
        "--device",
        h200_file,
        "--sweep-batch",
        "1,256",
        "--json",
    ).json()
    assert [row["batch"] for row in sj["rows"]] == [1, 256]
    assert sj["rows"][1]["totals"]["tokens_per_s"] > sj["rows"][0]["totals"]["tokens_per_s"]


def test_cli_list_and_weight_dtype() -> None:
    r = run_cli("model", "--list")
    assert r.returncode == 0 and all(n in r.stdout for n in PUBLISHED)
    w = run_cli("model", "--model", "gpt2", "--context", "512", "--weight-dtype", "fp8", "--json")
    assert w.json()["memory"]["weights_bytes"] == params(builtin("gpt2")) * 1
    assert w.json()["dtype"] == "bf16" and w.json()["weight_dtype"] == "fp8"
    t = run_cli("model", "--model", "gpt2", "--context", "512", "--weight-dtype", "fp8")
    assert "multiplied at the bf16 peak" in t.stdout


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ('{"hidden_size": 4096', "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        (
            json.dumps(tiny(num_attention_heads=3)),
            "num_attention_heads = 3 does not divide hidden_size = 128",
        ),
        (json.dumps(tiny(num_attention_heads=4, num_key_value_heads=3)), "num_key_value_heads = 3"),
        (json.dumps(tiny(num_hidden_layers=-2)), "num_hidden_layers = -2 must be positive"),
        (
            json.dumps({k: v for k, v in tiny().items() if k != "vocab_size"}),
            "missing required field 'vocab_size'",
        ),
    ],
)
def test_cli_bad_config_one_line(tmp_path: Path, content: str, needle: str) -> None:
    cfg = tmp_path / "bad.json"
    cfg.write_text(content)
    assert_one_line_error(run_cli("model", "--model", str(cfg), "--context", "128"), needle)


def test_cli_bad_input_one_line(tmp_path: Path) -> None:
    assert_one_line_error(
        run_cli("model", "--model", "llama-3-8b", "--context", "128"), "did you mean llama-3.1-8b"
    )
    missing = str(tmp_path / "nope.json")
    assert_one_line_error(
        run_cli("model", "--model", missing, "--context", "128"), "cannot read model config"
    )
    assert_one_line_error(run_cli("model", "--context", "128"), "--model is required")
    assert_one_line_error(run_cli("model", "--model", "gpt2"), "--context is required")
    assert_one_line_error(run_cli("model", "--model", "gpt2", "--context", "0"), "'0'")
    assert_one_line_error(run_cli("model", "--model", "gpt2", "--context", "8", "--kv-dtype", "fp7"), "fp7")
