"""attnroof against the model Hugging Face ``transformers`` builds from the same ``config.json``:
parameter counts, and the FLOPs of a prefill and a decode step as PyTorch's ``FlopCounterMode``
counts them (issue 11). CPU only, nothing downloaded, no weights: the model lives on the meta device::

    cfg = AutoConfig.for_model(fields.pop("model_type"), **fields)    # quantization_config dropped
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(
            cfg, attn_implementation="eager", experts_implementation="batched_mm"
        )

Conventions, aligned so that both sides count the same work:

- ``FlopCounterMode`` counts matrix products only (mm, addmm, bmm, SDPA), 2 FLOPs per multiply-add.
  attnroof's side is its GEMM rows and attention rows with ``softmax_flops_per_element = 0``; norms,
  activations, residual adds, RoPE and the embedding gather are left out on both sides.
- ``addmm`` counts the product, not the bias add: attnroof's bias epilogue (one FLOP per output element,
  GPT-2 and Qwen2's QKV) is taken off its GEMM FLOPs.
- Causal halving: ``FlopCounterMode`` counts Q·Kᵀ and P·V over the whole s × s matrix (it ignores the
  mask); attnroof counts the causal half at prefill. The reference's attention matmuls are compared with
  2 × attnroof's at prefill (:data:`CAUSAL_UNDONE`). The prompt (:data:`PROMPT`, 128 tokens) is no longer
  than any window (gpt-oss's 128 is the smallest), so no window cuts the prefill matrix.
- The LM head runs on the last position only: ``logits_to_keep=1``.
- Decode at context N: a prefill of N − 1 tokens fills a ``DynamicCache`` (not counted), then one token
  is counted against N cached positions — attnroof's decode at context N reads ``min(N, window)``
  tokens of K and V, and so does transformers (Phi-3-mini's window 2047 on every layer, Mistral's 4096).
- The reference's attention FLOPs are the attention modules' own matmuls (a module whose class name
  ends in ``Attention``, less what its child modules count: its projections are GEMMs);
  the reference's GEMM FLOPs are the rest.
- Mixture-of-experts: transformers' default expert path counts zero FLOPs on the meta device;
  ``experts_implementation="batched_mm"`` runs the top-k experts of each token, exactly.
- Latent attention (DeepSeek): transformers 5 caches the latent and re-expands the whole cache through
  ``kv_b_proj`` at every decode step: the naive (decompressed) form, a GEMM on this split.

Models attnroof refuses today (one line from ``model/unmodelled.py``) are expected failures until
their architecture lands. ``python tests/test_transformers_flops.py`` prints the reference numbers.
"""

from __future__ import annotations

import functools
import json
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers", minversion="5.0")

from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from attnroof.model.analysis import analyse  # noqa: E402
from attnroof.model.config import CONFIGS, ModelConfig, load_config_file  # noqa: E402
from attnroof.model.costs import model_ops  # noqa: E402
from attnroof.model.layers import DECODE, PREFILL, Step, active_params, layer_table, params  # noqa: E402  # noqa: E402
from attnroof.operators import ATTENTION, GEMM, operator  # noqa: E402
from attnroof.ops.latent import KV_UP, NAIVE, Q_ABSORB, V_ABSORB  # noqa: E402
from attnroof.ops.linear import BIAS_FLOPS_PER_ELEMENT  # noqa: E402
from attnroof.roofline import Roof  # noqa: E402

PUBLISHED = Path(__file__).parent / "data" / "configs"
HYBRIDS = frozenset(
    {"qwen3-next-80b-a3b", "nemotron-h-8b", "granite-4.0-h-tiny", "jamba-mini-1.5", "llama-4-scout",
     "mamba2-2.7b", "falcon-h1-7b", "deepseek-v3.2-exp"}
)  # fmt: skip
"""Issue 23's models: their mixers count differently in FlopCounterMode (tests/test_hybrid_transformers.py)."""
CONFIG_FILES = {p.stem: p for p in sorted(PUBLISHED.glob("*.json"))} | {
    p.stem: p for p in sorted(CONFIGS.glob("*.json")) if p.stem not in HYBRIDS
}
"""Every built-in config and every published one (a built-in wins over its published copy)."""

UNMODELLED: dict[str, str] = {}
"""Architectures attnroof does not model (xfail with the reason); none of the configs here since
experts, latent attention and alternating windows landed. DeepSeek's decode is transformers' naive
MLA (the whole latent cache re-expanded through kv_b_proj, 16.77 TFLOPs of the 16.88 at 8192
tokens), compared with attnroof's naive form; the absorbed form is checked by hand in
tests/test_architectures.py."""

PROMPT = 128
"""Prefill tokens (batch 1)."""
DECODE_CONTEXT = 8192
"""Decode context, capped at the model's positions (GPT-2: 1024; Phi-3-mini-4k: 4096)."""
CAUSAL_UNDONE = 2
"""FlopCounterMode counts the whole s × s attention matrices; attnroof counts the causal half."""
TOLERANCE = 0.01
"""The issue's target: within 1% once the conventions agree."""
ROOF = Roof(989e12, 4.8e12)
"""Any device: FLOPs do not depend on it."""
DROPPED_FIELDS = ("quantization_config",)
"""Left out of the transformers config: a quantizer (FP8, MXFP4) needs kernels and changes no FLOP count."""


@dataclass(frozen=True)
class Counted:
    """Matmul FLOPs of one step, split the same way on both sides."""

    gemm: int
    """Weight GEMMs: projections, MLP or experts, router, LM head (MLA's kv_b_proj too)."""
    attention: int
    """Q·Kᵀ and P·V (the reference: over the whole matrix; attnroof: the causal half at prefill)."""

    @property
    def total(self) -> int:
        return self.gemm + self.attention


@dataclass(frozen=True)
class Reference:
    """What transformers' model of a config counts."""

    params: int
    active_params: int
    """Per token: all parameters but the experts a token does not use (input embedding included)."""
    embedding: int
    prefill: Counted
    decode: Counted
    decode_context: int


def raw_config(name: str) -> dict[str, Any]:
    return json.loads(CONFIG_FILES[name].read_text())


def decode_context(name: str) -> int:
    cfg = raw_config(name)
    positions = cfg.get("max_position_embeddings") or cfg.get("n_positions") or DECODE_CONTEXT
    return min(DECODE_CONTEXT, positions)


# ---------------------------------------------------------------- the reference: transformers on meta


def build(name: str) -> tuple[Any, Any]:
    """transformers' model of ``name``'s config on the meta device (shapes, no weights)."""
    fields = {k: v for k, v in raw_config(name).items() if k not in DROPPED_FIELDS}
    transformers.logging.set_verbosity_error()
    cfg = transformers.AutoConfig.for_model(fields.pop("model_type"), **fields)
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = transformers.AutoModelForCausalLM.from_config(
            cfg, attn_implementation="eager", experts_implementation="batched_mm"
        )
    # an inference count: no parameter asks for a gradient. FlopCounterMode's module tracker hooks
    # the gradients of the parameters that do, and a hub kernel layer (the `kernels` package,
    # which transformers 5.25 uses for Qwen3-Next's causal conv1d) runs them under no_grad with none
    # to hook: "Expected gradient function to be set"
    return cfg, model.eval().requires_grad_(False)


def _forward_keywords(model: Any) -> tuple[str, str]:
    """The cache and logits keywords of this transformers version's forward."""
    import inspect

    params = inspect.signature(model.forward).parameters
    cache = "cache" if "cache" in params else "past_key_values"
    logits = "logits_to_keep" if "logits_to_keep" in params else "num_logits_to_keep"
    return cache, logits


def _run(model: Any, tokens: int, cache: Any, counter: FlopCounterMode | None = None) -> None:
    cache_kw, logits_kw = _forward_keywords(model)
    ids = torch.zeros(1, tokens, dtype=torch.long, device="meta")
    kw = {cache_kw: cache, logits_kw: 1, "use_cache": True}
    with torch.no_grad():
        if counter is None:
            model(input_ids=ids, **kw)
        else:
            with counter:
                model(input_ids=ids, **kw)


def _split(model: Any, counter: FlopCounterMode) -> Counted:
    """The counted FLOPs, split: each attention module's own matmuls (its total less that of the
    outermost submodules it called, its projections) and everything else."""
    counts = {key: sum(by_op.values()) for key, by_op in counter.get_flop_counts().items()}
    prefix = type(model).__name__
    attention = 0
    for fqn, module in model.named_modules():
        if not type(module).__name__.endswith("Attention"):
            continue
        key = f"{prefix}.{fqn}"
        inner = [k for k in counts if k.startswith(key + ".")]
        outermost = [k for k in inner if not any(k.startswith(o + ".") for o in inner)]
        attention += counts.get(key, 0) - sum(counts[k] for k in outermost)
    return Counted(counts["Global"] - attention, attention)


def _active(model: Any, cfg: Any) -> int:
    """Parameters per token: the routed experts count k/E of their weights."""
    top_k = getattr(cfg, "num_experts_per_tok", None) or getattr(cfg, "experts_per_token", None)
    inactive = 0.0
    for module in model.modules():
        experts = getattr(module, "num_experts", None)
        if top_k and experts and type(module).__name__.endswith("Experts"):
            own = sum(p.numel() for p in module.parameters(recurse=False))
            inactive += own * (experts - top_k) / experts
    return sum(p.numel() for p in model.parameters()) - round(inactive)


@functools.cache
def reference(name: str) -> Reference:
    cfg, model = build(name)
    prefill = FlopCounterMode(display=False)
    _run(model, PROMPT, transformers.DynamicCache(config=cfg), prefill)
    n = decode_context(name)
    cache = transformers.DynamicCache(config=cfg)
    _run(model, n - 1, cache)  # fills the cache; not counted
    decode = FlopCounterMode(display=False)
    _run(model, 1, cache, decode)
    return Reference(
        params=sum(p.numel() for p in model.parameters()),  # a tied head is one parameter, counted once
        active_params=_active(model, cfg),
        embedding=model.get_input_embeddings().weight.numel(),
        prefill=_split(model, prefill),
        decode=_split(model, decode),
        decode_context=n,
    )


# ---------------------------------------------------------------- attnroof's side


def attnroof_model(name: str) -> ModelConfig:
    return load_config_file(CONFIG_FILES[name])  # refuses what attnroof does not model, by name


def attnroof_counts(model: ModelConfig, phase: str, context: int) -> Counted:
    """attnroof's GEMM and attention FLOPs of one step (batch 1, softmax 0), the GEMMs without
    their bias epilogue; the step's total is the analysis's. Latent attention runs naive, as
    transformers runs it, and its up-projection (kv_b_proj in transformers) counts as a GEMM."""
    ops = model_ops(model, phase, 1, context, softmax_flops_per_element=0, latent_form=NAIVE)
    total = analyse(
        model, phase, 1, context, ROOF, softmax_flops_per_element=0, latent_form=NAIVE
    ).totals.flops
    assert total == sum(o.count * o.cost.flops for o in ops)
    projections = {KV_UP, Q_ABSORB, V_ABSORB}

    def kind_flops(kind: str) -> int:
        out = 0
        for o in ops:
            for st in o.cost:
                st_kind = GEMM if st.name in projections else operator(o.operator).kind
                out += o.count * st.flops if st_kind == kind else 0
        return out

    step = Step(phase, 1, context)
    bias = sum(
        i.count * BIAS_FLOPS_PER_ELEMENT * step.tokens(i.tokens) * i.shape.get("top_k", 1) * i.shape["m"]
        for i in layer_table(model)
        if operator(i.operator).kind == GEMM and i.shape.get("bias")
    )
    return Counted(kind_flops(GEMM) - bias, kind_flops(ATTENTION))


# ---------------------------------------------------------------- tests


def _models() -> list[Any]:
    out = []
    for name in CONFIG_FILES:
        feature = UNMODELLED.get(name)
        marks = (
            [pytest.mark.xfail(strict=False, reason=f"attnroof does not model {feature} yet")]
            if feature
            else []
        )
        out.append(pytest.param(name, marks=marks, id=name))
    return out


MODELS = _models()


@pytest.mark.parametrize("name", MODELS)
def test_parameters_match_transformers(name: str) -> None:
    model = attnroof_model(name)
    ref = reference(name)
    assert params(model) == pytest.approx(ref.params, rel=TOLERANCE)
    # active per token, input embedding included (dense: every parameter)
    active = active_params(model)
    assert active == pytest.approx(ref.active_params, rel=TOLERANCE)


@pytest.mark.parametrize("name", MODELS)
def test_prefill_flops_match_flop_counter(name: str) -> None:
    ours = attnroof_counts(attnroof_model(name), PREFILL, PROMPT)
    ref = reference(name).prefill
    assert ours.gemm == pytest.approx(ref.gemm, rel=TOLERANCE)
    assert CAUSAL_UNDONE * ours.attention == pytest.approx(ref.attention, rel=TOLERANCE)
    assert ours.gemm + CAUSAL_UNDONE * ours.attention == pytest.approx(ref.total, rel=TOLERANCE)


@pytest.mark.parametrize("name", MODELS)
def test_decode_flops_match_flop_counter(name: str) -> None:
    n = decode_context(name)
    ours = attnroof_counts(attnroof_model(name), DECODE, n)
    ref = reference(name).decode
    assert ours.gemm == pytest.approx(ref.gemm, rel=TOLERANCE)
    assert ours.attention == pytest.approx(ref.attention, rel=TOLERANCE)
    assert ours.total == pytest.approx(ref.total, rel=TOLERANCE)


def test_llama_8b_by_hand() -> None:
    # Prefill of 128 tokens, per layer: QKV 2·128·4096·6144 + O 2·128·4096·4096 + MLP 3 · 2·128·4096·14336
    # = 55,834,574,848; × 32 layers + LM head 2·1·4096·128256 = 1,787,757,068,288.
    # Attention, whole matrix: 32 layers × 32 heads × (Q·Kᵀ + P·V) 2 × 2·128·128·128 = 8,589,934,592.
    ref = reference("llama-3.1-8b")
    per_layer = 2 * 128 * 4096 * (6144 + 4096 + 3 * 14336)
    assert ref.prefill == Counted(32 * per_layer + 2 * 4096 * 128256, 32 * 32 * 2 * 2 * 128**3)
    # Decode at 8192: one token's GEMMs; attention over 8192 cached positions, 32 × 32 × 2 × 2·8192·128.
    assert ref.decode.attention == 32 * 32 * 2 * 2 * 8192 * 128
    assert ref.params == 8_030_261_248


if __name__ == "__main__":  # the reference numbers, for the record
    for name in CONFIG_FILES:
        r = reference(name)
        row: dict[str, Any] = {
            "model": name,
            "params": r.params,
            "active_params": r.active_params,
            "active_params_without_embedding": r.active_params - r.embedding,
            "prefill_tokens": PROMPT,
            "prefill": [r.prefill.gemm, r.prefill.attention, r.prefill.total],
            "decode_context": r.decode_context,
            "decode": [r.decode.gemm, r.decode.attention, r.decode.total],
        }
        try:
            m = attnroof_model(name)
        except Exception as e:
            row["attnroof"] = str(e).split(": ", 2)[-1][:80]
        else:
            p = attnroof_counts(m, PREFILL, PROMPT)
            d = attnroof_counts(m, DECODE, r.decode_context)
            row["attnroof"] = {
                "params": params(m),
                "prefill": [p.gemm, CAUSAL_UNDONE * p.attention, p.gemm + CAUSAL_UNDONE * p.attention],
                "decode": [d.gemm, d.attention, d.total],
            }
        print(json.dumps(row))
