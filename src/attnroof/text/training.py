"""Training in words: an operator's backward stages on the roof, the crossover of a pass, and a
whole model's training step (FLOPs by pass, time, MFU, and the memory it must hold)."""

from __future__ import annotations

from typing import Any

from attnroof.cost import Cost
from attnroof.model.training import PASS_NAMES, TrainAnalysis
from attnroof.passes import WORDS
from attnroof.roofline import Roof, place
from attnroof.text import render
from attnroof.text.render import table
from attnroof.units import duration


def stages_placed_text(cost: Cost, roof: Roof) -> str:
    """Each kernel of ``cost`` placed on ``roof`` on its own: the backward's GEMMs and passes
    each have their own intensity."""
    rows = [render.placement_row(st.name, place((st.flops, st.bytes), roof)) for st in cost]
    return table(render.PLACEMENT_HEADERS, rows)


def linear_pass_text(which: str, forward_text: str, cost: Cost, roof: Roof) -> str:
    """The linear command's text for a backward or combined pass: its lines, the pass named in
    the title, and each GEMM on the roof."""
    first, *rest = forward_text.splitlines()
    return "\n".join([f"{first} ({WORDS[which]})", *rest, "", "kernels:", stages_placed_text(cost, roof)])


def forward_crossover_line(forward: dict[str, Any]) -> str:
    """How the forward pass's crossovers compare: ``forward: unfused never, fused from s = 595``."""
    parts = [f"{label} {'never' if c.never else f'from s = {c.s_min}'}" for label, c in forward.items()]
    return "the forward pass, for comparison: " + ", ".join(parts)


def train_text(head: list[str], a: TrainAnalysis) -> str:
    """A training step: every operator of every pass placed, the totals by pass, MFU, memory."""
    t = a.totals
    rows = [
        [
            op.pass_name,
            o.name,
            f"×{o.count}" if o.count > 1 else "",
            render.flops(o.flops),
            render.nbytes(o.bytes),
            render.num(o.intensity),
            duration(o.time_s),
            o.limiter,
            render.pct(o.count * o.time_s / t.time_s),
        ]
        for op in a.ops
        for o in (op.result,)
    ]
    headers = ["pass", "operator", "×", "FLOPs", "bytes", "FLOP/byte", "time ≥", "limiter", "of step"]
    fl, tm = t.flops_by_pass, t.time_by_pass
    by_pass = ", ".join(
        f"{w} {render.flops(fl[w])} in {duration(tm[w])}" for w in PASS_NAMES if fl[w] or tm[w]
    )
    out = [
        *head,
        "",
        table(headers, rows, "lllrrrrlr"),
        "",
        f"step: {render.flops(t.flops)} ({by_pass}), {render.nbytes(t.bytes)}; time ≥ {duration(t.time_s)}, "
        f"≤ {render.num(t.tokens / t.time_s)} tokens/s",
        f"model FLOPs {render.flops(t.model_flops)} ({render.flops(t.model_flops / t.tokens)} per token: "
        f"6·N + 6·L·H·Q·T, PaLM's with the causal half): MFU ≤ {render.pct(t.mfu)}, "
        f"HFU ≤ {render.pct(t.hfu)} (hardware FLOPs, recomputation included)",
        f"memory-bound {render.pct(t.memory_bound_share)} of the time; "
        f"attention takes {render.pct(t.attention_share)} of the time",
        train_memory_line(a),
        *(f"note: {n}" for n in a.notes),
    ]
    return "\n".join(out)


def train_memory_line(a: TrainAnalysis) -> str:
    m, b = a.memory, render.nbytes
    per_param = (m.weights_bytes + m.gradient_bytes + m.optimizer_bytes) / a.model.params()
    used = (
        f"memory: weights {b(m.weights_bytes)} + gradients {b(m.gradient_bytes)} + "
        f"{a.prec.optimizer} state {b(m.optimizer_bytes)} ({render.num(per_param)} B/parameter in all) + "
        f"activations {b(m.activation_bytes)} ({b(m.activation_bytes_per_layer)} kept per layer, "
        f"recompute {a.recompute}) = {b(m.total_bytes)}"
    )
    if m.capacity_bytes is None:
        return used + "; no capacity figure (pass --capacity)"
    verdict = "fits" if m.fits else "does NOT fit"
    ctx = "unbounded" if m.max_context is None else f"{m.max_context:,}"
    return (
        f"{used} of {b(m.capacity_bytes)}: {verdict}; largest batch at this context {m.max_batch:,}, "
        f"largest context at this batch {ctx}"
    )
