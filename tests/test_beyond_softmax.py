"""Issue 23: the stage tables of attention beyond softmax, each worked by hand at one small
shape (bf16, 2 bytes an element), and the properties the seed's method asks of them: the limit
of the intensity as s grows, decode bytes flat in the context, symbolic = numeric."""

from __future__ import annotations

import pytest

from attnroof.ops.chunked import chunk_position, chunk_scores, chunked_attention, chunked_attention_backward
from attnroof.ops.recurrent import (
    gated_delta_rule,
    gated_delta_rule_backward,
    gated_delta_step,
    selective_scan,
    selective_scan_backward,
    selective_scan_step,
    ssd,
    ssd_backward,
    ssd_step,
)
from attnroof.ops.sparse import indexer, sparse_attention

B = 2  # bf16


def table(cost):
    return [(st.name, st.flops, st.bytes) for st in cost]


def test_gated_delta_rule_by_hand():
    # s = 128 tokens, C = 64 (2 chunks), H = 2 value heads on 1 key head, d_k = 4, d_v = 8, K = 4
    s, H, dk, dv, C = 128, 2, 4, 8, 64
    c = gated_delta_rule(s, heads=H, key_heads=1, key_dim=dk, value_dim=dv, chunk=C)
    q = k = H * s * dk * B  # 2048
    v = o = u = v_new = H * s * dv * B  # 4096
    w = H * s * dk * B  # 2048
    gates = 2 * H * s * B  # g and β: 1024
    big_a = H * s * C * 4  # fp32: 65536
    inv = H * s * C * B  # 32768
    h = H * 2 * dk * dv * B  # two chunk states: 256
    state = H * dk * dv * B  # 128
    conv = 2 * 1 * dk + H * dv  # 24 channels
    assert table(c) == [
        ("conv1d", 2 * 4 * conv * s, 2 * s * conv * B + 4 * conv * B),  # 24576, 12480
        ("KKᵀ", H * s * 2 * C * dk, k + gates + 2 * H * B + big_a),  # 131072; A and dt bias per head
        ("(I + A)⁻¹", H * 2 * (64 * 63 * 62 // 3), big_a + inv),  # 2 heads · 2 chunks · 83328
        ("w, u", H * s * 2 * C * (dk + dv), inv + k + v + gates + w + u),  # 393216
        ("state pass", H * s * 4 * dk * dv, k + w + u + gates + h + v_new + state),  # 32768
        ("output", H * s * 2 * (dk * dv + C * (dk + dv)), q + k + v_new + h + gates + o),  # 409600
    ]
    assert c.flops == 24576 + 131072 + 333312 + 393216 + 32768 + 409600
    # backward: the states again (all but conv and output), two gradients per product, the conv's
    b = gated_delta_rule_backward(s, heads=H, key_heads=1, key_dim=dk, value_dim=dv, chunk=C)
    mixer = 131072 + 333312 + 393216 + 32768 + 409600
    assert [st.flops for st in b] == [mixer - 409600, 2 * mixer, 2 * 24576]


def test_gated_delta_step_by_hand():
    # one token: the 2 × 4 × 8 state read and written, 7 FLOPs per state element + 2·d_v per head
    c = gated_delta_step(heads=2, key_heads=1, key_dim=4, value_dim=8)
    conv, step = c.stages
    state = 2 * 4 * 8 * B  # 128
    assert (step.flops, step.bytes) == (
        2 * (7 * 32 + 2 * 8),
        (2 * 2 * 4 + 2 * 8 + 2 * 2 + 2 * 2) * B + 2 * state + 2 * 8 * B,  # q, k; v; g, β; A, dt bias; o
    )
    # the conv: 24 channels × 4 taps; its state, 3 × 24 inputs, read and written
    assert (conv.flops, conv.bytes) == (2 * 4 * 24, (24 + 3 * 24 + 4 * 24 + 24 + 3 * 24) * B)


def test_ssd_by_hand():
    # s = 256, L = 128 (2 chunks), H = 2 heads of P = 4, N = 8, G = 1, K = 4
    s, H, P, N, G, L = 256, 2, 4, 8, 1, 128
    c = ssd(s, heads=H, head_dim=P, state=N, groups=G, chunk=L)
    x = y = H * s * P * B  # 4096
    b_ = c_ = G * s * N * B  # 4096
    dt = H * s * B  # 1024
    st32 = H * 2 * N * P * 4  # 512
    st = H * 2 * N * P * B  # 256
    final = H * N * P * B  # 128
    cb = G * s * L * 4  # 131072
    conv = H * P + 2 * G * N  # 24 channels
    assert table(c) == [
        ("conv1d", 2 * 4 * conv * s, 2 * s * conv * B + 4 * conv * B),
        ("chunk state", H * s * 2 * N * P, x + b_ + dt + 3 * H * B + st32),  # 32768; A, D, dt bias
        ("state passing", H * 2 * 2 * N * P, st32 + st + final),  # 256
        ("C·Bᵀ", G * s * 2 * L * N, c_ + b_ + cb),  # 524288
        ("output", H * s * 2 * (N * P + L * P), cb + x + c_ + st + dt + y),  # 557056
    ]
    back = ssd_backward(s, heads=H, head_dim=P, state=N, groups=G, chunk=L)
    mixer = 32768 + 256 + 524288 + 557056
    assert [st.flops for st in back] == [mixer - 557056, 2 * mixer, 2 * 2 * 4 * conv * s]


def test_ssd_step_by_hand():
    c = ssd_step(heads=2, head_dim=4, state=8, groups=1)
    state = 2 * 4 * 8 * B  # 128
    reads = (2 * 4 + 2 * 8 + 2 + 3 * 2) * B + state  # x, B and C, dt, A, D, dt bias, the state
    assert (c.stages[1].flops, c.stages[1].bytes) == (5 * 2 * 8 * 4, reads + 2 * 4 * B + state)


def test_selective_scan_by_hand():
    # s = 64, D = 8 channels, N = 4
    c = selective_scan(64, channels=8, state=4)
    reads = 3 * 64 * 8 * B + 2 * 64 * 4 * B + (8 * 4 + 8) * B  # u, Δ, z; B, C; A, D
    writes = 64 * 8 * B + 8 * 4 * B  # y, the final state
    assert table(c)[1] == ("selective scan", 64 * 8 * 4 * 7, reads + writes)  # 14336 FLOPs
    step = selective_scan_step(channels=8, state=4).stages[1]
    assert (step.flops, step.bytes) == (
        7 * 8 * 4,
        3 * 8 * B + 2 * 4 * B + (8 * 4 + 8) * B + 2 * 8 * 4 * B + 8 * B,
    )
    assert selective_scan_backward(64, channels=8, state=4).stages[0].flops == 3 * 14336


def test_chunked_attention_by_hand():
    # s = 10, C = 4: chunks of 4, 4 and 2; causal halves ⌈16/2⌉ + ⌈16/2⌉ + ⌈4/2⌉ = 18 scores
    assert chunk_scores(10, 4) == 8 + 8 + 2
    c = chunked_attention(10, 8, chunk=4, fused=False)
    s_bytes = 18 * B
    assert table(c) == [
        ("Q·Kᵀ", 18 * 2 * 8, 2 * 10 * 8 * B + s_bytes),  # Q, K; S
        ("softmax", 18 * 5, 2 * s_bytes),
        ("P·V", 18 * 2 * 8, s_bytes + 2 * 10 * 8 * B),  # P, V; O
    ]
    fused = chunked_attention(10, 8, chunk=4)
    assert (fused.flops, fused.bytes) == (18 * (4 * 8 + 5), 4 * 10 * 8 * B)
    back = chunked_attention_backward(10, 8, chunk=4, softmax_flops_per_element=0)
    assert back.flops == 18 * 10 * 8  # FlashAttention-2's five products, 2·d each
    # decode at context 10: its chunk holds tokens 9 and 10
    assert chunk_position(10, 4) == 2


def test_indexer_and_sparse_attention_by_hand():
    # 1 query against 16 keys: 2 index heads of 4, top 8
    idx = indexer(1, 16, index_heads=2, index_head_dim=4, top_k=8)
    scores, topk = idx.stages
    assert scores.flops == 16 * 2 * (2 * 4 + 3)  # 352
    assert scores.bytes == 2 * 4 * 1 + 2 * 4 + 16 * (4 + 4) + 16 * 4  # q_I fp8, w fp32, keys + scales; logits
    assert topk.bytes == 16 * 4 + 8 * 4  # read the logits, write 8 int32 indices
    mla = dict(heads=2, kv_lora_rank=8, qk_rope_head_dim=2, qk_nope_head_dim=4, v_head_dim=4)
    dsa = sparse_attention(
        1, 16, index_heads=2, index_head_dim=4, top_k=8, softmax_flops_per_element=0, **mla
    )
    # absorbed MLA over 8 latents: q absorb 2·2·4·8, scores 2 heads · 8 · (2·10 + 2·8), v absorb 2·2·8·4
    assert dsa.flops == 352 + 2 * 2 * 4 * 8 + 2 * 8 * (2 * 10 + 2 * 8) + 2 * 2 * 8 * 4
    # prefill of 12 tokens, top 8: Σ_t min(t, 8) ≈ ½·12² − ½·4² = 64 scores (the causal band)
    pre = sparse_attention(
        12, 12, causal=True, index_heads=2, index_head_dim=4, top_k=8, softmax_flops_per_element=0, **mla
    )
    assert pre.stages[0].flops == 72 * 2 * 11  # the indexer scores the whole causal half: ⌈144/2⌉ pairs
    assert pre.stages[3].flops == 2 * 64 * (2 * 10 + 2 * 8)


@pytest.mark.parametrize(
    "decode",
    [
        lambda s: gated_delta_step(heads=32, key_heads=16, key_dim=128, value_dim=128),
        lambda s: ssd_step(heads=128, head_dim=64, state=128, groups=8),
        lambda s: selective_scan_step(channels=8192, state=16),
    ],
)
def test_recurrent_decode_bytes_are_flat_in_context(decode):
    assert decode(4096).bytes == decode(1 << 20).bytes


def test_intensity_limits_symbolically():
    sympy = pytest.importorskip("sympy")
    s = sympy.Symbol("s", positive=True)
    gdn = gated_delta_rule(s, heads=32, key_heads=16, key_dim=128, value_dim=128)
    lim = sympy.limit(gdn.flops / gdn.bytes, s, sympy.oo)
    # the limit: FLOPs and bytes both ∝ s; equal to the numeric intensity at a multiple of C
    num = gated_delta_rule(1 << 20, heads=32, key_heads=16, key_dim=128, value_dim=128)
    assert float(lim) == pytest.approx(num.flops / num.bytes, rel=1e-3)
    assert 25 < float(lim) < 35  # below every catalog device's bf16 ridge: never compute-bound
    mamba = ssd(s, heads=128, head_dim=64, state=128, groups=8, chunk=128)
    assert 30 < float(sympy.limit(mamba.flops / mamba.bytes, s, sympy.oo)) < 40


FORMULAS = {
    "gated DeltaNet": lambda s: gated_delta_rule(s, heads=32, key_heads=16, key_dim=128, value_dim=128),
    "gated DeltaNet backward": lambda s: gated_delta_rule_backward(s, heads=32, key_heads=16, key_dim=128, value_dim=128),
    "SSD": lambda s: ssd(s, heads=128, head_dim=64, state=128, groups=8, chunk=128),
    "SSD backward": lambda s: ssd_backward(s, heads=128, head_dim=64, state=128, groups=8, chunk=128),
    "selective scan": lambda s: selective_scan(s, channels=8192, state=16),
    "chunked attention": lambda s: chunked_attention(s, 128, chunk=8192, group=5, kv_heads=8),
    "chunked attention backward": lambda s: chunked_attention_backward(s, 128, chunk=8192, group=5, kv_heads=8),
    "sparse attention": lambda s: sparse_attention(
        s, s, causal=True, top_k=2048, heads=128, kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128,
        v_head_dim=128, index_heads=64, index_head_dim=128,
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", FORMULAS)
def test_one_formula_three_number_systems(name):
    """The same function on ints, on a numpy array of them, and on a sympy symbol (at sizes that
    are whole multiples of every chunk, where s/C chunks are exact)."""
    np = pytest.importorskip("numpy")
    sympy = pytest.importorskip("sympy")
    f = FORMULAS[name]
    sizes = [16384, 65536]
    ints = [f(s) for s in sizes]
    arr = f(np.array(sizes))
    assert [int(x) for x in arr.flops] == [c.flops for c in ints]
    assert [int(x) for x in arr.bytes] == [c.bytes for c in ints]
    if name.startswith(("chunked", "sparse")):
        return  # floor and min: the symbolic forms are taken per regime (tests/test_beyond_sheet.py)
    s = sympy.Symbol("s", positive=True)
    sym = f(s)
    assert [sym.flops.subs(s, n) for n in sizes] == [c.flops for c in ints]
    assert [sym.bytes.subs(s, n) for n in sizes] == [c.bytes for c in ints]
