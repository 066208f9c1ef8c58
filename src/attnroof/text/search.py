"""A plan search in words: what was tried and why plans were rejected, then the Pareto front of
the plans that fit, best first."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from attnroof.model.search import Row, Search
from attnroof.text import render
from attnroof.text.parallel import plan_line
from attnroof.text.render import table
from attnroof.units import duration


def tried_line(found: Search) -> str:
    """Every plan considered: how many were tried, fit, and are on the front; then those refused
    before they were tried and those tried and rejected, each count with its reason.

    >>> from collections import Counter
    >>> from attnroof.model.search import NOT_FIT
    >>> found = Search(tried=10, rejected=Counter([NOT_FIT] * 6 + ["PP exceeds the layers"] * 2))
    >>> print(tried_line(found))
    12 plans considered, 10 tried, 0 fit, 0 on the Pareto front
    refused before they were tried: 2 PP exceeds the layers
    tried and rejected: 6 does not fit in memory
    """
    refused = found.refused.most_common()
    failed = [(why, n) for why, n in found.rejected.most_common() if why not in found.refused]
    before = sum(n for _, n in refused)
    lines = [
        f"{found.tried + before:,} plans considered, {found.tried:,} tried, {len(found.rows):,} fit, "
        f"{len(found.front):,} on the Pareto front"
    ]
    for label, reasons in (("refused before they were tried", refused), ("tried and rejected", failed)):
        if reasons:
            lines.append(f"{label}: " + "; ".join(f"{n:,} {why}" for why, n in reasons))
    return "\n".join(lines)


MAX_DIGITS = 6


def told_apart(values: Sequence[float], fmt: Callable[[float, int], str] = duration) -> list[str]:
    """``values`` at the fewest significant digits, 3 to :data:`MAX_DIGITS`, that print any two
    different values differently (the front's plans differ by 0.04% where their bounds are
    close: at 3 digits six of them read 7.87 s).

    >>> told_apart([7.8712, 7.8745, 7.99])
    ['7.871 s', '7.875 s', '7.99 s']
    >>> told_apart([1.0, 1.0, 2.0])
    ['1 s', '1 s', '2 s']
    """
    for digits in range(3, MAX_DIGITS + 1):
        shown = [fmt(v, digits) for v in values]
        seen: dict[str, float] = {}
        if all(seen.setdefault(text, v) == v for text, v in zip(shown, values, strict=True)):
            break
    return shown


def _plan(r: Row, train: bool) -> str:
    return plan_line(r.spread) + (f"; recompute {r.option.recompute}" if train else "")


def _row(i: int, r: Row, train: bool, step: str, estimate: str) -> list[str]:
    t = r.totals
    rate = (
        render.pct(t["mfu"])
        if train
        else ("—" if t.get("tokens_per_s") is None else render.num(t["tokens_per_s"]))
    )
    return [str(i), _plan(r, train), step, estimate, rate, render.nbytes(r.memory_bytes), r.limiter]


def search_text(head: list[str], found: Search, top: int, train: bool, decode: bool) -> str:
    rate = "MFU ≤" if train else ("tokens/s ≤" if decode else "—")
    headers = ["#", "plan", "step ≥", "estimate", rate, "memory/device", "limited by"]
    shown = found.front[:top]
    steps = told_apart([r.time_s for r in shown])
    estimates = told_apart([r.estimate_time_s for r in shown])
    rows = [_row(i, r, train, steps[i - 1], estimates[i - 1]) for i, r in enumerate(shown, 1)]
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


def forecast_text(ranked: Any, top: int, train: bool) -> str:
    """The plans by forecast: the front over forecast, memory and devices, best first, the bound
    beside each."""
    from attnroof.text.forecast import error_words

    p, rk = ranked.profile, ranked.ranking
    headers = ["#", "plan", "forecast", "step ≥", "MFU" if train else "—", "memory/device"]
    shown = ranked.front[:top]
    fore = told_apart([f for _, f in shown])
    bound = told_apart([r.time_s for r, _ in shown])
    rows = [
        [
            str(i),
            _plan(r, train),
            fore[i - 1],
            bound[i - 1],
            render.pct(ranked.mfu(r, f)) if train else "—",
            render.nbytes(r.memory_bytes),
        ]
        for i, (r, f) in enumerate(shown, 1)
    ]
    how = (
        "every plan whose bound could beat the best forecast was forecast"
        if rk.settled
        else f"the {rk.looked_at} fastest bounds were forecast; a slower bound might still forecast faster"
    )
    return "\n".join(
        [
            f"By forecast ({p.basis}, {error_words(p, 'train' if train else 'step')}): {how}.",
            table(headers, rows, "rlrrrr"),
        ]
    )
