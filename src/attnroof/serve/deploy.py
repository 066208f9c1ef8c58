"""A deployment: a model on a device (one, or a tensor-parallel group), the engine's settings,
and what its memory leaves for the KV cache; or two pools, prefill and decode, with each
request's KV cache sent between them (disaggregated serving, as DistServe and vLLM's
disaggregated prefill run it).

    KV blocks = (gpu_memory_utilization × capacity − weights − activations of a step of
                 max_num_batched_tokens tokens) / (block_size × KV bytes per token)

per device of the group (weights, activations and cache all cut by tensor parallelism).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from attnroof.errors import InputError
from attnroof.model.layers import PREFILL, Precision
from attnroof.model.memory import (
    activation_bytes,
    kv_cache_bytes_per_sequence,
    kv_cache_bytes_per_token,
    memory,
)
from attnroof.model.spec import ModelConfig
from attnroof.ops.collectives import send_recv
from attnroof.roofline import Roof
from attnroof.serve.engine import Engine, EngineConfig, Run, kv_blocks
from attnroof.serve.step import PipelineStepCost, StepCost, StepOptions
from attnroof.serve.workload import Workload

if TYPE_CHECKING:
    from attnroof.devices.links import Link, Links
    from attnroof.model.parallel import Plan


@dataclass(frozen=True)
class Pool:
    """One engine: its plan's step costs and its scheduler (with its KV blocks)."""

    cost: StepCost
    config: EngineConfig
    devices: int
    weights_bytes: float
    activation_bytes: float
    kv_bytes_per_token: float
    virtual: int = 1
    """Engines running at once: a pipeline's stages (vLLM's virtual engines)."""
    state_bytes: float = 0.0
    """A hybrid's recurrent state, held for ``max_num_seqs`` sequences (a device's)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "devices": self.devices,
            "tp": 1 if self.cost.plan is None else self.cost.plan.tp,
            "pp": 1 if self.cost.plan is None else self.cost.plan.pp,
            "ep": 1 if self.cost.plan is None else self.cost.plan.ep,
            "kv_blocks": self.config.blocks if self.kv_bytes_per_token else None,
            "block_size": self.config.block_size,
            "kv_tokens": self.config.blocks * self.config.block_size if self.kv_bytes_per_token else None,
            "kv_cache": self.kv_bytes_per_token > 0,
            "weights_bytes_per_device": self.weights_bytes,
            "activation_bytes_per_device": self.activation_bytes,
            "recurrent_state_bytes_per_device": self.state_bytes,
            "kv_bytes_per_token_per_device": self.kv_bytes_per_token,
            "max_num_seqs": self.config.max_num_seqs,
            "max_num_batched_tokens": self.config.max_num_batched_tokens,
        }


def pool(
    model: ModelConfig,
    roof: Roof,
    capacity_bytes: float,
    config: EngineConfig,
    *,
    options: StepOptions,
    memory_utilization: float,
    plan: Plan | None = None,
    links: Links | None = None,
    overhead_s: float = 0.0,
    calibration: Any = None,
    impl: str | None = None,
    longest: int | None = None,
) -> Pool:
    """An engine of ``model`` on one device, or on ``plan``'s tensor-parallel group; its steps
    forecast by ``calibration`` where one is given, else at their roofline bound. A hybrid's
    recurrent state (a fixed size a sequence) is reserved for ``max_num_seqs`` sequences beside
    the activations; the KV blocks take what is left."""
    from attnroof.model.parallel import stages as pipeline_stages

    if plan is not None:
        from attnroof.model.parallel import check_plan

        check_plan(model, plan, 1)
    prec: Precision = options.prec
    max_len = config.max_model_len or model.max_positions or 131072
    pp = 1 if plan is None else plan.pp
    ranges = pipeline_stages(model.layers, pp)
    # the decode tables run to the longest request's tokens (a model of 10M positions needs no
    # 10M-entry table for 2k-token requests); the engine refuses a request past the model's length
    table = max_len if longest is None else max(1, min(max_len, longest))
    max_num_blocks = config.max_num_seqs * -(-table // config.block_size)  # every sequence at its longest
    # each stage's device: its layers' weights, activations and cache; the tightest sets the blocks
    worst = None
    for first, stop in ranges:
        shard = None if plan is None or plan.single else plan.shard(first, stop)
        weights = memory(model, PREFILL, 1, 1, prec, None, shard=shard).weights_bytes
        act = activation_bytes(
            model, PREFILL, 1, config.max_num_batched_tokens, prec, fused=options.fused, shard=shard
        )
        per_token = kv_cache_bytes_per_token(model, prec.kv_itemsize, shard)
        # a recurrent mixer's fixed state a sequence (the cache of one token, less its KV),
        # held for every sequence the engine may run
        state = config.max_num_seqs * (
            kv_cache_bytes_per_sequence(model, 1, prec.kv_itemsize, shard) - per_token
        )
        free = memory_utilization * capacity_bytes - weights - act - state
        if per_token == 0:  # no attention layer: nothing grows with the tokens, so no block binds
            blocks = max_num_blocks if free > 0 else 0
        else:
            blocks = kv_blocks(free, per_token, config.block_size) if free > 0 else 0
        if worst is None or blocks < worst[0]:
            worst = (blocks, weights, act, per_token, state)
    assert worst is not None
    blocks, weights, act, per_token, state = worst
    if blocks < 1:
        held = f"activations ({act / 1e9:.2f} GB)"
        if state:
            held += f" and the recurrent state of {config.max_num_seqs} sequences ({state / 1e9:.2f} GB)"
        raise InputError(
            f"{model.name}: weights ({weights / 1e9:.1f} GB), {held} leave no room "
            f"for {'a KV cache' if per_token else 'them'} in {memory_utilization:g} of {capacity_bytes / 1e9:.0f} GB"
            + ("" if plan is None or plan.single else f" per device of the plan ({plan.devices} devices)"),
            param="gpu_memory_utilization",
        )
    kw: dict[str, Any] = dict(
        max_tokens=config.max_num_batched_tokens, max_seqs=config.max_num_seqs, max_context=table,
        options=options, plan=plan, links=links,
    )  # fmt: skip

    def stage(layers: tuple[int, int], overhead: float) -> StepCost:
        if calibration is not None:
            from attnroof.serve.forecast import ForecastStepCost

            return ForecastStepCost(
                model, roof, calibration=calibration, impl=impl, layers=layers, overhead_s=overhead, **kw
            )
        return StepCost(model, roof, layers=layers, overhead_s=overhead, **kw)

    costs = [stage(r, overhead_s if i == 0 else 0.0) for i, r in enumerate(ranges)]
    cost: Any = costs[0] if pp == 1 else PipelineStepCost(costs)
    devices = 1 if plan is None else plan.devices
    return Pool(
        cost,
        replace(config, blocks=blocks, max_model_len=max_len),
        devices,
        weights,
        act,
        per_token,
        pp,
        state,
    )


def simulate(p: Pool, w: Workload) -> Run:
    """The pool's engine over ``w``. A pipeline of p stages runs p batches at once, as vLLM's
    virtual engines do: p engines, each with 1/p of the sequences and of the KV blocks, the
    requests dealt to them in turn, each step passing through every stage."""
    if p.virtual == 1:
        return Engine(p.cost, p.config).run(w)
    v = p.virtual
    cfg = replace(p.config, blocks=p.config.blocks // v, max_num_seqs=max(1, p.config.max_num_seqs // v))
    used = [i for i in range(min(v, w.n))]  # fewer requests than engines: the rest stay idle
    runs = [Engine(p.cost, cfg).run(_every(w, i, v)) for i in used]
    return merge_runs(runs, [_indices(w.n, i, v) for i in used], w.n)


def _indices(n: int, i: int, v: int) -> Any:
    import numpy as np

    return np.arange(i, n, v)


def _every(w: Workload, i: int, v: int) -> Workload:
    idx = _indices(w.n, i, v)
    conc = 0 if not w.concurrency else max(1, -(-w.concurrency // v))
    return Workload(w.arrival_s[idx], w.input_tokens[idx], w.output_tokens[idx], conc, w.rate, w.burstiness)


def merge_runs(runs: list[Run], where: list[Any], n: int) -> Run:
    """Runs of parts of one workload (``where``: each part's request indices), as one run."""
    import numpy as np

    def per_request(name: str) -> Any:
        first = getattr(runs[0], name)
        out = np.empty(n, dtype=first.dtype)
        for r, idx in zip(runs, where, strict=True):
            out[idx] = getattr(r, name)
        return out

    cols = ("step_end_s", "step_s", "step_tokens", "step_prefill_tokens", "step_running", "step_waiting",
            "step_blocks_used", "step_preempted")  # fmt: skip
    return Run(
        **{k: per_request(k) for k in ("arrival_s", "first_token_s", "finish_s", "input_tokens", "output_tokens",
                                        "preemptions")},
        itl_s=np.concatenate([r.itl_s for r in runs]),
        **{c: np.concatenate([getattr(r, c) for r in runs]) for c in cols},
        blocks=runs[0].blocks, steps=sum(r.steps for r in runs), preempted=sum(r.preempted for r in runs),
    )  # fmt: skip


@dataclass(frozen=True)
class Disaggregated:
    """Prefill on one pool, decode on another; each request's KV cache over ``link``."""

    prefill: Pool
    decode: Pool
    link: Link
    kv_bytes_per_token: float
    """The whole model's, as it crosses: every layer's K and V of each prompt token."""
    state_bytes_per_sequence: float = 0.0
    """The whole model's recurrent state of one sequence (a hybrid's or a state-space model's
    mixers), which crosses with the cache: a fixed size, however long the prompt."""

    def transfer_s(self, tokens: Any) -> Any:
        """A prompt's cache over the link: one send of its bytes, α₀ + α + bytes/β."""
        return send_recv(tokens * self.kv_bytes_per_token + self.state_bytes_per_sequence).on(self.link)


def simulate_disaggregated(d: Disaggregated, w: Workload) -> Run:
    """The prefill pool runs each prompt and samples its first token; the cache crosses the
    link, one transfer after another; the decode pool, which holds the prompt's cache on
    arrival, generates the rest. TTFT is the prefill pool's; the rest of the latencies end on
    the decode pool."""
    import numpy as np

    first = Engine(d.prefill.cost, d.prefill.config).run(
        replace(w, output_tokens=np.ones(w.n, dtype=np.int64))
    )
    ready = first.finish_s
    # one link: transfers in the order their prefills end, each waiting for the one before
    order = np.argsort(ready, kind="stable")
    sent = np.empty(w.n)
    t = 0.0
    for i in order:
        t = max(t, ready[i]) + float(d.transfer_s(int(w.input_tokens[i])))
        sent[i] = t
    rest = np.asarray(w.output_tokens) - 1
    go = rest > 0
    finish = ready.copy()
    itl = [np.zeros(0)]
    if go.any():
        # the decode pool: each request arrives with prompt + first token cached, to generate the rest
        dw = Workload(sent[go], np.asarray(w.input_tokens)[go] + 1, rest[go], 0, w.rate, w.burstiness)
        second = Engine(d.decode.cost, d.decode.config).run(dw, precomputed=np.asarray(w.input_tokens)[go])
        finish[go] = second.finish_s
        # the first gap of each request: from its first token to its second, across the link
        itl = [second.itl_s, second.first_token_s - ready[go]]
        log = second
    else:
        log = first
    return Run(
        arrival_s=first.arrival_s, first_token_s=first.first_token_s, finish_s=finish,
        input_tokens=np.asarray(w.input_tokens), output_tokens=np.asarray(w.output_tokens),
        preemptions=first.preemptions, itl_s=np.concatenate(itl), step_end_s=log.step_end_s, step_s=log.step_s,
        step_tokens=log.step_tokens, step_prefill_tokens=log.step_prefill_tokens, step_running=log.step_running, step_waiting=log.step_waiting,
        step_blocks_used=log.step_blocks_used, step_preempted=log.step_preempted, blocks=log.blocks, steps=first.steps + log.steps * go.any(),
        preempted=first.preempted + (log.preempted if go.any() else 0),
        extra={"prefill_steps": first.steps, "transfer_s_mean": float((sent - ready).mean())},
    )  # fmt: skip
