"""Element-wise operators of a transformer layer: norms, residual adds, MLP activations, rotary
position embeddings, copies.

Each is one kernel that reads its inputs once and writes its output once, so its intensity is a
few FLOP per several bytes: always far below any ridge. They matter at model scale only because
they run on every token of every layer.
"""

from __future__ import annotations

from attnroof import validate
from attnroof.cost import Access, Cost, Num, Stage
from attnroof.dtypes import BF16_BYTES

RMSNORM_FLOPS_PER_ELEMENT = 4
"""x², the running sum, x·rsqrt(mean), times the scale: four operations per element (the one
rsqrt per row is negligible beside them)."""

LAYERNORM_FLOPS_PER_ELEMENT = 7
"""Sum for the mean, x − mean, its square, the sum of squares, times rsqrt(var), times the
scale, plus the shift: seven per element."""

ADD_FLOPS_PER_ELEMENT = 1
"""A residual add: one addition per element."""

SILU_FLOPS_PER_ELEMENT = 4
"""x·σ(x) = x / (1 + exp(−x)): negate-exp, add, divide, multiply (exp counted as one)."""

GATE_FLOPS_PER_ELEMENT = 1
"""The gated MLP's silu(gate)·up: one multiply per element."""

GELU_FLOPS_PER_ELEMENT = 8
"""GPT-2's tanh GELU, 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))): x³ (2), ·0.044715, +x,
·√(2/π), tanh, +1, ·0.5x — eight, with tanh counted as one."""


ROTARY_FLOPS_PER_PAIR = 6
"""A rotated pair (x, y) at angle θ: x·cos θ − y·sin θ and y·cos θ + x·sin θ, four multiplies
and two adds (vLLM's csrc/pos_encoding_kernels.cu, ``apply_token_rotary_embedding``; transformers'
``q·cos + rotate_half(q)·sin`` is the same three per element, its negation not counted)."""
ROTARY_FLOPS_PER_ELEMENT = ROTARY_FLOPS_PER_PAIR // 2
"""Three a rotated element: the count kept in whole numbers."""


ACTIVATION_FLOPS_PER_ELEMENT = {"silu": SILU_FLOPS_PER_ELEMENT, "gelu": GELU_FLOPS_PER_ELEMENT}


def _one(name: str, flops: Num, reads: tuple[Access, ...], writes: tuple[Access, ...]) -> Cost:
    return Cost((Stage(name, flops, reads, writes),))


def _itemsizes(**values: Num) -> None:
    for name, value in values.items():
        if value is not None:
            validate.positive(name, value)


def norm(
    n: Num,
    h: Num,
    *,
    itemsize: Num = BF16_BYTES,
    weight_itemsize: Num | None = None,
    kind: str = "rms",
    name: str = "norm",
    scale_width: Num | None = None,
) -> Cost:
    """RMSNorm (``kind="rms"``) or LayerNorm (``"layer"``) of ``n`` tokens of width ``h``.

    Reads the activations and the scale (and LayerNorm's shift), writes the normalised tokens.
    ``scale_width`` (default ``h``) is the scale's length when it is shared across the row, as in
    QK-norm: one head_dim scale for every head of the row.

    >>> c = norm(1, 4096)                   # one token, Llama-3.1-8B width, bf16
    >>> c.flops, c.bytes                    # 4·4096 FLOPs; 2·(4096 + 4096 + 4096) bytes
    (16384, 24576)
    """
    validate.sizes(n=n, h=h)
    _itemsizes(itemsize=itemsize, weight_itemsize=weight_itemsize)
    w_item = itemsize if weight_itemsize is None else weight_itemsize
    scale = h if scale_width is None else scale_width
    if kind == "rms":
        per, params = RMSNORM_FLOPS_PER_ELEMENT, scale
    elif kind == "layer":
        per, params = LAYERNORM_FLOPS_PER_ELEMENT, 2 * scale
    else:
        raise ValueError(f"unknown norm kind {kind!r}; known: rms, layer")
    return _one(
        name,
        per * n * h,
        (Access("X", n * h * itemsize), Access("scale", params * w_item, weight=True)),
        (Access("Y", n * h * itemsize),),
    )


def add(n: Num, h: Num, *, itemsize: Num = BF16_BYTES, name: str = "residual add") -> Cost:
    """Residual add of two ``n × h`` tensors: reads both, writes the sum.

    >>> add(1, 4096).bytes                  # 3 × 4096 × 2 bytes
    24576
    """
    validate.sizes(n=n, h=h)
    _itemsizes(itemsize=itemsize)
    return _one(
        name,
        ADD_FLOPS_PER_ELEMENT * n * h,
        (Access("X", n * h * itemsize), Access("residual", n * h * itemsize)),
        (Access("Y", n * h * itemsize),),
    )


def add_norm(
    n: Num, h: Num, *, itemsize: Num = BF16_BYTES, kind: str = "rms", name: str = "residual add + norm"
) -> Cost:
    """A residual add fused into the norm after it (vLLM's and Liger's ``fused_add_rms_norm``):
    reads X, the residual and the scale once, writes the normalised tokens and the new residual.
    Its bytes are the add's and the norm's less the sum's round trip through memory::

        residual ← X + residual            (add: 1 FLOP per element)
        Y        ← norm(residual) · scale  (the norm's FLOPs per element)

    >>> c = add_norm(1, 4096)               # bf16: 2·(4096 + 4096 + 4096) read, 2·(2 · 4096) written
    >>> c.flops, c.bytes                    # (1 + 4)·4096; add(1, 4096) + norm(1, 4096) less 2 · 2 · 4096
    (20480, 40960)
    """
    validate.sizes(n=n, h=h)
    _itemsizes(itemsize=itemsize)
    normed = norm(n, h, itemsize=itemsize, kind=kind)
    act = n * h * itemsize
    (stage,) = normed.stages
    return _one(
        name,
        ADD_FLOPS_PER_ELEMENT * n * h + stage.flops,
        (Access("X", act), Access("residual", act), *stage.reads[1:]),
        (Access("Y", act), Access("residual", act)),
    )


def activation(
    n: Num,
    width: Num,
    *,
    gated: bool,
    itemsize: Num = BF16_BYTES,
    name: str = "activation",
    function: str = "silu",
) -> Cost:
    """The MLP's activation on ``n`` tokens of ``width`` (the intermediate size).

    Gated: reads gate and up (2·width), writes act(gate)·up — SwiGLU with ``function="silu"``
    (Llama, Mistral, Qwen), GeGLU with ``"gelu"`` (Gemma). Plain (GPT-2): reads width, writes
    GELU of it.

    >>> activation(1, 14336, gated=True).flops      # (4 + 1) × 14336
    71680
    """
    validate.sizes(n=n, width=width)
    _itemsizes(itemsize=itemsize)
    if function not in ACTIVATION_FLOPS_PER_ELEMENT:
        raise ValueError(f"unknown activation {function!r}; known: {', '.join(ACTIVATION_FLOPS_PER_ELEMENT)}")
    if gated:
        per = ACTIVATION_FLOPS_PER_ELEMENT[function] + GATE_FLOPS_PER_ELEMENT
        reads: tuple[Access, ...] = (Access("gate", n * width * itemsize), Access("up", n * width * itemsize))
    else:
        per = ACTIVATION_FLOPS_PER_ELEMENT["gelu"]
        reads = (Access("X", n * width * itemsize),)
    return _one(name, per * n * width, reads, (Access("Y", n * width * itemsize),))


def rotary(
    n: Num,
    q_heads: Num,
    k_heads: Num,
    rotated: Num,
    *,
    itemsize: Num = BF16_BYTES,
    name: str = "rotary embedding",
) -> Cost:
    """Rotary position embedding (RoPE) of ``n`` tokens: the ``rotated`` dims of each of
    ``q_heads`` query and ``k_heads`` key heads turned, in pairs, by the token's angles, in place
    (vLLM's ``rotary_embedding`` kernel; partial rotary turns only the first ``rotated`` dims of a
    head and leaves the rest unread)::

        rotary   reads q, k (rotated dims), cos/sin (``rotated`` a token)   writes q, k (rotated dims)
                 6 FLOPs per pair: 3 · n · (q_heads + k_heads) · rotated

    The cos/sin table is read a row per token, in the activations' dtype (vLLM casts its
    ``cos_sin_cache`` to the model's).

    >>> c = rotary(8192, 32, 8, 128)         # Llama-3.1-8B, one layer, 8192 tokens
    >>> c.flops == 3 * 8192 * 40 * 128, c.bytes == 2 * 8192 * 40 * 128 * 2 + 8192 * 128 * 2
    (True, True)
    """
    validate.sizes(n=n, q_heads=q_heads, k_heads=k_heads, rotated=rotated)
    _itemsizes(itemsize=itemsize)
    rotated_elements = n * (q_heads + k_heads) * rotated
    qk = rotated_elements * itemsize
    table = n * rotated * itemsize
    flops = ROTARY_FLOPS_PER_ELEMENT * rotated_elements
    return _one(name, flops, (Access("q, k", qk), Access("cos, sin", table)), (Access("q, k", qk),))


def copy(
    elements: Num,
    *,
    read_itemsize: Num = BF16_BYTES,
    write_itemsize: Num | None = None,
    name: str = "copy",
    tensor: str = "X",
    weight: bool = False,
) -> Cost:
    """Move ``elements`` from one buffer to another, casting from ``read_itemsize`` to
    ``write_itemsize`` bytes (a KV-cache append, an embedding gather: ``weight``, the rows read
    are a weight's). No FLOPs.

    >>> copy(2 * 8 * 128, write_itemsize=1).bytes   # new K and V of 8 heads, bf16 → fp8
    6144
    """
    validate.sizes(elements=elements)
    _itemsizes(read_itemsize=read_itemsize, write_itemsize=write_itemsize)
    w_item = read_itemsize if write_itemsize is None else write_itemsize
    read = Access(tensor, elements * read_itemsize, weight)
    return _one(name, 0, (read,), (Access(tensor, elements * w_item),))


def embedding(
    tokens: Num,
    width: Num,
    *,
    weight_itemsize: Num = BF16_BYTES,
    itemsize: Num = BF16_BYTES,
    positions: bool = False,
    name: str = "embedding",
    tensor: str = "embedding rows",
) -> Cost:
    """Gather one ``width``-wide row of a table for each of ``tokens`` tokens: a copy of the rows
    read (in the weight dtype), written as activations. The rest of the table is never read.
    With ``positions`` (a learned position table, GPT-2's): each token's position row gathered
    too, and added to its token row.

    >>> embedding(1, 4096).bytes            # one bf16 row read, one written
    16384
    >>> embedding(1, 768, positions=True).bytes      # two rows gathered (4 · 768 · 2), an add (3 · 768 · 2)
    10752
    """
    items = dict(read_itemsize=weight_itemsize, write_itemsize=itemsize)
    cost = copy(tokens * width, **items, name=name, tensor=tensor, weight=True)
    if not positions:
        return cost
    rows = dict(weight_itemsize=weight_itemsize, itemsize=itemsize)
    gathered = embedding(tokens, width, name="position rows", tensor="position rows", **rows)
    return cost + gathered + add(tokens, width, itemsize=itemsize, name="position add")
