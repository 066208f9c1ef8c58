"""A whole model's step in words: the header, the per-operator table with the step's totals and
memory, the batch sweep, and the list of built-in models."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from attnroof.devices import Device
from attnroof.dtypes import DType
from attnroof.escaping import escaped
from attnroof.model.analysis import ModelAnalysis, OpResult, Totals
from attnroof.model.batching import GemmCrossover
from attnroof.model.config import ModelConfig
from attnroof.model.layers import active_params, params
from attnroof.model.memory import MODEL, Memory, largest_context
from attnroof.model.notes import any_routing_line, past_positions_warning
from attnroof.operators import operator
from attnroof.ops.experts import as_routing
from attnroof.roofline import Roof
from attnroof.text import render
from attnroof.text.render import table
from attnroof.units import GIGA, duration


@dataclass(frozen=True, slots=True)
class Setting:
    """What the header states: the model, the device, the step and the three dtypes."""

    model: ModelConfig
    device: Device
    roof: Roof
    phase: str
    context: int
    fused: bool
    dt: DType
    wdt: DType
    kdt: DType
    stored: tuple[tuple[str, str], ...] = ()
    """(format, rows) the checkpoint stores in a format of their own, counted so (the rest: ``wdt``)."""


def architecture(m: ModelConfig) -> str:
    """The shapes that decide the arithmetic, in one line."""
    if m.latent is not None:
        lat = m.latent
        attn = f"{render.plural(m.heads, 'head')} of latent attention (cache {lat.kv_lora_rank} + {lat.qk_rope_head_dim})"
    else:
        attn = f"{render.plural(m.heads, 'head')} on {render.plural(m.kv_heads, 'KV head')} of {m.head_dim}"
    if m.windowed_layers and m.windowed_layers < m.layers:
        attn += f", window {m.sliding_window} on {render.plural(m.windowed_layers, 'layer')}"
    elif m.windowed_layers:
        attn += f", window {m.sliding_window}"
    gated = (" SwiGLU" if m.activation == "silu" else " GeGLU") if m.gated else ""
    if m.experts is not None:
        ex = m.experts
        shared = f" + {ex.shared_width} shared" if ex.shared_width else ""
        n_moe = m.moe_layer_count
        dense = f", MLP {m.intermediate} on {m.layers - n_moe} layers" if n_moe < m.layers else ""
        mlp = f"{ex.experts} experts of {ex.width}{gated}, top {ex.top_k}{shared}{dense}"
    else:
        mlp = f"MLP {m.intermediate}{' gated' if m.gated else ''}"
    kinds = m.layer_kinds()
    if m.mixers is not None and not any(k.mixer in ATTENDING for k in kinds):
        attn = "no attention"  # Mamba-2-2.7B: every layer a scan
    if m.mixers is not None and (mixed := _mixers(m)):
        attn += f"; {mixed}"
    if not any(k.mlp for k in kinds):
        mlp = "no MLP"
    size = f"{render.num(params(m) / GIGA)} B parameters"
    if active_params(m) != params(m):
        without, with_ = (render.num(active_params(m, embedding=e) / GIGA) for e in (False, True))
        size += f" ({without} B active without the input embedding, {with_} B with it)"
    return f"{m.layers} layers, hidden {m.hidden}, {attn}, {mlp}, vocab {m.vocab}, {size}"


def header(s: Setting, batch: int | None) -> list[str]:
    m = s.model
    shape = architecture(m)
    what = (
        f"prefill of {render.plural(s.context, 'token')}"
        if s.phase == "prefill"
        else f"decode of one token at context {s.context}"
    )
    if batch is not None:
        what += f", batch {batch}"
    attn = "fused" if s.fused else "unfused"
    lines = [
        f"{escaped(m.name)}: {shape}",
        render.device_line(s.device, s.roof),
        f"{what}; weights {_weights(s)}, KV cache {s.kdt.name}, activations {s.dt.name}; {attn} attention",
        *past_positions_lines(m, [s.context]),
    ]
    names = list(dict.fromkeys([fmt for fmt, _ in s.stored] + [s.wdt.name]))
    if names != [s.dt.name]:
        stored = " and ".join(n for n in names if n != s.dt.name)
        lines.append(f"weights stored as {stored} are multiplied at the {s.dt.name} peak (--dtype)")
    return lines


def past_positions_lines(model: ModelConfig, contexts: Sequence[int]) -> list[str]:
    """The warning line for contexts past the model's own limit, or none."""
    line = past_positions_warning(model, contexts)
    return [] if line is None else [line]


def _weights(s: Setting) -> str:
    """The weights' formats: one dtype, or the checkpoint's format on its rows and the rest."""
    if not s.stored:
        return s.wdt.name
    return " + ".join(f"{fmt} on {rows}" for fmt, rows in s.stored) + f" + {s.wdt.name} on the rest"


OP_HEADERS = ("operator", "×", "FLOPs", "bytes", "FLOP/byte", "time ≥", "limiter", "of step")


def op_row(o: OpResult, step_time_s: float) -> list[str]:
    """One operator of a step placed on the roof: its runs, work, traffic, bound and share."""
    return [
        o.name,
        f"×{o.count}" if o.count > 1 else "",
        render.flops(o.flops),
        render.nbytes(o.bytes),
        render.num(o.intensity),
        duration(o.time_s),
        o.limiter,
        render.pct(o.count * o.time_s / step_time_s),
    ]


def cache_column(headers: list[str], rows: list[list[str]], ops: Sequence[OpResult], roof: Roof) -> str:
    """The "in cache" column added to an operator table where ``roof`` counts a cache (each
    operator's bytes at the cache's bandwidth, a run's); the alignment letter it adds ("" if none)."""
    if roof.levels == 1:
        return ""
    headers.append(render.CACHE_HEADER)
    for row, o in zip(rows, ops, strict=True):
        row.append(render.resident_cell(o.resident_bytes, o.bytes))
    return "r"


def step_text(s: Setting, a: ModelAnalysis) -> str:
    """One step: every operator placed, then the step's totals, its memory and the notes."""
    t = a.totals
    rows = [op_row(o, t.time_s) for o in a.ops]
    headers = list(OP_HEADERS)
    align = "llrrrrlr" + cache_column(headers, rows, a.ops, a.roof)
    tokens = t.tokens_per_s
    rate = f"≤ {render.num(tokens)} tokens/s" if tokens is not None else f"time to first token ≥ {_rate(t)}"
    cached = f" ({render.nbytes(t.resident_bytes)} in cache)" if a.roof.levels == 2 else ""
    any_routing = any_routing_line(a.model, t, a.batch)
    at = f" ({as_routing(a.routing).words})" if any_routing else ""
    out = [
        *header(s, a.batch),
        "",
        table(headers, rows, align),
        "",
        f"step: {render.flops(t.flops)}, {render.nbytes(t.bytes)}{cached}, time ≥ {duration(t.time_s)}{at}; {rate}",
        *([any_routing] if any_routing else []),
        f"memory-bound {render.pct(t.memory_bound_share)} of the time; "
        f"attention takes {render.pct(t.attention_share)} of the time",
        memory_line(a.memory, s.device.name),
        *(f"note: {n}" for n in a.notes),
    ]
    return "\n".join(out)


def _rate(t: Totals) -> str:
    """Decode: the tokens/s ceiling; prefill: the time-to-first-token floor."""
    if t.tokens_per_s is not None:
        return render.num(t.tokens_per_s)
    return duration(t.time_s if t.ttft_s is None else t.ttft_s)


def memory_line(mem: Memory, device: str) -> str:
    b = render.nbytes
    device = escaped(device)
    held, written = b(mem.kv_cache_bytes_per_token_held), b(mem.kv_cache_bytes_per_token_written)
    rate = (
        f"{held}/token" if held == written else f"{held}/token held at this context, {written}/token written"
    )
    state = mem.recurrent_state_bytes_per_sequence
    if state:
        rate += f", recurrent state {b(state)} a sequence"
    used = (
        f"memory: weights {b(mem.weights_bytes)} + KV cache {b(mem.kv_cache_bytes)} "
        f"({rate}) + activations {b(mem.activation_bytes)} = {b(mem.total_bytes)}"
    )
    if mem.capacity_bytes is None:
        return used + f"; {device} has no capacity figure (pass --capacity)"
    verdict = "fits" if mem.fits else "does NOT fit"
    why = (
        "the recurrent state does not grow with the context"
        if state and not mem.kv_cache_bytes_per_token_written
        else "the KV cache stops growing at the window"
    )
    ctx = largest_context_text(
        mem.max_context_by_memory, mem.max_context_by_model, mem.capacity_bytes, f"unbounded ({why})", why
    )
    return (
        f"{used} of {b(mem.capacity_bytes)}: {verdict}; largest batch at this context {mem.max_batch:,}, "
        f"largest context at this batch {ctx}"
    )


def largest_context_text(
    by_memory: int | None,
    by_model: int | None,
    capacity_bytes: float | None,
    unbounded: str,
    why_unbounded: str = "memory does not limit it",
) -> str:
    """The largest context as the memory lines state it (:func:`attnroof.model.memory.largest_context`,
    what JSON's ``max_context`` holds), with memory's own limit beside the model's when that sets it
    (``why_unbounded``: why memory has none)."""
    limit, by = largest_context(by_memory, by_model, capacity_bytes)
    if limit is None:
        return unbounded
    if by == MODEL:
        other = f"memory alone would allow {by_memory:,}" if by_memory is not None else why_unbounded
        return f"{limit:,} (the model's limit; {other})"
    return f"{limit:,}"


def sweep_text(
    s: Setting,
    runs: Sequence[ModelAnalysis],
    gemms: Sequence[GemmCrossover],
    step_batch: int | None,
    share: float,
) -> str:
    """A step at several batches, where each GEMM turns compute-bound, and (decode) whether the
    whole step ever does."""
    decode = s.phase == "decode"
    rows: list[list[Any]] = []
    for a in runs:
        t, mem = a.totals, a.memory
        fits = "—" if mem.fits is None else ("yes" if mem.fits else "no")
        rows.append(
            [
                a.batch,
                duration(t.time_s),
                _rate(t),
                mlp.limiter if (mlp := _mlp_gemm(a)) is not None else "—",  # Mamba-2: no MLP
                next(o for o in a.ops if o.attention).limiter,
                render.pct(t.memory_bound_share),
                render.pct(t.attention_share),
                render.nbytes(mem.kv_cache_bytes),
                fits,
            ]
        )
    headers = ["batch", "step ≥", "tokens/s ≤" if decode else "TTFT ≥", "MLP GEMM", "attention"]
    headers += ["memory-bound", "attention share", "KV cache", "fits"]
    cross = ", ".join(f"{g.name} {g.batch}" if g.batch else f"{g.name} never" for g in gemms)
    out = [*header(s, None), "", table(headers, rows, "rrrllrrrl"), ""]
    unit = "batch" if decode else "tokens through the GEMM (batch × prompt; the LM head: batch)"
    out.append(f"GEMMs compute-bound from {unit}: {cross}")
    ex = s.model.experts
    expert = next((g for g in gemms if g.dense_batch and g.batch), None)
    if ex is not None and expert is not None and expert.batch and expert.dense_batch:
        out.append(
            f"expert GEMMs need {expert.batch / expert.dense_batch:.1f}× the batch of a dense GEMM of their "
            f"shape to reach the ridge ({expert.name}: {expert.batch} against {expert.dense_batch}); each expert "
            f"sees about batch·{ex.top_k}/{ex.experts} tokens once all are touched, so E/k = {ex.experts / ex.top_k:g}"
        )
    if decode and step_batch is None:
        out.append(
            f"the decode step never turns compute-bound at context {s.context}: each sequence "
            f"reads its own KV cache, so {render.pct(share)} of the time stays memory-bound "
            "however large the batch"
        )
    elif decode:
        out.append(
            f"the decode step is compute-bound (under half its time memory-bound) from batch {step_batch}"
        )
    out += [f"note: {n}" for n in runs[0].notes]
    return "\n".join(out)


def _mlp_gemm(a: ModelAnalysis) -> Any:
    """The MLP's first GEMM: the routed experts' where there are experts, else gate/up (or up)."""
    experts = [o for o in a.ops if operator(o.operator).routed]
    if experts:
        return experts[0]
    return next((o for o in a.ops if o.name.endswith(("gate/up projection", "up projection"))), None)


def models_table(models: Sequence[ModelConfig]) -> str:
    """The built-in models, one row each."""
    rows = [
        [
            escaped(m.name),
            render.num(params(m) / GIGA),
            render.num(active_params(m, embedding=False) / GIGA),
            render.num(active_params(m) / GIGA),
            m.layers,
            m.hidden,
            f"{m.heads}/{m.kv_heads}" if m.latent is None else f"{m.heads}/latent",
            m.head_dim if m.latent is None else m.latent.cache_elements,
            m.intermediate
            if m.experts is None
            else f"{m.experts.experts}×{m.experts.width} top {m.experts.top_k}",
            "gated" if m.gated else "plain",
            m.vocab,
            _windows(m),
        ]
        for m in models
    ]
    headers = ["model", "params (B)", "active w/o embedding (B)", "active with embedding (B)", "layers"]
    headers += ["hidden", "heads/KV", "head dim", "MLP", "MLP kind", "vocab", "window or mixers"]
    return table(headers, rows, "lrrrrrrrrlrr")


ATTENDING = frozenset({"attention", "chunked attention", "attention+mamba2"})
"""Mixers with softmax attention, whose heads the header describes."""
MIXER_NAMES = {
    "attention": "attention",
    "chunked attention": "chunked attention",
    "linear attention": "gated DeltaNet",
    "mamba2": "Mamba-2",
    "mamba": "Mamba-1",
    "attention+mamba2": "attention ∥ Mamba-2",
    "none": "MLP only",
}
"""A hybrid's layer mixers, as the header and ``--list`` name them (issue 23)."""


def _mixers(m: ModelConfig) -> str:
    """A hybrid's layers by mixer: "36 gated DeltaNet + 12 attention"; chunked attention with its
    chunk, DeepSeek's sparse attention with its top-k."""
    counts: dict[str, int] = {}
    for kind, n in m.layer_kinds().items():
        counts[kind.mixer] = counts.get(kind.mixer, 0) + n
    mx = m.mixers
    parts = []
    for mixer, n in counts.items():
        name = MIXER_NAMES.get(mixer, mixer)
        if mixer == "chunked attention" and mx is not None and mx.chunk:
            name += f" (chunks of {mx.chunk})"
        if mixer == "attention" and mx is not None and mx.indexer is not None:
            name = f"sparse attention (top {mx.indexer.top_k})"
        parts.append(f"{n} {name}")
    return " + ".join(parts)


def _windows(m: ModelConfig) -> str:
    if m.mixers is not None:
        return _mixers(m)
    n = m.windowed_layers
    if not n:
        return "—"
    return str(m.sliding_window) if n == m.layers else f"{m.sliding_window} on {n}/{m.layers}"
