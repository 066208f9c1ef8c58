"""A plan search in words: what was tried and why plans were rejected, then the Pareto front of
the plans that fit, best first."""

from __future__ import annotations

from attnroof.model.search import Row, Search
from attnroof.text import render
from attnroof.text.parallel import plan_line
from attnroof.text.render import table
from attnroof.units import duration


def tried_line(found: Search) -> str:
    """How many plans were tried and fit, and how many were rejected for what."""
    rejected = "; ".join(f"{n:,} {why}" for why, n in found.rejected.most_common())
    return (
        f"{found.tried:,} plans tried, {len(found.rows):,} fit, {len(found.front):,} on the Pareto front"
        + (f"; rejected: {rejected}" if rejected else "")
    )


def _row(i: int, r: Row, train: bool) -> list[str]:
    t = r.totals
    rate = (
        render.pct(t["mfu"])
        if train
        else ("—" if t.get("tokens_per_s") is None else render.num(t["tokens_per_s"]))
    )
    plan = plan_line(r.spread) + (f"; recompute {r.option.recompute}" if train else "")
    return [
        str(i),
        plan,
        duration(r.time_s),
        duration(r.estimate_time_s),
        rate,
        render.nbytes(r.memory_bytes),
        r.limiter,
    ]


def search_text(head: list[str], found: Search, top: int, train: bool, decode: bool) -> str:
    rate = "MFU ≤" if train else ("tokens/s ≤" if decode else "—")
    headers = ["#", "plan", "step ≥", "estimate", rate, "memory/device", "limited by"]
    rows = [_row(i, r, train) for i, r in enumerate(found.front[:top], 1)]
    lines = [*head, "", tried_line(found), ""]
    if not rows:
        lines.append("no plan fits")
        return "\n".join(lines)
    more = len(found.front) - len(rows)
    lines += [
        "Pareto front over step time, memory per device and devices used, fastest first (step ≥: the "
        "bound, every collective hidden behind kernels; estimate: each pass's collectives hidden "
        "behind that pass's kernels):",
        table(headers, rows, "rlrrrrl"),
    ]
    if more > 0:
        lines.append(f"[{more:,} more on the front: --top {len(found.front)} or --json]")
    return "\n".join(lines)
