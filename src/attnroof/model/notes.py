"""What a whole-model step's numbers leave out or assume, in one line each: the notes under the
table. Each note states its number (how many experts a batch touches, what share of the scores a
window keeps, how small an uncounted term is), so it can be checked.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from attnroof.model.layers import DECODE, Precision, layer_table
from attnroof.model.spec import ModelConfig
from attnroof.model.weights import weights_by_format
from attnroof.ops.attention import causal_band, causal_half
from attnroof.ops.experts import Routing, as_routing, touched_experts
from attnroof.ops.softmax import SOFTMAX_FLOPS_PER_ELEMENT
from attnroof.units import duration, si

SOFTCAP_FLOPS_PER_SCORE = 3
"""cap·tanh(score/cap): a divide, a tanh and a multiply per score (tanh counted as one)."""


def step_notes(
    model: ModelConfig,
    phase: str,
    batch: int,
    context: int,
    prec: Precision,
    *,
    routing: Routing | str,
    latent_form: str,
) -> tuple[str, ...]:
    m = model
    notes: list[str] = []
    if prec.weight_itemsize < prec.itemsize:
        notes.append(
            f"every parameter is counted at {prec.weight_itemsize:g} B, embedding and LM head included; "
            "many low-precision checkpoints keep those two in 16 bits"
        )
    if m.quantization is not None:
        notes.append(_stored_note(m, prec))
    w, n = m.sliding_window, m.windowed_layers
    if w is not None and n and context > w:
        where = "every layer" if n == m.layers else f"{n} of {m.layers} layers"
        if phase == DECODE:
            notes.append(
                f"sliding window {w} on {where}: each new token reads the last {w} tokens' K and V there"
            )
        else:
            share = causal_band(context, w) / causal_half(context * context)
            notes.append(
                f"sliding window {w} on {where}: prefill computes the band within the window there, "
                f"{share:.0%} of the causal scores"
            )
    if m.mixers is not None:
        notes.append(cache_note(m, context, prec.kv_itemsize))
    if m.experts is not None:
        notes.append(_experts_note(m, phase, batch, context, routing))
    if m.latent is not None:
        lat = m.latent
        form = "decompressed (naive)" if phase != DECODE else latent_form
        notes.append(
            f"latent attention ({form}): the cache holds {lat.kv_lora_rank} + {lat.qk_rope_head_dim} = "
            f"{lat.cache_elements} elements per token and layer"
            + (", read once for all heads" if phase == DECODE and latent_form != "naive" else "")
        )
    if m.attn_softcap is not None:
        per_score = 4 * m.head_dim + SOFTMAX_FLOPS_PER_ELEMENT
        notes.append(
            f"attention logit soft-capping not counted: {SOFTCAP_FLOPS_PER_SCORE} FLOPs per score beside "
            f"{per_score}, {SOFTCAP_FLOPS_PER_SCORE / per_score:.2%} of attention's FLOPs"
        )
    if m.final_softcap is not None:
        share = SOFTCAP_FLOPS_PER_SCORE / (2 * m.hidden)
        notes.append(f"final logit soft-capping not counted: {share:.3%} of the LM head's FLOPs")
    if m.sinks:
        notes.append(
            f"attention sinks not counted: one more logit per head and query beside {context}, "
            f"{1 / context:.2%} of the scores"
        )
    return tuple(notes)  # a context past the model's limit: a warning at the top (past_positions_warning)


def past_positions(model: ModelConfig, contexts: Iterable[int]) -> list[int]:
    """The contexts past the model's own limit (its ``max_position_embeddings``): each is analysed
    as asked, and the answer says so (:func:`past_positions_warning`; JSON: ``context_beyond_model_limit``).

    >>> from attnroof.model.config import builtin
    >>> past_positions(builtin("nemotron-h-8b"), [4096, 8192, 16384, 131072])
    [16384, 131072]
    """
    limit = model.max_positions
    return [] if limit is None else [c for c in contexts if c > limit]


def past_positions_warning(model: ModelConfig, contexts: Iterable[int]) -> str | None:
    """The header's line for contexts past the model's limit; None when there are none.

    >>> from attnroof.model.config import builtin
    >>> past_positions_warning(builtin("nemotron-h-8b"), [131072])
    "warning: context 131,072 is past the model's limit of 8,192 positions (max_position_embeddings): analysed as asked, as if the model ran that far"
    """
    past = past_positions(model, contexts)
    if not past:
        return None
    names = [f"{c:,}" for c in past]
    which = (
        f"context {names[0]} is"
        if len(names) == 1
        else f"contexts {', '.join(names[:-1])} and {names[-1]} are"
    )
    return (
        f"warning: {which} past the model's limit of {model.max_positions:,} positions "
        "(max_position_embeddings): analysed as asked, as if the model ran that far"
    )


def _stored_note(m: ModelConfig, prec: Precision) -> str:
    """How the weights are counted against how the checkpoint stores them, with the bytes."""
    q = m.quantization
    assert q is not None
    if q.format is None:
        return (
            f"the checkpoint's quant_method {q.method!r} is a layout attnroof does not read: its weights are "
            f"counted at {prec.weight_itemsize:g} B each (--weight-dtype to choose)"
        )
    groups = weights_by_format(m, prec)
    if not prec.stored:
        total = sum(g.bytes for g in groups)
        return (
            f"the checkpoint stores weights as {q.format.name} ({float(q.format.bits):g} bits a weight, "
            f"quantization_config); every row is counted here at {prec.weight_itemsize:g} B: {si(total, 'B')}"
        )
    parts = [
        f"{g.rows_text} at {g.itemsize * 8:g} bits a weight ({g.format.layout}), {si(g.bytes, 'B')}"
        for g in groups
        if g.format is not None
    ]
    rest = sum(g.bytes for g in groups if g.format is None)
    return (
        f"weights counted as the checkpoint stores them ({q.method}, quantization_config): "
        + "; ".join(parts)
        + f"; the other rows at {prec.weight_itemsize:g} B, {si(rest, 'B')} (--weight-dtype: one dtype for every row)"
    )


def _experts_note(m: ModelConfig, phase: str, batch: int, context: int, routing: Routing | str) -> str:
    ex = m.experts
    assert ex is not None
    r = as_routing(routing)
    tokens = batch if phase == DECODE else batch * context
    touched = touched_experts(tokens, ex.experts, ex.top_k, r)
    ratio = ex.experts / ex.top_k
    busiest = ""
    if r.counts:
        e, over = r.busiest_expert()
        busiest = f"; the trace's busiest expert, {e}, takes {over:.2f}× the mean expert's tokens"
    return (
        f"experts: {ex.top_k} of {ex.experts} per token; {tokens} token{'s touch' if tokens != 1 else ' touches'} "
        f"{touched:.1f} of {ex.experts} per layer ({r.words}), {tokens * ex.top_k / touched:.1f} tokens each; expert GEMMs need "
        f"E/k = {ratio:g}× the batch of a dense layer to reach the ridge{busiest}"
    )


def cache_note(model: ModelConfig, context: int, kv_itemsize: float) -> str:
    """A hybrid's cache per sequence, layer kind by layer kind (issue 23): K and V (or a latent)
    per cached token where a layer attends, a fixed state where it scans.

    >>> from attnroof.model.config import builtin
    >>> cache_note(builtin("qwen3-next-80b-a3b"), 131072, 2)
    'cache per sequence at 131072 tokens: linear attention (gated DeltaNet) 36 layers × 1097728 B (state) + attention 12 layers × 131072 tokens × 2048 B (K,V) = 3260743680 B'
    """
    parts, total = [], 0.0
    for i in layer_table(model):
        if i.kv_elements_per_token or i.fixed_cache_bytes_per_token:
            tokens = i.cached_tokens(context)
            each = i.kv_elements_per_token * kv_itemsize + i.fixed_cache_bytes_per_token
            what = "K,V" if not i.fixed_cache_bytes_per_token else "latent and fp8 index key"
            parts.append(f"{i.name} {i.count} layers × {tokens} tokens × {each:.0f} B ({what})")
            total += i.count * tokens * each
        if i.state_elements:
            each = i.state_elements * kv_itemsize
            parts.append(f"{i.name} {i.count} layers × {each:.0f} B (state)")
            total += i.count * each
    return f"cache per sequence at {context} tokens: {' + '.join(parts)} = {total:.0f} B"


def any_routing_line(model: ModelConfig, totals: Any, batch: int) -> str | None:
    """The bound whatever the router does, for a mixture of experts whose fewest experts' step is
    below the step at the routing asked for (the table's): the time, and for decode the tokens/s,
    at the fewest experts a batch can touch. None for a dense model or when the two are equal."""
    ex, floor = model.experts, totals.any_routing_time_s
    if ex is None or floor is None or floor >= totals.time_s:
        return None
    rate = f", ≤ {batch / floor:,.0f} tokens/s" if totals.tokens_per_s is not None else ""
    return (
        f"bound whatever the routing: step ≥ {duration(floor)}{rate}, {floor / totals.time_s:.2f}× the step "
        f"above: the fewest experts a batch can touch, {ex.top_k} of {ex.experts} a layer "
        "(every token to the same ones)"
    )
