"""One serving question, end to end: a deployment (:mod:`attnroof.serve.deploy`), a workload
(:mod:`attnroof.serve.workload`), the simulation (:mod:`attnroof.serve.engine`), its figures
(:mod:`attnroof.serve.metrics`), and, where asked, the highest rate that meets the SLOs
(:mod:`attnroof.serve.search`), cost and energy per token.

Length: the job, the steps it runs on (bound or forecast), the run, and its whole JSON, in one place,
so that every figure the answer prints is produced next to the field that names it.

    cost per second   = price per device-hour × devices / 3600
    $ per 1M tokens   = each step's device time shared by the tokens it computed (prompt
                        tokens and generated ones alike), summed per kind, × cost per second
    J per token       = board power × devices × the run's span / tokens (every board at its
                        rated power throughout: an upper bound)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from attnroof.devices import Device
from attnroof.devices.links import Links
from attnroof.errors import InputError
from attnroof.model.spec import ModelConfig
from attnroof.roofline import Roof
from attnroof.serve.deploy import Disaggregated, Pool, pool, simulate, simulate_disaggregated
from attnroof.serve.engine import EngineConfig, Run
from attnroof.serve.memory import require_simulation_memory
from attnroof.serve.metrics import Summary, summarise
from attnroof.serve.search import RateSearch, max_rate
from attnroof.serve.speculative import Speculation, speculate
from attnroof.serve.step import StepOptions
from attnroof.serve.workload import RATE, Workload, from_jsonl, longest_request, synthetic

DEFAULT_INPUT, DEFAULT_OUTPUT = 1024, 128
DEFAULTS = (DEFAULT_INPUT, DEFAULT_OUTPUT)
SECONDS_PER_HOUR = 3600
PER_MILLION = 1e6


@dataclass(frozen=True)
class Traffic:
    """How the requests come: synthetic lengths at a rate (or closed loop), or a file's."""

    num_requests: int = 1000
    rate: float | None = None
    burstiness: float = 1.0
    concurrency: int = 0
    input_len: int | None = None
    output_len: int | None = None
    range_ratio: float = 0.0
    requests_text: str | None = None
    requests_origin: str = ""
    seed: int = 0
    warmup: int = 0

    def at(self, rate: float | None, requests: int | None = None) -> Workload:
        """The requests at ``rate`` (the traffic's own when None); ``requests``: as many (more
        than the traffic's: synthetic ones drawn on with the same seed, a file's cycled)."""
        r = self.rate if rate is None else rate
        if self.requests_text is not None:
            return from_jsonl(
                self.requests_text, self.requests_origin, rate=r, burstiness=self.burstiness,
                concurrency=self.concurrency, seed=self.seed, limit=self.num_requests, cycle_to=requests,
                warmup=self.warmup,
            )  # fmt: skip
        return synthetic(
            requests or self.num_requests, input_tokens=self.input_len or DEFAULT_INPUT, output_tokens=self.output_len or DEFAULT_OUTPUT,
            rate=math.inf if r is None else r, burstiness=self.burstiness, concurrency=self.concurrency,
            range_ratio=self.range_ratio, seed=self.seed,
        )  # fmt: skip


@dataclass(frozen=True)
class Job:
    model: ModelConfig
    device: Device
    roof: Roof
    links: Links
    traffic: Traffic
    engine: EngineConfig = field(default_factory=EngineConfig)
    options: StepOptions = field(default_factory=StepOptions)
    memory_utilization: float = 0.9
    step_overhead_s: float | None = None
    """The engine's own time a step; ``None``: the profile's host time a step (0 without one)."""
    tp: int = 1
    pp: int = 1
    ep: int = 1
    etp: int = 0
    prefill_devices: int | None = None
    decode_devices: int | None = None
    slo: dict[str, float] = field(default_factory=dict)
    percentile: int = 90
    search: bool = False
    price_per_device_hour: float | None = None
    calibration: Any = None
    """A calibration (:mod:`attnroof.calibration`): each step forecast instead of bounded."""
    profile: Any = None
    """An efficiency profile (:mod:`attnroof.profiles`): each step forecast from it — kernels,
    collectives, and the engine's host time a step where ``step_overhead_s`` is not given."""
    impl: str | None = None
    draft: ModelConfig | None = None
    spec_tokens: int = 0
    acceptance: float = 0.0


def _steps(job: Job) -> tuple[Roof, Links, float]:
    """The roof, links and fixed cost a step runs on: the bound's, or a profile's forecast."""
    from attnroof.profiles.kernels import ForecastRoof

    p = job.profile if job.calibration is None else None
    if p is None:
        return job.roof, job.links, job.step_overhead_s or 0.0
    from attnroof.model.forecast import forecast_links

    overhead = p.host.step("vllm") if job.step_overhead_s is None else job.step_overhead_s
    return ForecastRoof.over(job.roof, p, step=True), forecast_links(job.links, p), overhead


def step_overhead(job: Job) -> float:
    """The engine's fixed time a step the simulation charges (s)."""
    return _steps(job)[2]


def basis(job: Job) -> str:
    """What the steps are: ``forecast`` (a profile's or a calibration's) or ``bound``."""
    return "forecast" if job.calibration is not None or job.profile is not None else "bound"


@dataclass(frozen=True)
class Result:
    job: Job
    pools: dict[str, Pool]
    devices: int
    summary: Summary
    search: RateSearch | None
    cost: dict[str, float] | None
    energy: dict[str, Any]
    disaggregated: dict[str, Any] | None = None
    speculation: Speculation | None = None
    at_max_rate: dict[str, Any] | None = None
    """Cost and energy of the run at the max rate (the search's), where one was found."""

    def to_json(self) -> dict[str, Any]:
        j = self.job
        return {
            "model": j.model.name,
            "device": j.device.name,
            "dtype": j.roof.dtype,
            **j.roof.cache_json(),
            "devices": self.devices,
            "deployment": {name: p.to_json() for name, p in self.pools.items()},
            "disaggregated": self.disaggregated,
            "engine": {"step_overhead_s": step_overhead(j), "gpu_memory_utilization": j.memory_utilization},
            "traffic": {
                "num_requests": j.traffic.num_requests,
                "rate_per_s": j.traffic.rate,
                "burstiness": j.traffic.burstiness,
                "concurrency": j.traffic.concurrency or None,
                "input_len": j.traffic.input_len or (None if j.traffic.requests_text else DEFAULT_INPUT),
                "output_len": j.traffic.output_len or (None if j.traffic.requests_text else DEFAULT_OUTPUT),
                "range_ratio": j.traffic.range_ratio,
                "seed": j.traffic.seed,
                "warmup": j.traffic.warmup,
            },
            "summary": self._summary_json(self.summary),
            "max_rate": None if self.search is None else self._search_json(self.search),
            "cost": self.cost,
            "energy": self.energy,
            "speculative": None
            if self.speculation is None
            else {"draft": self.job.draft.name if self.job.draft else None, **self.speculation.to_json()},
            "steps": basis(j),
            "calibration": None
            if j.calibration is None
            else {"device": j.calibration.catalog_device or j.calibration.device, "impl": j.impl},
            "profile": None if j.profile is None or j.calibration is not None else j.profile.to_json(),
            "estimate": "simulated latencies: the engine's policy over steps at their "
            + {
                "bound": "roofline bound",
                "forecast": "calibrated forecast"
                if j.calibration is not None
                else "forecast (efficiency profile)",
            }[basis(j)],
        }

    def _kv(self) -> bool:
        return any(p.kv_bytes_per_token for p in self.pools.values())

    def _summary_json(self, s: Summary) -> dict[str, Any]:
        """A summary's JSON; without a KV cache (no attention layer) its block figures are none."""
        d = {**s.to_json(), "basis": basis(self.job)}
        if not self._kv():
            d.update(kv_blocks=None, kv_peak_share=None, kv_mean_share=None)
            d["timeline"] = {k: v for k, v in d["timeline"].items() if k != "kv_share"}
        return d

    def _search_json(self, search: RateSearch) -> dict[str, Any]:
        d = {**search.to_json(), **(self.at_max_rate or {})}
        if search.best is not None:
            d["at_max_rate"] = self._summary_json(search.best.summary)
        return d


def _pools(job: Job, longest: int) -> tuple[dict[str, Pool], Disaggregated | None]:
    """The deployment's engines, their tables as long as the ``longest`` request needs."""
    from attnroof.model.parallel import Plan

    roof, links, overhead = _steps(job)
    kw = dict(
        options=job.options, memory_utilization=job.memory_utilization, links=links,
        overhead_s=overhead, calibration=job.calibration, impl=job.impl, longest=longest,
    )  # fmt: skip
    cap = job.device.capacity_bytes
    if cap is None:
        raise InputError(f"{job.device.name} has no memory capacity: give --capacity", param="capacity")
    if job.prefill_devices is None:
        plan = Plan(tp=job.tp, pp=job.pp, ep=job.ep, etp=job.etp) if job.tp * job.pp * job.ep > 1 else None
        return {"engine": pool(job.model, roof, cap, job.engine, plan=plan, **kw)}, None
    assert job.decode_devices is not None
    pre_plan = Plan(tp=job.prefill_devices) if job.prefill_devices > 1 else None
    dec_plan = Plan(tp=job.decode_devices) if job.decode_devices > 1 else None
    pools = {}
    for name, flag, n, plan in (
        ("prefill", "--prefill-devices", job.prefill_devices, pre_plan),
        ("decode", "--decode-devices", job.decode_devices, dec_plan),
    ):
        try:
            pools[name] = pool(job.model, roof, cap, job.engine, plan=plan, **kw)
        except InputError as e:  # the pool is TP over its devices: say which flag set it
            raise InputError(f"{flag} {n} (TP {n}): {e}") from None
    pre, dec = pools["prefill"], pools["decode"]
    link = _transfer_link(job)
    from attnroof.model.memory import kv_cache_bytes_per_sequence, kv_cache_bytes_per_token

    itemsize = job.options.prec.kv_itemsize
    whole = kv_cache_bytes_per_token(job.model, itemsize)
    state = kv_cache_bytes_per_sequence(job.model, 1, itemsize) - whole  # the cache of one token, less its KV
    return {"prefill": pre, "decode": dec}, Disaggregated(pre, dec, link, whole, state)


def _transfer_link(job: Job) -> Any:
    """The link a prompt's cache crosses: scale-up when both pools fit one domain, else scale-out."""
    links = job.links
    total = (job.prefill_devices or 0) + (job.decode_devices or 0)
    domain = links.scaleup_domain
    up, out = links.scaleup, links.scaleout
    if up is not None and (domain is None or total <= domain):
        return up
    if out is not None:
        return out
    raise InputError(f"{job.device.name} has no link to send KV caches between pools", param="link_bandwidth")


def _simulate(job: Job, pools: dict[str, Pool], dis: Disaggregated | None, w: Workload) -> Run:
    return simulate_disaggregated(dis, w) if dis is not None else simulate(pools["engine"], w)


def run(job: Job) -> Result:
    t = job.traffic
    file = None if t.requests_text is None else t.at(None)  # read first: its lengths size the engine
    pools, dis = _pools(job, longest_request(t, file, DEFAULTS))
    require_simulation_memory(pools, file, t, DEFAULTS, runs=1, search=job.search)
    w = file if file is not None else t.at(None)
    devices = sum(p.devices for p in pools.values())
    r = _simulate(job, pools, dis, w)
    nominal = w.rate if math.isfinite(w.rate) else None
    summary = summarise(r, warmup=job.traffic.warmup, slo=job.slo, rate=nominal)
    search = None
    if job.search:

        def at(rate: float, requests: int) -> tuple[Summary, Run]:
            wr = job.traffic.at(rate, requests)
            run_r = _simulate(job, pools, dis, wr)
            return summarise(run_r, warmup=job.traffic.warmup, slo=job.slo, rate=rate), run_r

        search = max_rate(at, requests=w.n, slo=job.slo, percentile=job.percentile, warmup=job.traffic.warmup)
    cost = _cost(job, r, summary, devices) if job.price_per_device_hour else None
    energy = _energy(job, summary, devices)
    at_max = None
    if search is not None and search.best is not None:
        b = search.best
        assert b.run is not None  # the best rate keeps its run
        at_max = {
            "cost": _cost(job, b.run, b.summary, devices) if job.price_per_device_hour else None,
            "energy": _energy(job, b.summary, devices),
        }
    extra = None
    if dis is not None:
        extra = {
            "link": dis.link.kind,
            "link_bandwidth_bytes_per_s": dis.link.bandwidth_bytes_per_s,
            "kv_bytes_per_token": dis.kv_bytes_per_token,
            "state_bytes_per_request": dis.state_bytes_per_sequence,
            "transfer_s_mean": r.extra.get("transfer_s_mean"),
        }
    spec = _speculation(job, pools, summary, w) if job.draft is not None else None
    return Result(job, pools, devices, summary, search, cost, energy, extra, spec, at_max)


def _speculation(job: Job, pools: dict[str, Pool], s: Summary, w: Workload) -> Speculation:
    """The closed form at the run's mean decode batch and mean context: the target's pool (the
    decode pool when disaggregated), the draft on the same devices."""
    from attnroof.serve.step import StepCost

    assert job.draft is not None
    target = pools.get("decode", pools.get("engine"))
    assert target is not None
    roof, links, overhead = _steps(job)
    draft = StepCost(
        job.draft, roof, max_tokens=target.cost.max_tokens, max_seqs=target.cost.max_seqs,
        max_context=target.cost.max_context, options=job.options, plan=target.cost.plan, links=links,
        overhead_s=overhead,
    )  # fmt: skip
    batch = max(1, round(s.mean_running))
    context = round(float(w.input_tokens.mean() + w.output_tokens.mean() / 2))
    return speculate(
        target.cost, draft, k=job.spec_tokens, alpha=job.acceptance, batch=batch, context=context
    )


def _cost(job: Job, r: Run, s: Summary, devices: int) -> dict[str, float]:
    """Dollars per million prompt and generated tokens: each step's time shared by its tokens."""
    import numpy as np

    assert job.price_per_device_hour is not None
    per_s = job.price_per_device_hour * devices / SECONDS_PER_HOUR
    share = np.divide(
        r.step_prefill_tokens, r.step_tokens, out=np.zeros(len(r.step_s)), where=r.step_tokens > 0
    )
    prefill_s = float((r.step_s * share).sum())
    decode_s = float(r.step_s.sum()) - prefill_s
    prompt_tokens = float(r.step_prefill_tokens.sum())
    made = float(r.output_tokens.sum())
    span = s.duration_s
    return {
        "price_per_device_hour": job.price_per_device_hour,
        "usd_per_s": per_s,
        "usd_per_million_input_tokens": per_s * prefill_s / prompt_tokens * PER_MILLION
        if prompt_tokens
        else math.nan,
        "usd_per_million_output_tokens": per_s * decode_s / made * PER_MILLION if made else math.nan,
        "usd_per_million_tokens_at_throughput": per_s
        / (s.input_throughput + s.output_throughput)
        * PER_MILLION
        if span > 0
        else math.nan,
        "busy_share": float(r.step_s.sum()) / max(float(r.finish_s.max() - r.arrival_s.min()), 1e-300),
    }


def _energy(job: Job, s: Summary, devices: int) -> dict[str, Any]:
    from attnroof.devices.energy import energy_per_token

    power = job.device.board_power_w
    if power is None:
        return {
            "board_power_w": None,
            "note": f"{job.device.name} has no board power in the catalog: give --board-power",
        }
    made = s.output_throughput * s.duration_s
    both = (s.input_throughput + s.output_throughput) * s.duration_s
    return {
        "board_power_w": power,
        "joules_per_output_token": energy_per_token(job.device, s.duration_s, made, devices),
        "joules_per_token": energy_per_token(job.device, s.duration_s, both, devices),
        "note": "every board at its rated power for the whole run: an upper bound",
    }


CHART_RATES = 8


def sweep_rates(job: Job, result: Result) -> list[tuple[float, Summary]]:
    """Summaries over :data:`CHART_RATES` rates from 15% to 120% of the all-at-once capacity,
    and the rates the search tried (rerun: the search keeps only their percentiles)."""
    t = job.traffic
    file = None if t.requests_text is None else t.at(None)
    pools, dis = _pools(job, longest_request(t, file, DEFAULTS))
    require_simulation_memory(
        pools, file, t, DEFAULTS, runs=2, search=job.search
    )  # the result's, each rate's

    def at(rate: float) -> Summary:
        return summarise(
            _simulate(job, pools, dis, job.traffic.at(rate)), warmup=job.traffic.warmup, slo=job.slo
        )

    capacity = at(math.inf).request_throughput
    rates = {capacity * (0.15 + 1.05 * i / (CHART_RATES - 1)) for i in range(CHART_RATES)}
    rates = {r for r in rates if r >= RATE.low}  # slower than a simulation takes: not drawn
    if result.search is not None:
        rates |= {t.rate for t in result.search.tried if t.rate <= 2 * capacity}
    return [(r, at(r)) for r in sorted(rates)]
