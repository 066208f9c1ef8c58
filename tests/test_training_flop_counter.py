"""Cross-check against a real framework: a small Llama built by ``transformers`` on the CPU, one
forward and backward pass counted by ``torch.utils.flop_counter.FlopCounterMode``, against
attnroof's training step.

Conventions aligned (FlopCounterMode's, stated):

- it counts matrix products only (mm, bmm, SDPA): attnroof's operators of kind ``gemm`` and
  ``attention`` with ``softmax_flops_per_element=0``; norms, activations, adds, the embedding
  and the loss are left out on both sides;
- the model runs eager attention (CPU SDPA is not among FlopCounterMode's formulas), which
  computes every score and then masks: the attention rows are costed with ``causal=False``;
  its backward keeps P and does four products (2× the forward), attnroof's unfused backward;
- the LM head runs on every position (the loss needs all logits), as attnroof's training step.
"""

from __future__ import annotations

import pytest

from attnroof.model.hf_config import from_hf
from attnroof.model.training import train_ops
from attnroof.model.training_memory import TrainPrecision
from attnroof.passes import FWD_BWD, pass_formula

transformers = pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

BATCH, SEQ = 2, 64


def _attnroof_matmul_flops(cfg_dict: dict) -> int:
    model = from_hf(cfg_dict, "tiny-llama")
    ops = train_ops(model, BATCH, SEQ, TrainPrecision(), fused=False, softmax_flops_per_element=0)
    gemms = sum(o.count * o.cost.flops for _, o in ops if o.operator == "linear")
    attention = pass_formula("attention", FWD_BWD)(
        SEQ,
        model.head_dim,
        group=model.group,
        kv_heads=model.kv_heads,
        batch=BATCH,
        softmax_flops_per_element=0,
        causal=False,
    )
    return gemms + model.layers * attention.flops


def test_flop_counter_agrees_with_the_training_step():
    from torch.utils.flop_counter import FlopCounterMode

    cfg = transformers.LlamaConfig(
        hidden_size=256,
        intermediate_size=688,
        num_hidden_layers=3,
        num_attention_heads=8,
        num_key_value_heads=2,
        vocab_size=1000,
        max_position_embeddings=512,
    )
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg)
    ids = torch.randint(0, cfg.vocab_size, (BATCH, SEQ))
    with FlopCounterMode(display=False) as counter:
        model(input_ids=ids, labels=ids).loss.backward()
    counted = counter.get_total_flops()
    ours = _attnroof_matmul_flops(cfg.to_dict())
    assert ours == pytest.approx(counted, rel=0.01)
    # by hand: 7 weight matrices per layer, 3·2·tokens·params for forward + dX + dW:
    # (256·256·2 + 256·64·2 + 3·256·688)·3 layers + 256·1000 (LM head) = 2,332,672 parameters;
    # attention 3 × 2 products × 2·b·H·s²·d per layer
    gemm = 3 * 2 * BATCH * SEQ * ((256 * 256 * 2 + 256 * 64 * 2 + 3 * 256 * 688) * 3 + 256 * 1000)
    attention = 3 * 3 * 2 * 2 * BATCH * 8 * SEQ * SEQ * 32
    assert counted == ours == gemm + attention
