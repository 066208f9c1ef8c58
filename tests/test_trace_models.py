"""``attnroof trace`` on every built-in model transformers builds (issue 38's check): the
published config built on the meta device the way ``attnroof trace config.json`` builds it (SDPA
and grouped expert GEMMs where the architecture takes them), a 128-token prefill with the LM head
on the last token, against ``attnroof model`` of the same step.

- **GEMM FLOPs** equal ``model``'s weight GEMMs (tests/test_transformers_flops.py's split, the
  bias epilogue left out on both sides) within 1%: the trace takes its products' FLOPs from
  PyTorch's own registry, so this is transformers' program against attnroof's layer table.
- **Attention FLOPs**, where the model runs SDPA, equal ``model``'s attention rows at softmax 0
  to the FLOP. Gemma 2 and gpt-oss refuse SDPA and run eager: their attention is two products
  over the whole s × s matrix, which FlopCounterMode counts the same way (2× attnroof's causal
  half, within 1%).
- **Fused bytes** lie within 10% of ``model``'s bytes with every weight at the traced dtype
  (``Precision(stored=False)``: the trace holds bf16 weights, not the checkpoint's FP8 or MXFP4),
  MLA in its naive form (transformers' own). The rest is what transformers does and attnroof's
  step does not count: the RoPE tables and the masks read, GPT-2's position embedding.
"""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers", minversion="5.0")

from attnroof.model.analysis import analyse  # noqa: E402
from attnroof.model.config import builtin  # noqa: E402
from attnroof.ops.latent import NAIVE  # noqa: E402
from attnroof.roofline import Roof  # noqa: E402
from attnroof.row import Precision  # noqa: E402
from attnroof.trace import FUSED, rules, trace  # noqa: E402
from attnroof.trace.capture import ATTENTION  # noqa: E402
from attnroof.trace.kernels import attention_cost  # noqa: E402
from attnroof.trace.load import from_config  # noqa: E402
from test_transformers_flops import (  # noqa: E402
    CAUSAL_UNDONE,
    CONFIGS,
    DROPPED_FIELDS,
    HYBRIDS,
    TOLERANCE,
    attnroof_counts,
    raw_config,
)

PROMPT = 128
BYTES_MARGIN = 0.10
"""The stated margin between the trace's fused bytes and model's (issue 38's check)."""
ATTENTION_MODULES = {"self_attn", "attn"}
"""The attention modules of transformers' models: an eager one's products are its attention."""
BUILT_INS = sorted(p.stem for p in CONFIGS.glob("*.json") if p.stem not in HYBRIDS)


def _traced(name: str):
    fields = {k: v for k, v in raw_config(name).items() if k not in DROPPED_FIELDS}
    transformers.logging.set_verbosity_error()
    cfg = transformers.AutoConfig.for_model(fields.pop("model_type"), **fields)
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = from_config(transformers.AutoModelForCausalLM, cfg)
    m = m.to(torch.bfloat16).requires_grad_(False)
    kw = {
        "input_ids": torch.zeros(1, PROMPT, dtype=torch.long, device="meta"),
        "use_cache": True,
        "logits_to_keep": 1,
    }
    with torch.no_grad():
        return m.config._attn_implementation, trace(m, (), kw)


def test_the_built_ins_cover_dense_experts_latent_and_windows():
    assert {"llama-3.1-8b", "gpt2", "mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3", "gemma-2-9b"} <= set(
        BUILT_INS
    )


@pytest.mark.parametrize("name", BUILT_INS)
def test_a_built_in_traced_agrees_with_attnroof_model(name: str) -> None:
    implementation, t = _traced(name)
    assert not t.uncosted, t.uncosted
    model = builtin(name)
    ours = attnroof_counts(model, "prefill", PROMPT)
    products = [r for r in t.records if r.kind == rules.MATMUL]
    in_attention = sum(r.flops for r in products if r.module.rsplit(".", 1)[-1] in ATTENTION_MODULES)
    gemm = sum(r.flops for r in products) - in_attention
    assert gemm == pytest.approx(ours.gemm, rel=TOLERANCE)
    if implementation == "sdpa":
        att = sum(
            attention_cost(r, fused=True, softmax_flops_per_element=0).flops
            for r in t.records
            if r.kind == ATTENTION
        )
        assert in_attention == 0 and att == ours.attention
    else:  # eager: the two products of each head over the whole matrix
        assert in_attention == pytest.approx(CAUSAL_UNDONE * ours.attention, rel=TOLERANCE)
    a = analyse(model, "prefill", 1, PROMPT, Roof(989e12, 4.8e12), Precision(stored=False), latent_form=NAIVE)
    assert t.bytes(FUSED) == pytest.approx(a.totals.bytes, rel=BYTES_MARGIN)


def test_grouped_expert_gemms_count_what_flop_counter_counts_on_the_batched_path():
    """PyTorch's registry has no rule for torch._grouped_mm. Mixtral's experts over 128 tokens,
    built on transformers' batched path (bmm, which FlopCounterMode counts) and on its grouped
    path (costed by the trace's rule, 2 FLOPs a multiply-add): the same 2,886,218,022,912 FLOPs."""
    from torch.utils.flop_counter import FlopCounterMode

    fields = {k: v for k, v in raw_config("mixtral-8x7b").items() if k not in DROPPED_FIELDS}
    cfg = transformers.AutoConfig.for_model(fields.pop("model_type"), **fields)
    kw = {
        "input_ids": torch.zeros(1, PROMPT, dtype=torch.long, device="meta"),
        "use_cache": True,
        "logits_to_keep": 1,
    }
    counted = {}
    for path in ("batched_mm", "grouped_mm"):
        with torch.device("meta"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m = transformers.AutoModelForCausalLM.from_config(
                cfg, attn_implementation="sdpa", experts_implementation=path
            )
        m = m.to(torch.bfloat16).requires_grad_(False)
        if path == "batched_mm":
            fc = FlopCounterMode(display=False)
            with torch.no_grad(), fc:
                m(**kw)
            counted["FlopCounterMode"] = sum(
                sum(c.values()) for name, c in fc.get_flop_counts().items() if name.endswith(".experts")
            )
        with torch.no_grad():
            t = trace(m, (), kw)
        counted[path] = sum(r.flops for r in t.records if r.kind == rules.MATMUL and "experts" in r.module)
    assert counted == dict.fromkeys(("FlopCounterMode", "batched_mm", "grouped_mm"), 2_886_218_022_912)
