"""The worked analysis (parts A–F) for any device, dtype and shape, as data and as Markdown.

Every number is computed here from the formulas in :mod:`attnroof.ops`; the algebra (closed
forms, limits, thresholds) comes from evaluating the same formulas on sympy symbols. Nothing is
typed in by hand, so another device, dtype or head dimension redoes the whole argument.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sympy as sp

from attnroof import render
from attnroof.analysis import Comparison, attention_crossover, softmax_share
from attnroof.commands._common import table
from attnroof.cost import Cost
from attnroof.devices import Device
from attnroof.dtypes import DType
from attnroof.footprint import Footprint, footprint
from attnroof.ops import SOFTMAX_FLOPS_PER_ELEMENT, attention, decode, linear
from attnroof.roofline import NEAR_RIDGE_FACTOR, Placement, Roof, place
from attnroof.solve import Crossover, crossover
from attnroof.units import duration

SWEEP_S = (512, 1024, 2048, 4096, 8192, 32768)
SHARE_D = (8, 64, 128, 256)
GROUPS = (1, 2, 4, 8)
TOKENS = (1, 8, 64, 512, 4096)

S, D = sp.symbols("s d", positive=True)


@dataclass(frozen=True)
class Sheet:
    """The whole analysis for one device, dtype and shape."""

    device: Device
    dtype: DType
    roof: Roof
    s: int
    d: int
    batch: int
    heads: int
    layers: int
    group: int
    softmax_flops_per_element: float
    prefill: Comparison
    causal: Comparison
    decode: Comparison
    sweep: list[tuple[int, Placement, Placement]]
    crossover: dict[str, Crossover]
    crossover_causal: dict[str, Crossover]
    footprint_layer: Footprint
    footprint_model: Footprint
    share_by_d: dict[int, float]
    gqa: list[tuple[int, Placement, Placement, float]]
    decode_batched: Placement
    decode_limit: float
    linear_k: int
    linear_rows: list[tuple[int, Placement]]
    linear_crossover: Crossover
    algebra: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {
            "device": self.device.to_json(),
            "dtype": self.dtype.name,
            "itemsize": self.dtype.itemsize,
            "shape": {
                "s": self.s,
                "d": self.d,
                "batch": self.batch,
                "heads": self.heads,
                "layers": self.layers,
                "group": self.group,
            },
            "softmax_flops_per_element": self.softmax_flops_per_element,
            "ridge": self.roof.ridge,
            "attention": self.prefill.to_json(),
            "softmax_share_by_d": {str(k): v for k, v in self.share_by_d.items()},
            "sweep": [{"s": n, "unfused": u.to_json(), "fused": f.to_json()} for n, u, f in self.sweep],
            "crossover": {k: v.to_json() for k, v in self.crossover.items()},
            "causal": {
                **self.causal.to_json(),
                "crossover": {k: v.to_json() for k, v in self.crossover_causal.items()},
            },
            "footprint": {"layer": self.footprint_layer.to_json(), "model": self.footprint_model.to_json()},
            "decode": {
                **self.decode.to_json(),
                "limit_intensity": self.decode_limit,
                "batched": self.decode_batched.to_json(),
            },
            "gqa": [
                {"group": g, "unfused": u.to_json(), "fused": f.to_json(), "fused_limit_intensity": lim}
                for g, u, f, lim in self.gqa
            ],
            "linear": {
                "k": self.linear_k,
                "m": self.linear_k,
                "rows": [{"n": n, **p.to_json()} for n, p in self.linear_rows],
                "crossover": {"n_min": self.linear_crossover.s_min, **self.linear_crossover.to_json()},
            },
            "algebra": {k: str(v) for k, v in self.algebra.items()},
        }


def build_sheet(
    device: Device,
    dtype: DType,
    *,
    s: int = 8192,
    d: int = 128,
    batch: int = 8,
    heads: int = 32,
    layers: int = 80,
    group: int = 8,
    softmax_flops_per_element: float = SOFTMAX_FLOPS_PER_ELEMENT,
) -> Sheet:
    roof = Roof.of(device, dtype)
    kw: dict[str, Any] = {"itemsize": dtype.itemsize, "softmax_flops_per_element": softmax_flops_per_element}

    def att(n: Any, dd: Any = d, **extra: Any) -> Cost:
        return attention(n, dd, **kw, **extra)

    def dec(n: Any, dd: Any = d, **extra: Any) -> Cost:
        return decode(n, dd, **kw, **extra)

    def cross(**extra: Any) -> Crossover:
        return attention_crossover(d, roof, **kw, **extra)

    def limit(cost_of: Any) -> float:
        return float(sp.limit(sp.cancel(cost_of(S).intensity), S, sp.oo))

    hidden = heads * d
    cap = device.capacity_bytes
    unfused_sym, fused_sym = att(S, D), att(S, D, fused=True)
    i_unfused = sp.factor(sp.cancel(unfused_sym.intensity))
    algebra = {
        "flops": sp.factor(unfused_sym.flops),
        "bytes_unfused": sp.factor(unfused_sym.bytes),
        "bytes_fused": sp.factor(fused_sym.bytes),
        "traffic_ratio": sp.expand(sp.cancel(unfused_sym.bytes / fused_sym.bytes)),
        "softmax_share": sp.factor(
            sp.cancel(sum(st.flops for st in unfused_sym if st.name == "softmax") / unfused_sym.flops)
        ),
        "intensity_unfused": i_unfused,
        "intensity_fused": sp.factor(sp.cancel(fused_sym.intensity)),
        "limit_unfused": sp.factor(sp.limit(i_unfused, S, sp.oo)),
        "intensity_unfused_causal": sp.factor(sp.cancel(att(S, D, causal=True).intensity)),
        "intensity_fused_causal": sp.factor(sp.cancel(att(S, D, fused=True, causal=True).intensity)),
        "decode_flops": sp.factor(
            decode(S, D, itemsize=1, softmax_flops_per_element=softmax_flops_per_element).flops
        ),
        "decode_elements": sp.expand(
            decode(S, D, itemsize=1, softmax_flops_per_element=softmax_flops_per_element).bytes
        ),
        "decode_intensity": sp.factor(sp.cancel(dec(S, D).intensity)),
    }
    return Sheet(
        device=device,
        dtype=dtype,
        roof=roof,
        s=s,
        d=d,
        batch=batch,
        heads=heads,
        layers=layers,
        group=group,
        softmax_flops_per_element=softmax_flops_per_element,
        prefill=Comparison.of(att(s), att(s, fused=True), roof),
        causal=Comparison.of(att(s, causal=True), att(s, fused=True, causal=True), roof),
        decode=Comparison.of(dec(s), dec(s, fused=True), roof),
        sweep=[(n, place(att(n), roof), place(att(n, fused=True), roof)) for n in SWEEP_S],
        crossover={"unfused": cross(), "fused": cross(fused=True)},
        crossover_causal={"unfused": cross(causal=True), "fused": cross(fused=True, causal=True)},
        footprint_layer=footprint(s, itemsize=dtype.itemsize, batch=batch, heads=heads, capacity_bytes=cap),
        footprint_model=footprint(
            s, itemsize=dtype.itemsize, batch=batch, heads=heads, layers=layers, capacity_bytes=cap
        ),
        share_by_d={dd: softmax_share(att(1, dd)) for dd in sorted({*SHARE_D, d})},
        gqa=[
            (
                g,
                place(dec(s, group=g), roof),
                place(dec(s, group=g, fused=True), roof),
                limit(lambda x, g=g: dec(x, group=g, fused=True)),
            )
            for g in sorted({*GROUPS, group})
        ],
        decode_batched=place(dec(s, batch=batch), roof),
        decode_limit=limit(dec),
        linear_k=hidden,
        linear_rows=[(n, place(linear(n, hidden, hidden, itemsize=dtype.itemsize), roof)) for n in TOKENS],
        linear_crossover=crossover(
            lambda n: linear(n, hidden, hidden, itemsize=dtype.itemsize).intensity,
            roof.peak_flops_per_s,
            roof.bandwidth_bytes_per_s,
            variable="n",
        ),
        algebra=algebra,
    )


# ---------------------------------------------------------------- Markdown

e = render.expr
num = render.num


def _stage_table(sym: Cost, cost: Cost) -> str:
    rows = render.stage_rows(cost, symbolic=sym)
    return table(
        ["stage", "FLOPs", "reads (elements)", "writes (elements)", "elements", "bytes"], rows, "lrllrr"
    )


def _placements(rows: list[tuple[str, Placement]]) -> str:
    return table(render.PLACEMENT_HEADERS, [render.placement_row(label, p) for label, p in rows])


def _cross_text(c: Crossover, label: str) -> list[str]:
    out = [
        f"- {label}: I(s) = `{e(c.intensity_expr)}`; I(s) ≥ {c.ridge_exact} ⇔ `{e(c.inequality)}` ⇔ `{c.solution}`."
    ]
    if c.never:
        assert c.limit_intensity is not None  # a bounded supremum: an unbounded intensity always crosses
        out.append(
            f"  No positive s satisfies it: **never compute-bound**. I(s) only approaches its supremum "
            f"{c.limit_exact} = {num(c.limit_intensity)} FLOP/byte, {num(c.ridge / c.limit_intensity)}× below the ridge."
        )
    else:
        out.append(f"  **Compute-bound from s = {c.s_min}** (threshold {c.exact} = {num(c.threshold, 5)}).")
    return out


def sheet_markdown(device: Device, dtype: DType, **shape: Any) -> str:
    """The worked analysis as Markdown; ``shape`` takes :func:`build_sheet`'s keywords."""
    return render_sheet(build_sheet(device, dtype, **shape))


def render_sheet(sh: Sheet) -> str:
    """A built :class:`Sheet` as Markdown."""
    dev, roof, s, d, dt = sh.device, sh.roof, sh.s, sh.d, sh.dtype
    u, f = sh.prefill.unfused, sh.prefill.fused
    a = sh.algebra
    size = dt.itemsize
    sm_stage = next(st for st in u.cost if st.name == "softmax")
    gemm = u.placement.flops - float(sm_stage.flops)
    lines: list[str] = [
        f"# Attention roofline: {dev.name}, {dt.name}, s = {s}, d = {d}",
        "",
        f"Device: {render.device_line(dev, roof)}.",
        f"One head, forward pass, {size:g} bytes per element; softmax counted at "
        f"{num(sh.softmax_flops_per_element)} FLOPs per score; a matrix product (m×k)·(k×n) at 2mnk FLOPs.",
        "",
        "## A. Work",
        "",
        f"Q·Kᵀ and P·V are (s×d)·(d×s) and (s×s)·(s×d) products; softmax touches every one of the s² scores. "
        f"In total F(s, d) = `{e(a['flops'])}`.",
        "",
        f"At s = {s}, d = {d}: matrix products {render.flops(gemm)}, softmax {render.flops(float(sm_stage.flops))}, "
        f"total {render.flops(u.placement.flops)}; softmax is {render.pct(softmax_share(u.cost))} of the FLOPs.",
        "",
        f"The softmax share is `{e(a['softmax_share'])}`, so it matters only for small heads:",
        "",
        table(
            ["d", *map(str, sh.share_by_d)],
            [["softmax share", *(render.pct(v) for v in sh.share_by_d.values())]],
        ),
        "",
        "Dropping it is harmless for a FLOP estimate at d ≥ 64, but not for a time estimate: the exponentials run "
        "on a much slower unit than the matrix cores, and the row max and row sum are reductions that force "
        "synchronisation. A roofline sees none of that.",
        "",
        "## B. Off-chip traffic",
        "",
        f"Unfused, three kernels; the s×s scores are written by one kernel and read by the next "
        f"(elements × {size:g} B):",
        "",
        _stage_table(
            attention(S, D, itemsize=1, softmax_flops_per_element=sh.softmax_flops_per_element), u.cost
        ),
        "",
        f"Bytes, unfused: `{e(a['bytes_unfused'])}`.",
        "",
        "Fused, one kernel; scores and probabilities live on chip, tile by tile:",
        "",
        _stage_table(
            attention(S, D, fused=True, itemsize=1, softmax_flops_per_element=sh.softmax_flops_per_element),
            f.cost,
        ),
        "",
        f"Bytes, fused: `{e(a['bytes_fused'])}`.",
        "",
        f"Unfused over fused traffic: `{e(a['traffic_ratio'])}`; at d = {d} that is "
        f"{num(1 + 512 / d)}× at s = 512 and {num(sh.prefill.traffic_ratio)}× at s = {s}, and it grows without bound in s.",
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
        f"Ridge = P / B = {render.rate(roof.peak_flops_per_s)} / {render.bandwidth(roof.bandwidth_bytes_per_s)} = "
        f"**{num(roof.ridge)} FLOP/byte** ({roof.dtype}).",
        "",
        *_cross_text(sh.crossover["fused"], "Fused"),
        *_cross_text(sh.crossover["unfused"], "Unfused"),
        "",
        _unfused_condition(sh),
        "",
        f"At s = {s}, d = {d}:",
        "",
        _placements([("unfused", u.placement), ("fused", f.placement)]),
        "",
        f"Fusion alone can make this shape up to **{num(sh.prefill.speedup_ceiling)}×** faster. "
        + (
            "The unfused kernels are not badly written; the bandwidth roof forbids them from doing better than "
            f"{render.rate(u.placement.attainable_flops_per_s)} here."
            if u.placement.limiter == "memory"
            else ""
        ),
        "",
        "## E. Memory for the score matrix",
        "",
    ]
    lines += _footprint_lines(sh)
    lines += _variants_lines(sh)
    return "\n".join(lines).rstrip() + "\n"


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
            + f" {sh.device.name}'s ridge is {num(sh.roof.ridge)}: no tuning of the three kernels changes that."
        )
    return (
        general
        + f" {sh.device.name}'s ridge is {num(sh.roof.ridge)}, so here it does cross, at s = {c.s_min}."
    )


def _footprint_lines(sh: Sheet) -> list[str]:
    one, allf, dev = sh.footprint_layer, sh.footprint_model, sh.device
    out = [
        f"Materialised, one head's scores take s²·{sh.dtype.itemsize:g} B = {render.nbytes(one.bytes_per_head)} at s = {sh.s}; "
        f"batch {sh.batch} × {sh.heads} heads: {render.nbytes(one.bytes)}.",
    ]
    if one.capacity_bytes is None:
        out += ["", f"{dev.name} has no memory capacity in the catalog; pass --capacity to compare.", ""]
        return out
    out += [
        "",
        f"- One layer: {render.pct(one.fraction_of_capacity)} of {dev.name}'s {render.nbytes(one.capacity_bytes)} "
        f"({'fits' if one.fits else 'does not fit'}).",
        f"- {sh.layers} layers kept for the backward pass: {render.nbytes(allf.bytes)}, "
        f"{num(allf.fraction_of_capacity)}× the capacity ({'fits' if allf.fits else 'does not fit'}); "
        f"the longest sequence whose scores would fit is s = {allf.s_max_fits}.",
        "",
        "Fused attention keeps none of this: it recomputes the scores in the backward pass instead, which is what "
        "makes long contexts fit at all.",
        "",
    ]
    return out


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
        f"- Unfused: I = `{e(a['intensity_unfused_causal'])}`, still tending to {cu.limit_exact} = "
        f"{num(cu.limit_intensity)} FLOP/byte: half the work over half the dominant traffic.",
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
        _stage_table(
            decode(S, D, itemsize=1, softmax_flops_per_element=sh.softmax_flops_per_element), dec.unfused.cost
        ),
        "",
        f"I = `{e(a['decode_intensity'])}` → {num(sh.decode_limit)} FLOP/byte as s → ∞. At s = {s}: "
        f"{num(dec.unfused.placement.intensity)} unfused, {num(dec.fused.placement.intensity)} fused, "
        f"{num(roof.ridge / dec.unfused.placement.intensity)}× below the ridge.",
        "",
        _placements([("unfused", dec.unfused.placement), ("fused", dec.fused.placement)]),
        "",
        "Fusing decode saves little: the scores are a vector of s values, and the traffic is the cache itself, "
        "which every generated token must read once. Decode speed follows memory bandwidth.",
        "",
        "### F3. Grouped-query attention and batching",
        "",
        "With g query heads per KV head, K and V are read once for g heads' work, so intensity grows about g-fold:",
        "",
        table(
            ["g", "I unfused", "I fused", "fused limit (s → ∞)", "time fused", "verdict"],
            [
                [g, num(pu.intensity), num(pf.intensity), num(lim), duration(pf.time_s), pf.verdict]
                for g, pu, pf, lim in sh.gqa
            ],
            "rrrrrl",
        ),
        "",
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
            f"The projection turns compute-bound from **n = {lc.s_min} tokens** (n ≥ {lc.exact} = {num(lc.threshold, 5)}). "
            "GQA amortises K/V over query heads; batching amortises weights over sequences."
        )
    return out
