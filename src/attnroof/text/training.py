"""Training in words: an operator's backward stages on the roof, the crossover of a pass, and a
whole model's training step (FLOPs by pass, time, MFU, and the memory it must hold)."""

from __future__ import annotations

from typing import Any

from attnroof.analysis import Comparison
from attnroof.cost import Cost
from attnroof.model.layers import params
from attnroof.model.training import PASS_NAMES, TrainAnalysis
from attnroof.model.training_memory import TrainMemory
from attnroof.passes import WORDS
from attnroof.roofline import Roof, loop_resident, place
from attnroof.sheet_backward import BackwardPart
from attnroof.text import render
from attnroof.text.model import OP_HEADERS, cache_column, largest_context_text, op_row
from attnroof.text.render import table
from attnroof.units import duration


def stages_placed_text(cost: Cost, roof: Roof) -> str:
    """Each kernel of ``cost`` placed on ``roof`` on its own: the backward's GEMMs and passes
    each have their own intensity."""
    resident = loop_resident(cost, roof)
    return render.placement_table(
        [(st.name, place((st.flops, st.bytes), roof, r)) for st, r in zip(cost, resident, strict=True)], roof
    )


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
    rows = [[op.pass_name, *op_row(op.result, t.time_s)] for op in a.ops]
    headers = ["pass", *OP_HEADERS]
    cached = cache_column(headers, rows, [op.result for op in a.ops], a.roof)
    fl, tm = t.flops_by_pass, t.time_by_pass
    by_pass = ", ".join(
        f"{w} {render.flops(fl[w])} in {duration(tm[w])}" for w in PASS_NAMES if fl[w] or tm[w]
    )
    out = [
        *head,
        "",
        table(headers, rows, "lllrrrrlr" + cached),
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
    return train_memory_text(a.memory, a.prec.optimizer, a.recompute, params(a.model))


def train_memory_text(
    m: TrainMemory,
    optimizer: str,
    recompute: str,
    n_params: int | None = None,
    zero: int = 0,
    batch_word: str = "batch",
    sharded: str | None = None,
) -> str:
    """Weights, gradients, optimizer state and activations, and whether they fit (with the
    bytes per parameter when ``n_params`` is given, and what ZeRO shards: ``sharded``, the
    plan's policy in words, or the stage's default)."""
    b = render.nbytes
    states = m.weights_bytes + m.gradient_bytes + m.optimizer_bytes
    per_param = f" ({render.num(states / n_params)} B/parameter in all)" if n_params else ""
    if sharded is None:
        sharded = (
            f" (ZeRO {zero}: {ZERO_SHARDS[zero]} sharded over the data-parallel replicas)" if zero else ""
        )
    used = (
        f"memory: weights {b(m.weights_bytes)} + gradients {b(m.gradient_bytes)} + "
        f"{optimizer} state {b(m.optimizer_bytes)}{per_param} + "
        f"activations {b(m.activation_bytes)} ({b(m.activation_bytes_per_layer)} kept per layer, "
        f"recompute {recompute}) = {b(m.total_bytes)}{sharded}"
    )
    if m.capacity_bytes is None:
        return used + "; no capacity figure (pass --capacity)"
    verdict = "fits" if m.fits else "does NOT fit"
    ctx = largest_context_text(m.max_context_by_memory, m.max_context_by_model, m.capacity_bytes, "unbounded")
    return (
        f"{used} of {b(m.capacity_bytes)}: {verdict}; largest {batch_word} at this context "
        f"{m.max_batch:,}, largest context at this {batch_word} {ctx}"
    )


ZERO_SHARDS = {
    1: "the optimizer state",
    2: "the optimizer state and gradients",
    3: "weights, gradients and optimizer state",
}


def backward_part_markdown(g: BackwardPart) -> str:
    """Part G of the sheet: the backward pass of attention."""
    u, f = g.backward.unfused, g.backward.fused
    cu, cf, fw = g.crossover["unfused"], g.crossover["fused"], g.forward_crossover["fused"]
    same = (
        "the same s"
        if cf.s_min == fw.s_min
        else ("earlier" if (cf.s_min or 0) < (fw.s_min or 0) else "later")
    )
    n = f"{g.batch} × {render.plural(g.heads, 'head')} × {render.plural(g.layers, 'layer')}"
    lines = [
        "## Part G — The backward pass",
        "",
        f"G1. The fused backward (FlashAttention-2) at s = {g.s}, d = {g.d} recomputes S and P from Q, K "
        "and the saved row log-sum-exp and does five s×s×d products (dV, dP, dQ, dK and S again), 2.5× "
        f"the forward's. Its traffic is still O(s·d), so its intensity grows with s: "
        f"{render.num(f.placement.intensity)} FLOP/byte here, {f.placement.verdict}.",
        f"It reaches the ridge ({render.num(g.roof.ridge)} FLOP/byte) from s = {cf.s_min} "
        f"(I(s) = {render.expr(cf.intensity_expr)}); the forward does from s = {fw.s_min}: {same}.",
        "",
        render.placement_table([("unfused", u.placement), ("fused", f.placement)]),
        "",
        "G2. The unfused backward reads back the P its forward kept and sends dP and dS through "
        f"memory: seven score-sized passes, {render.num(g.backward.traffic_ratio)}× the fused traffic.",
        "",
        table(["stage", "FLOPs", "reads", "writes", "bytes"], render.stage_rows(u.cost), "lrllr"),
        "",
        f"Its intensity tends to {render.exact(cu.limit_exact)} FLOP/byte: "
        + ("it never reaches the ridge." if cu.never else f"it reaches the ridge from s = {cu.s_min}."),
        "",
        f"G3. What recomputation costs: S = Q·Kᵀ and the softmax again, {render.flops(g.recompute_flops)} per "
        f"head — for {n}, {duration(g.recompute_time_s)} at the peak. What it saves: the P matrices an "
        f"unfused backward reads back, {render.nbytes(g.kept_p_bytes)} for the same {n}.",
        "",
    ]
    return "\n".join(lines)


def recompute_note(cmp: Comparison) -> str:
    """Why the two variants' FLOPs differ in a backward pass (the headline is the unfused one's)."""
    u, f = cmp.unfused.placement.flops, cmp.fused.placement.flops
    return (
        f"FLOPs differ: the fused backward recomputes S and P ({render.flops(f)}), the unfused one "
        f"reads back the P its forward kept ({render.flops(u)}); fused/unfused {render.num(f / u)}×"
    )
