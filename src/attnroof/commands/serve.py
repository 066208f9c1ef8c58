"""serve-sim: a deployment under traffic, simulated — latency percentiles, throughput, goodput,
the highest rate that meets an SLO, cost and energy per token (:mod:`attnroof.serve`)."""

from __future__ import annotations

import argparse
from typing import Any

from attnroof.commands._calibration import add_calibration_args, load
from attnroof.commands._common import (
    Command,
    add_device_args,
    add_force_arg,
    add_json_arg,
    emit_json,
    path_arg,
    positive_int,
    require,
    roof_from_args,
)
from attnroof.commands._parallel import add_link_args, links_of
from attnroof.commands._serve_flags import (
    acceptance_arg,
    at_most,
    burstiness_arg,
    duration_arg,
    nonnegative_duration,
    price_arg,
    rate_arg,
    ratio_arg,
    seed_arg,
    share_arg,
)
from attnroof.errors import InputError


def _setup(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model", required=True, metavar="NAME|config.json|org/name", help="built-in model or a config.json"
    )
    load = p.add_argument_group("traffic")
    load.add_argument(
        "--rate",
        type=rate_arg,
        metavar="R",
        help="requests a second, 0.001 to 1e9, or inf (default inf: all at once)",
    )
    load.add_argument(
        "--burstiness", type=burstiness_arg, default=1.0, metavar="B",
        help="gamma shape of the gaps between arrivals, 0.01 to 1e4: 1 Poisson (default), <1 burstier, >1 steadier",
    )  # fmt: skip
    load.add_argument(
        "--concurrency",
        type=at_most(1_000_000, "clients"),
        metavar="N",
        help="closed loop: N clients, each waits for its answer",
    )
    load.add_argument("--input-len", type=positive_int, metavar="TOKENS", help="prompt tokens (default 1024)")
    load.add_argument("--output-len", type=positive_int, metavar="TOKENS", help="answer tokens (default 128)")
    load.add_argument(
        "--range-ratio", type=ratio_arg, default=0.0, metavar="X",
        help="lengths uniform within ±X of --input-len/--output-len (default 0: fixed)",
    )  # fmt: skip
    load.add_argument(
        "--requests-file", type=path_arg, metavar="FILE.jsonl",
        help="requests, one JSON object a line: input_tokens, output_tokens and (optionally) arrival_s",
    )  # fmt: skip
    load.add_argument(
        "--num-requests",
        type=positive_int,
        default=1000,
        metavar="N",
        help="requests (default 1000; as many as the memory holds, said before a run that would not fit)",
    )
    load.add_argument(
        "--warmup", type=int, default=0, metavar="N", help="first N requests run but not counted (default 0)"
    )
    load.add_argument(
        "--seed", type=seed_arg, default=0, help="seed for arrivals and lengths, 0 to 2^64-1 (default 0)"
    )
    eng = p.add_argument_group("engine (vLLM's scheduler)")
    eng.add_argument(
        "--max-num-seqs",
        type=at_most(65_536, "sequences"),
        default=256,
        metavar="N",
        help="sequences a step (default 256)",
    )
    eng.add_argument(
        "--max-num-batched-tokens",
        type=at_most(1 << 20, "tokens a step"),
        default=8192,
        metavar="N",
        help="tokens a step (default 8192)",
    )
    eng.add_argument(
        "--block-size",
        type=at_most(4096, "tokens a block"),
        default=16,
        metavar="N",
        help="tokens a KV block (default 16)",
    )
    eng.add_argument(
        "--gpu-memory-utilization", type=share_arg, default=0.9, metavar="X",
        help="share of device memory for weights, activations and KV cache (default 0.9)",
    )  # fmt: skip
    eng.add_argument(
        "--max-model-len",
        type=at_most(1 << 24, "tokens a request"),
        metavar="N",
        help="longest request (default: the model's)",
    )
    eng.add_argument(
        "--step-overhead", type=nonnegative_duration, default=None, metavar="T",
        help="the engine's own time a step (scheduling, launch, sampling), e.g. 2ms (default: the "
        "profile's host time a step; 0 with --bound)",
    )  # fmt: skip
    plan = p.add_argument_group("deployment")
    plan.add_argument(
        "--tp", type=positive_int, default=1, metavar="T", help="tensor-parallel degree (default 1)"
    )
    plan.add_argument(
        "--pp", type=positive_int, default=1, metavar="P",
        help="pipeline stages: P batches in flight, as vLLM's virtual engines (default 1)",
    )  # fmt: skip
    plan.add_argument(
        "--ep",
        type=positive_int,
        default=1,
        metavar="E",
        help="expert-parallel degree, within the TP group (default 1)",
    )
    plan.add_argument(
        "--etp",
        type=positive_int,
        metavar="N",
        help="expert-tensor-parallel degree (default --tp; with --ep, usually 1)",
    )
    plan.add_argument(
        "--prefill-devices",
        type=positive_int,
        metavar="N",
        help="disaggregated: a prefill pool of N devices (TP N)",
    )
    plan.add_argument(
        "--decode-devices",
        type=positive_int,
        metavar="N",
        help="disaggregated: a decode pool of N devices (TP N)",
    )
    plan.add_argument(
        "--weight-dtype", metavar="DTYPE", help="dtype the weights are stored in (default: --dtype)"
    )
    plan.add_argument("--kv-dtype", metavar="DTYPE", help="dtype of the KV cache (default: --dtype)")
    plan.add_argument("--unfused", action="store_true", help="unfused attention (S and P go through memory)")
    add_link_args(plan)
    spec = p.add_argument_group("speculative decoding (a closed form, Leviathan et al. 2023)")
    spec.add_argument(
        "--draft-model",
        type=path_arg,
        metavar="NAME|config.json",
        help="the draft model (with --spec-tokens, --acceptance)",
    )
    spec.add_argument(
        "--spec-tokens", type=positive_int, metavar="K", help="tokens the draft proposes a round"
    )
    spec.add_argument(
        "--acceptance", type=acceptance_arg, metavar="A", help="each draft token's acceptance rate, 0 to 1"
    )
    slo = p.add_argument_group("service level")
    slo.add_argument("--slo-ttft", type=duration_arg, metavar="T", help="time to first token limit, e.g. 2s")
    slo.add_argument(
        "--slo-tpot", type=duration_arg, metavar="T", help="time per output token limit, e.g. 50ms"
    )
    slo.add_argument(
        "--percentile",
        type=int,
        choices=(50, 90, 99),
        default=90,
        help="the percentile an SLO holds at (default 90)",
    )
    slo.add_argument(
        "--max-rate", action="store_true", help="search the highest rate whose percentile meets the SLOs"
    )
    slo.add_argument(
        "--price-per-device-hour", type=price_arg, metavar="USD", help="cost per million tokens at this price"
    )
    p.add_argument(
        "--chart", type=path_arg, metavar="FILE.png",
        help="latency against rate (p50 and the percentile, TTFT and TPOT) over the rates --max-rate tried, "
        "or 8 rates up to the all-at-once capacity (needs attnroof[plot])",
    )  # fmt: skip
    add_force_arg(p)
    add_device_args(p)
    add_calibration_args(p)
    from attnroof.commands._forecast import add_profile_args

    add_profile_args(p)
    p.add_argument(
        "--bound", action="store_true",
        help="simulate on the steps' roofline bounds (no forecast): the best any engine can do",
    )  # fmt: skip
    add_json_arg(p)


def _run(args: argparse.Namespace) -> int:
    from attnroof.dtypes import dtype
    from attnroof.errors import read_text
    from attnroof.formats import weight_format
    from attnroof.model import get_model
    from attnroof.model.layers import Precision
    from attnroof.serve.engine import EngineConfig
    from attnroof.serve.run import Job, Traffic, run
    from attnroof.serve.step import StepOptions

    _check(args)
    model = get_model(args.model)
    dev, dt, roof = roof_from_args(args)
    wdt = weight_format(args.weight_dtype) if args.weight_dtype else dt
    kdt = dtype(args.kv_dtype) if args.kv_dtype else dt
    text = read_text(args.requests_file, "requests file", InputError) if args.requests_file else None
    traffic = Traffic(
        num_requests=args.num_requests, rate=args.rate, burstiness=args.burstiness, concurrency=args.concurrency or 0,
        input_len=args.input_len, output_len=args.output_len, range_ratio=args.range_ratio, requests_text=text,
        requests_origin=args.requests_file or "", seed=args.seed, warmup=args.warmup,
    )  # fmt: skip
    slo = {k: v for k, v in (("ttft", args.slo_ttft), ("tpot", args.slo_tpot)) if v is not None}
    job = Job(
        model, dev, roof, links_of(args, dev), traffic,
        engine=EngineConfig(
            max_num_seqs=args.max_num_seqs, max_num_batched_tokens=args.max_num_batched_tokens,
            block_size=args.block_size, max_model_len=args.max_model_len or 0,
        ),
        options=StepOptions(
            Precision(dt.itemsize, wdt.itemsize, kdt.itemsize, stored=not args.weight_dtype), fused=not args.unfused
        ),
        memory_utilization=args.gpu_memory_utilization, step_overhead_s=args.step_overhead, tp=args.tp,
        pp=args.pp, ep=args.ep, etp=args.etp or 0,
        prefill_devices=args.prefill_devices, decode_devices=args.decode_devices, slo=slo,
        percentile=args.percentile, search=args.max_rate, price_per_device_hour=args.price_per_device_hour,
        calibration=load(args, dev, dt), impl=args.impl, profile=_profile(args, dev, dt),
        draft=get_model(args.draft_model) if args.draft_model else None, spec_tokens=args.spec_tokens or 0,
        acceptance=args.acceptance or 0.0,
    )  # fmt: skip
    result = run(job)
    if args.chart:
        _chart(args.chart, job, result)
    if args.json:
        emit_json(result.to_json())
    else:
        from attnroof.text.serve import render

        print(render(result))
    return 0


def _chart(path: str, job: Any, result: Any) -> None:
    from attnroof.plot import use_agg
    from attnroof.serve.run import sweep_rates

    use_agg()
    from attnroof.plot.serving import write_latency_chart

    points = sweep_rates(job, result)
    search = result.search
    title = f"{job.model.name} on {result.devices} × {job.device.name}: latency against arrival rate"
    write_latency_chart(
        path, points, title=title, percentile=job.percentile, slo=job.slo,
        max_rate=None if search is None else search.rate,
    )  # fmt: skip


def _check(args: argparse.Namespace) -> None:
    require(args.warmup >= 0, f"--warmup {args.warmup}: a count of requests, 0 or more")
    require(
        args.warmup < args.num_requests,
        f"--warmup {args.warmup} leaves none of --num-requests {args.num_requests}",
    )
    require(
        not (args.rate is not None and args.concurrency),
        "--rate and --concurrency: give one (open or closed loop)",
    )
    require(
        not (args.max_rate and args.concurrency),
        "--max-rate searches an arrival rate: not with --concurrency",
    )
    require(not (args.max_rate and args.rate is not None), "--max-rate searches the rate: leave out --rate")
    require(not (args.chart and args.concurrency), "--chart sweeps the arrival rate: not with --concurrency")
    if args.chart:  # before any simulation: a path that cannot be written, or holds measurements
        from pathlib import Path

        from attnroof import outfile

        known = (".png", ".svg", ".pdf")
        require(
            Path(args.chart).suffix.lower() in known,
            f"--chart {args.chart!r}: unknown image format; use {', '.join(known)}",
        )
        outfile.target(args.chart)
        outfile.check_overwrite(
            args.chart, force=args.force, hint=" (pass --force to overwrite it, or choose another --chart)"
        )
    pools = (args.prefill_devices, args.decode_devices)
    require(
        (pools[0] is None) == (pools[1] is None),
        "--prefill-devices and --decode-devices: give both (or neither)",
    )
    require(
        pools[0] is None or args.tp == 1,
        "--tp with a disaggregated deployment: each pool is TP over its devices",
    )
    if args.requests_file:
        require(
            args.input_len is None and args.output_len is None and args.range_ratio == 0,
            "--requests-file gives each request's lengths: leave out --input-len, --output-len and --range-ratio",
        )
    spec = (args.draft_model, args.spec_tokens, args.acceptance)
    require(
        all(x is None for x in spec) or all(x is not None for x in spec),
        "speculative decoding needs all three: --draft-model, --spec-tokens and --acceptance",
    )
    if args.max_rate and not (args.slo_ttft or args.slo_tpot):
        raise InputError("--max-rate needs an SLO: --slo-ttft and/or --slo-tpot")


COMMANDS = (Command("serve-sim", _setup, _run),)


def _profile(args: argparse.Namespace, dev: Any, dt: Any) -> Any:
    """The efficiency profile the steps are forecast from; ``None`` with ``--bound``."""
    if args.bound:
        require(args.profile in (None, "none"), "--bound simulates on the bounds: not with --profile")
        return None
    from attnroof.commands._forecast import profile_of

    return profile_of(args, dev, dt)
