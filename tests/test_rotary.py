"""Rotary position embedding as an operator (issue 33): its FLOPs against transformers'
``apply_rotary_pos_emb``, its bytes by hand for Llama-3.1-8B, which models and layers run it and
how many of each head's dims it turns, and its rules (the heads cut, training, sequence and
context parallelism).

PyTorch's ``FlopCounterMode`` counts matrix products, convolutions and attention only: an
element-wise op is 0 FLOPs to it (shown below), so the count is checked against the multiplies
and adds transformers' kernel dispatches, element by element.
"""

from __future__ import annotations

from collections import Counter

import pytest

from attnroof.errors import InputError
from attnroof.model.config import builtin, builtin_names
from attnroof.model.costs import model_ops
from attnroof.model.hf_config import from_hf
from attnroof.model.layers import layer_table
from attnroof.model.parallel import Shard
from attnroof.model.training import train_ops
from attnroof.model.training_memory import TrainPrecision
from attnroof.operators import operator
from attnroof.ops.backward import rotary_backward
from attnroof.ops.elementwise import ROTARY_FLOPS_PER_PAIR, rotary
from attnroof.row import Saving
from conftest import run_cli

LLAMA = builtin("llama-3.1-8b")


def _rotary_rows(model, shard=None):
    return [
        (r.name, r.count, dict(r.shape), r.split) for r in layer_table(model, shard) if r.operator == "rotary"
    ]


def test_llama_bytes_by_hand():
    """Llama-3.1-8B prefill of 8,192 tokens, one layer: q is 8,192 × 32 × 128 × 2 B = 67,108,864 B
    and k 8,192 × 8 × 128 × 2 B = 16,777,216 B, each read and written; the cos/sin rows,
    8,192 × 128 × 2 B = 2,097,152 B, read: 169,869,312 B. 8,192 × 40 heads × 64 pairs × 6 FLOPs =
    125,829,120 FLOPs, 32 layers."""
    (op,) = [o for o in model_ops(LLAMA, "prefill", 1, 8192) if o.operator == "rotary"]
    assert op.count == 32
    assert op.cost.bytes == 2 * (67_108_864 + 16_777_216) + 2_097_152 == 169_869_312
    assert op.cost.flops == 8192 * 40 * 64 * 6 == 125_829_120
    (dec,) = [o for o in model_ops(LLAMA, "decode", 16, 8192) if o.operator == "rotary"]
    assert dec.cost.flops == 16 * 40 * 64 * 6  # decode: the batch's new tokens only


def test_the_flop_count_against_transformers():
    """transformers' ``apply_rotary_pos_emb`` (q·cos + rotate_half(q)·sin, and the same for k)
    dispatches two multiplies and one add per element: 3 an element, 6 a pair, as counted here.
    FlopCounterMode, which counts matrix products, sees none of them."""
    torch = pytest.importorskip("torch")
    llama = pytest.importorskip("transformers.models.llama.modeling_llama")
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import FlopCounterMode

    class Elements(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.seen = Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            name = func.overloadpacket.__name__
            if name in ("mul", "add", "sub"):
                self.seen[name] += out.numel()
            return out

    heads, kv, seq, d = 4, 2, 16, 32
    q, k = torch.randn(1, heads, seq, d), torch.randn(1, kv, seq, d)
    cos, sin = torch.randn(1, seq, d), torch.randn(1, seq, d)
    with Elements() as counted:
        llama.apply_rotary_pos_emb(q, k, cos, sin)
    elements = (heads + kv) * seq * d
    assert counted.seen == {"mul": 2 * elements, "add": elements}
    assert (
        sum(counted.seen.values()) == rotary(seq, heads, kv, d).flops == ROTARY_FLOPS_PER_PAIR * elements / 2
    )
    with FlopCounterMode(display=False) as fc:
        llama.apply_rotary_pos_emb(q, k, cos, sin)
    assert fc.get_total_flops() == 0


ROTATED = {
    # model: (q heads, k heads, dims turned, layers) of each rotary row; none for NoPE models
    "llama-3.1-8b": [(32, 8, 128, 32)],
    "llama-3.1-70b": [(64, 8, 128, 80)],
    "llama-3.1-405b": [(128, 8, 128, 126)],
    "mistral-7b": [(32, 8, 128, 32)],
    "mixtral-8x7b": [(32, 8, 128, 32)],
    "qwen2.5-7b": [(28, 4, 128, 28)],
    "qwen3-30b-a3b": [(32, 4, 128, 48)],
    "phi-3-mini": [(32, 32, 96, 32)],
    "gemma-2-9b": [(16, 8, 256, 42)],
    "gpt-oss-20b": [(64, 8, 64, 24)],
    "gpt-oss-120b": [(64, 8, 64, 36)],
    "falcon-h1-7b": [(12, 2, 128, 44)],
    "llama-4-scout": [(40, 8, 128, 36)],  # no_rope_layers: every 4th of 48 layers is NoPE
    "qwen3-next-80b-a3b": [(16, 2, 64, 12)],  # partial_rotary_factor 0.25 of 256, full-attention layers
    "deepseek-v3": [(128, 1, 64, 61)],  # qk_rope_head_dim of each head, one shared k_pe
    "deepseek-v3.2-exp": [(128, 1, 64, 61), (64, 1, 64, 61)],  # and the indexer's q and k
    "gpt2": [],  # learned positions
    "jamba-mini-1.5": [],  # no positional embedding in its attention
    "nemotron-h-8b": [],  # NemotronHAttention applies none
    "granite-4.0-h-tiny": [],  # position_embedding_type "nope"
    "mamba2-2.7b": [],  # no attention
}


@pytest.mark.parametrize("name", builtin_names())
def test_rotary_is_in_exactly_the_layers_that_rotate(name):
    rows = [(s["q_heads"], s["k_heads"], s["rotated"], n) for _, n, s, _ in _rotary_rows(builtin(name))]
    assert rows == ROTATED[name]


def test_partial_rotary_names_its_share():
    (row,) = _rotary_rows(builtin("qwen3-next-80b-a3b"))
    assert row[0] == "rotary embedding (64 of 256 dims)"
    assert builtin("qwen3-next-80b-a3b").to_json()["rotary_dim"] == 64
    assert builtin("llama-4-scout").to_json()["nope_layers"] == 12
    assert "rotary_dim" not in builtin("gpt2").to_json()


CFG = {"hidden_size": 512, "num_hidden_layers": 2, "num_attention_heads": 8, "intermediate_size": 1024,
       "vocab_size": 1000, "hidden_act": "silu", "rms_norm_eps": 1e-5}  # fmt: skip
"""A Llama-style config without a model type: 8 heads of 64."""


@pytest.mark.parametrize(
    "extra, dims",
    [
        ({}, 64),
        ({"partial_rotary_factor": 0.5}, 32),  # GLM, Phi-2
        ({"rotary_pct": 0.25}, 16),  # GPT-NeoX
        ({"rotary_dim": 32}, 32),  # GPT-J
        ({"position_embedding_type": "rope"}, 64),
        ({"position_embedding_type": "nope"}, 0),
        ({"position_embedding_type": "alibi"}, 0),
    ],
)
def test_the_rotated_dims_a_config_says(extra, dims):
    assert from_hf({**CFG, **extra}).rotary_dim == dims


@pytest.mark.parametrize(
    "extra, needle",
    [
        ({"partial_rotary_factor": 0}, "partial_rotary_factor = 0 is not a share of the head"),
        ({"partial_rotary_factor": 1.5}, "is not a share of the head"),
        (
            {"partial_rotary_factor": 0.3},
            "partial_rotary_factor = 0.3 of head_dim 64 is 19 dims, not a whole number",
        ),
        ({"rotary_dim": 96}, "rotary_dim = 96 exceeds head_dim = 64"),
        ({"position_embedding_type": "absolute"}, "position_embedding_type = 'absolute' is not modelled"),
        ({"no_rope_layers": [1]}, "no_rope_layers = [1] is not 2 zeros and ones"),
    ],
)
def test_a_rotary_field_that_cannot_be_read_is_refused(extra, needle):
    with pytest.raises(InputError, match=needle.replace("[", r"\[").replace("]", r"\]")):
        from_hf({**CFG, **extra})


def test_no_rope_layers_drop_the_row_there():
    m = from_hf({**CFG, "no_rope_layers": [1, 0]})
    assert [n for _, n, _, _ in _rotary_rows(m)] == [1]


def test_its_rules_under_tensor_sequence_and_context_parallelism():
    """TP 8: each device turns its 4 query heads and its 1 KV head. Llama-3.1-70B on TP 16: 4 and
    one replicated KV head (8 KV heads < 16). DeepSeek-V3 on TP 8: 16 heads and the shared k_pe
    whole. Sequence parallelism leaves it on every token (q and k are cut by heads, not tokens);
    context parallelism halves its tokens under --cp 2, as every token-by-token row."""
    assert _rotary_rows(LLAMA, Shard(8, 1, 0, 32))[0][2] == {"q_heads": 4, "k_heads": 1, "rotated": 128}
    assert _rotary_rows(builtin("llama-3.1-70b"), Shard(16, 1, 0, 80))[0][2]["k_heads"] == 1
    assert _rotary_rows(builtin("deepseek-v3"), Shard(8, 1, 0, 61))[0][2] == {
        "q_heads": 16,
        "k_heads": 1,
        "rotated": 64,
    }
    assert "sequence_shards" not in _rotary_rows(LLAMA, Shard(8, 1, 0, 32, sp=True))[0][2]
    idx = [
        r
        for r in _rotary_rows(builtin("deepseek-v3.2-exp"), Shard(8, 1, 0, 61))
        if r[0].startswith("indexer")
    ]
    assert idx[0][2]["q_heads"] == 64 and idx[0][3] == "replicated"  # the indexer is not cut
    base = [
        "model",
        "--model",
        "llama-3.1-8b",
        "--phase",
        "prefill",
        "--context",
        "8192",
        "--device",
        "h200",
        "--json",
    ]
    one = next(o for o in run_cli(*base).json()["ops"] if o["operator"] == "rotary")
    cp2 = next(o for o in run_cli(*base, "--cp", "2").json()["ops"] if o["operator"] == "rotary")
    assert cp2["flops"] == one["flops"] / 2


def test_training_runs_it_back_and_keeps_nothing_for_it():
    """The backward turns dq and dk back: the forward's FLOPs and bytes again. It keeps no
    activation (cos and sin are a table, not a saved tensor), so activation memory is what it was."""
    assert rotary_backward(8192, 32, 8, 128).bytes == rotary(8192, 32, 8, 128).bytes
    ops = [(p, o) for p, o in train_ops(LLAMA, 1, 4096, TrainPrecision()) if o.operator == "rotary"]
    assert [p for p, _ in ops] == ["forward", "backward"]
    assert ops[1][1].cost.flops == ops[0][1].cost.flops == 4096 * 40 * 64 * 6
    assert ops[1][1].cost.stages[0].name == "rotary embedding backward"
    (row,) = [r for r in layer_table(LLAMA) if r.operator == "rotary"]
    assert operator("rotary").saved_bytes(row, Saving(1, 4096, 2, True)) == 0
