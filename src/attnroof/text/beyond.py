"""Part H of the sheet, attention beyond softmax (issue 23), in Markdown: for each variant its
intensity as s grows, its limit, its crossover or "never", and its decode bytes against the
context; then each hybrid's cache against its all-attention twin's."""

from __future__ import annotations

from collections.abc import Sequence

from attnroof.beyond import CacheComparison, VariantAnalysis
from attnroof.devices import Device
from attnroof.roofline import Roof
from attnroof.text.render import device_line, flops, nbytes, num, stage_rows, table


def _cross(a: VariantAnalysis, roof: Roof) -> str:
    if a.crossover_s is not None:
        return f"s ≥ {a.crossover_s:,}"
    top = "∞" if a.limit_intensity is None else num(a.limit_intensity)
    return f"never (supremum {top} < ridge {num(roof.ridge)})"


def beyond_markdown(
    dev: Device, roof: Roof, variants: Sequence[VariantAnalysis], caches: Sequence[CacheComparison]
) -> str:
    out = ["## Part H — Attention beyond softmax", "", device_line(dev, roof), ""]
    if len(variants) == 1:  # one variant: its stage tables first, as the seed's part B
        out += _stages(variants[0])
    sizes = [s for s, _ in variants[0].sweep]
    rows = []
    for a in variants:
        limit = "∞" if a.limit_intensity is None else f"{num(a.limit_intensity)} ({a.limit_exact})"
        rows.append([a.name, *(num(i) for _, i in a.sweep), limit, _cross(a, roof)])
    out += ["### H1. Prefill intensity (FLOP/byte) as s grows, its limit and the crossover", ""]
    out += [table(["variant", *(f"s = {s:,}" for s in sizes), "limit s → ∞", "reaches the ridge"], rows), ""]
    contexts = [c for c, _, _ in variants[0].decode]
    rows = [
        [a.name, *(nbytes(b) for _, b, _ in a.decode), a.decode_growth, num(a.decode[-1][2])]
        for a in variants
    ]  # fmt: skip
    out += ["### H2. Decode: bytes one token reads and writes in one layer, against the context", ""]
    out += [table(["variant", *(f"{c:,}" for c in contexts), "", "FLOP/byte at the last"], rows), ""]
    out += ["The layers:", ""] + [f"- {a.name}: {a.layer}" for a in variants] + [""]
    if caches:
        f = caches[0].factor
        rows = []
        for c in caches:
            when = f"{c.context:,} tokens" if c.context is not None else "never"
            limit = "—" if c.limit_ratio is None else f"{c.limit_ratio:.3g}×"
            rows.append(
                [
                    c.model,
                    nbytes(c.hybrid_bytes_per_token),
                    nbytes(c.state_bytes),
                    nbytes(c.twin_bytes_per_token),
                    when,
                    limit,
                ]
            )
        out += [
            f"### H3. Cache per sequence: each hybrid against its twin with softmax attention in every mixing layer (factor {f:g})",
            "",
        ]
        out += [
            table(
                [
                    "model",
                    "KV per token",
                    "fixed state",
                    "twin's KV per token",
                    f"twin ≥ {f:g}× from",
                    "ratio as s → ∞",
                ],
                rows,
            ),
            "",
        ]
    return "\n".join(out)


def _stages(a: VariantAnalysis) -> list[str]:
    out: list[str] = []
    for what, cost in (
        ("prefill of s", a.prefill_cost),
        ("one decode token at a context of s", a.decode_cost),
    ):
        if cost is None:
            continue
        rows = [*stage_rows(cost), ["total", flops(cost.flops), "", "", nbytes(cost.bytes)]]
        out += [f"### H0. {a.name}: {what} = {a.s:,}, {num(cost.flops / cost.bytes)} FLOP/byte", ""]
        out += [table(["stage", "FLOPs", "reads", "writes", "bytes"], rows, "lrllr"), ""]
    return out
