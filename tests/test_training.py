"""The training step and its memory, with the arithmetic worked in each test."""

from __future__ import annotations

import pytest

from attnroof.model.config import builtin
from attnroof.model.layers import params
from attnroof.model.training import BACKWARD, FORWARD, RECOMPUTE, analyse_train, model_flops, train_ops
from attnroof.model.training_memory import (
    FULL,
    NONE,
    SELECTIVE,
    TrainPrecision,
    activation_bytes,
    train_memory,
)
from attnroof.roofline import Roof
from conftest import assert_one_line_error, run_cli

H200 = Roof(989e12, 4.8e12)
LLAMA = builtin("llama-3.1-8b")
T = 8192


def _matmul_params() -> int:
    # per layer: QKV 4096×(4096 + 2·1024), O 4096×4096, gate/up 4096×2·14336, down 14336×4096
    layer = 4096 * 6144 + 4096 * 4096 + 4096 * 28672 + 14336 * 4096  # 218,103,808
    return 32 * layer + 4096 * 128256  # + the LM head: 7,504,658,432


def test_llama_8b_train_step_flops_against_6nt_plus_attention():
    n = _matmul_params()
    assert n == 7_504_658_432
    a = analyse_train(LLAMA, 1, T, H200)
    # counted: 6·N·T for the GEMMs (forward 2, backward 4 per parameter per token) plus causal
    # attention: forward 2 products × 2·H·Q·T²/2, backward 2.5× that: 3.5 · 2·L·H·Q·T² = 7·L·H·Q·T²
    attention = 7 * 32 * 32 * 128 * T * T
    expected = 6 * n * T + attention
    assert a.totals.flops == pytest.approx(expected, rel=0.02)
    assert a.totals.flops > expected  # the rest: norms, activations, softmax, adds
    # model FLOPs (PaLM, causal half): 6·N·T + 6·L·H·Q·T² exactly
    assert a.totals.model_flops == 6 * n * T + 6 * 32 * 4096 * T * T
    assert a.totals.mfu < a.totals.hfu <= 1
    assert a.totals.to_json()["recompute_flops"] == 0


def test_passes_split_the_flops():
    a = analyse_train(LLAMA, 1, T, H200, recompute=FULL)
    by = a.totals.flops_by_pass
    # the GEMMs' backward is twice their forward; attention's 2.5×: backward/forward between 2 and 2.5
    assert 2 < by[BACKWARD] / by[FORWARD] < 2.5
    # full recomputation runs every layer's forward again: all of the forward but the
    # embedding, the final norm and the LM head (2·T·4096·128256 FLOPs and its norm)
    head = 2 * T * 4096 * 128256 + 4 * T * 4096
    assert by[RECOMPUTE] == by[FORWARD] - head
    # the same model FLOPs in a longer step: recomputation lowers MFU
    assert a.totals.mfu < analyse_train(LLAMA, 1, T, H200).totals.mfu


def test_optimizer_and_gradient_bytes_by_default():
    p = params(LLAMA)
    m = train_memory(LLAMA, 1, T, TrainPrecision(), 141e9)
    assert m.weights_bytes == 2 * p and m.gradient_bytes == 2 * p
    assert m.optimizer_bytes == 12 * p  # fp32 master 4 + m 4 + v 4
    sgd = train_memory(LLAMA, 1, T, TrainPrecision(optimizer="sgd"), None)
    assert sgd.optimizer_bytes == 8 * p  # master + momentum
    pure = train_memory(LLAMA, 1, T, TrainPrecision(master_itemsize=2), None)
    assert pure.optimizer_bytes == 4 * p  # bf16 master = the weights: m and v only, 2 + 2


def test_recompute_orders_activation_memory():
    def act(recompute: str, fused: bool) -> float:
        return train_memory(
            LLAMA, 1, T, TrainPrecision(), None, fused=fused, recompute=recompute
        ).activation_bytes

    assert act(FULL, False) < act(SELECTIVE, False) < act(NONE, False)
    # fused: no score matrix to drop; selective checkpoints the core attention, as Megatron-LM
    # does, dropping its log-sum-exp rows: fp32, one per head and token, 4 B × 32 heads × s, in
    # each of the 32 layers
    assert act(FULL, True) < act(SELECTIVE, True) < act(NONE, True)
    assert act(NONE, True) - act(SELECTIVE, True) == 32 * 4 * 32 * T


def test_full_recompute_keeps_each_layer_input_and_one_working_set():
    s, b, h, L, V = T, 1, 4096, 32, 128256
    parts = activation_bytes(LLAMA, b, s, 2, fused=True, recompute=FULL)
    one_layer = activation_bytes(LLAMA, b, s, 2, fused=True, recompute=NONE)[
        "kept_per_layer"
    ]  # every Llama layer alike
    assert parts["kept_per_layer"] == 2 * s * b * h
    head = 2 * s * b * h * 2 + 2 * s * b * V  # final norm and LM head inputs, the logits
    assert parts["total"] == L * 2 * s * b * h + one_layer + head
    # one Llama layer, fused (bytes per token, bf16): norms' inputs 2·2h, QKV input 2h,
    # Q K V 2·(h + 2·1024), L 4·32, O 2h, gate/up input 2h, gate and up 2·2·14336, down input 2·14336
    per_token = 2 * 2 * h + 2 * h + 2 * (h + 2048) + 4 * 32 + 2 * h + 2 * h + 2 * 2 * 14336 + 2 * 14336
    assert one_layer == s * b * per_token


def test_korthikanti_gpt_layer():
    """Korthikanti et al. (2022), 16-bit, per layer: s·b·h·(34 + 5·a·s/h) without recomputation,
    34·s·b·h with selective. attnroof's own accounting differs by what it does not model:

    - dropout: attnroof trains without it. Korthikanti keep the attention dropout's output
      (2·a·s²·b) and mask (a·s²·b), and two 1-byte masks after attention and the MLP (2·s·b·h).
    - the causal half: Megatron's softmax writes the whole s×s P; attnroof's causal convention
      keeps the computed half (a·s²·b instead of 2·a·s²·b).
    - FlashAttention keeps no P at all, only the row log-sum-exp (4·a bytes per token).
    """
    gpt = builtin("gpt2")
    s, b, h, a = 1024, 4, gpt.hidden, gpt.heads
    dropout_sbh, dropout_ass = 2 * s * b * h, 3 * a * s * s * b
    korthikanti_none = s * b * h * 34 + 5 * a * s * s * b
    korthikanti_selective = 34 * s * b * h

    def per_layer(fused: bool, recompute: str) -> int:
        return activation_bytes(gpt, b, s, 2, fused=fused, recompute=recompute)["kept_per_layer"]

    causal_p = a * s * s * b  # 2 bytes × half of s²
    assert per_layer(False, NONE) == 32 * s * b * h + causal_p
    assert per_layer(False, NONE) + dropout_sbh + dropout_ass + a * s * s * b == korthikanti_none
    assert per_layer(False, SELECTIVE) + dropout_sbh == korthikanti_selective
    assert per_layer(True, NONE) + dropout_sbh - 4 * a * s * b == korthikanti_selective


def test_train_ops_skip_the_kv_cache_and_run_the_head_on_every_position():
    ops = train_ops(LLAMA, 2, 512, TrainPrecision())
    assert all(o.name != "KV-cache write" for _, o in ops)
    head = next(o for p, o in ops if p == FORWARD and o.name == "LM head")
    assert head.cost.flops == 2 * (2 * 512) * 4096 * 128256


def test_model_flops_formula():
    # gpt2: 12 layers of 768, 12 heads; N = 12·(768·2304 + 768² + 2·768·3072) + 768·50257 (tied head)
    n = 12 * (768 * 2304 + 768 * 768 + 2 * 768 * 3072) + 768 * 50257
    assert model_flops(builtin("gpt2"), 2, 1024) == (6 * n + 6 * 12 * 768 * 1024) * 2 * 1024


def test_cli_train_json_fields_and_errors():
    r = run_cli(
        "model",
        "--model",
        "llama-3.1-8b",
        "--phase",
        "train",
        "--context",
        "8192",
        "--device",
        "h200",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    data = r.json()
    mem = data["memory"]
    for key in (
        "weights_bytes",
        "gradient_bytes",
        "optimizer_bytes",
        "activation_bytes",
        "total_bytes",
        "fits",
    ):
        assert key in mem
    assert mem["fits"] is False and mem["max_batch"] == 0  # 16 B × 8.03 B + 38.8 GB > 141 GB
    assert {"hardware_flops", "model_flops", "mfu", "hfu", "tokens_per_s"} <= set(data["totals"])
    assert {o["pass"] for o in data["ops"]} == {"forward", "backward"}
    full = run_cli(
        "model",
        "--model",
        "llama-3.1-8b",
        "--phase",
        "train",
        "--context",
        "8192",
        "--device",
        "h200",
        "--recompute",
        "full",
        "--json",
    ).json()
    assert full["memory"]["fits"] is True
    assert_one_line_error(
        run_cli("model", "--model", "gpt2", "--context", "8", "--recompute", "full"), "--recompute"
    )
    assert_one_line_error(
        run_cli("model", "--model", "gpt2", "--phase", "train", "--context", "8", "--sweep-batch", "1,2"),
        "--sweep-batch",
    )
    text = run_cli("model", "--model", "gpt2", "--phase", "train", "--context", "1024", "--batch", "8")
    assert text.returncode == 0 and "MFU ≤" in text.stdout and "gradients" in text.stdout
