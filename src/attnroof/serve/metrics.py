"""What a serving benchmark reports, from a simulated run: latencies at percentiles, throughput,
goodput under SLOs, the KV cache over time — with the names and definitions of vLLM's
``benchmarks/benchmark_serving.py``:

    TTFT   first token − arrival
    TPOT   (end − first token) / (output tokens − 1), per request (requests of one token: none)
    ITL    each gap between two tokens of a request
    E2E    end − arrival
    request throughput = requests / (last end − first arrival); token throughputs alike
    goodput = requests meeting every SLO given / the same span

Percentiles by ``numpy.percentile``'s default (linear), as the benchmark computes them.
Requests before ``warmup`` (in arrival order) are run but not counted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from attnroof.serve.engine import Run

PERCENTILES = (50, 90, 99)
METRICS = ("ttft", "tpot", "itl", "e2e")


@dataclass(frozen=True)
class Summary:
    """One run's figures (SI units: seconds, requests/s, tokens/s)."""

    requests: int
    duration_s: float
    request_throughput: float
    input_throughput: float
    output_throughput: float
    latency: dict[str, dict[str, float]]
    """metric → {"mean", "p50", "p90", "p99"}, seconds."""
    goodput: float | None
    slo: dict[str, float]
    slo_met: float | None
    """The share of requests meeting every SLO."""
    mean_in_system: float
    """Time-average requests in the system (waiting or running) over the span."""
    little_rate_x_latency: float
    """Arrival rate (requests over the run's span) × mean end-to-end latency, every request:
    Little's law says it equals ``mean_in_system``, which the engine's queues give."""
    offered_rate: float | None
    preemptions: int
    timeline: dict[str, list[float]]
    """Over the run in :data:`TIMELINE_POINTS` equal intervals: the KV blocks in use (share, the
    interval's largest), sequences running and waiting (time-averaged) and preemptions."""
    steps: int
    kv_blocks: int
    kv_peak_share: float
    kv_mean_share: float
    mean_running: float

    def to_json(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "duration_s": self.duration_s,
            "request_throughput_per_s": self.request_throughput,
            "input_tokens_per_s": self.input_throughput,
            "output_tokens_per_s": self.output_throughput,
            "latency_s": self.latency,
            "goodput_per_s": self.goodput,
            "slo_s": self.slo,
            "slo_met_share": self.slo_met,
            "mean_in_system": self.mean_in_system,
            "little_rate_x_latency": self.little_rate_x_latency,
            "offered_rate_per_s": self.offered_rate,
            "preemptions": self.preemptions,
            "timeline": self.timeline,
            "steps": self.steps,
            "kv_blocks": self.kv_blocks,
            "kv_peak_share": self.kv_peak_share,
            "kv_mean_share": self.kv_mean_share,
            "mean_running": self.mean_running,
        }


def per_request(run: Run) -> dict[str, Any]:
    """TTFT, TPOT and E2E of every request (NaN TPOT for a one-token answer)."""
    import numpy as np

    ttft = run.first_token_s - run.arrival_s
    e2e = run.finish_s - run.arrival_s
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(
            run.output_tokens > 1, (run.finish_s - run.first_token_s) / (run.output_tokens - 1), np.nan
        )
    return {"ttft": ttft, "tpot": tpot, "e2e": e2e}


def summarise(
    run: Run, *, warmup: int = 0, slo: dict[str, float] | None = None, rate: float | None = None
) -> Summary:
    """The benchmark's figures over the requests after the first ``warmup`` arrivals; ``rate``:
    the offered arrival rate, for Little's law (default: requests over the run's span)."""
    import numpy as np

    slo = dict(slo or {})
    order = np.argsort(run.arrival_s, kind="stable")
    kept = np.zeros(len(order), dtype=bool)
    kept[order[warmup:]] = True
    r = per_request(run)
    start = float(run.arrival_s[kept].min())
    end = float(run.finish_s[kept].max())
    span = end - start
    latency: dict[str, dict[str, float]] = {}
    for name in ("ttft", "tpot", "e2e"):
        values = r[name][kept]
        values = values[~np.isnan(values)]
        latency[name] = _stats(values)
    latency["itl"] = _stats(run.itl_s)
    met = np.ones(len(order), dtype=bool)
    for name, limit in slo.items():
        met &= np.nan_to_num(r[name], nan=0.0) <= limit
    good = int((met & kept).sum()) if slo else None
    # Little's law, L = λ·W: L from the engine's queues step by step (running + waiting, each
    # step weighted by its length, over the whole run), λ·W from the requests' own times
    widths = run.step_s
    whole = float(run.finish_s.max() - run.arrival_s.min())
    in_system = float(((run.step_running + run.step_waiting) * widths).sum() / whole) if whole > 0 else 0.0
    measured = len(order) / whole if whole > 0 else 0.0
    used = run.step_blocks_used / run.blocks
    busy = float(widths.sum()) or 1.0
    return Summary(
        requests=int(kept.sum()),
        duration_s=span,
        request_throughput=int(kept.sum()) / span if span > 0 else 0.0,
        input_throughput=float(run.input_tokens[kept].sum()) / span if span > 0 else 0.0,
        output_throughput=float(run.output_tokens[kept].sum()) / span if span > 0 else 0.0,
        latency=latency,
        goodput=None if good is None else good / span,
        slo=slo,
        slo_met=None if good is None else good / int(kept.sum()),
        mean_in_system=in_system,
        little_rate_x_latency=measured * float(r["e2e"].mean()),
        offered_rate=rate,
        preemptions=run.preempted,
        timeline=timeline(run),
        steps=run.steps,
        kv_blocks=run.blocks,
        kv_peak_share=float(used.max()) if len(used) else 0.0,
        kv_mean_share=float((used * widths).sum() / busy) if len(used) else 0.0,
        mean_running=float((run.step_running * widths).sum() / busy) if len(used) else 0.0,
    )


TIMELINE_POINTS = 100


def timeline(run: Run, points: int = TIMELINE_POINTS) -> dict[str, list[float]]:
    """The step log in ``points`` equal intervals of the run (fewer for a run of fewer steps)."""
    import numpy as np

    ends = run.step_end_s
    if not len(ends):
        return {k: [] for k in ("end_s", "kv_share", "running", "waiting", "preempted")}
    order = np.argsort(ends, kind="stable")  # merged runs (virtual engines) interleave in time
    ends, dt = ends[order], run.step_s[order]
    edges = np.linspace(float(ends.min()) - float(dt[0]), float(ends.max()), min(points, len(ends)) + 1)
    which = np.clip(np.searchsorted(edges, ends, side="left") - 1, 0, len(edges) - 2)
    n = len(edges) - 1
    width = np.bincount(which, weights=dt, minlength=n)
    safe = np.where(width > 0, width, 1.0)

    def average(col: Any) -> list[float]:
        return (np.bincount(which, weights=col[order] * dt, minlength=n) / safe).tolist()

    peak = np.zeros(n)
    np.maximum.at(peak, which, run.step_blocks_used[order] / run.blocks)
    return {
        "end_s": edges[1:].tolist(),
        "kv_share": peak.tolist(),
        "running": average(run.step_running),
        "waiting": average(run.step_waiting),
        "preempted": np.bincount(which, weights=run.step_preempted[order], minlength=n).tolist(),
    }


def _stats(values: Any) -> dict[str, float]:
    import numpy as np

    if not len(values):
        return {"mean": float("nan"), **{f"p{p}": float("nan") for p in PERCENTILES}}
    pct = np.percentile(values, PERCENTILES)
    return {
        "mean": float(values.mean()),
        **{f"p{p}": float(v) for p, v in zip(PERCENTILES, pct, strict=True)},
    }
