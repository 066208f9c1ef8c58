"""serve-sim's text: the deployment, the latency table, throughput and goodput, the KV cache,
the rate search, cost and energy."""

from __future__ import annotations

import math
from typing import Any

from attnroof.escaping import escaped
from attnroof.text.render import table
from attnroof.units import duration, si


def _ms(x: float) -> str:
    return "—" if x is None or math.isnan(x) else duration(x)


def render(result: Any) -> str:
    j, s = result.job, result.summary
    out: list[str] = []
    pools = result.pools
    where = ", ".join(
        f"{name}: {p.devices} × {escaped(j.device.name)}" + _plan(p.cost.plan) for name, p in pools.items()
    )
    t = j.traffic
    if t.requests_text is not None:
        load = f"{s.requests + t.warmup} requests from {escaped(t.requests_origin)}"
    else:
        load = f"{t.num_requests} requests of {t.input_len or 1024} → {t.output_len or 128} tokens"
        if t.range_ratio:
            load += f" (±{t.range_ratio:.0%})"
    if t.concurrency:
        load += f", closed loop of {t.concurrency} clients"
    else:
        rate = t.rate
        load += ", all at once" if rate is None or math.isinf(rate) else f" at {rate:g}/s"
        if t.burstiness != 1 and rate is not None and math.isfinite(rate):
            load += f" (burstiness {t.burstiness:g})"
    out.append(f"# {escaped(j.model.name)} serving {load}")
    out.append(
        f"{where}; {j.roof.dtype}; seed {t.seed}" + (f", first {t.warmup} not counted" if t.warmup else "")
    )
    for name, p in pools.items():
        c = p.config
        cache = (
            f"KV cache {c.blocks:,} blocks × {c.block_size} = {c.blocks * c.block_size:,} tokens"
            if p.kv_bytes_per_token
            else "no KV cache, no attention layer"
        )
        out.append(
            f"{name}: {cache} "
            f"(weights {si(p.weights_bytes, 'B')}, activations {si(p.activation_bytes, 'B')}"
            + (
                f", recurrent state {si(p.state_bytes, 'B')} for {c.max_num_seqs} sequences"
                if p.state_bytes
                else ""
            )
            + " a device); "
            f"max {c.max_num_seqs} sequences, {c.max_num_batched_tokens:,} tokens a step"
        )
    if result.disaggregated:
        d = result.disaggregated
        out.append(
            f"KV cache sent over {d['link']} at {si(d['link_bandwidth_bytes_per_s'], 'B/s')}: "
            f"{si(d['kv_bytes_per_token'], 'B')} a prompt token"
            + (
                f" and {si(d['state_bytes_per_request'], 'B')} of recurrent state"
                if d["state_bytes_per_request"]
                else ""
            )
            + f", {_ms(d['transfer_s_mean'])} a request on average"
        )
    out.append("")
    rows = [
        [name.upper(), _ms(s.latency[name]["mean"]), *(_ms(s.latency[name][f"p{q}"]) for q in (50, 90, 99))]
        for name in ("ttft", "tpot", "itl", "e2e")
    ]
    out.append(table(["latency", "mean", "p50", "p90", "p99"], rows, align="lrrrr"))
    out.append("")
    out.append(
        f"throughput: {s.request_throughput:.3g} requests/s, {s.output_throughput:,.0f} output tokens/s, "
        f"{s.input_throughput:,.0f} input tokens/s over {_ms(s.duration_s)}"
    )
    if s.goodput is not None:
        limits = ", ".join(f"{k.upper()} ≤ {_ms(v)}" for k, v in s.slo.items())
        out.append(f"goodput: {s.goodput:.3g} requests/s meet {limits} ({s.slo_met:.1%} of requests)")
    kv = any(p.kv_bytes_per_token for p in pools.values())
    out.append(
        (f"KV cache: peak {s.kv_peak_share:.0%}, mean {s.kv_mean_share:.0%} of blocks; " if kv else "")
        + f"{s.mean_running:.1f} sequences a step on average; {s.preemptions} preemptions; {s.steps:,} steps"
    )
    out.append(
        f"Little's law: {s.mean_in_system:.3g} requests in the system on average, arrival rate × mean E2E = "
        f"{s.little_rate_x_latency:.3g}"
    )
    if result.search is not None:
        out.append("")
        out.append(_search(result.search))
    at_max = result.at_max_rate
    # with a max rate found, the cost and energy lines are the max rate's run
    cost, energy = (at_max["cost"], at_max["energy"]) if at_max else (result.cost, result.energy)
    basis = f" at the max rate ({result.search.rate:.3g} requests/s)" if at_max else ""
    if cost:
        out.append("")
        out.append(
            f"cost{basis} at ${cost['price_per_device_hour']:g} a device-hour: "
            f"${cost['usd_per_million_input_tokens']:.3g} per million input tokens, "
            f"${cost['usd_per_million_output_tokens']:.3g} per million output tokens "
            f"(each step's time shared by the tokens it computed; busy {cost['busy_share']:.0%} of the run)"
        )
    sp = result.speculation
    if sp is not None:
        out.append("")
        out.append(
            f"speculative decoding with {escaped(j.draft.name)} proposing {sp.k} at acceptance {sp.alpha:g}: "
            f"{sp.tokens_per_step:.3g} tokens a target step (1 − α^(k+1))/(1 − α); at batch {sp.batch}, context "
            f"{sp.context:,}: verify {_ms(sp.verify_step_s)} + {sp.k} × draft {_ms(sp.draft_step_s)} a round, "
            f"{_ms(sp.time_per_token_s)} a token against {_ms(sp.plain_step_s)} plain ({sp.speedup:.2f}×)"
        )
    e = energy
    if e.get("board_power_w"):
        out.append(
            f"energy{basis} at {e['board_power_w']:g} W a board: ≤ {e['joules_per_output_token']:.3g} J per output token, "
            f"≤ {e['joules_per_token']:.3g} J per token (every board at its rated power throughout)"
        )
    out.append("")
    if j.calibration is not None:
        fitted = j.calibration.catalog_device or j.calibration.device
        out.append(
            f"Simulated: each step forecast by the calibration fitted on {fitted} (GEMMs and passes by their fits, "
            "attention by the "
            + (f"{j.impl} fit" if j.impl else "fastest calibrated implementation")
            + ", collectives at their link-roof time), scheduled as vLLM's V1 engine does: an estimate."
        )
    elif j.profile is not None:
        from attnroof.serve.run import step_overhead
        from attnroof.text.forecast import error_words

        host = step_overhead(j)
        out.append(
            f"Simulated: each step forecast from {j.profile.basis} ({error_words(j.profile, 'serve')}): kernels at "
            f"the fractions of their roofs real ones reach, collectives at the links' measured share, "
            f"{host * 1e3:.3g} ms of host time a step; scheduled as vLLM's V1 engine does. --bound gives the "
            "latencies no engine can beat."
        )
    else:
        out.append(
            "Simulated: each step at its roofline bound (one kernel's time is max(F/P, bytes/B)), scheduled as "
            "vLLM's V1 engine does; real kernels are slower, so these latencies are lower bounds on the policy."
        )
    return "\n".join(out)


def _search(r: Any) -> str:
    limits = " and ".join(f"p{r.percentile} {k.upper()} ≤ {_ms(v)}" for k, v in r.slo.items())
    sims = f"{len(r.tried)} simulation{'s' if len(r.tried) != 1 else ''} of {r.requests:,} requests"
    if r.rate is None:
        last = r.tried[-1]
        why = "misses " + limits if not last.slo_met else "falls behind its arrivals"
        return f"max rate: none — even {last.rate:.3g} requests/s {why} (capacity {r.capacity:.3g}/s; {sims})"
    b = r.best
    got = ", ".join(
        f"p{r.percentile} {k.upper()} {_ms(b.summary.latency[k][f'p{r.percentile}'])}" for k in r.slo
    )
    st = b.steady
    return (
        f"max rate: {r.rate:.3g} requests/s meets {limits} in steady state ({got}; offered {b.rate:.3g}/s: "
        f"over the second half of the arrivals {st.offered:.3g}/s came and {st.achieved:.3g}/s were taken in, "
        f"TTFT trend {st.wait_slope * 1e3:+.2g} ms/s); capacity {r.capacity:.3g} requests/s with every request "
        f"at once; {sims}"
    )


def _plan(plan: Any) -> str:
    if plan is None:
        return ""
    parts = [f"{k} {v}" for k, v in (("TP", plan.tp), ("PP", plan.pp), ("EP", plan.ep)) if v > 1]
    return f" ({' × '.join(parts)})" if parts else ""
