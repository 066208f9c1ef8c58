"""The worked analysis as Markdown: parts A–F written from a :class:`attnroof.sheet.Sheet`.

Every sentence that states a comparison (which roof binds, how far from the ridge, whether the
softmax share matters) branches on the numbers, so another device or shape gets the right words.

Length: one document, parts A–F, read top to bottom; each part's helper sits beside the part.
"""

from __future__ import annotations

from typing import Any

from attnroof.analysis import softmax_flops, softmax_share
from attnroof.cost import Cost
from attnroof.devices import Device
from attnroof.dtypes import DType
from attnroof.escaping import escaped
from attnroof.roofline import NEAR_RIDGE_FACTOR, Placement
from attnroof.sheet import SOFTMAX_SHARE_WORTH_NOTING, Sheet, build_sheet
from attnroof.solve import Crossover
from attnroof.text import render
from attnroof.text.render import table
from attnroof.units import duration

e = render.expr
num = render.num


def _stage_table(sym: Cost, cost: Cost) -> str:
    rows = render.stage_rows(cost, symbolic=sym)
    return table(
        ["stage", "FLOPs", "reads (elements)", "writes (elements)", "elements", "bytes"], rows, "lrllrr"
    )


def _placements(rows: list[tuple[str, Placement]]) -> str:
    return render.placement_table(rows)


def _cross_text(c: Crossover, label: str) -> list[str]:
    out = [
        f"- {label}: I(s) = `{e(c.intensity_expr)}`; I(s) ≥ {render.exact(c.ridge_exact)} ⇔ `{e(c.inequality)}` ⇔ `{render.exact_in(c.solution)}`."
    ]
    if c.never:
        assert c.limit_intensity is not None  # a bounded supremum: an unbounded intensity always crosses
        out.append(
            f"  No positive s satisfies it: **never compute-bound**. I(s) only approaches its supremum "
            f"{render.exact(c.limit_exact)} FLOP/byte, {num(c.ridge / c.limit_intensity)}× below the ridge."
        )
    else:
        out.append(f"  **Compute-bound from s = {c.s_min}** (threshold {render.exact(c.exact or '', 5)}).")
    return out


def sheet_markdown(device: Device, dtype: DType, **shape: Any) -> str:
    """The worked analysis as Markdown; ``shape`` takes :func:`build_sheet`'s keywords."""
    return render_sheet(build_sheet(device, dtype, **shape))


def _softmax_lines(sh: Sheet) -> list[str]:
    """The softmax share and when it matters, from the numbers (not a fixed sentence)."""
    if sh.softmax_flops_per_element == 0:
        return [
            "Softmax is counted at 0 FLOPs here (the FlashAttention papers' convention): all the work is in "
            "the two matrix products.",
            "",
        ]
    small = [dd for dd, share in sh.share_by_d.items() if share >= SOFTMAX_SHARE_WORTH_NOTING]
    where = (
        f"it is {SOFTMAX_SHARE_WORTH_NOTING:.0%} or more of the work at d ≤ {max(small)}"
        if small
        else f"it stays under {SOFTMAX_SHARE_WORTH_NOTING:.0%} for every head size below"
    )
    return [
        f"The softmax share is `{e(sh.algebra['softmax_share'])}`: {where}.",
        "",
        table(
            ["d", *map(str, sh.share_by_d)],
            [["softmax share", *(render.pct(v) for v in sh.share_by_d.values())]],
        ),
        "",
        "Even where its FLOPs are negligible it is not free in time: the exponentials run on a much slower "
        "unit than the matrix cores, and the row max and row sum are reductions that force synchronisation. "
        "A roofline sees none of that.",
        "",
    ]


def render_sheet(sh: Sheet) -> str:
    """A built :class:`Sheet` as Markdown."""
    dev, roof, s, d, dt = sh.device, sh.roof, sh.s, sh.d, sh.dtype
    u, f = sh.prefill.unfused, sh.prefill.fused
    a = sh.algebra
    size = dt.itemsize
    sm_flops = float(softmax_flops(u.cost))
    gemm = u.placement.flops - sm_flops
    lines: list[str] = [
        f"# Attention roofline: {escaped(dev.name)}, {dt.name}, s = {s}, d = {d}",
        "",
        f"Device: {render.device_line(dev, roof)}.",
        f"One head, forward pass, {render.plural(size, 'byte')} per element; softmax counted at "
        f"{num(sh.softmax_flops_per_element)} FLOPs per score; a matrix product (m×k)·(k×n) at 2mnk FLOPs.",
        "",
        "## A. Work",
        "",
        f"Q·Kᵀ and P·V are (s×d)·(d×s) and (s×s)·(s×d) products; softmax touches every one of the s² scores. "
        f"In total F(s, d) = `{e(a['flops'])}`.",
        "",
        f"At s = {s}, d = {d}: matrix products {render.flops(gemm)}, softmax {render.flops(sm_flops)}, "
        f"total {render.flops(u.placement.flops)}; softmax is {render.pct(softmax_share(u.cost))} of the FLOPs.",
        "",
        *_softmax_lines(sh),
        "## B. Off-chip traffic",
        "",
        f"Unfused, three kernels; the s×s scores are written by one kernel and read by the next "
        f"(elements × {size:g} B):",
        "",
        _stage_table(sh.symbolic["unfused"], u.cost),
        "",
        f"Bytes, unfused: `{e(a['bytes_unfused'])}`.",
        "",
        "Fused, one kernel; scores and probabilities live on chip, tile by tile:",
        "",
        _stage_table(sh.symbolic["fused"], f.cost),
        "",
        f"Bytes, fused: `{e(a['bytes_fused'])}`.",
        "",
        f"Unfused over fused traffic: `{e(a['traffic_ratio'])}`; at d = {d} that is "
        f"{num(sh.sweep[0][1].bytes / sh.sweep[0][2].bytes)}× at s = {sh.sweep[0][0]} and "
        f"{num(sh.prefill.traffic_ratio)}× at s = {s}, and it grows without bound in s.",
        "",
        "## C. Arithmetic intensity",
        "",
        f"- Unfused: I = `{e(a['intensity_unfused'])}`. As s → ∞ it tends to `{e(a['limit_unfused'])}` = "
        f"{num(sh.crossover['unfused'].limit_intensity)} FLOP/byte at d = {d}: the s² score traffic grows exactly "
        "as fast as the work, so a longer sequence cannot lift it.",
        f"- Fused: I = `{e(a['intensity_fused'])}`, linear in s and unbounded: work grows as s², traffic as s.",
        "",
        f'Ridge {num(roof.ridge)} FLOP/byte; "near ridge" means within {NEAR_RIDGE_FACTOR}× of it either way.',
        "",
        table(
            ["s", "I unfused", "I fused", "unfused", "fused"],
            [[n, num(pu.intensity), num(pf.intensity), pu.verdict, pf.verdict] for n, pu, pf in sh.sweep],
            "rrrll",
        ),
        "",
        "## D. The ridge and where it is crossed",
        "",
        f"Ridge = P / B = {render.peak(roof.peak_flops_per_s, roof.dtype)} / {render.bandwidth(roof.bandwidth_bytes_per_s)} = "
        f"**{num(roof.ridge)} FLOP/byte** ({roof.dtype}).",
        "",
        *_cross_text(sh.crossover["fused"], "Fused"),
        *_cross_text(sh.crossover["unfused"], "Unfused"),
        "",
        _band_text(sh),
        "",
        _unfused_condition(sh),
        "",
        f"At s = {s}, d = {d}:",
        "",
        _placements([("unfused", u.placement), ("fused", f.placement)]),
        "",
        _speedup_text(sh),
        "",
        "## E. Memory for the score matrix",
        "",
    ]
    lines += _footprint_lines(sh)
    lines += _variants_lines(sh)
    return "\n".join(lines).rstrip() + "\n"


def _relative_to_ridge(intensity: float, ridge: float) -> str:
    """``302× below the ridge``, ``2× above the ridge``, ``at the ridge``."""
    if intensity < ridge:
        return f"{num(ridge / intensity)}× below the ridge"
    if intensity > ridge:
        return f"{num(intensity / ridge)}× above the ridge"
    return "at the ridge"


def _speedup_text(sh: Sheet) -> str:
    """What fusion buys in time at the sheet's shape, from the two time bounds."""
    u, up = sh.prefill.unfused.placement, sh.prefill.speedup_ceiling
    if up <= 1 + 1e-9:
        return (
            "At this shape both variants are compute-bound, so fusion buys no time here: it still saves "
            f"{num(sh.prefill.traffic_ratio)}× the traffic and the memory of the score matrix."
        )
    text = f"Fusion alone can make this shape up to **{num(up)}×** faster."
    if u.limiter == "memory":
        text += (
            " The unfused kernels are not badly written; the bandwidth roof forbids them from doing better than "
            f"{render.rate(u.attainable_flops_per_s)} here."
        )
    return text


def _band_text(sh: Sheet) -> str:
    """Where fused attention is clear of the "near ridge" band (intensity ≥ 2 × ridge)."""
    clear = sh.crossover_clear
    if clear.never or clear.s_min is None:
        return f"Fused attention never gets {NEAR_RIDGE_FACTOR}× past the ridge at d = {sh.d}."
    return (
        f"Within {NEAR_RIDGE_FACTOR}× of the ridge either roof can win in practice; fused attention is clear of "
        f"that band (I ≥ {num(NEAR_RIDGE_FACTOR * sh.roof.ridge)}) from **s = {clear.s_min}**."
    )


def _unfused_condition(sh: Sheet) -> str:
    """The device-independent form of the unfused verdict: compare the ridge with the supremum."""
    c = sh.crossover["unfused"]
    sup = c.limit_intensity
    general = (
        f"Unfused intensity rises with s towards `{e(sh.algebra['limit_unfused'])}` and never reaches it, so unfused "
        f"attention at d = {sh.d} can be compute-bound only on a part whose ridge is below {num(sup)} FLOP/byte."
    )
    if c.never:
        return (
            general
            + f" {escaped(sh.device.name)}'s ridge is {num(sh.roof.ridge)}: no tuning of the three kernels changes that."
        )
    return (
        general
        + f" {escaped(sh.device.name)}'s ridge is {num(sh.roof.ridge)}, so here it does cross, at s = {c.s_min}."
    )


def _footprint_lines(sh: Sheet) -> list[str]:
    one, allf, dev = sh.footprint_layer, sh.footprint_model, sh.device
    name = escaped(dev.name)
    out = [
        f"Materialised, one head's scores take s²·{sh.dtype.itemsize:g} B = {render.nbytes(one.bytes_per_head)} at s = {sh.s}; "
        f"batch {sh.batch} × {render.plural(sh.heads, 'head')}: {render.nbytes(one.bytes)}.",
    ]
    if one.capacity_bytes is None:
        out += ["", f"{name} has no memory capacity in the catalog; pass --capacity to compare.", ""]
        return out
    out += [
        "",
        f"- One layer: {render.pct(one.fraction_of_capacity)} of {name}'s {render.nbytes(one.capacity_bytes)} "
        f"({'fits' if one.fits else 'does not fit'}).",
        f"- {render.plural(sh.layers, 'layer')} kept for the backward pass: {render.nbytes(allf.bytes)}, "
        f"{num(allf.fraction_of_capacity)}× the capacity ({'fits' if allf.fits else 'does not fit'}); "
        f"the longest sequence whose scores would fit is s = {allf.s_max_fits}.",
        "",
        "Fused attention keeps none of this: it recomputes the scores in the backward pass instead, which is what "
        "makes long contexts fit at all.",
        "",
    ]
    return out


def _gqa_lines(sh: Sheet) -> list[str]:
    """Part F3's comparison of groups for the sheet's head count, the chosen group in bold."""
    heads, chosen = sh.heads, sh.group
    if len(sh.gqa) == 1:  # one query head: nothing to share K and V with
        ((_, pu, pf, _lim),) = sh.gqa
        return [
            f"With {heads} query head there is nothing to group: g = 1, and decode runs at "
            f"{num(pf.intensity)} FLOP/byte fused ({num(pu.intensity)} unfused).",
            "",
        ]
    (g0, _, first, _), (g1, _, last, _) = sh.gqa[0], sh.gqa[-1]
    kv = heads // chosen
    return [
        f"With g query heads per KV head, K and V are read once for g heads' work. For the same {heads} query "
        f"heads (on {heads}/g KV heads; g runs over the divisors of {heads} among 1, 2, 4, 8, the chosen group "
        f"and {heads}, one KV head), intensity goes from {num(first.intensity)} at g = {g0} to "
        f"{num(last.intensity)} at g = {g1} (fused), and the time bound falls with it. "
        f"The chosen group, in bold, is g = {chosen}: {kv} KV head{'s' if kv != 1 else ''}.",
        "",
        table(
            [
                "g",
                "I unfused",
                "I fused",
                "fused limit (s → ∞)",
                f"time fused, {render.plural(heads, 'head')}",
                "verdict",
            ],
            [
                [
                    f"**{g}**" if g == chosen else g,
                    num(pu.intensity),
                    num(pf.intensity),
                    num(lim),
                    duration(pf.time_s),
                    pf.verdict,
                ]
                for g, pu, pf, lim in sh.gqa
            ],
            "rrrrrl",
        ),
        "",
    ]


def _variants_lines(sh: Sheet) -> list[str]:
    roof, a, s = sh.roof, sh.algebra, sh.s
    cu, cf = sh.crossover_causal["unfused"], sh.crossover_causal["fused"]
    full = sh.crossover["fused"]
    dec = sh.decode
    out = [
        "## F. Variants",
        "",
        "### F1. Causal masking",
        "",
        "Skipping the tiles above the diagonal halves the FLOPs and, unfused, the score traffic; Q, K, V and O "
        "are read and written whole either way.",
        "",
        f"- Unfused: I = `{e(a['intensity_unfused_causal'])}`, still tending to "
        f"{render.exact(cu.limit_exact)} FLOP/byte: half the work over half the dominant traffic.",
        f"- Fused: I = `{e(a['intensity_fused_causal'])}`, half the non-causal intensity, because the traffic did not shrink.",
        "",
        *_cross_text(cf, "Fused, causal"),
        *_cross_text(cu, "Unfused, causal"),
        "",
    ]
    if cf.threshold is not None and full.threshold is not None:
        out += [
            f"The fused crossover moves from s = {full.s_min} to s = {cf.s_min} "
            f"({num(cf.threshold / full.threshold)}× the threshold): removing FLOPs without removing bytes lowers "
            "intensity.",
            "",
        ]
    out += [
        _placements([("unfused", sh.causal.unfused.placement), ("fused", sh.causal.fused.placement)]),
        "",
        "### F2. Decode against a KV cache",
        "",
        f"One new query token against a cache of s keys and values: F = `{e(a['decode_flops'])}`; elements moved, "
        f"unfused: `{e(a['decode_elements'])}`.",
        "",
        _stage_table(sh.symbolic["decode"], dec.unfused.cost),
        "",
        f"I = `{e(a['decode_intensity'])}` → {num(sh.decode_limit)} FLOP/byte as s → ∞. At s = {s}: "
        f"{num(dec.unfused.placement.intensity)} unfused, {num(dec.fused.placement.intensity)} fused; "
        + _relative_to_ridge(dec.unfused.placement.intensity, roof.ridge)
        + ".",
        "",
        _placements([("unfused", dec.unfused.placement), ("fused", dec.fused.placement)]),
        "",
        "Fusing decode saves little: the scores are a vector of s values, and the traffic is the cache itself, "
        "which every generated token must read once. "
        + (
            "Decode speed follows memory bandwidth."
            if dec.fused.placement.verdict == "memory-bound"
            else f"On this part, though, decode is {dec.fused.placement.verdict}: its ridge is that low."
        ),
        "",
        "### F3. Grouped-query attention and batching",
        "",
        *_gqa_lines(sh),
        f"Batching does not help attention itself: each sequence has its own cache. At batch {sh.batch} decode "
        f"still runs at {num(sh.decode_batched.intensity)} FLOP/byte. Batching helps the weight GEMMs instead: "
        f"a {sh.linear_k}×{sh.linear_k} projection reads its weights once for all n tokens.",
        "",
        _placements([(f"n = {n}", p) for n, p in sh.linear_rows]),
        "",
    ]
    lc = sh.linear_crossover
    if lc.never:
        out.append(
            f"No token count brings this projection to the ridge (its intensity tends to {num(lc.limit_intensity)})."
        )
    else:
        out.append(
            f"The projection turns compute-bound from **n = {render.plural(lc.s_min or 0, 'token')}** (n ≥ {render.exact(lc.exact or '', 5)}). "
            "GQA amortises K/V over query heads; batching amortises weights over sequences."
        )
    return out
