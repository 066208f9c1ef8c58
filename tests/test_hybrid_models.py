"""Issue 23's hybrid models as whole models: their layer patterns read from the published configs,
the cache per sequence (K and V where a layer attends, a fixed state where it scans) worked by
hand, the two answers that were wrong before (Qwen3-Next as all full attention, Falcon-H1 without
its Mamba half), the configs real checkpoints ship, tensor parallelism and what is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnroof.model.config import CONFIGS, builtin, load_config_file
from attnroof.model.costs import model_ops
from attnroof.model.fields import ModelConfigError
from attnroof.model.layers import layer_table
from attnroof.model.memory import kv_cache_bytes_per_sequence, kv_cache_bytes_per_token
from attnroof.model.parallel import Shard
from conftest import assert_one_line_error, run_cli

B = 2  # bf16


def _mixers(name: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for kind, n in builtin(name).layer_kinds().items():
        key = kind.mixer + ("" if kind.mlp else " (no MLP)")
        out[key] = out.get(key, 0) + n
    return out


def test_layer_patterns_from_each_family() -> None:
    assert _mixers("qwen3-next-80b-a3b") == {"linear attention": 36, "attention": 12}
    assert _mixers("nemotron-h-8b") == {"mamba2 (no MLP)": 24, "attention (no MLP)": 4, "none": 24}
    assert _mixers("granite-4.0-h-tiny") == {"mamba2": 36, "attention": 4}
    assert _mixers("jamba-mini-1.5") == {"mamba": 28, "attention": 4}
    assert builtin("jamba-mini-1.5").moe_layer_count == 16  # odd layers
    assert _mixers("llama-4-scout") == {"chunked attention": 36, "attention": 12}
    assert _mixers("mamba2-2.7b") == {"mamba2 (no MLP)": 64}
    assert _mixers("falcon-h1-7b") == {"attention+mamba2": 44}
    assert _mixers("deepseek-v3.2-exp") == {"attention": 61}


def test_qwen3_next_cache_by_hand() -> None:
    # 12 full-attention layers: K and V of 2 KV heads × 256, bf16, per token:
    #   12 × 2 × 2 × 256 × 2 B = 24,576 B/token (not 48 layers' 98,304)
    # 36 gated-DeltaNet layers: a 128 × 128 state for each of 32 heads and the conv's last 3
    #   inputs of its 8192 channels: (32 × 128 × 128 + 3 × 8192) × 2 B = 1,097,728 B, at any context
    m = builtin("qwen3-next-80b-a3b")
    assert kv_cache_bytes_per_token(m, B) == 12 * 2 * 2 * 256 * 2 == 24_576
    kv = 12 * 2 * 2 * 256 * B * 131072
    state = 36 * (32 * 128 * 128 + 3 * 8192) * B
    assert kv_cache_bytes_per_sequence(m, 131072, B) == kv + state == 3_260_743_680
    assert kv_cache_bytes_per_sequence(m, 1, B) == 12 * 2 * 2 * 256 * B + state


def test_qwen3_next_decode_cli() -> None:
    args = (
        "model",
        "--model",
        "qwen3-next-80b-a3b",
        "--phase",
        "decode",
        "--context",
        "131072",
        "--device",
        "h200",
    )
    r = run_cli(*args)
    assert r.returncode == 0, r.stderr
    assert "| linear attention (gated DeltaNet)  | ×36 |" in r.stdout
    assert "| attention                          | ×12 |" in r.stdout
    assert (
        "36 layers × 1097728 B (state) + attention 12 layers × 131072 tokens × 2048 B (K,V) = 3260743680 B"
        in r.stdout
    )
    data = json.loads(run_cli(*args, "--json").stdout)
    assert data["memory"]["kv_cache_bytes_per_sequence"] == 3_260_743_680


def test_recurrent_decode_bytes_do_not_grow_with_context() -> None:
    m = builtin("qwen3-next-80b-a3b")

    def bytes_of(context: int, name: str) -> int:
        return next(o.cost.bytes for o in model_ops(m, "decode", 1, context) if o.name == name)

    assert bytes_of(8192, "linear attention (gated DeltaNet)") == bytes_of(
        131072, "linear attention (gated DeltaNet)"
    )
    assert bytes_of(131072, "attention") > 15 * bytes_of(8192, "attention")  # K and V: 16× the tokens


def test_falcon_h1_counts_its_mamba_half() -> None:
    ops = {o.name: o for o in model_ops(builtin("falcon-h1-7b"), "prefill", 1, 4096)}
    assert ops["SSD (Mamba-2)"].count == ops["attention"].count == 44
    # in_proj 3072 → 2·3072 + 2·256 + 24 = 6680, out_proj 3072 → 3072, per token
    assert ops["Mamba in_proj"].cost.flops == 2 * 4096 * 3072 * 6680


def test_llama4_chunked_decode_reads_its_chunk() -> None:
    m = builtin("llama-4-scout")
    ops = {o.name: o for o in model_ops(m, "decode", 1, 131073)}
    # the chunked layers' decode token is the first of a new chunk: 1 key; the global layers read all
    chunked, full = ops["attention (chunked)"].cost, ops["attention"].cost
    assert chunked.flops * 131073 == full.flops
    # the cache: 8192 tokens in the 36 chunked layers, all of them in the 12 global ones (8 KV heads × 128)
    assert kv_cache_bytes_per_sequence(m, 131073, B) == (36 * 8192 + 12 * 131073) * 2 * 8 * 128 * B


def test_deepseek_v32_decode_grows_only_through_the_indexer() -> None:
    m = builtin("deepseek-v3.2-exp")

    def attention_bytes(context: int) -> int:
        return next(
            o.cost.bytes for o in model_ops(m, "decode", 1, context) if o.name == "attention (sparse)"
        )

    # beyond 2048 tokens each further token costs its index key (128 fp8 + a 4-byte scale) and a
    # 4-byte logit written and read
    assert attention_bytes(131072) - attention_bytes(65536) == 65536 * (132 + 4 + 4)


def test_nemotron_time_step_limit_infinity_is_read(tmp_path: Path) -> None:
    text = (CONFIGS / "nemotron-h-8b.json").read_text()
    assert "Infinity" in text  # as published: Python's JSON writes it
    assert load_config_file(CONFIGS / "nemotron-h-8b.json").layers == 52


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"rope_theta": float("inf")}, "rope_theta = inf is not a finite number"),
        ({"time_step_limit": [1.0, 0.5]}, "time_step_limit = [1.0, 0.5] is not [low, high]"),
        ({"hybrid_override_pattern": "M-E*"}, "hybrid_override_pattern holds 'E'"),
        ({"hybrid_override_pattern": "M-M*"}, "hybrid_override_pattern has 4 layers, num_hidden_layers = 52"),
        ({"mamba_num_heads": 0}, "mamba_num_heads = 0 must be positive"),
    ],
)
def test_malformed_hybrid_fields_are_named(tmp_path: Path, change: dict, needle: str) -> None:
    cfg = json.loads((CONFIGS / "nemotron-h-8b.json").read_text()) | change
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    with pytest.raises(ModelConfigError, match=needle.replace("[", r"\[").replace("]", r"\]")):
        load_config_file(path)
    assert_one_line_error(run_cli("model", "--model", str(path), "--context", "1024"), needle)


def test_tensor_parallel_cuts_the_mixers_by_heads() -> None:
    m = builtin("qwen3-next-80b-a3b")
    shard = Shard(tp=4, ep=1, first=0, stop=48)
    rows = {r.name: r for r in layer_table(m, shard)}
    gdn = rows["linear attention (gated DeltaNet)"]
    assert (gdn.shape["heads"], gdn.shape["key_heads"]) == (8, 4)
    assert gdn.state_elements == 8 * 128 * 128 + 3 * (2 * 4 * 128 + 8 * 128)  # 1/4 of the state
    ssd = {r.name: r for r in layer_table(builtin("nemotron-h-8b"), shard)}["SSD (Mamba-2)"]
    assert (ssd.shape["heads"], ssd.shape["groups"]) == (32, 2)


@pytest.mark.parametrize(
    ("model", "operator"),
    [
        ("qwen3-next-80b-a3b", "linear attention"),
        ("nemotron-h-8b", "ssd"),
        ("llama-4-scout", "chunked attention"),
    ],
)
def test_context_parallelism_is_refused_for_the_new_mixers(model: str, operator: str) -> None:
    r = run_cli("model", "--model", model, "--phase", "prefill", "--context", "8192", "--cp", "2")
    assert_one_line_error(r, f"operator '{operator}' has no rule for context parallelism")


def test_sparse_attention_training_is_refused() -> None:
    r = run_cli("model", "--model", "deepseek-v3.2-exp", "--phase", "train", "--context", "4096")
    assert_one_line_error(r, "backward pass of sparse attention is not modelled")


def test_plan_search_trains_a_hybrid_without_context_parallelism() -> None:
    r = run_cli("plan", "--model", "nemotron-h-8b", "--devices", "4", "--device", "h200", "--phase", "train",
                "--context", "4096", "--batch", "8", "--json")  # fmt: skip
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["front"] and all(p["parallel"]["cp"] == 1 for p in data["plans"])
    assert all(p["mfu"] <= 1 for p in data["front"])  # PaLM's attention term: the 4 attention layers only
    assert (
        data["rejected"][
            "CP cannot run this step (decode; windowed, latent, chunked, sparse, linear or state-space attention)"
        ]
        == 5
    )


def test_a_model_without_attention_or_mlp_reads_as_such() -> None:
    r = run_cli(
        "model", "--model", "mamba2-2.7b", "--phase", "decode", "--context", "8192", "--sweep-batch", "1,16"
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(
        "mamba2-2.7b: 64 layers, hidden 2560, no attention; 64 Mamba-2, no MLP, vocab 50288"
    )
    assert "|     1 |" in r.stdout and "| —        |" in r.stdout  # no MLP GEMM to show


def test_deepseek_v32_cache_by_hand() -> None:
    # per token and layer: the latent 512 + 64 in the cache's dtype, and the index key in fp8 with
    # an fp32 scale, 128 + 4 B whatever that dtype: 61 × (576 × 2 + 132) = 78,324 B in bf16
    m = builtin("deepseek-v3.2-exp")
    assert kv_cache_bytes_per_token(m, 2) == 61 * (576 * 2 + 132) == 78_324
    assert kv_cache_bytes_per_token(m, 1) == 61 * (576 + 132)  # --kv-dtype fp8: the latent only
    assert kv_cache_bytes_per_sequence(m, 131072, 2) == 78_324 * 131072
