"""Forecasts held against the published end-to-end table (data/validation/, issue 34).

    python benchmarks/validate.py                                   # the profile attnroof picks per device
    python benchmarks/validate.py --profile tests/data/profiles/toy-h100-bf16.toml
    python benchmarks/validate.py --markdown --json validation.json --chart docs/accuracy.png
    python benchmarks/validate.py --rows narayanan2021-001,lmdeploy_a100_v020   # ids or sources

Each resolvable row is run the way a user runs attnroof, in this process through
``attnroof.commands._run.run`` with ``--json``: a training row as ``attnroof model --phase train``
with the row's plan; a serving row as ``attnroof serve-sim`` with the row's deployment and traffic
(run twice: with the profile's forecast steps, and with ``--bound``); a phase measured alone (the
other disaggregated) as ``attnroof model --phase prefill|decode``. ``--profile`` is passed through.
The measured figure is converted to what attnroof prints (a training row's TFLOP/s or tokens/s to a
step time, with the row's own FLOP convention) and each figure's error is

    e = forecast / measured − 1        (the bound's: bound / measured − 1)

printed per level (training step, training MFU, serving throughput, serving latency) and per source
as the median and p90 of |e| and the signed median (the bias: for a time, + is slower than measured;
for a throughput, + is faster). A field a row leaves null takes attnroof's default, and each row's
JSON says which (``assumed``). The rows are for validation only: nothing here fits or tunes anything
(data/validation/README.md). serve-sim runs at most ``--max-requests`` requests a row (default 1000),
said in each capped row's ``assumed``, so the whole table runs in about a minute on a CPU.

Length: one script for the whole table (the row mappings, the conversions, the tables, the chart), as
the other benchmarks are; it is not part of the package.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from attnroof.calibration.fit import percentile  # noqa: E402
from attnroof.commands._run import run  # noqa: E402
from attnroof.devices import get_device  # noqa: E402


def _table_module() -> Any:
    spec = importlib.util.spec_from_file_location(
        "validation_table", ROOT / "scripts" / "validation_table.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


TABLE = _table_module()
MAX_REQUESTS = 1000
"""serve-sim requests a row at most (a row's own number where smaller)."""

LEVELS = ("training step", "training MFU", "serving throughput", "serving latency")

SCALEOUT: dict[str, tuple[float, str]] = {
    "narayanan2021": (25e9, "8 x 200 Gb/s HDR InfiniBand per 8-GPU node (sources.toml): 25 GB/s per GPU"),
    "ibm_fsdp_2024.A100 SXM 80GB": (6.25e9, "400 Gb/s between nodes (sources.toml), read as per 8-GPU node: 6.25 GB/s per GPU"),
    "ibm_fsdp_2024.H100 SXM": (12.5e9, "800 Gb/s between nodes (sources.toml), read as per 8-GPU node: 12.5 GB/s per GPU"),
    "llama3_2024": (50e9, "RoCE 400 Gb/s between servers (sources.toml), read as per GPU: 50 GB/s"),
}  # fmt: skip
"""The scale-out link of each source's cluster, one way per GPU, as the source states it (the
catalog's A100 SXM 80GB has none); ``source.device`` where a source ran two clusters."""

STATED_IN_NOTES: dict[str, tuple[int, str]] = {
    "sglang_large_ep_2025-003": (4, "4 sequences per device: the notes' '16,384 tokens per device, input length 4,096'"),
}  # fmt: skip
"""A phase-alone row's sequences per device where only its notes give them."""


class RowFailed(Exception):
    """A row that cannot be run: its one-line reason."""


# ---------------------------------------------------------------- running attnroof


def attnroof_json(words: list[str]) -> dict[str, Any]:
    """``attnroof WORDS --json`` in this process (the CLI's own path): its JSON, or
    :class:`RowFailed` with attnroof's one-line error."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = run([*words, "--json"])
        except SystemExit as e:  # a usage error, after its one line
            status = e.code if isinstance(e.code, int) else 2
    if status != 0:
        lines = [line for line in err.getvalue().splitlines() if line.strip()]
        raise RowFailed(lines[-1] if lines else f"attnroof exited {status}")
    return json.loads(out.getvalue())


@dataclass
class Figure:
    """One measured figure of a row beside attnroof's forecast and bound of it."""

    level: str
    metric: str
    measured: float
    forecast: float | None
    bound: float | None
    rate: bool = False
    """A throughput (more is faster), not a time."""

    @property
    def error(self) -> float | None:
        return relative_error(self.forecast, self.measured)

    @property
    def bound_error(self) -> float | None:
        return relative_error(self.bound, self.measured)


def relative_error(value: float | None, measured: float) -> float | None:
    """``value / measured − 1`` (None without a value).

    >>> round(relative_error(9000.0, 7817.03), 4)   # 9000 / 7817.03 − 1
    0.1513
    """
    return None if value is None else value / measured - 1


@dataclass
class Result:
    """A row run: the commands (with the forecast's ``--profile``; serve-sim's bound ran the same
    words with ``--bound``), what was assumed, how the measured figure was converted, its figures."""

    id: str
    source: str
    level: str
    commands: list[list[str]]
    assumed: list[str]
    conversion: str
    figures: list[Figure]
    basis: str | None = None

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        for f, j in zip(self.figures, out["figures"], strict=True):
            j["error"], j["bound_error"] = f.error, f.bound_error
        return out


@dataclass
class Failure:
    id: str
    source: str
    level: str
    reason: str


# ---------------------------------------------------------------- training rows


def narayanan_eq3(cfg: dict[str, Any], batch: int, seq: int) -> float:
    """Narayanan et al. (2021) eq. (3), FLOPs of one iteration with activation recomputation:
    F = 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h))."""
    layers, h, vocab = cfg["layers"], cfg["hidden_size"], cfg["vocab_size"]
    return 96 * batch * seq * layers * h**2 * (1 + seq / (6 * h) + vocab / (16 * layers * h))


def six_n(cfg: dict[str, Any], batch: int, seq: int) -> float:
    """FLOPs of one step as PaLM's appendix B counts them (Chowdhery et al. 2022; the same formula
    as nanoGPT's MFU, FlashAttention-2's 6·s·N + 12·l·h·s² per sequence and the ROCm issue's
    6N + 12·L·H·d·S per token): per token 6·N + 12·L·H·d·S, attention not halved for the causal
    mask, N every parameter of the config."""
    width = cfg["heads"] * cfg["head_dim"]
    return batch * seq * (6 * cfg["params"] + 12 * cfg["layers"] * width * seq)


CONVENTION: dict[str, Callable[[dict[str, Any], int, int], float]] = {
    "narayanan2021": narayanan_eq3,
    "llama3_2024": six_n,
    "ibm_fsdp_2024": six_n,
    "dao2023_fa2": six_n,
    "rocm_te_issue79": six_n,
}
"""Each training source's FLOP convention (the rows' ``flop_convention``)."""


def _zero(words: str | None) -> tuple[list[str], str | None]:
    """The row's ZeRO or FSDP policy as attnroof's flags, and what was read into it."""
    if words is None:
        return ["--zero", "0"], "zero: null, attnroof's default --zero 0"
    if words.startswith("zero-"):
        return ["--zero", words[5]], None
    if words.startswith("fsdp (optimizer states and gradients sharded; weights not resharded"):
        return (
            ["--zero", "3", "--weight-gather", "microbatch"],
            "FSDP that keeps the weights after the forward: --zero 3 --weight-gather microbatch (reshard_after_forward=False)",
        )
    if words == "fsdp":
        return [
            "--zero",
            "3",
        ], "FSDP full sharding: --zero 3 (reshard_after_forward=True, attnroof's default)"
    raise RowFailed(f"ZeRO policy {words!r} not mapped")


def _batch(row: dict[str, Any], rows: list[dict[str, Any]], assumed: list[str]) -> int:
    context = row["context"]
    if row.get("global_batch_sequences"):
        return int(row["global_batch_sequences"])
    if row.get("global_batch_tokens"):
        return int(row["global_batch_tokens"]) // context
    same = [
        r
        for r in rows
        if r["source"] == row["source"] and r["model"] == row["model"] and r.get("global_batch_sequences")
    ]
    if not same:
        raise RowFailed("global batch not stated, and no row of the same source and model states one")
    tokens = same[0]["global_batch_sequences"] * same[0]["context"]
    assumed.append(
        f"global batch not stated: {tokens:,} tokens a step as {same[0]['id']} states "
        f"({same[0]['global_batch_sequences']} x {same[0]['context']}), {tokens // context} sequences"
    )
    return tokens // context


def training_words(row: dict[str, Any], rows: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """The ``attnroof model --phase train`` words for a row, and what had to be assumed."""
    plan, assumed = row["plan"], []
    if row.get("context") is None:
        raise RowFailed("context not stated: attnroof needs --context, and the step's FLOPs depend on it")
    context = int(row["context"])
    batch = _batch(row, rows, assumed)
    tp, pp, dp, cp, ep = (int(plan[k] or 1) for k in ("tp", "pp", "dp", "cp", "ep"))
    if tp * pp * dp * cp != row["devices"]:
        raise RowFailed(
            f"plan tp {tp} x pp {pp} x dp {dp} x cp {cp} is not the row's {row['devices']} devices"
        )
    words = ["model", "--model", row.get("model_config") or row["model"], "--device", row["device"]]
    words += ["--phase", "train", "--batch", str(batch), "--context", str(context)]
    words += ["--tp", str(tp), "--pp", str(pp), "--dp", str(dp), "--cp", str(cp)]
    if ep > 1:
        words += ["--ep", str(ep)]
    mbs = plan.get("micro_batch_size")
    if mbs is None and pp > 1:
        mbs = 1
        assumed.append(
            "micro-batch size not stated: 1 sequence (attnroof's --microbatches 1 would pass the replica's whole batch as one)"
        )
    elif mbs is None:
        assumed.append("micro-batch size not stated: attnroof's default --microbatches 1")
    if mbs is not None:
        per_replica = batch // dp
        if per_replica % mbs:
            raise RowFailed(f"batch {batch} over dp {dp} is not a whole number of micro-batches of {mbs}")
        words += ["--microbatches", str(per_replica // mbs)]
    recompute = plan.get("recompute")
    if recompute is None:
        assumed.append("recompute not stated: attnroof's default --recompute none")
    else:
        words += ["--recompute", recompute]
        if recompute == "selective" and row["source"] == "ibm_fsdp_2024":
            assumed.append(
                "IBM's 'selective' checkpoints every n-th block; attnroof's recomputes the attention core"
            )
    zero, said = _zero(plan.get("zero"))
    words += zero
    assumed += [said] if said else []
    schedule, virtual = plan.get("schedule"), plan.get("virtual_stages")
    if schedule and schedule.startswith("interleaved") and virtual:
        words += ["--schedule", "interleaved", "--virtual-stages", str(virtual)]
    elif schedule and schedule.startswith("interleaved") and pp > 1:
        words.append(UNSTATED_CHUNKS)
        assumed.append(
            "interleaved, chunks per device not stated: bounded by the chunk count whose bound is "
            "least, forecast with the fewest chunks that split the layers"
        )
    elif pp > 1:
        words.append(UNSTATED_SCHEDULE)
        assumed.append(
            f"schedule {schedule or 'not stated'}: bounded by the schedule attnroof knows whose bound "
            "is least (1f1b, zb-h1, interleaved at each chunk count that splits the layers), "
            "forecast with attnroof's default, 1f1b"
        )
    if plan.get("sequence_parallel"):
        words.append("--sp")
    elif tp > 1:
        assumed.append("sequence parallelism not stated: off (attnroof's default)")
    if row.get("attention_kernel") == "none":
        words.append("--unfused")
        assumed.append(
            "attention kernel 'none' (the source's standard attention): --unfused, S and P through memory"
        )
    if row.get("dtype"):
        words += ["--dtype", row["dtype"]]
    else:
        assumed.append("dtype not stated (mixed precision): attnroof's default bf16")
    link = SCALEOUT.get(f"{row['source']}.{row['device']}") or SCALEOUT.get(row["source"])
    if link:
        words += ["--scaleout-bandwidth", f"{link[0]:g}"]
        assumed.append(f"scale-out {link[1]}")
    return words, assumed


def measured_step(row: dict[str, Any], cfg: dict[str, Any], batch: int) -> tuple[float, str]:
    """The row's measured figure as seconds a step, and how it was converted."""
    gpus, context = row["devices"], row["context"]
    if row.get("measured_step_s"):
        return float(row["measured_step_s"]), "step time as printed"
    if row.get("measured_tokens_per_s"):
        rate = float(row["measured_tokens_per_s"])
        per = gpus if row.get("measured_tokens_per_s_scope") == "per_gpu" else 1
        tokens = batch * context
        return tokens / (rate * per), f"step = {tokens:,} tokens / ({per} x {rate:g} tokens/s)"
    if row.get("measured_tflops_per_gpu"):
        flops = CONVENTION[row["source"]](cfg, batch, context)
        rate = float(row["measured_tflops_per_gpu"]) * 1e12
        name = CONVENTION[row["source"]].__name__
        return flops / (
            gpus * rate
        ), f"step = F / ({gpus} GPUs x {rate / 1e12:g} TFLOP/s), F = {name} = {flops:.4g} FLOPs"
    raise RowFailed("no measured step time, tokens/s or TFLOP/s per GPU")


UNSTATED_SCHEDULE, UNSTATED_CHUNKS = "<schedule>", "<interleaved>"
"""Where a row's words hold one of these, its pipeline schedule is not stated, or it is interleaved
with its chunks a device not stated: :func:`least_schedule` tries each."""
SCHEDULES = (["--schedule", "1f1b"], ["--schedule", "zb-h1"])
MAX_VIRTUAL_STAGES = 16


def least_schedule(words: list[str]) -> tuple[list[str], dict[str, Any], dict[str, Any]]:
    """``words`` run with each pipeline schedule attnroof has (1F1B, ZB-H1, interleaved at every
    chunk count up to :data:`MAX_VIRTUAL_STAGES` that splits the layers): the words and the JSON of
    the one whose bound is least, and the JSON of the forecast's plan. A row that does not say which
    schedule it ran is bounded by every schedule it may have run, and forecast with the schedule a
    user who does not say gets: attnroof's default, 1F1B, or for a row that says "interleaved" the
    fewest chunks that split its layers. The least bound's plan would make the forecast the fastest
    schedule's, which a run that names none is not known to have used."""
    marks = [w for w in words if w in (UNSTATED_SCHEDULE, UNSTATED_CHUNKS)]
    if not marks:
        out = attnroof_json(words)
        return words, out, out
    i = words.index(marks[0])
    interleaved = [
        ["--schedule", "interleaved", "--virtual-stages", str(v)] for v in range(2, MAX_VIRTUAL_STAGES + 1)
    ]
    tries = interleaved if marks[0] == UNSTATED_CHUNKS else [*SCHEDULES, *interleaved]
    runs = []
    for schedule in tries:
        w = [*words[:i], *schedule, *words[i + 1 :]]
        try:
            runs.append((attnroof_json(w), w))
        except RowFailed:  # a chunk count that does not split the layers
            continue
    if not runs:
        raise RowFailed("no pipeline schedule attnroof has runs this plan")
    best = min(runs, key=lambda r: r[0]["totals"]["time_s"])
    return best[1], best[0], runs[0][0]


def training_result(row: dict[str, Any], rows: list[dict[str, Any]], profile: list[str]) -> Result:
    words, assumed = training_words(row, rows)
    words, out, planned = least_schedule(words + profile)
    totals, cfg = out["totals"], out["config"]
    batch = out["batch"]
    step, how = measured_step(row, cfg, batch)
    bound, forecast = totals["time_s"], planned["totals"].get("forecast_time_s")
    figures = [Figure("training step", "step_s", step, forecast, bound)]
    if row.get("measured_mfu"):
        dt = row.get("dtype") or "bf16"
        peak = get_device(row["device"]).peak_flops_per_s[dt]
        flops = CONVENTION[row["source"]](cfg, batch, row["context"])

        def mfu(t: float | None) -> float | None:
            return None if t is None else flops / (row["devices"] * peak * t)

        figures.append(
            Figure("training MFU", "mfu", float(row["measured_mfu"]), mfu(forecast), mfu(bound), rate=True)
        )
        how += (
            f"; MFU = F / ({row['devices']} x {peak / 1e12:g} TFLOP/s x step), the row's convention "
            f"(the measured step gives {mfu(step):.3f} beside the printed {row['measured_mfu']})"
        )
    basis = (planned.get("forecast") or {}).get("basis")
    return Result(row["id"], row["source"], "training", [words], assumed, how, figures, basis)


# ---------------------------------------------------------------- serving rows

THROUGHPUT: dict[str, Callable[[dict[str, Any]], float]] = {
    "output_tokens_per_s": lambda s: s["output_tokens_per_s"],
    "total_tokens_per_s": lambda s: s["input_tokens_per_s"] + s["output_tokens_per_s"],
    "input_tokens_per_s": lambda s: s["input_tokens_per_s"],
    "tokens_per_s": lambda s: s["input_tokens_per_s"] + s["output_tokens_per_s"],
    "request_per_s": lambda s: s["request_throughput_per_s"],
}
"""A serving row's throughputs, each from serve-sim's ``summary`` (``tokens_per_s``, whose kind the
source does not state, compared as input plus output tokens)."""

LATENCY: dict[str, tuple[str, str]] = {
    "ttft_median_s": ("ttft", "p50"),
    "ttft_mean_s": ("ttft", "mean"),
    "tpot_median_s": ("tpot", "p50"),
    "tpot_mean_s": ("tpot", "mean"),
    "itl_median_s": ("itl", "p50"),
    "itl_mean_s": ("itl", "mean"),
    "token_latency_p50_s": ("itl", "p50"),
    "e2e_latency_s": ("e2e", "mean"),
}
"""A serving row's latencies, each serve-sim's ``summary.latency_s`` figure (LMDeploy's per-token
latency median as the inter-token latency's; a batch's average latency as the mean end-to-end)."""


def _dtype_words(row: dict[str, Any], assumed: list[str]) -> list[str]:
    weights, kv = row.get("weights_dtype"), row.get("kv_cache_dtype")
    words: list[str] = []
    if weights == "fp16":
        words += ["--dtype", "fp16"]
    elif weights == "fp8":
        words += ["--dtype", "fp8", "--weight-dtype", "fp8"]
        assumed.append("fp8 weights: every weight fp8 and the GEMMs at the fp8 peak (W8A8)")
        if kv in (None, "auto"):
            words += ["--kv-dtype", "bf16"]
            assumed.append(f"KV cache {kv or 'not stated'}: bf16")
    elif weights == "bf16":
        words += ["--weight-dtype", "bf16"]
    elif weights == "mxfp4":
        assumed.append("mxfp4: the checkpoint's own formats (MXFP4 experts, the rest bf16)")
    elif weights is not None:
        raise RowFailed(f"weights {weights!r} not mapped")
    if kv and kv.startswith("fp8"):
        words += ["--kv-dtype", "fp8"]
        if kv != "fp8":
            assumed.append(f"KV cache '{kv}': every layer fp8")
    return words


def _mean_lengths(row: dict[str, Any], assumed: list[str]) -> tuple[int, int]:
    if row.get("total_input_tokens") and row.get("completed_requests"):
        n = row["completed_requests"]
        lengths = round(row["total_input_tokens"] / n), round(row["total_output_tokens"] / n)
        how = f"total_input_tokens / completed_requests, total_output_tokens / completed_requests (n = {n})"
    elif row.get("request_per_s") and row.get("output_tokens_per_s") and row.get("total_tokens_per_s"):
        r, out = row["request_per_s"], row["output_tokens_per_s"]
        lengths = round((row["total_tokens_per_s"] - out) / r), round(out / r)
        how = "(total - output) tokens/s / requests/s, output tokens/s / requests/s"
    else:
        raise RowFailed(
            "ShareGPT with neither token totals nor token throughputs: its mean lengths are unknown"
        )
    assumed.append(
        f"ShareGPT not reproduced: every request {lengths[0]} in, {lengths[1]} out, the run's means ({how})"
    )
    return lengths


def serving_words(row: dict[str, Any], cap: int) -> tuple[list[str], list[str]]:
    """The ``attnroof serve-sim`` words for a whole-request row, and what had to be assumed."""
    assumed: list[str] = []
    if row.get("speculative_decoding"):
        raise RowFailed("speculative decoding (EAGLE MTP) with no draft model or acceptance rate stated")
    if row["throughput_per"] != "deployment" or row.get("dp", 1) > 1 or row.get("instances", 1) > 1:
        raise RowFailed(
            f"throughput per {row['throughput_per']} over {row['devices']} devices: not one engine"
        )
    words = ["serve-sim", "--model", row.get("model_config") or row["model"], "--device", row["device"]]
    words += ["--tp", str(row["tp"]), "--pp", str(row["pp"])]
    if row["ep"] > 1:
        words += ["--ep", str(row["ep"]), "--etp", "1"]
    words += _dtype_words(row, assumed)
    if row["engine"] != "vllm":
        assumed.append(f"engine {row['engine']} simulated with vLLM V1's scheduler")
    w = row["workload"]
    if w["dataset"] == "sharegpt":
        input_len, output_len = _mean_lengths(row, assumed)
    else:
        input_len, output_len = w.get("input_len"), w.get("output_len")
        if not input_len or not output_len:
            raise RowFailed("input or output length not stated")
    words += ["--input-len", str(input_len), "--output-len", str(output_len)]
    notes = " ".join(row.get("notes", []))
    engine_batch = "--max-num-seqs" in notes  # AMD's table: the engine's limit, the requests all at once
    if "engine's max batch size" in notes:  # LMDeploy's profile_throughput: as many clients, a closed loop
        words += ["--max-num-seqs", str(w["max_concurrency"])]
        assumed.append(
            f"LMDeploy's 'batch' {w['max_concurrency']}: as many clients (a closed loop) and the engine's batch limit"
        )
    n = w.get("num_prompts") or w.get("batch_size")
    if w.get("batch_size"):  # a static batch: as many clients, each with one request
        words += ["--concurrency", str(w["batch_size"])]
        assumed.append(f"a static batch of {w['batch_size']}: as many clients at once, one request each")
    elif w.get("max_concurrency") and not engine_batch:  # vllm bench's --max-concurrency: a closed loop
        words += ["--concurrency", str(w["max_concurrency"])]
    else:
        if w.get("max_concurrency"):  # the engine's own batch limit, the requests all at once
            words += ["--max-num-seqs", str(w["max_concurrency"])]
        rate = w.get("request_rate")
        words += ["--rate", "inf" if rate in (None, "inf") else f"{rate:g}"]
        if rate is None:
            assumed.append("request rate not stated: all at once (inf)")
    if n is None:
        n = cap
        assumed.append(f"number of prompts not stated: {cap}")
    elif n > cap:
        assumed.append(f"{n} prompts capped at {cap}")
        n = cap
    words += ["--num-requests", str(n)]
    return words, assumed


def _simulate(
    words: list[str], profile: list[str]
) -> tuple[dict[str, Any], dict[str, Any] | None, str | None]:
    """serve-sim on the bound's steps and on the forecast's: the two summaries (the forecast's
    None where no profile applies) and the forecast's basis."""
    bound = attnroof_json([*words, "--bound"])["summary"]
    out = attnroof_json([*words, *profile])
    if out.get("steps") != "forecast":
        return bound, None, None
    return bound, out["summary"], (out.get("profile") or {}).get("basis")


def _serve_figures(
    row: dict[str, Any], bound: dict[str, Any], forecast: dict[str, Any] | None
) -> list[Figure]:
    figures = []
    for key, of in THROUGHPUT.items():
        if row.get(key):
            f = of(forecast) if forecast else None
            figures.append(Figure("serving throughput", key, float(row[key]), f, of(bound), rate=True))
    for key, (what, stat) in LATENCY.items():
        if row.get(key):
            f = forecast["latency_s"][what][stat] if forecast else None
            figures.append(Figure("serving latency", key, float(row[key]), f, bound["latency_s"][what][stat]))
    return figures


def itl_line_result(row: dict[str, Any], profile: list[str]) -> Result:
    """A line fitted to measured ITL against input length at concurrency 1: the line at the ends of
    its range beside serve-sim's mean ITL of one request at each."""
    assumed: list[str] = []
    base = ["serve-sim", "--model", row.get("model_config") or row["model"], "--device", row["device"]]
    base += ["--tp", str(row["tp"]), *_dtype_words(row, assumed), "--concurrency", "1", "--num-requests", "1"]
    base += ["--output-len", str(row["workload"]["output_len"])]
    a, b = row["itl_fit_intercept_s"], row["itl_fit_slope_s_per_token"]
    figures, commands, basis = [], [], None
    for length in row["workload"]["input_len_range"]:
        words = [*base, "--input-len", str(length)]
        bound, forecast, basis = _simulate(words, profile)
        commands.append([*words, *profile])
        f = forecast["latency_s"]["itl"]["mean"] if forecast else None
        figures.append(
            Figure(
                "serving latency", f"itl_s at {length}", a + b * length, f, bound["latency_s"]["itl"]["mean"]
            )
        )
    how = (
        f"measured ITL = {a:g} s + {b:g} s/token x input (the source's fitted line) at each end of its range"
    )
    return Result(row["id"], row["source"], "serving", commands, assumed, how, figures, basis)


def phase_result(row: dict[str, Any], profile: list[str]) -> Result:
    """A phase measured alone (the other assumed unlimited): ``attnroof model --phase`` on the
    whole group, its tokens a second per node or GPU."""
    w, phase, gpus = row["workload"], row["phase"], row["devices"]
    per_device = w.get("batch_size") or (STATED_IN_NOTES.get(row["id"]) or (None,))[0]
    if not per_device or not w.get("input_len"):
        raise RowFailed(f"{phase} measured alone: batch per device or input length not stated")
    if row.get("instances", 1) > 1:
        raise RowFailed(
            f"{row['instances']} instances of {row['devices'] // row['instances']} devices: not one group"
        )
    assumed = [f"{phase} of the whole group of {gpus} devices as one step, the other phase left out"]
    if row["id"] in STATED_IN_NOTES:
        assumed.append(STATED_IN_NOTES[row["id"]][1])
    batch = per_device * gpus
    words = ["model", "--model", row.get("model_config") or row["model"], "--device", row["device"]]
    words += ["--phase", phase, "--batch", str(batch), "--context", str(w["input_len"])]
    words += ["--tp", str(row["tp"]), "--dp", str(row["dp"]), "--ep", str(row["ep"]), "--etp", "1"]
    words += _dtype_words(row, assumed)
    out = attnroof_json([*words, *profile])
    per = row.get("gpus_per_node", 1) if row["throughput_per"] == "node" else 1
    tokens = batch * (w["input_len"] if phase == "prefill" else 1)
    key = "input_tokens_per_s" if phase == "prefill" else "output_tokens_per_s"

    def rate(t: float | None) -> float | None:
        return None if t is None else tokens / t * per / gpus

    totals = out["totals"]
    figures = [
        Figure(
            "serving throughput",
            key,
            float(row[key]),
            rate(totals.get("forecast_time_s")),
            rate(totals["time_s"]),
            rate=True,
        )
    ]
    how = f"tokens/s per {row['throughput_per']} = {tokens:,} tokens a step / step time x {per} / {gpus} devices"
    return Result(
        row["id"],
        row["source"],
        "serving",
        [[*words, *profile]],
        assumed,
        how,
        figures,
        (out.get("forecast") or {}).get("basis"),
    )


def serving_result(row: dict[str, Any], profile: list[str], cap: int) -> Result:
    if row.get("itl_fit_intercept_s") is not None:
        return itl_line_result(row, profile)
    if row["phase"] != "mixed":
        return phase_result(row, profile)
    words, assumed = serving_words(row, cap)
    bound, forecast, basis = _simulate(words, profile)
    how = "serve-sim's summary beside the row's figures, as printed (per deployment)"
    if row.get("tokens_per_s"):
        how += "; tokens_per_s (kind not stated) compared as input + output tokens/s"
    return Result(
        row["id"],
        row["source"],
        "serving",
        [[*words, *profile]],
        assumed,
        how,
        _serve_figures(row, bound, forecast),
        basis,
    )


# ---------------------------------------------------------------- the whole table


def validate(
    ids: Iterable[str] | None, profile: list[str], cap: int, progress: bool = False
) -> tuple[list[Result], list[Failure]]:
    """Every resolvable row (or those named by id or source in ``ids``) run and compared."""
    wanted = list(ids) if ids else None
    results: list[Result] = []
    failures: list[Failure] = []
    for level in TABLE.LEVELS:
        rows = TABLE.rows(level)
        for row in rows:
            if wanted and not any(row["id"] == w or row["source"] == w for w in wanted):
                continue
            if row.get("resolvable") is False:
                failures.append(
                    Failure(row["id"], row["source"], level, f"unresolvable: {row['unresolvable_why']}")
                )
                continue
            t0 = time.perf_counter()
            try:
                if level == "training":
                    results.append(training_result(row, rows, profile))
                else:
                    results.append(serving_result(row, profile, cap))
            except RowFailed as e:
                failures.append(Failure(row["id"], row["source"], level, str(e)))
            if progress:
                print(f"  {row['id']} {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return results, failures


def stats(errors: list[float]) -> dict[str, float | int | None]:
    """Median and p90 of |e| and the signed median (bias) of the errors ``e``.

    >>> stats([0.1, -0.2, 0.3])
    {'n': 3, 'median': 0.2, 'p90': 0.28, 'bias': 0.1}
    """
    if not errors:
        return {"n": 0, "median": None, "p90": None, "bias": None}
    a = [abs(e) for e in errors]
    return {
        "n": len(errors),
        "median": statistics.median(a),
        "p90": round(percentile(a, 0.9), 12),
        "bias": statistics.median(errors),
    }


def summary(results: list[Result], key: Callable[[Result, Figure], str]) -> dict[str, dict[str, Any]]:
    """Per group (``key`` of each figure): rows, figures, the forecast's and the bound's stats."""
    groups: dict[str, list[tuple[Result, Figure]]] = {}
    for r in results:
        for f in r.figures:
            groups.setdefault(key(r, f), []).append((r, f))
    out = {}
    for name, pairs in sorted(groups.items(), key=lambda kv: _level_order(kv[0])):
        fe = [f.error for _, f in pairs if f.error is not None]
        be = [f.bound_error for _, f in pairs if f.bound_error is not None]
        out[name] = {
            "rows": len({r.id for r, _ in pairs}),
            "figures": len(pairs),
            "forecast": stats(fe),
            "bound": stats(be),
        }
    return out


def _level_order(name: str) -> tuple[int, str]:
    level = next((i for i, lv in enumerate(LEVELS) if name.startswith(lv)), len(LEVELS))
    return level, name


def checks(results: list[Result]) -> list[str]:
    """What looked wrong: a forecast faster than its bound, a bound slower than the measurement."""
    out = []
    for r in results:
        for f in r.figures:
            if f.forecast is not None and f.bound is not None:
                beyond = f.forecast > f.bound * (1 + 1e-9) if f.rate else f.forecast < f.bound * (1 - 1e-9)
                if beyond:
                    out.append(f"{r.id} {f.metric}: forecast {f.forecast:.4g} beyond its bound {f.bound:.4g}")
            if f.bound is not None:
                slower = f.bound < f.measured * (1 - 1e-9) if f.rate else f.bound > f.measured * (1 + 1e-9)
                if slower and f.level in ("training step", "serving throughput"):
                    out.append(
                        f"{r.id} {f.metric}: bound {f.bound:.4g} slower than measured {f.measured:.4g}"
                    )
    return out


TARGETS = {"training step": (0.15, 0.35), "serving throughput": (0.20, None), "serving latency": (0.20, None)}
"""The issue's targets: median |e| (and p90) per level."""


# ---------------------------------------------------------------- printing


def _pct(x: float | None, signed: bool = False) -> str:
    if x is None:
        return "—"
    return f"{100 * x:+.1f}%" if signed else f"{100 * x:.1f}%"


HEADERS = ["", "rows", "figures", "forecast median", "p90", "bias", "bound median", "p90", "bias"]


def _rows(table: dict[str, dict[str, Any]]) -> list[list[str]]:
    out = []
    for name, s in table.items():
        f, b = s["forecast"], s["bound"]
        out.append(
            [name, str(s["rows"]), str(s["figures"]), _pct(f["median"]), _pct(f["p90"]), _pct(f["bias"], True),
             _pct(b["median"]), _pct(b["p90"]), _pct(b["bias"], True)]
        )  # fmt: skip
    return out


def render(headers: list[str], rows: list[list[str]], markdown: bool) -> str:
    if markdown:
        lines = [
            "| " + " | ".join(headers) + " |",
            "|" + "|".join(":--" if i == 0 else "--:" for i in range(len(headers))) + "|",
        ]
        return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = [
        "  ".join(
            h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(headers, widths, strict=True))
        )
    ]
    for r in rows:
        lines.append(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))
            )
        )
    return "\n".join(lines)


KERNEL_TARGET = 0.15
"""Single kernels: median |e| ≤ 15%, judged on each profile's own held-out kernel rows."""


def kernel_errors(profile: str | None) -> list[list[str]]:
    """Each profile's held-out kernel error, as its ``[error]`` tables state it (fitted and held
    out on data/public's kernel rows, never on this table): the file ``--profile`` names, or the
    shipped profiles (the one it names)."""
    from attnroof.profiles import files

    if profile == "none":
        return []
    if profile and (profile.endswith(".toml") or "/" in profile):
        chosen = [files.read(profile)]
    else:
        chosen = [p for p in files.shipped() if profile is None or p.name == profile]
    out = []
    for p in chosen:
        m, q = p.error.median.get("kernel"), p.error.p90.get("kernel")
        fig = p.figures.get("error.median.kernel")
        met = "—" if m is None else "met" if m <= KERNEL_TARGET else "not met"
        out.append([f"{p.name} {p.dtype}", _pct(m), _pct(q), (fig.note if fig else "") or "—", met])
    return out


def report(results: list[Result], failures: list[Failure], markdown: bool, profile: str | None = None) -> str:
    levels = summary(results, lambda r, f: f.level)
    parts = ["Per level", render(["level", *HEADERS[1:]], _rows(levels), markdown)]
    parts += [
        "Per source",
        render(
            ["level / source", *HEADERS[1:]],
            _rows(summary(results, lambda r, f: f"{f.level} / {r.source}")),
            markdown,
        ),
    ]
    parts += [
        "Per figure",
        render(
            ["level / figure", *HEADERS[1:]],
            _rows(summary(results, lambda r, f: f"{f.level} / {f.metric.split(' at ')[0]}")),
            markdown,
        ),
    ]
    target_rows = []
    for level, (median, p90) in TARGETS.items():
        got = levels.get(level, {}).get("forecast", {})
        m, p = got.get("median"), got.get("p90")
        met = None if m is None else m <= median and (p90 is None or (p is not None and p <= p90))
        want = f"median ≤ {_pct(median)}" + (f", p90 ≤ {_pct(p90)}" if p90 else "")
        target_rows.append(
            [level, want, _pct(m), _pct(p), "—" if met is None else "met" if met else "not met"]
        )
    parts += ["Targets", render(["level", "target", "median", "p90", "met?"], target_rows, markdown)]
    kernels = kernel_errors(profile)
    parts += [
        f"Single kernels (target: median ≤ {_pct(KERNEL_TARGET)}; each profile's held-out kernel rows, not this table)",
        render(["profile", "median", "p90", "rows", "met?"], kernels, markdown) if kernels else "none",
    ]
    bullet = "- " if markdown else "  "
    parts += [
        f"Rows that did not run ({len(failures)})",
        "\n".join(f"{bullet}{f.id}: {f.reason}" for f in failures) or f"{bullet}none",
    ]
    found = checks(results)
    parts += [f"Checks ({len(found)})", "\n".join(f"{bullet}{c}" for c in found) or f"{bullet}none"]
    sep = "\n\n" if markdown else "\n"
    return sep.join(f"### {p}" if markdown and i % 2 == 0 else p for i, p in enumerate(parts))


UNITS = {
    "training step": "s",
    "training MFU": "fraction of peak",
    "serving throughput": "tokens/s or requests/s",
    "serving latency": "s",
}


def chart(results: list[Result], path: str) -> None:
    """Forecast against measured, log-log: a panel per level (its own units), one colour each,
    the y = x line and ±20% dotted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(9.6, 8.4), dpi=110)
    for i, (level, ax) in enumerate(zip(LEVELS, axes.flat, strict=True)):
        pts = [
            (f.measured, f.forecast) for r in results for f in r.figures if f.level == level and f.forecast
        ]
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(f"{level} ({len(pts)} figures)", fontsize=10)
        ax.set_xlabel(f"measured ({UNITS[level]})", fontsize=8)
        ax.set_ylabel("attnroof's forecast", fontsize=8)
        if not pts:
            continue
        xs, ys = zip(*pts, strict=True)
        ax.scatter(xs, ys, s=14, color=plt.cm.tab10(i), alpha=0.75)
        lo, hi = min(*xs, *ys) / 1.5, max(*xs, *ys) * 1.5
        ax.plot([lo, hi], [lo, hi], color="black", lw=1, label="y = x")
        for k in (1.2, 1 / 1.2):
            ax.plot([lo, hi], [k * lo, k * hi], color="grey", lw=0.6, ls=":")
        ax.legend(fontsize=7, loc="upper left")
    fig.suptitle("forecasts against the published end-to-end table (dotted: ±20%)", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--profile",
        metavar="NAME|FILE|none",
        help="passed to attnroof (default: attnroof's choice per device)",
    )
    ap.add_argument("--rows", metavar="IDS", help="only these rows: ids or sources, comma-separated")
    ap.add_argument(
        "--max-requests",
        type=int,
        default=MAX_REQUESTS,
        metavar="N",
        help=f"serve-sim requests a row at most (default {MAX_REQUESTS})",
    )
    ap.add_argument(
        "--markdown", action="store_true", help="print the tables as Markdown (for docs/accuracy.md)"
    )
    ap.add_argument("--json", metavar="FILE", help="write every row's forecast, bound and measured figures")
    ap.add_argument(
        "--chart", metavar="FILE.png", help="forecast against measured, log-log (needs matplotlib)"
    )
    ap.add_argument("--progress", action="store_true", help="each row's time on stderr")
    args = ap.parse_args(argv)
    if args.max_requests < 1:
        print(f"validate: error: --max-requests {args.max_requests}: must be at least 1", file=sys.stderr)
        return 2
    profile = ["--profile", args.profile] if args.profile else []
    ids = [w.strip() for w in args.rows.split(",") if w.strip()] if args.rows else None
    results, failures = validate(ids, profile, args.max_requests, args.progress)
    if ids and not results and not failures:
        print(f"validate: error: --rows {args.rows!r}: no such row or source", file=sys.stderr)
        return 2
    bases = sorted({r.basis for r in results if r.basis})
    head = (
        f"data/validation: {len(results)} rows run, {len(failures)} not; profile: "
        f"{'; '.join(bases) or 'none applied (bounds only)'}; serve-sim at most {args.max_requests} requests a row"
    )
    print(head + ("\n" if args.markdown else ""))
    print(report(results, failures, args.markdown, args.profile))
    if args.json:
        doc = {
            "profile": args.profile,
            "bases": bases,
            "max_requests": args.max_requests,
            "levels": summary(results, lambda r, f: f.level),
            "sources": summary(results, lambda r, f: f"{f.level} / {r.source}"),
            "rows": [r.to_json() for r in results],
            "failed": [asdict(f) for f in failures],
            "checks": checks(results),
        }
        Path(args.json).write_text(json.dumps(doc, indent=1, allow_nan=False) + "\n", encoding="utf-8")
    if args.chart:
        chart(results, args.chart)
    return 0


if __name__ == "__main__":
    sys.exit(main())
