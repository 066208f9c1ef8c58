"""Reading a config.json (issue 20): what attnroof does not model is refused in one line; layer
numbers and counts are checked against the layers the model has; a step is costed once per
layer kind, never once per layer."""

from __future__ import annotations

from typing import Any

import pytest

from attnroof.model import ModelConfigError, from_hf
from attnroof.model import rows as rows_module
from attnroof.model.architectures import LayerKind
from attnroof.model.fields import MAX_LAYERS
from attnroof.model.layers import layer_table, params

LLAMA = {
    "model_type": "llama",
    "hidden_size": 128,
    "num_hidden_layers": 32,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 256,
    "vocab_size": 1000,
    "rms_norm_eps": 1e-5,
}
MOE = {**LLAMA, "model_type": "qwen2_moe", "num_experts": 8, "num_experts_per_tok": 2}


def _error(cfg: dict[str, Any], *needles: str) -> None:
    with pytest.raises(ModelConfigError) as err:
        from_hf(cfg, where="c.json")
    text = str(err.value)
    assert text.startswith("c.json: ") and "\n" not in text
    for needle in needles:
        assert needle in text, (needle, text)


# ---------------------------------------------------------------- layer counts and layer numbers


@pytest.mark.parametrize("layers", [MAX_LAYERS + 1, 10**6, 10**9])
def test_layer_counts_beyond_the_ceiling_are_refused(layers: int) -> None:
    # 10**6 layers took 23 s and 10**9 ran out of memory: one row list was built per layer
    _error({**LLAMA, "num_hidden_layers": layers}, f"num_hidden_layers = {layers:,}", f"{MAX_LAYERS:,}")


def test_gpt2_layer_key_is_named() -> None:
    gpt2 = {"model_type": "gpt2", "n_embd": 64, "n_layer": 10**7, "n_head": 4, "vocab_size": 100}
    _error(gpt2, "n_layer = 10,000,000")


def test_a_step_is_costed_once_per_layer_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    """Gemma 2's alternation on the ceiling's 10,000 layers: two kinds (window 64 on the even
    layers, global on the odd), so the layer rows are built twice, and each attention row runs
    5,000 times."""
    calls = []
    real = rows_module.layer_rows

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(args[1:3])  # (window, moe)
        return real(*args, **kwargs)

    monkeypatch.setattr(rows_module, "layer_rows", counted)
    cfg = {**LLAMA, "model_type": "gemma2", "num_hidden_layers": MAX_LAYERS, "sliding_window": 64}
    m = from_hf(cfg)
    assert m.layer_kinds() == {LayerKind(64): 5000, LayerKind(None): 5000}
    table = layer_table(m)
    assert sorted(calls, key=str) == [(64, False), (None, False)]
    assert {i.name: i.count for i in table if i.operator == "attention"} == {
        "attention (window 64)": 5000,
        "attention (global)": 5000,
    }
    # per layer: QKV 128·(128 + 2·64) + O 128·128 + MLP gate/up/down 3·128·256 + four norms 4·128
    per_layer = 128 * 256 + 128 * 128 + 3 * 128 * 256 + 4 * 128
    assert params(m) == MAX_LAYERS * per_layer + 1000 * 128 + 128  # embedding (tied head) + final norm


def test_pipeline_stage_counts_each_kind_in_its_layers() -> None:
    """DeepSeek-style: 3 dense layers first, then experts; layers 2 to 9 hold 1 dense and 7 MoE."""
    m = from_hf({**MOE, "first_k_dense_replace": 3})
    assert m.layer_kinds(2, 10) == {LayerKind(None, False): 1, LayerKind(None, True): 7}
    assert m.moe_layer_count == 29


@pytest.mark.parametrize(
    ("fields", "needles"),
    [
        ({"first_k_dense_replace": 1000}, ("first_k_dense_replace = 1000", "32 layers")),
        ({"first_k_dense_replace": 33}, ("first_k_dense_replace = 33",)),
        ({"mlp_only_layers": [-1, 1000]}, ("mlp_only_layers", "layer -1", "0 to 31")),
        ({"mlp_only_layers": [0, 32]}, ("mlp_only_layers", "layer 32", "0 to 31")),
    ],
)
def test_layer_numbers_outside_the_model_are_refused(
    fields: dict[str, Any], needles: tuple[str, ...]
) -> None:
    _error({**MOE, **fields}, *needles)


def test_layer_numbers_at_the_edges_are_read() -> None:
    # every layer dense (first_k_dense_replace = layers) and the last layer dense (31) are legal
    assert from_hf({**MOE, "first_k_dense_replace": 32}).moe_layer_count == 0
    assert from_hf({**MOE, "mlp_only_layers": [0, 31]}).moe_layer_count == 30


# ---------------------------------------------------------------- model types


OLMOE_1B_7B = {
    "_name_or_path": "allenai/OLMoE-1B-7B-0924",
    "model_type": "olmoe",
    "hidden_act": "silu",
    "hidden_size": 2048,
    "intermediate_size": 1024,
    "num_hidden_layers": 16,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "num_experts": 64,
    "num_experts_per_tok": 8,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False,
    "vocab_size": 50304,
}
"""The published config of allenai/OLMoE-1B-7B-0924 (the fields that size it)."""


def test_olmoe_counts_its_whole_width_qk_norm() -> None:
    """transformers' ``OlmoeAttention``: ``q_norm = RMSNorm(hidden_size)``, ``k_norm =
    RMSNorm(head_dim × kv_heads)`` — one scale per element of q and of k, not per head.

    per layer: attention 4 · 2048² = 16,777,216; QK norm 2048 + 2048 = 4,096; two norms 4,096;
    router 2048 · 64 = 131,072; experts 64 · 3 · 2048 · 1024 = 402,653,184 → 419,569,664;
    × 16 = 6,713,114,624, + embedding and LM head 2 · 50304 · 2048 = 206,045,184 + final norm
    2,048 = 6,919,161,856 (the 6.9 B of OLMoE-1B-7B; without the QK norm 65,536 fewer)."""
    m = from_hf(OLMOE_1B_7B)
    assert params(m) == 6_919_161_856
    qk = next(i for i in layer_table(m) if i.name == "QK norm")
    assert (qk.count, qk.params) == (16, 2048 + 2048)


def test_olmoe_parameters_match_transformers() -> None:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    fields = {k: v for k, v in OLMOE_1B_7B.items() if k != "_name_or_path"}
    cfg = transformers.AutoConfig.for_model(fields.pop("model_type"), **fields)
    with torch.device("meta"):
        ref = transformers.AutoModelForCausalLM.from_config(cfg)
    assert params(from_hf(OLMOE_1B_7B)) == sum(p.numel() for p in ref.parameters())


@pytest.mark.parametrize("model_type", ["granite", "olmo2", "cohere", "internlm2", "Granite"])
def test_a_model_type_attnroof_does_not_read_is_refused(model_type: str) -> None:
    """Llama 3.1 8B's shapes under another family's name: read as an ungated MLP they counted
    6.15 B parameters for an 8.03 B config; now one line naming the type and what is read."""
    llama_8b = {
        **LLAMA,
        "model_type": model_type,
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 14336,
        "vocab_size": 128256,
        "hidden_act": "silu",
    }
    _error(llama_8b, f"model_type = {model_type.lower()!r}", "llama", "olmoe", "gpt2")


def test_every_family_rule_names_a_type_that_is_read() -> None:
    """The expert-bias and Gemma-2 window rules key on model types: each is one of the table's."""
    from attnroof.model.architectures import EXPERT_BIAS_TYPES, GEMMA2_TYPES
    from attnroof.model.hf_config import FAMILIES

    assert set(FAMILIES) >= EXPERT_BIAS_TYPES | GEMMA2_TYPES


def test_a_config_without_model_type_is_read_as_a_llama_style_stack() -> None:
    # gated by its SiLU activation: 32 layers × (attention 2·128·128 + 2·128·64 + MLP 3·128·256)
    m = from_hf({k: v for k, v in LLAMA.items() if k != "model_type"} | {"hidden_act": "silu"})
    per_layer = 2 * 128 * 128 + 2 * 128 * 64 + 3 * 128 * 256 + 2 * 128
    assert m.gated and params(m) == 32 * per_layer + 2 * 1000 * 128 + 128
