"""Backward passes: FLOPs and off-chip traffic of the gradients, operator by operator.

Each formula takes its forward's arguments (and ``grad_itemsize``, the bytes of a weight's
gradient, where the operator has a weight) and returns the backward's stage table.

Attention, one KV head with its ``group`` query heads, per score kept (all, or half when causal;
see :func:`attnroof.ops.attention.causal_half`). Unfused, as eager PyTorch runs it, with the
probabilities P saved by the forward pass::

    dV = Pᵀ·dO        reads P, dO       writes dV      2·d per score
    dP = dO·Vᵀ        reads dO, V       writes dP      2·d
    softmax bwd       reads P, dP       writes dS      e     dS = P ⊙ (dP − rowsum(P ⊙ dP))
    dQ = dS·K         reads dS, K       writes dQ      2·d
    dK = dSᵀ·Q        reads dS, Q       writes dK      2·d

Fused (FlashAttention-2): nothing of size s² is kept; the forward saves O and the row
log-sum-exp L, and the backward recomputes S and P tile by tile::

    preprocess        reads O, dO       writes D       D = rowsum(dO ⊙ O), fp32, one per row
    fused backward    reads Q, K, V,    writes dQ,     S = Q·Kᵀ, P = exp(S − L), dV, dP,
                      dO, L, D          dK, dV         dS = P ⊙ (dP − D), dQ, dK: 10·d + e

Five s×s×d products against the forward's two: 2.5× the forward's matmul FLOPs, the count the
FlashAttention papers use (forward + backward = 3.5× forward); the unfused backward does four
(2×), since P was kept. ``e`` is the element-wise work per score, counted with the forward
softmax's figure ``softmax_flops_per_element`` (5 by default: exp(S − L) is two, dP − D, the
product with P and the softmax scale three; unfused: P ⊙ dP, its row sum, the difference, the
product and the scale). 0 counts the matrix products alone, the papers' convention. D's
2·s·d FLOPs (O(s·d) beside 10·s²·d) are not counted; its traffic is.

dQ is counted once, written in the activation dtype: the traffic of an ideal accumulation.
FlashAttention-2 adds each K/V tile's share into an fp32 buffer with atomics (s/B_c
read-modify-writes of 4 bytes per element, mostly absorbed by the L2 cache) and converts it in
a last pass; that traffic is not in the bound. With GQA, dK and dV of one KV head sum over its
``group`` query heads; the sum is the inner dimension of the dK and dV products (unfused) or is
kept on chip (fused), so they are written once per KV head, like K and V are read once.

Length: every operator's backward in one module, as the operator table's ``backward`` slots
point at one place; the formulas are short, their conventions (named constants) are the bulk.
"""

from __future__ import annotations

from attnroof import validate
from attnroof.cost import Access, Cost, Num, Stage
from attnroof.dtypes import BF16_BYTES
from attnroof.ops.attention import _check, _queries, chunk_keys, chunk_scores, kept_scores
from attnroof.ops.elementwise import rotary
from attnroof.ops.experts import UNIFORM, Routing, expert_share, touched_experts
from attnroof.ops.matmul import expected_matmul_flops, matmul_flops
from attnroof.ops.softmax import SOFTMAX_FLOPS_PER_ELEMENT

FP32_BYTES = 4
"""The row statistics (log-sum-exp L, D) are kept in fp32."""

BACKWARD_MATMULS_FUSED = 5
BACKWARD_MATMULS_UNFUSED = 4
"""s×s×d products of each backward: recomputed S, dV, dP, dQ, dK; the unfused one keeps P."""

RMSNORM_BACKWARD_FLOPS_PER_ELEMENT = 9
"""x̂ = x·r (1), g = dY·scale (1), the row sum of g·x̂ (2), dX = r·(g − x̂·mean) (3), the
scale's gradient dY·x̂ summed over tokens (2)."""

LAYERNORM_BACKWARD_FLOPS_PER_ELEMENT = 13
"""x̂ = (x − μ)·r (2), g = dY·scale (1), the row sums of g and g·x̂ (3),
dX = r·(g − mean g − x̂·mean g·x̂) (4), the scale's and the shift's gradients (3)."""

SWIGLU_BACKWARD_FLOPS_PER_ELEMENT = 11
"""σ(gate) again (3), silu = gate·σ (1), silu' = σ·(1 + gate·(1 − σ)) (4), d up = dY·silu (1),
d gate = dY·up·silu' (2)."""

GELU_BACKWARD_FLOPS_PER_ELEMENT = 17
"""The tanh argument again (4) and tanh (1), ½(1 + t) (2), 1 − t² (2),
1 + 3·0.044715·x² (3), ·√(2/π) (1), ·½x (2), the sum (1), ·dY (1)."""

GEGLU_BACKWARD_FLOPS_PER_ELEMENT = GELU_BACKWARD_FLOPS_PER_ELEMENT + 4
"""GeGLU: GELU(gate) again and its derivative (17 with the GELU's own recomputation), d up =
dY·GELU(gate) (1), d gate = dY·up·GELU' (2), and the forward product's operands (1)."""

ADD_BACKWARD_FLOPS_PER_ELEMENT = 1
"""A residual add passes its gradient to both inputs unchanged; the work is the add where the
branch's gradient joins the residual stream's: one per element, the forward's kernel again."""

SCATTER_ADD_FLOPS_PER_ELEMENT = 1
"""An embedding's gradient: each token's row of dY added into its row of the table's gradient."""

WEIGHT_GRADIENT = "dW"
"""The last word of a stage's name that computes a weight's gradient (dW = Xᵀ·dY): the W pass
a zero-bubble pipeline schedule (Qi et al. 2024) defers, apart from B, the input's gradient."""


def weight_gradient_stages(cost: Cost) -> Cost:
    """The stages of a backward ``cost`` that compute weight gradients (named ``… dW``).

    >>> [s.name for s in weight_gradient_stages(linear_backward(1, 8, 8))]
    ['linear dW']
    """
    return Cost(tuple(s for s in cost if s.name.rsplit(" ", 1)[-1] == WEIGHT_GRADIENT))


def _attention_backward(
    s_q: Num,
    s_kv: Num,
    d: Num,
    *,
    fused: bool,
    causal: bool,
    group: Num,
    itemsize: Num,
    kv_itemsize: Num,
    softmax_flops_per_element: Num,
    window: Num | None = None,
    d_v: Num | None = None,
    last: bool = False,
) -> Cost:
    """One KV head and its ``group`` query heads; values (and O) ``d_v`` wide (default ``d``);
    ``last``: the queries are the sequence's last ``s_q`` (a chunk, as the forward counts it)."""
    if last:
        scores = group * chunk_scores(s_q, s_kv, window)
        s_kv = chunk_keys(s_q, s_kv, window)
    else:
        scores = group * kept_scores(s_q, s_kv, causal, window)
    return score_backward_table(
        scores, s_q, s_kv, d, d_v=d_v, group=group, itemsize=itemsize, kv_itemsize=kv_itemsize,
        softmax_flops_per_element=softmax_flops_per_element, fused=fused,
    )  # fmt: skip


def score_backward_table(
    scores: Num,
    queries: Num,
    keys: Num,
    d: Num,
    *,
    d_v: Num | None,
    group: Num,
    itemsize: Num,
    kv_itemsize: Num,
    softmax_flops_per_element: Num,
    fused: bool,
) -> Cost:
    """The backward's stage table of one KV head's attention, whatever decides which scores it
    keeps: ``scores`` over ``group`` query heads of ``queries`` tokens, dK and dV of ``keys``.
    Fused (FlashAttention-2), a preprocess and one kernel of five products per score; unfused,
    four products and the softmax's backward through P, dP and dS."""
    dv_ = d if d_v is None else d_v
    mm = scores * matmul_flops(1, d, 1)  # one s×s×d product (S, dQ, dK), per kept score
    mm_v = scores * matmul_flops(1, 1, dv_)  # one s×s×d_v product (dV, dP)
    e = scores * softmax_flops_per_element
    q, dq = (Access(t, group * queries * d * itemsize) for t in ("Q", "dQ"))
    o, do = (Access(t, group * queries * dv_ * itemsize) for t in ("O", "dO"))
    k, dk = (Access(t, keys * d * kv_itemsize) for t in ("K", "dK"))
    v, dv = (Access(t, keys * dv_ * kv_itemsize) for t in ("V", "dV"))
    if fused:
        rows = group * queries * FP32_BYTES
        lse, dd = Access("L", rows), Access("D", rows)
        return Cost(
            (
                Stage("backward preprocess", 0, (o, do), (dd,)),
                Stage(
                    "fused attention backward",
                    (BACKWARD_MATMULS_FUSED - 2) * mm + 2 * mm_v + e,  # S, dQ, dK at d; dV, dP at d_v
                    (q, k, v, do, lse, dd),
                    (dq, dk, dv),
                ),
            )
        )
    sb = scores * itemsize
    p, dp, ds = Access("P", sb), Access("dP", sb), Access("dS", sb)
    return Cost(
        (
            Stage("dV = Pᵀ·dO", mm_v, (p, do), (dv,)),
            Stage("dP = dO·Vᵀ", mm_v, (do, v), (dp,)),
            Stage("softmax backward", e, (p, dp), (ds,)),
            Stage("dQ = dS·K", mm, (ds, k), (dq,)),
            Stage("dK = dSᵀ·Q", mm, (ds, q), (dk,)),
        )
    )


def attention_backward(
    s: Num,
    d: Num,
    *,
    fused: bool = False,
    causal: bool = False,
    group: Num = 1,
    itemsize: Num = BF16_BYTES,
    kv_itemsize: Num | None = None,
    softmax_flops_per_element: Num = SOFTMAX_FLOPS_PER_ELEMENT,
    batch: Num = 1,
    kv_heads: Num = 1,
    mask_pass: bool = False,
    window: Num | None = None,
    d_v: Num | None = None,
    queries: Num | None = None,
) -> Cost:
    """Attention backward over a sequence of length ``s``, head dimension ``d``: the gradients of
    Q, K and V from that of O. Arguments as :func:`attnroof.ops.attention`'s (``mask_pass`` is
    accepted and changes nothing: the backward skips the masked tiles either way). Under context
    parallelism (``queries`` = s/C) dQ is the device's own and dK, dV are partial sums for the
    whole sequence, which the ring carries back to their owners.

    >>> attention_backward(8192, 128, fused=True, softmax_flops_per_element=0).flops  # 10·s²·d
    85899345920
    >>> attention_backward(8192, 128).bytes          # 2·(7s² + 8sd): seven score-sized passes
    956301312
    """
    _check(s, d, group, itemsize, kv_itemsize, softmax_flops_per_element, batch, kv_heads)
    one = _attention_backward(
        _queries(s, queries, window),
        s,
        d,
        fused=fused,
        causal=causal,
        group=group,
        itemsize=itemsize,
        kv_itemsize=itemsize if kv_itemsize is None else kv_itemsize,
        softmax_flops_per_element=softmax_flops_per_element,
        window=window,
        d_v=d_v,
    )
    return one * (batch * kv_heads)


def chunk_backward(
    s_q: Num,
    s_kv: Num,
    d: Num,
    *,
    fused: bool = True,
    group: Num = 1,
    itemsize: Num = BF16_BYTES,
    kv_itemsize: Num | None = None,
    softmax_flops_per_element: Num = SOFTMAX_FLOPS_PER_ELEMENT,
    batch: Num = 1,
    kv_heads: Num = 1,
    d_v: Num | None = None,
    window: Num | None = None,
) -> Cost:
    """The backward of a chunk (:func:`attnroof.ops.attention.chunk`): dQ of its ``s_q``
    queries, dK and dV of every key they read; of the whole sequence it is prefill's.

    >>> chunk_backward(8192, 8192, 128) == attention_backward(8192, 128, fused=True, causal=True)
    True
    """
    _check(s_kv, d, group, itemsize, kv_itemsize, softmax_flops_per_element, batch, kv_heads)
    validate.size("s_q", s_q)
    one = _attention_backward(
        s_q,
        s_kv,
        d,
        fused=fused,
        causal=True,
        group=group,
        itemsize=itemsize,
        kv_itemsize=itemsize if kv_itemsize is None else kv_itemsize,
        softmax_flops_per_element=softmax_flops_per_element,
        window=window,
        d_v=d_v,
        last=True,
    )
    return one * (batch * kv_heads)


def decode_backward(
    s: Num,
    d: Num,
    *,
    fused: bool = False,
    group: Num = 1,
    itemsize: Num = BF16_BYTES,
    kv_itemsize: Num | None = None,
    softmax_flops_per_element: Num = SOFTMAX_FLOPS_PER_ELEMENT,
    batch: Num = 1,
    kv_heads: Num = 1,
    d_v: Num | None = None,
) -> Cost:
    """The backward of one query token against ``s`` keys (a last-token loss): dQ of one row,
    dK and dV of every cached position.

    >>> decode_backward(8192, 128, fused=True, softmax_flops_per_element=0).flops   # 10·s·d
    10485760
    """
    _check(s, d, group, itemsize, kv_itemsize, softmax_flops_per_element, batch, kv_heads)
    one = _attention_backward(
        1,
        s,
        d,
        fused=fused,
        causal=False,
        group=group,
        itemsize=itemsize,
        kv_itemsize=itemsize if kv_itemsize is None else kv_itemsize,
        softmax_flops_per_element=softmax_flops_per_element,
        d_v=d_v,
    )
    return one * (batch * kv_heads)


def _grad_item(grad_itemsize: Num | None, weight_itemsize: Num | None, itemsize: Num) -> Num:
    if grad_itemsize is not None:
        return validate.positive("grad_itemsize", grad_itemsize)
    return itemsize if weight_itemsize is None else weight_itemsize


def linear_backward(
    n: Num,
    k: Num,
    m: Num,
    *,
    itemsize: Num = BF16_BYTES,
    weight_itemsize: Num | None = None,
    grad_itemsize: Num | None = None,
    bias: bool = False,
    name: str = "linear",
) -> Cost:
    """The two GEMMs behind Y = X·W: dX = dY·Wᵀ (n×m by m×k) and dW = Xᵀ·dY (k×n by n×m), each
    the forward's 2nkm FLOPs. dX reads the weight as the forward does; dW reads the saved X
    and writes the weight's gradient (``grad_itemsize``, default the weight's). Both
    intensities grow with the tokens ``n`` like the forward GEMM's. With ``bias``, its gradient
    (a column sum of dY, one addition per element of dY) is written in dW's epilogue.

    >>> c = linear_backward(1, 8192, 8192)
    >>> c.flops, [st.bytes for st in c]          # 2 × 2nkm; dX: 2(m + km + k), dW: 2(k + m + km)
    (268435456, [134250496, 134250496])
    """
    validate.sizes(n=n, k=k, m=m)
    validate.positive("itemsize", itemsize)
    w_item = itemsize if weight_itemsize is None else validate.positive("weight_itemsize", weight_itemsize)
    g_item = _grad_item(grad_itemsize, weight_itemsize, itemsize)
    dy = Access("dY", n * m * itemsize)
    return Cost(
        (
            Stage(
                f"{name} dX",
                matmul_flops(n, m, k),
                (dy, Access("W", k * m * w_item, weight=True)),
                (Access("dX", n * k * itemsize),),
            ),
            Stage(
                f"{name} {WEIGHT_GRADIENT}",
                matmul_flops(k, n, m) + (n * m if bias else 0),
                (Access("X", n * k * itemsize), dy),
                (Access("dW", k * m * g_item), *((Access("d bias", m * g_item),) if bias else ())),
            ),
        )
    )


def norm_backward(
    n: Num,
    h: Num,
    *,
    itemsize: Num = BF16_BYTES,
    weight_itemsize: Num | None = None,
    grad_itemsize: Num | None = None,
    kind: str = "rms",
    name: str = "norm",
    scale_width: Num | None = None,
) -> Cost:
    """RMSNorm or LayerNorm backward: reads the saved input, dY and the scale, writes dX and the
    scale's (and shift's) gradient, summed over tokens on chip. ``scale_width`` as in the forward
    (QK-norm: one head_dim scale shared by every head).

    >>> norm_backward(1, 4096).flops, norm_backward(1, 4096).bytes   # 9·4096; 2·(5 × 4096)
    (36864, 40960)
    """
    validate.sizes(n=n, h=h)
    validate.positive("itemsize", itemsize)
    w_item = itemsize if weight_itemsize is None else validate.positive("weight_itemsize", weight_itemsize)
    g_item = _grad_item(grad_itemsize, weight_itemsize, itemsize)
    scale = h if scale_width is None else scale_width
    if kind == "rms":
        per, params = RMSNORM_BACKWARD_FLOPS_PER_ELEMENT, scale
    elif kind == "layer":
        per, params = LAYERNORM_BACKWARD_FLOPS_PER_ELEMENT, 2 * scale
    else:
        raise ValueError(f"unknown norm kind {kind!r}; known: rms, layer")
    act = n * h * itemsize
    reads = (Access("X", act), Access("dY", act), Access("scale", params * w_item, weight=True))
    writes = (Access("dX", act), Access("d scale", params * g_item))
    return Cost((Stage(f"{name} backward", per * n * h, reads, writes),))


def add_backward(n: Num, h: Num, *, itemsize: Num = BF16_BYTES, name: str = "residual add") -> Cost:
    """The residual stream's gradient plus the branch's: reads two, writes one (the forward's
    kernel on gradients).

    >>> add_backward(1, 4096).bytes
    24576
    """
    validate.sizes(n=n, h=h)
    validate.positive("itemsize", itemsize)
    g = n * h * itemsize
    reads = (Access("dY", g), Access("d branch", g))
    return Cost(
        (Stage(f"{name} backward", ADD_BACKWARD_FLOPS_PER_ELEMENT * n * h, reads, (Access("dX", g),)),)
    )


def rotary_backward(
    n: Num,
    q_heads: Num,
    k_heads: Num,
    rotated: Num,
    *,
    itemsize: Num = BF16_BYTES,
    name: str = "rotary embedding",
) -> Cost:
    """dq and dk turned back by the same angles (the rotation's transpose: vLLM's kernel with
    ``inverse``, sin negated): the forward's reads, writes and FLOPs on the gradients. Nothing of
    the forward is kept for it but the cos/sin table.

    >>> rotary_backward(1, 32, 8, 128).flops == rotary(1, 32, 8, 128).flops
    True
    """
    (stage,) = rotary(n, q_heads, k_heads, rotated, itemsize=itemsize).stages
    grads, table = stage.reads  # dq, dk of the rotated dims (the forward's q, k), and cos/sin
    reads = (Access("dq, dk", grads.bytes), table)
    return Cost((Stage(f"{name} backward", stage.flops, reads, (Access("dq, dk", grads.bytes),)),))


def activation_backward(
    n: Num,
    width: Num,
    *,
    gated: bool,
    itemsize: Num = BF16_BYTES,
    name: str = "activation",
    function: str = "silu",
) -> Cost:
    """The MLP activation's backward. Gated: reads gate, up and dY, writes d gate and d up
    (SwiGLU, or GeGLU with ``function="gelu"``: GELU's derivative and the product's). Plain:
    reads X and dY, writes dX.

    >>> activation_backward(1, 14336, gated=True).flops      # 11 × 14336
    157696
    """
    validate.sizes(n=n, width=width)
    validate.positive("itemsize", itemsize)
    t = n * width * itemsize
    if gated:
        per = SWIGLU_BACKWARD_FLOPS_PER_ELEMENT if function == "silu" else GEGLU_BACKWARD_FLOPS_PER_ELEMENT
        reads: tuple[Access, ...] = (Access("gate", t), Access("up", t), Access("dY", t))
        writes: tuple[Access, ...] = (Access("d gate", t), Access("d up", t))
    else:
        per = GELU_BACKWARD_FLOPS_PER_ELEMENT
        reads, writes = (Access("X", t), Access("dY", t)), (Access("dX", t),)
    return Cost((Stage(f"{name} backward", per * n * width, reads, writes),))


def embedding_backward(
    tokens: Num,
    width: Num,
    *,
    weight_itemsize: Num = BF16_BYTES,
    itemsize: Num = BF16_BYTES,
    grad_itemsize: Num | None = None,
    positions: bool = False,
    name: str = "embedding",
    tensor: str = "embedding rows",
) -> Cost:
    """Scatter-add each token's gradient row into the table's gradient: reads dY and the rows
    of the gradient it adds to, writes them back. Only the rows used are touched. With
    ``positions`` (a learned position table, GPT-2's), the same again into that table's
    gradient: the position add passes its gradient on unchanged.

    >>> embedding_backward(1, 4096).bytes          # 2 · 4096 · (1 + 1 + 1)
    24576
    """
    validate.sizes(tokens=tokens, width=width)
    validate.positive("itemsize", itemsize)
    g_item = _grad_item(grad_itemsize, weight_itemsize, itemsize)
    rows = tokens * width * g_item
    cost = Cost(
        (
            Stage(
                f"{name} backward",
                SCATTER_ADD_FLOPS_PER_ELEMENT * tokens * width,
                (Access("dY", tokens * width * itemsize), Access(f"d {tensor}", rows)),
                (Access(f"d {tensor}", rows),),
            ),
        )
    )
    if not positions:
        return cost
    rows_kw = dict(weight_itemsize=weight_itemsize, itemsize=itemsize, grad_itemsize=grad_itemsize)
    return cost + embedding_backward(tokens, width, name="position rows", tensor="position rows", **rows_kw)


def softmax_backward(
    elements: Num,
    *,
    itemsize: Num = BF16_BYTES,
    per_element: Num = SOFTMAX_FLOPS_PER_ELEMENT,
    name: str = "softmax",
) -> Cost:
    """dS = P ⊙ (dP − rowsum(P ⊙ dP)): reads P and dP, writes dS (the middle stage of the
    unfused attention backward, counted with the forward's per-element figure).

    >>> softmax_backward(8192 * 8192).bytes        # 3 · 2 s²
    402653184
    """
    validate.nonnegative("elements", elements)
    validate.nonnegative("per_element", per_element)
    sb = elements * itemsize
    return Cost(
        (
            Stage(
                f"{name} backward",
                per_element * elements,
                (Access("P", sb), Access("dP", sb)),
                (Access("dS", sb),),
            ),
        )
    )


def copy_backward(
    elements: Num,
    *,
    read_itemsize: Num = BF16_BYTES,
    write_itemsize: Num | None = None,
    name: str = "copy",
    tensor: str = "X",
) -> Cost:
    """The gradient copied back, the cast reversed.

    >>> copy_backward(1024, write_itemsize=1).bytes     # 1024 read at 1 B, written at 2 B
    3072
    """
    validate.sizes(elements=elements)
    validate.positive("read_itemsize", read_itemsize)
    w_item = read_itemsize if write_itemsize is None else validate.positive("write_itemsize", write_itemsize)
    return Cost(
        (
            Stage(
                f"{name} backward",
                0,
                (Access(f"d {tensor}", elements * w_item),),
                (Access(f"d {tensor}", elements * read_itemsize),),
            ),
        )
    )


def expert_backward(
    tokens: Num,
    k: Num,
    m: Num,
    *,
    experts: Num,
    top_k: Num,
    routing: Routing | str = UNIFORM,
    itemsize: Num = BF16_BYTES,
    weight_itemsize: Num | None = None,
    grad_itemsize: Num | None = None,
    bias: bool = False,
    ep: Num = 1,
    imbalance: Num = 1,
    name: str = "expert GEMM",
) -> Cost:
    """The backward of one grouped expert GEMM (:func:`attnroof.ops.experts.expert_gemm`): dX and
    dW over the ``tokens·top_k`` routed rows, each the forward's FLOPs; the weights read and the
    gradients written are those of the experts the batch touches. ``ep``: as the forward's, one
    device's share of an expert-parallel group's pooled ``tokens``; ``imbalance``: the busiest
    device's routed rows, F × the mean.

    >>> c = expert_backward(1, 4096, 28672, experts=8, top_k=2)       # Mixtral gate/up, one token
    >>> c.flops == 2 * (2 * 2 * 4096 * 28672)                          # 2 × the forward
    True
    """
    validate.sizes(k=k, m=m, experts=experts, top_k=top_k)
    validate.positive("tokens", tokens)  # an expectation, as the forward's: whole or not
    validate.positive("itemsize", itemsize)
    w_item = itemsize if weight_itemsize is None else validate.positive("weight_itemsize", weight_itemsize)
    g_item = _grad_item(grad_itemsize, weight_itemsize, itemsize)
    routed = tokens * top_k * imbalance
    touched = touched_experts(tokens, experts, top_k, routing)
    dy = Access("dY", routed * m * itemsize)
    dw_writes = [Access("dW", touched * k * m * g_item)]
    dw_flops = expected_matmul_flops(routed, k, m)
    if bias:  # each touched expert's bias gradient: a column sum of its rows of dY
        dw_writes.append(Access("d bias", touched * m * g_item))
        dw_flops = dw_flops + routed * m
    cost = Cost(
        (
            Stage(
                f"{name} dX",
                expected_matmul_flops(routed, m, k),
                (dy, Access("W", touched * k * m * w_item, weight=True)),
                (Access("dX", routed * k * itemsize),),
            ),
            Stage(
                f"{name} {WEIGHT_GRADIENT}",
                dw_flops,
                (Access("X", routed * k * itemsize), dy),
                tuple(dw_writes),
            ),
        )
    )
    return expert_share(cost, ep)


def latent_attention_backward(
    s_q: Num,
    s_kv: Num,
    *,
    heads: Num,
    kv_lora_rank: Num,
    qk_rope_head_dim: Num,
    qk_nope_head_dim: Num,
    v_head_dim: Num,
    form: str = "naive",
    fused: bool = True,
    causal: bool = False,
    window: Num | None = None,
    batch: Num = 1,
    itemsize: Num = BF16_BYTES,
    kv_itemsize: Num | None = None,
    weight_itemsize: Num | None = None,
    grad_itemsize: Num | None = None,
    softmax_flops_per_element: Num = SOFTMAX_FLOPS_PER_ELEMENT,
) -> Cost:
    """The backward of latent attention in its naive form (what training runs, as prefill does):
    the attention backward of ``heads`` heads of d = nope + ρ for Q·Kᵀ and d_v = v, then the
    backward of the KV up-projection (dc_kv = d[K_nope, V]·W_UKVᵀ and dW_UKV), a linear layer over
    the ``batch·s_kv`` latents.

    >>> mla = dict(heads=128, kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128)
    >>> c = latent_attention_backward(4096, 4096, causal=True, softmax_flops_per_element=0, **mla)
    >>> scores = 128 * 4096 * 4096 // 2
    >>> c.flops == scores * (3 * 2 * 192 + 2 * 2 * 128) + 2 * (2 * 4096 * 512 * 128 * 256)
    True
    """
    if form != "naive":
        from attnroof.errors import InputError

        raise InputError(
            f"form {form!r}: the backward of latent attention is modelled in its naive form (what training runs)",
            param="form",
        )
    H, n, rho, v = heads, qk_nope_head_dim, qk_rope_head_dim, v_head_dim
    kw = dict(
        fused=fused, itemsize=itemsize, kv_itemsize=itemsize, softmax_flops_per_element=softmax_flops_per_element,
        batch=batch, kv_heads=H, d_v=v,
    )  # fmt: skip
    if s_q == 1 and not causal:
        heads_part = decode_backward(s_kv, n + rho, **kw)
    else:
        heads_part = attention_backward(s_kv, n + rho, causal=causal, window=window, **kw)
    up = linear_backward(
        batch * s_kv,
        kv_lora_rank,
        H * (n + v),
        itemsize=itemsize,
        weight_itemsize=weight_itemsize,
        grad_itemsize=grad_itemsize,
        name="KV up-projection",
    )
    return heads_part + up
