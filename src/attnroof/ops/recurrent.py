"""Attention without a score matrix: linear attention (gated DeltaNet) and state-space scans
(Mamba-2's SSD, Mamba-1's selective scan), forward, backward and the decode step.

Each mixes a sequence through a fixed-size state per head instead of a KV cache: a d_k × d_v
matrix (gated DeltaNet), N × P (Mamba-2) or N per channel (Mamba-1). Prefill runs in chunks of
C tokens: inside a chunk, small dense products (the "attention-like" part, C wide); between
chunks, the state is carried. Its FLOPs and its bytes both grow as s (C and the state are fixed),
so the intensity tends to a constant set by C, d and the state, whatever the context: the seed's
unfused attention's fate (a limit), not fused attention's (unbounded). Decode reads and writes the
whole state for each token of each sequence: bytes per token flat in the context, and about 3.5
FLOPs per state element read and written, so batching never helps it (every sequence has its own
state).

Every mixer starts with a short causal depthwise convolution (``conv_kernel`` K taps over its
``channels``); decode keeps its last K − 1 inputs (vLLM's conv state, ``(channels, K − 1)``).

**Gated DeltaNet**, chunked (Yang, Kautz & Hatamizadeh, "Gated Delta Networks", ICLR 2025,
arXiv 2412.06464; kernels: flash-linear-attention's ``chunk_gated_delta_rule``), per head and
sequence of s tokens in n_c = ⌈s/C⌉ chunks::

    conv1d        reads x, taps       writes x          2K per channel and token
    KKᵀ           reads k, β, g       writes A (fp32)   2·C·d_k per token (C × C tiles)
    (I + A)⁻¹     reads A             writes A⁻¹        C(C−1)(C−2)/3 per chunk (substitution)
    w, u          reads A⁻¹, k, v     writes w, u       2·C·(d_k + d_v) per token
    state pass    reads k, w, u, g    writes h, v_new   4·d_k·d_v per token (u − w·S; S += kᵀ·v_new)
    output        reads q, k, v_new,  writes o          2·d_k·d_v + 2·C·(d_k + d_v) per token
                  h (n_c states)

**Mamba-2 SSD** (Dao & Gu, "Transformers are SSMs", ICML 2024, arXiv 2405.21060; kernels:
mamba_ssm's ``mamba_chunk_scan_combined``), H heads of dimension P, state N, G groups of B and C,
chunk L::

    conv1d         reads x, B, C       writes them        2K per channel and token
    chunk state    reads x, B, dt      writes states      2·N·P per token and head (fp32)
    state passing  reads states        writes states      2·N·P per chunk and head
    C·Bᵀ           reads C, B          writes CB (fp32)   2·L·N per token and group
    chunk scan     reads CB, x, C,     writes y           2·N·P + 2·L·P per token and head
                   states

**Mamba-1 selective scan** (Gu & Dao, "Mamba", arXiv 2312.00752; kernel: mamba_ssm's
``selective_scan_fn``): D channels, each with a state of N, the state on chip for the whole
sequence::

    conv1d          reads x             writes x           2K per channel and token
    selective scan  reads u, Δ, z, B,   writes y           7 per state element and token
                    C, A

Not counted: the gates' element-wise preparation (softplus, exp, cumulative sums), the L2 norm of
q and k, and the skip D·x; the gated output norm is a row of its own.

Length: three mixers, each a forward, a backward and a decode step, with their shared conv1d:
one module, since they share the chunk arithmetic and the conventions.
"""

from __future__ import annotations

import numbers

from attnroof import validate
from attnroof.cost import Access, Cost, Num, Stage
from attnroof.dtypes import BF16_BYTES
from attnroof.ops.matmul import FLOPS_PER_MAC

FP32_BYTES = 4
"""Chunk-local matrices and the per-chunk states of the SSD kernels are kept in fp32."""

STEP_FLOPS_PER_STATE = 7
"""Gated DeltaNet's decode step per state element: decay S·exp(g) (1), Sᵀk (2), S += k⊗δ (2),
Sᵀq (2) (flash-linear-attention's ``fused_recurrent_gated_delta_rule``)."""

SSD_STEP_FLOPS_PER_STATE = 5
"""Mamba-2's decode step per state element: decay (1), dt·B⊗x added (2), readout by C (2)
(mamba_ssm's ``selective_state_update``)."""

SCAN_FLOPS_PER_STATE = 7
"""Mamba-1's scan per state element and token: Δ·A and its exp (2), Δ·B·u (2), h = ΔA·h + ΔBu
(2), the readout C·h (1 multiply; its sum over N, 1): 7, as mamba_ssm's ``selective_scan``."""

BACKWARD_PRODUCTS = 2
"""Backward of a product X·Y: dX and dY, each a product as large as the forward's."""

CONV_STATE_TAPS = 1
"""Decode keeps the last K − ``CONV_STATE_TAPS`` inputs of the causal conv (vLLM's conv state)."""

LINEAR_ATTENTION, SSD, SELECTIVE_SCAN = "gated DeltaNet", "SSD", "selective scan"
CONV, STATE_PASS, OUTPUT = "conv1d", "state pass", "output"


def _is_integer(x: Num) -> bool:
    if isinstance(x, bool):
        return False
    if isinstance(x, numbers.Integral):
        return True
    return getattr(getattr(x, "dtype", None), "kind", None) in ("i", "u")


def chunks(s: Num, chunk: Num) -> Num:
    """Chunks of ``chunk`` tokens in ``s``: ⌈s/C⌉ for integers, s/C for symbols and floats.

    >>> chunks(8192, 64), chunks(100, 64)
    (128, 2)
    """
    if _is_integer(s) and _is_integer(chunk):
        return -(-s // chunk)
    return s / chunk


def _third(x: Num) -> Num:
    """x/3 for a product of three consecutive integers (an int for ints)."""
    return x // 3 if _is_integer(x) else x / 3


def conv_channels_gdn(heads: Num, key_heads: Num, key_dim: Num, value_dim: Num) -> Num:
    """Channels of gated DeltaNet's conv: q and k of the key heads, v of the value heads.

    >>> conv_channels_gdn(32, 16, 128, 128)            # Qwen3-Next's 8192
    8192
    """
    return 2 * key_heads * key_dim + heads * value_dim


def conv_channels_ssd(heads: Num, head_dim: Num, state: Num, groups: Num) -> Num:
    """Channels of Mamba-2's conv: x (H·P), B and C (G·N each).

    >>> conv_channels_ssd(128, 64, 128, 8)               # Nemotron-H-8B's 10240
    10240
    """
    return heads * head_dim + 2 * groups * state


def conv_state_elements(channels: Num, conv_kernel: Num) -> Num:
    """Elements of one sequence's conv state: (K − 1) × channels."""
    return (conv_kernel - CONV_STATE_TAPS) * channels


def gdn_state_elements(heads: Num, key_heads: Num, key_dim: Num, value_dim: Num, conv_kernel: Num) -> Num:
    """Elements one sequence's gated-DeltaNet cache holds: every head's d_k × d_v state and the
    conv state.

    >>> gdn_state_elements(32, 16, 128, 128, 4)          # Qwen3-Next: 32·128² + 3·8192
    548864
    """
    conv = conv_channels_gdn(heads, key_heads, key_dim, value_dim)
    return heads * key_dim * value_dim + conv_state_elements(conv, conv_kernel)


def ssd_state_elements(heads: Num, head_dim: Num, state: Num, groups: Num, conv_kernel: Num) -> Num:
    """Elements one sequence's Mamba-2 cache holds: H·N·P and the conv state.

    >>> ssd_state_elements(128, 64, 128, 8, 4)           # Nemotron-H-8B: 128·64·128 + 3·10240
    1079296
    """
    conv = conv_channels_ssd(heads, head_dim, state, groups)
    return heads * head_dim * state + conv_state_elements(conv, conv_kernel)


def scan_state_elements(channels: Num, state: Num, conv_kernel: Num) -> Num:
    """Elements one sequence's Mamba-1 cache holds: D·N and the conv state.

    >>> scan_state_elements(8192, 16, 4)                  # Jamba: 8192·16 + 3·8192
    155648
    """
    return channels * state + conv_state_elements(channels, conv_kernel)


def _taps(channels: Num, k: Num, w: Num, bias: bool) -> Access:
    """The conv's weights: K taps per channel, and a bias per channel where it has one."""
    return Access("conv taps", (k + bias) * channels * w, weight=True)


def _conv(s: Num, channels: Num, k: Num, a: Num, w: Num, bias: bool = False) -> Stage:
    x = s * channels * a
    return Stage(
        CONV,
        FLOPS_PER_MAC * k * channels * s,
        (Access("x", x), _taps(channels, k, w, bias)),
        (Access("x (conv)", x),),
    )


def _conv_step(channels: Num, k: Num, a: Num, sb: Num, w: Num, bias: bool = False) -> Stage:
    state = Access("conv state", conv_state_elements(channels, k) * sb)
    x = Access("x", channels * a)
    taps = _taps(channels, k, w, bias)
    return Stage(
        f"{CONV} step",
        FLOPS_PER_MAC * k * channels,
        (x, state, taps),
        (Access("x (conv)", channels * a), state),
    )


def _conv_backward(s: Num, channels: Num, k: Num, a: Num, w: Num, bias: bool = False) -> Stage:
    """dX and the taps' gradient of the causal conv, in one kernel (the taps' gradient summed in
    it, as a norm's scale is)."""
    x = s * channels * a
    taps = _taps(channels, k, w, bias)
    return Stage(
        f"{CONV} backward",
        BACKWARD_PRODUCTS * FLOPS_PER_MAC * k * channels * s,
        (Access("x", x), Access("d x (conv)", x), taps),
        (Access("dx", x), Access("d conv taps", taps.bytes)),
    )


def _sizes(**values: Num) -> None:
    validate.sizes(**values)


def _items(itemsize: Num, state_itemsize: Num | None, weight_itemsize: Num | None) -> tuple[Num, Num, Num]:
    validate.positive("itemsize", itemsize)
    sb = itemsize if state_itemsize is None else validate.positive("state_itemsize", state_itemsize)
    w = itemsize if weight_itemsize is None else validate.positive("weight_itemsize", weight_itemsize)
    return itemsize, sb, w


# ---------------------------------------------------------------- gated DeltaNet


def gated_delta_rule(
    s: Num,
    *,
    heads: Num,
    key_dim: Num,
    value_dim: Num,
    key_heads: Num | None = None,
    chunk: Num = 64,
    conv_kernel: Num = 4,
    conv_bias: bool = False,
    batch: Num = 1,
    itemsize: Num = BF16_BYTES,
    state_itemsize: Num | None = None,
    weight_itemsize: Num | None = None,
) -> Cost:
    """Gated DeltaNet over ``batch`` sequences of ``s`` tokens (prefill), chunked.

    ``heads`` value heads of ``value_dim`` (the state is ``key_dim × value_dim`` per head);
    ``key_heads`` (default ``heads``) heads of q and k, repeated onto the value heads before the
    kernel, as Qwen3-Next does. FLOPs and bytes both ∝ s: the intensity has a limit.

    >>> c = gated_delta_rule(8192, heads=32, key_heads=16, key_dim=128, value_dim=128)
    >>> c.flops                                  # Qwen3-Next's layer, one sequence of 8192
    48122822656
    >>> round(c.flops / c.bytes, 1)              # flat in s: FLOP per byte
    29.8
    """
    kh = heads if key_heads is None else key_heads
    _sizes(s=s, heads=heads, key_dim=key_dim, value_dim=value_dim, key_heads=kh, chunk=chunk,
           conv_kernel=conv_kernel, batch=batch)  # fmt: skip
    a, sb, w = _items(itemsize, state_itemsize, weight_itemsize)
    H, dk, dv, C = heads, key_dim, value_dim, chunk
    n_c = chunks(s, C)
    q, k = Access("q", H * s * dk * a), Access("k", H * s * dk * a)
    v, o = Access("v", H * s * dv * a), Access("o", H * s * dv * a)
    gates = Access("g, β", 2 * H * s * a)
    big_a = Access("A", H * s * C * FP32_BYTES)
    inv = Access("A⁻¹", H * s * C * a)
    wk, u = Access("w", H * s * dk * a), Access("u", H * s * dv * a)
    h = Access("h (chunk states)", H * n_c * dk * dv * a)
    v_new = Access("v_new", H * s * dv * a)
    final = Access("state", H * dk * dv * sb)
    one = Cost(
        (
            _conv(s, conv_channels_gdn(H, kh, dk, dv), conv_kernel, a, w, conv_bias),
            Stage(
                "KKᵀ",
                H * s * FLOPS_PER_MAC * C * dk,
                (k, gates, Access("A, dt bias", 2 * H * w, weight=True)),
                (big_a,),
            ),
            Stage("(I + A)⁻¹", H * n_c * _third(C * (C - 1) * (C - 2)), (big_a,), (inv,)),
            Stage("w, u", H * s * FLOPS_PER_MAC * C * (dk + dv), (inv, k, v, gates), (wk, u)),
            Stage(STATE_PASS, H * s * 2 * FLOPS_PER_MAC * dk * dv, (k, wk, u, gates), (h, v_new, final)),
            Stage(
                OUTPUT,
                H * s * FLOPS_PER_MAC * (dk * dv + C * (dk + dv)),
                (q, k, v_new, h, gates),
                (o,),
            ),
        )
    )
    return one * batch


def gated_delta_step(
    *,
    heads: Num,
    key_dim: Num,
    value_dim: Num,
    key_heads: Num | None = None,
    conv_kernel: Num = 4,
    conv_bias: bool = False,
    batch: Num = 1,
    itemsize: Num = BF16_BYTES,
    state_itemsize: Num | None = None,
    weight_itemsize: Num | None = None,
) -> Cost:
    """One decode token per sequence: the conv state and the d_k × d_v state of every head read
    and written, whatever the context.

    >>> c = gated_delta_step(heads=32, key_heads=16, key_dim=128, value_dim=128)
    >>> c.stages[1].flops, c.stages[1].bytes          # 7·32·128² + 2·32·128; 2·32·128²·2 + q, k, v, g, β, A, dt bias, o
    (3678208, 2130176)
    """
    kh = heads if key_heads is None else key_heads
    _sizes(
        heads=heads, key_dim=key_dim, value_dim=value_dim, key_heads=kh, conv_kernel=conv_kernel, batch=batch
    )
    a, sb, w = _items(itemsize, state_itemsize, weight_itemsize)
    H, dk, dv = heads, key_dim, value_dim
    state = Access("state", H * dk * dv * sb)
    reads = (
        Access("q, k", 2 * H * dk * a), Access("v", H * dv * a), Access("g, β", 2 * H * a),
        Access("A, dt bias", 2 * H * w, weight=True), state,
    )  # fmt: skip
    one = Cost(
        (
            _conv_step(conv_channels_gdn(H, kh, dk, dv), conv_kernel, a, sb, w, conv_bias),
            Stage(
                "gated delta step",
                H * (STEP_FLOPS_PER_STATE * dk * dv + FLOPS_PER_MAC * dv),  # δ = β·(v − Sᵀk)
                reads,
                (Access("o", H * dv * a), state),
            ),
        )
    )
    return one * batch


def _recurrent_backward(fwd: Cost, inputs: tuple[Access, ...], grads: tuple[Access, ...], do: Access,
                        states: Access, conv: Stage) -> Cost:  # fmt: skip
    """The convention of the chunked kernels' backward (flash-linear-attention's
    ``chunk_gated_delta_rule_bwd``, mamba_ssm's ``_mamba_chunk_scan_combined_bwd``): the chunk
    states are recomputed (every forward stage but the conv and the output, once more), then each
    product of the forward has its two operand gradients (2× its FLOPs), reading the inputs, dO
    and the states and writing the inputs' gradients; the conv's backward last."""
    mixer = [st for st in fwd if st.name != CONV]
    recompute = sum(st.flops for st in mixer[:-1])
    products = sum(st.flops for st in mixer)
    return Cost(
        (
            Stage("recompute states", recompute, inputs, (states,)),
            Stage("gradients", BACKWARD_PRODUCTS * products, (*inputs, do, states), grads),
            conv,
        )
    )


def gated_delta_rule_backward(
    s: Num,
    *,
    heads: Num,
    key_dim: Num,
    value_dim: Num,
    key_heads: Num | None = None,
    chunk: Num = 64,
    conv_kernel: Num = 4,
    conv_bias: bool = False,
    batch: Num = 1,
    itemsize: Num = BF16_BYTES,
    state_itemsize: Num | None = None,
    weight_itemsize: Num | None = None,
) -> Cost:
    """Gated DeltaNet's backward (see :func:`_recurrent_backward`): 3× the forward's mixer FLOPs
    less the output's recomputation.

    >>> f = gated_delta_rule(64, heads=1, key_dim=2, value_dim=2, chunk=4)
    >>> b = gated_delta_rule_backward(64, heads=1, key_dim=2, value_dim=2, chunk=4)
    >>> b.flops == 3 * f.flops - f.stages[0].flops - f.stages[-1].flops   # conv 2×, output not recomputed
    True
    """
    kw = dict(heads=heads, key_dim=key_dim, value_dim=value_dim, key_heads=key_heads, chunk=chunk,
              conv_kernel=conv_kernel, conv_bias=conv_bias, batch=1, itemsize=itemsize,
              state_itemsize=state_itemsize, weight_itemsize=weight_itemsize)  # fmt: skip
    fwd = gated_delta_rule(s, **kw)
    a, _, w = _items(itemsize, state_itemsize, weight_itemsize)
    H, dk, dv = heads, key_dim, value_dim
    kh = heads if key_heads is None else key_heads
    inputs = (Access("q, k", 2 * H * s * dk * a), Access("v", H * s * dv * a), Access("g, β", 2 * H * s * a))
    grads = tuple(Access("d" + x.tensor, x.bytes) for x in inputs)
    states = Access("h (chunk states)", H * chunks(s, chunk) * dk * dv * a)
    conv = _conv_backward(s, conv_channels_gdn(H, kh, dk, dv), conv_kernel, a, w, conv_bias)
    return _recurrent_backward(fwd, inputs, grads, Access("dO", H * s * dv * a), states, conv) * batch


# ---------------------------------------------------------------- Mamba-2 SSD


def ssd(
    s: Num,
    *,
    heads: Num,
    head_dim: Num,
    state: Num,
    groups: Num = 1,
    chunk: Num = 256,
    conv_kernel: Num = 4,
    conv_bias: bool = False,
    batch: Num = 1,
    itemsize: Num = BF16_BYTES,
    state_itemsize: Num | None = None,
    weight_itemsize: Num | None = None,
) -> Cost:
    """Mamba-2's state-space duality over ``batch`` sequences of ``s`` tokens (prefill), chunked.

    >>> c = ssd(8192, heads=128, head_dim=64, state=128, groups=8, chunk=128)
    >>> c.flops                                  # Nemotron-H-8B's layer, one sequence of 8192
    54492397568
    >>> round(c.flops / c.bytes, 1)
    32.4
    """
    _sizes(s=s, heads=heads, head_dim=head_dim, state=state, groups=groups, chunk=chunk,
           conv_kernel=conv_kernel, batch=batch)  # fmt: skip
    a, sb, w = _items(itemsize, state_itemsize, weight_itemsize)
    H, P, N, G, L = heads, head_dim, state, groups, chunk
    n_c = chunks(s, L)
    x, y = Access("x", H * s * P * a), Access("y", H * s * P * a)
    b, c = Access("B", G * s * N * a), Access("C", G * s * N * a)
    dt = Access("dt", H * s * a)
    st32 = Access("states (fp32)", H * n_c * N * P * FP32_BYTES)
    st = Access("states", H * n_c * N * P * a)
    cb = Access("CB (fp32)", G * s * L * FP32_BYTES)
    one = Cost(
        (
            _conv(s, conv_channels_ssd(H, P, N, G), conv_kernel, a, w, conv_bias),
            Stage(
                "chunk state",
                H * s * FLOPS_PER_MAC * N * P,
                (x, b, dt, Access("A, D, dt bias", 3 * H * w, weight=True)),
                (st32,),
            ),
            Stage(
                "state passing",
                H * n_c * FLOPS_PER_MAC * N * P,
                (st32,),
                (st, Access("state", H * N * P * sb)),
            ),
            Stage("C·Bᵀ", G * s * FLOPS_PER_MAC * L * N, (c, b), (cb,)),
            Stage(OUTPUT, H * s * FLOPS_PER_MAC * (N * P + L * P), (cb, x, c, st, dt), (y,)),
        )
    )
    return one * batch


def ssd_step(
    *,
    heads: Num,
    head_dim: Num,
    state: Num,
    groups: Num = 1,
    conv_kernel: Num = 4,
    conv_bias: bool = False,
    batch: Num = 1,
    itemsize: Num = BF16_BYTES,
    state_itemsize: Num | None = None,
    weight_itemsize: Num | None = None,
) -> Cost:
    """One decode token per sequence: every head's N × P state read and written.

    >>> c = ssd_step(heads=128, head_dim=64, state=128, groups=8)
    >>> c.stages[1].flops, c.stages[1].bytes          # 5·128·64·128; 2·128·64·128·2 + x, B, C, dt, A, D, dt bias, y
    (5242880, 4232192)
    """
    _sizes(heads=heads, head_dim=head_dim, state=state, groups=groups, conv_kernel=conv_kernel, batch=batch)
    a, sb, w = _items(itemsize, state_itemsize, weight_itemsize)
    H, P, N, G = heads, head_dim, state, groups
    st = Access("state", H * N * P * sb)
    reads = (
        Access("x", H * P * a),
        Access("B, C", 2 * G * N * a),
        Access("dt", H * a),
        Access("A, D, dt bias", 3 * H * w, weight=True),
        st,
    )
    one = Cost(
        (
            _conv_step(conv_channels_ssd(H, P, N, G), conv_kernel, a, sb, w, conv_bias),
            Stage("SSD step", H * SSD_STEP_FLOPS_PER_STATE * N * P, reads, (Access("y", H * P * a), st)),
        )
    )
    return one * batch


def ssd_backward(
    s: Num,
    *,
    heads: Num,
    head_dim: Num,
    state: Num,
    groups: Num = 1,
    chunk: Num = 256,
    conv_kernel: Num = 4,
    conv_bias: bool = False,
    batch: Num = 1,
    itemsize: Num = BF16_BYTES,
    state_itemsize: Num | None = None,
    weight_itemsize: Num | None = None,
) -> Cost:
    """Mamba-2's backward (see :func:`_recurrent_backward`).

    >>> f = ssd(512, heads=2, head_dim=4, state=8, chunk=64)
    >>> b = ssd_backward(512, heads=2, head_dim=4, state=8, chunk=64)
    >>> b.flops == 3 * f.flops - f.stages[0].flops - f.stages[-1].flops
    True
    """
    kw = dict(heads=heads, head_dim=head_dim, state=state, groups=groups, chunk=chunk,
              conv_kernel=conv_kernel, conv_bias=conv_bias, batch=1, itemsize=itemsize,
              state_itemsize=state_itemsize, weight_itemsize=weight_itemsize)  # fmt: skip
    fwd = ssd(s, **kw)
    a, _, w = _items(itemsize, state_itemsize, weight_itemsize)
    H, P, N, G = heads, head_dim, state, groups
    inputs = (Access("x", H * s * P * a), Access("B, C", 2 * G * s * N * a), Access("dt", H * s * a))
    grads = tuple(Access("d" + x.tensor, x.bytes) for x in inputs)
    states = Access("states", H * chunks(s, chunk) * N * P * a)
    conv = _conv_backward(s, conv_channels_ssd(H, P, N, G), conv_kernel, a, w, conv_bias)
    return _recurrent_backward(fwd, inputs, grads, Access("dy", H * s * P * a), states, conv) * batch


# ---------------------------------------------------------------- Mamba-1 selective scan


def selective_scan(
    s: Num,
    *,
    channels: Num,
    state: Num,
    conv_kernel: Num = 4,
    conv_bias: bool = False,
    batch: Num = 1,
    itemsize: Num = BF16_BYTES,
    state_itemsize: Num | None = None,
    weight_itemsize: Num | None = None,
) -> Cost:
    """Mamba-1's selective scan over ``batch`` sequences of ``s`` tokens (prefill): one fused
    kernel, the state on chip (mamba_ssm's hardware-aware scan).

    >>> c = selective_scan(8192, channels=8192, state=16)
    >>> c.flops                                  # Jamba's layer: 8192·8192·(2·4 + 7·16)
    8053063680
    >>> round(c.stages[1].flops / c.stages[1].bytes, 1)     # 7N/(4·2) at N = 16, B and C shared
    14.0
    """
    _sizes(s=s, channels=channels, state=state, conv_kernel=conv_kernel, batch=batch)
    a, sb, w = _items(itemsize, state_itemsize, weight_itemsize)
    D, N = channels, state
    reads = (
        Access("u, Δ, z", 3 * s * D * a),
        Access("B, C", 2 * s * N * a),
        Access("A, D", (D * N + D) * w, weight=True),
    )
    one = Cost(
        (
            _conv(s, D, conv_kernel, a, w, conv_bias),
            Stage(SELECTIVE_SCAN, s * D * N * SCAN_FLOPS_PER_STATE, reads,
                  (Access("y", s * D * a), Access("state", D * N * sb))),
        )
    )  # fmt: skip
    return one * batch


def selective_scan_step(
    *,
    channels: Num,
    state: Num,
    conv_kernel: Num = 4,
    conv_bias: bool = False,
    batch: Num = 1,
    itemsize: Num = BF16_BYTES,
    state_itemsize: Num | None = None,
    weight_itemsize: Num | None = None,
) -> Cost:
    """One decode token per sequence: D × N state read and written.

    >>> selective_scan_step(channels=8192, state=16).stages[1].flops     # 7·8192·16
    917504
    """
    _sizes(channels=channels, state=state, conv_kernel=conv_kernel, batch=batch)
    a, sb, w = _items(itemsize, state_itemsize, weight_itemsize)
    D, N = channels, state
    st = Access("state", D * N * sb)
    reads = (
        Access("u, Δ, z", 3 * D * a),
        Access("B, C", 2 * N * a),
        Access("A, D", (D * N + D) * w, weight=True),
        st,
    )
    one = Cost(
        (
            _conv_step(D, conv_kernel, a, sb, w, conv_bias),
            Stage("scan step", D * N * SCAN_FLOPS_PER_STATE, reads, (Access("y", D * a), st)),
        )
    )
    return one * batch


def selective_scan_backward(
    s: Num,
    *,
    channels: Num,
    state: Num,
    conv_kernel: Num = 4,
    conv_bias: bool = False,
    batch: Num = 1,
    itemsize: Num = BF16_BYTES,
    state_itemsize: Num | None = None,
    weight_itemsize: Num | None = None,
) -> Cost:
    """Mamba-1's backward: the scan runs forward again for its states, then backward with two
    gradients per product (mamba_ssm's ``selective_scan_bwd``).

    >>> f = selective_scan(64, channels=4, state=2)
    >>> selective_scan_backward(64, channels=4, state=2).flops == 3 * f.flops - f.stages[0].flops
    True
    """
    fwd = selective_scan(s, channels=channels, state=state, conv_kernel=conv_kernel, conv_bias=conv_bias,
                         itemsize=itemsize, state_itemsize=state_itemsize, weight_itemsize=weight_itemsize)  # fmt: skip
    a, _, w = _items(itemsize, state_itemsize, weight_itemsize)
    D, N = channels, state
    scan = fwd.stages[1]
    inputs = scan.reads
    grads = (
        Access("du, dΔ, dz", 3 * s * D * a),
        Access("dB, dC", 2 * s * N * a),
        Access("dA", D * N * FP32_BYTES),
    )
    one = Cost(
        (
            Stage(f"{SELECTIVE_SCAN} backward", (1 + BACKWARD_PRODUCTS) * scan.flops,
                  (*inputs, Access("dy", s * D * a)), grads),
            _conv_backward(s, D, conv_kernel, a, w, conv_bias),
        )
    )  # fmt: skip
    return one * batch
