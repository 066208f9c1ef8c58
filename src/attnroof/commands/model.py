"""model: a whole transformer's prefill or decode step on a device, operator by operator."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from attnroof.commands._common import (
    Command,
    add_device_args,
    add_json_arg,
    emit_json,
    int_list,
    positive_int,
    require,
    roof_from_args,
)
from attnroof.devices import Device
from attnroof.dtypes import DType, dtype
from attnroof.model import ModelConfig, builtin, builtin_names, get_model
from attnroof.model.analysis import ModelAnalysis, Totals, analyse
from attnroof.model.layers import Precision
from attnroof.model.memory import Memory
from attnroof.roofline import Roof
from attnroof.text import render
from attnroof.text.render import table
from attnroof.units import GIGA, duration


def _setup(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model", metavar="NAME|config.json", help="built-in model (see --list) or a local config.json"
    )
    p.add_argument("--list", action="store_true", help="list the built-in models")
    p.add_argument(
        "--phase", choices=("prefill", "decode"), default="decode", help="step to analyse (default decode)"
    )
    p.add_argument("--batch", type=positive_int, default=1, help="sequences in the batch (default 1)")
    p.add_argument(
        "--context",
        type=positive_int,
        metavar="C",
        help="prefill: prompt length; decode: tokens in each KV cache",
    )
    p.add_argument(
        "--sweep-batch", type=int_list, metavar="LIST", help="batches to compare: 1,8,64 or 1..256"
    )
    p.add_argument("--unfused", action="store_true", help="unfused attention (S and P go through memory)")
    p.add_argument(
        "--weight-dtype", metavar="DTYPE", help="dtype the weights are stored in (default: --dtype)"
    )
    p.add_argument("--kv-dtype", metavar="DTYPE", help="dtype of the KV cache (default: --dtype)")
    add_device_args(p)
    add_json_arg(p)


@dataclass(frozen=True)
class _Job:
    """What every output needs: the model, the device and the three dtypes."""

    model: ModelConfig
    args: argparse.Namespace
    device: Device
    roof: Roof
    dt: DType
    wdt: DType
    kdt: DType

    @property
    def prec(self) -> Precision:
        return Precision(self.dt.itemsize, self.wdt.itemsize, self.kdt.itemsize)

    @property
    def fused(self) -> bool:
        return not self.args.unfused

    def analyse(self, batch: int) -> ModelAnalysis:
        a = self.args
        return analyse(
            self.model, a.phase, batch, a.context, self.roof, self.prec,
            capacity_bytes=self.device.capacity_bytes, fused=self.fused,
        )  # fmt: skip

    def json_head(self) -> dict[str, Any]:
        return {
            "model": self.model.name,
            "phase": self.args.phase,
            "context": self.args.context,
            "device": self.device.name,
            "dtype": self.dt.name,
            "weight_dtype": self.wdt.name,
            "kv_dtype": self.kdt.name,
            "fused": self.fused,
            "ridge": self.roof.ridge,
            "config": self.model.to_json(),
        }

    def header(self, batch: int | None) -> list[str]:
        m, a = self.model, self.args
        shape = (
            f"{m.layers} layers, hidden {m.hidden}, {m.heads} heads on {m.kv_heads} KV heads "
            f"of {m.head_dim}, MLP {m.intermediate}{' gated' if m.gated else ''}, vocab {m.vocab}, "
            f"{render.num(m.params() / GIGA)} B parameters"
        )
        what = (
            f"prefill of {render.plural(a.context, 'token')}"
            if a.phase == "prefill"
            else f"decode of one token at context {a.context}"
        )
        if batch is not None:
            what += f", batch {batch}"
        attn = "fused" if self.fused else "unfused"
        lines = [
            f"{m.name}: {shape}",
            render.device_line(self.device, self.roof),
            f"{what}; weights {self.wdt.name}, KV cache {self.kdt.name}, activations {self.dt.name}; "
            f"{attn} attention",
        ]
        if self.wdt.name != self.dt.name:
            lines.append(
                f"weights stored as {self.wdt.name} are multiplied at the {self.dt.name} peak (--dtype)"
            )
        return lines


def _run(args: argparse.Namespace) -> int:
    if args.list:
        return _print_list([builtin(n) for n in builtin_names()], args.json)
    require(args.model is not None, "--model is required (a built-in name or a config.json; see --list)")
    require(args.context is not None, "--context is required (prompt or KV-cache length, e.g. 8192)")
    model = get_model(args.model)
    dev, dt, roof = roof_from_args(args)
    wdt = dtype(args.weight_dtype) if args.weight_dtype else dt
    kdt = dtype(args.kv_dtype) if args.kv_dtype else dt
    job = _Job(model, args, dev, roof, dt, wdt, kdt)
    return _sweep(job) if args.sweep_batch else _single(job)


def _single(job: _Job) -> int:
    batch = job.args.batch
    a = job.analyse(batch)
    if job.args.json:
        ops = [o.to_json() for o in a.ops]
        totals, mem = a.totals.to_json(), a.memory.to_json()
        emit_json(
            {**job.json_head(), "batch": batch, "ops": ops, "totals": totals, "memory": mem, "notes": a.notes}
        )
        return 0
    t = a.totals
    rows = [
        [
            o.name,
            f"×{o.count}" if o.count > 1 else "",
            render.flops(o.flops),
            render.nbytes(o.bytes),
            render.num(o.intensity),
            duration(o.time_s),
            o.limiter,
            render.pct(o.count * o.time_s / t.time_s),
        ]
        for o in a.ops
    ]
    headers = ["operator", "×", "FLOPs", "bytes", "FLOP/byte", "time ≥", "limiter", "of step"]
    tokens = t.tokens_per_s
    rate = f"≤ {render.num(tokens)} tokens/s" if tokens is not None else f"time to first token ≥ {_rate(t)}"
    out = [
        *job.header(batch),
        "",
        table(headers, rows, "llrrrrlr"),
        "",
        f"step: {render.flops(t.flops)}, {render.nbytes(t.bytes)}, time ≥ {duration(t.time_s)}; {rate}",
        f"memory-bound {render.pct(t.memory_bound_share)} of the time; "
        f"attention takes {render.pct(t.attention_share)} of the time",
        _memory_line(a.memory, job.device.name, job.model.max_positions),
        *(f"note: {n}" for n in a.notes),
    ]
    print("\n".join(out))
    return 0


def _rate(t: Totals) -> str:
    """Decode: the tokens/s ceiling; prefill: the time-to-first-token floor."""
    if t.tokens_per_s is not None:
        return render.num(t.tokens_per_s)
    return duration(t.time_s if t.ttft_s is None else t.ttft_s)


def _memory_line(mem: Memory, device: str, max_positions: int | None = None) -> str:
    b = render.nbytes
    used = (
        f"memory: weights {b(mem.weights_bytes)} + KV cache {b(mem.kv_cache_bytes)} "
        f"({b(mem.kv_cache_bytes_per_token)}/token) + activations {b(mem.activation_bytes)}"
        f" = {b(mem.total_bytes)}"
    )
    if mem.capacity_bytes is None:
        return used + f"; {device} has no capacity figure (pass --capacity)"
    verdict = "fits" if mem.fits else "does NOT fit"
    if mem.max_context is not None and max_positions and mem.max_context > max_positions:
        ctx = f"{max_positions:,} (the model's limit; memory alone would allow {mem.max_context:,})"
    elif mem.max_context is not None:
        ctx = f"{mem.max_context:,}"
    elif max_positions:  # a sliding window: the cache stops growing, the model's own limit remains
        ctx = f"{max_positions:,} (the model's limit; the KV cache stops growing at the window)"
    else:
        ctx = "unbounded (the KV cache stops growing at the window)"
    return (
        f"{used} of {b(mem.capacity_bytes)}: {verdict}; largest batch at this context {mem.max_batch:,}, "
        f"largest context at this batch {ctx}"
    )


def _sweep(job: _Job) -> int:
    from attnroof.model.batching import compute_bound_batch, gemm_crossovers

    decode = job.args.phase == "decode"
    runs = [job.analyse(b) for b in job.args.sweep_batch]
    gemms = gemm_crossovers(job.model, job.roof, job.prec)
    step_batch, share = None, 1.0
    if decode:
        step_batch, share = compute_bound_batch(
            job.model, job.args.context, job.roof, job.prec, fused=job.fused
        )
    if job.args.json:
        json_rows = [
            {
                "batch": a.batch,
                "totals": a.totals.to_json(),
                "memory": a.memory.to_json(),
                "ops": [o.to_json() for o in a.ops],
            }
            for a in runs
        ]
        emit_json(
            {
                **job.json_head(),
                "rows": json_rows,
                "notes": runs[0].notes,
                "gemm_crossovers": [g.to_json() for g in gemms],
                # decode only: the first batch with under half the time memory-bound (None: never),
                # and the memory-bound share there (or at the largest batch searched)
                "step_crossover": {"batch": step_batch, "memory_bound_share": share} if decode else None,
            }
        )
        return 0
    mlp = "gate/up projection" if job.model.gated else "up projection"
    rows: list[list[Any]] = []
    for a in runs:
        t, mem = a.totals, a.memory
        fits = "—" if mem.fits is None else ("yes" if mem.fits else "no")
        rows.append(
            [
                a.batch,
                duration(t.time_s),
                _rate(t),
                a.op(mlp).limiter,
                a.op("attention").limiter,
                render.pct(t.memory_bound_share),
                render.pct(t.attention_share),
                render.nbytes(mem.kv_cache_bytes),
                fits,
            ]
        )
    headers = ["batch", "step ≥", "tokens/s ≤" if decode else "TTFT ≥", "MLP GEMM", "attention"]
    headers += ["memory-bound", "attention share", "KV cache", "fits"]
    cross = ", ".join(f"{g.name} {g.batch}" if g.batch else f"{g.name} never" for g in gemms)
    out = [*job.header(None), "", table(headers, rows, "rrrllrrrl"), ""]
    unit = "batch" if decode else "tokens through the GEMM (batch × prompt; the LM head: batch)"
    out.append(f"GEMMs compute-bound from {unit}: {cross}")
    if decode and step_batch is None:
        out.append(
            f"the decode step never turns compute-bound at context {job.args.context}: each sequence "
            f"reads its own KV cache, so {render.pct(share)} of the time stays memory-bound "
            "however large the batch"
        )
    elif decode:
        out.append(
            f"the decode step is compute-bound (under half its time memory-bound) from batch {step_batch}"
        )
    out += [f"note: {n}" for n in runs[0].notes]
    print("\n".join(out))
    return 0


def _print_list(models: list[ModelConfig], as_json: bool) -> int:
    if as_json:
        emit_json({"models": [m.to_json() for m in models]})
        return 0
    rows = [
        [
            m.name,
            render.num(m.params() / GIGA),
            m.layers,
            m.hidden,
            f"{m.heads}/{m.kv_heads}",
            m.head_dim,
            m.intermediate,
            "gated" if m.gated else "plain",
            m.vocab,
            m.sliding_window or "—",
        ]
        for m in models
    ]
    headers = ["model", "params (B)", "layers", "hidden", "heads/KV", "head dim", "MLP", "MLP kind", "vocab"]
    print(table([*headers, "window"], rows, "lrrrrrrlrr"))
    return 0


COMMANDS = (
    Command("model", "a whole model's prefill or decode, layer by layer, on a device", _setup, _run, 70),
)
