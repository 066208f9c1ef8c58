"""A step on many devices in words: the slowest device's operators and collectives, the layer
kinds against the link roof, the pipeline, per-device memory; a TP sweep; the smallest fit."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from attnroof.devices.links import BRIDGE, Links
from attnroof.model.comms import CommOp
from attnroof.model.schedules import INTERLEAVED, ONE_F_ONE_B, ZB_H1
from attnroof.model.search import Fit
from attnroof.model.spread import Spread
from attnroof.model.train_options import TRAIN
from attnroof.model.training_memory import TrainMemory
from attnroof.text import render
from attnroof.text.devices import link_abilities
from attnroof.text.model import OP_HEADERS, Setting, header, memory_line, op_row
from attnroof.text.render import table
from attnroof.text.sharding import sharded_words, sharding_line, zero_words
from attnroof.units import GB, duration

SCHEDULE_NAMES = {ONE_F_ONE_B: "1F1B", INTERLEAVED: "interleaved 1F1B", ZB_H1: "ZB-H1"}


def plan_line(s: Spread) -> str:
    p = s.plan
    cp = [f"CP {p.cp}" + (" (K/V all-gathered)" if p.cp_comm == "allgather" else "")] if p.cp > 1 else []
    parts = [f"TP {p.tp}", *cp, f"PP {p.pp}", f"DP {p.dp}"]
    parts += [f"EP {p.ep}"] if p.ep > 1 else []
    extra = [x for x, on in (("sequence parallel", p.sp), ("overlapped", p.overlap)) if on]
    if p.etp and p.etp != p.tp:  # the experts' own grid (Megatron's ETP × EP × EDP)
        extra.append(f"experts ETP {p.etp} × EP {p.ep} × EDP {p.edp}")
    if p.expert_imbalance != 1:
        extra.append(f"busiest expert device {render.num(p.expert_imbalance)}× the mean tokens")
    if p.zero:
        extra.insert(0, zero_words(p))
    micro = f", {render.plural(p.microbatches, 'micro-batch', 'micro-batches')}" if p.microbatches > 1 else ""
    if p.schedule != "1f1b":
        chunks = f" × {p.virtual_stages} chunks a device" if p.virtual_stages > 1 else ""
        micro += f", {p.schedule}{chunks}"
    return f"{' × '.join(parts)} = {render.plural(p.devices, 'device')}{micro}" + (
        f"; {', '.join(extra)}" if extra else ""
    )


def layer_ranges(ranges: Sequence[tuple[int, int]]) -> str:
    """A device's layers: 0–19, or, holding several model chunks, 0–4, 40–44."""
    return ", ".join(f"{first}–{stop - 1}" for first, stop in ranges)


def links_line(links: Links) -> str:
    """Each link one way per device, with its domain (a bridge: the cards it joins) and what its
    fabric allows beyond a ring."""
    out = []
    for link, n in links.each():
        joins = (
            ("pairs" if n == 2 else f"sets of {n}") if link.kind == BRIDGE else f"{n} a domain" if n else ""
        )
        traits = [t for t in (joins, *link_abilities(link)) if t]
        size = f" ({', '.join(traits)})" if traits else ""
        out.append(f"{link.kind} {render.num(link.bandwidth_bytes_per_s / GB)} GB/s one way{size}")
    return "links: " + ("; ".join(out) or "none")


def comm_row(c: CommOp, step_time_s: float, runs: int = 1) -> list[str]:
    """A collective in the operator table's columns: bytes it sends, its time on the link, and
    its share of the step when the step runs it ``runs`` times as often (once per micro-batch)."""
    return [
        f"{c.comm.name} [{c.comm.collective}, {c.comm.algorithm}, {c.comm.devices} dev, {_nodes(c)}{c.link.kind}]",
        f"×{c.count}" if c.count > 1 else "",
        "—",
        render.nbytes(float(c.comm.bytes_per_device)) + " sent",
        "—",
        duration(c.time_s),
        "link",
        render.pct(runs * c.count * c.time_s / step_time_s),
    ]


def _nodes(c: CommOp) -> str:
    """The nodes in its label: "8 a node, " for a collective across nodes, else nothing."""
    return f"{c.comm.per_node} a node, " if c.comm.per_node else ""


def _totals(setting: Setting, s: Spread) -> dict[str, Any]:
    from attnroof.model.train_spread import step_totals

    return step_totals(s, setting.model, setting.context, setting.roof.peak_flops_per_s)


def spread_text(setting: Setting, s: Spread, links: Links, head: list[str] | None = None) -> str:
    """One plan: the slowest device's operators and collectives, its layer kinds on the link
    roof, the step and the memory each device holds. ``head`` replaces the first lines (a
    training step's own)."""
    slow, t = s.slowest, _totals(setting, s)
    train = s.phase == TRAIN
    m, step = s.plan.microbatches, t["estimate_time_s"]  # shares of the estimate: they add up to it
    rows = [op_row(o, step / m) for o in slow.ops]  # each runs once per micro-batch: m times a step
    comms = [comm_row(c, step, m) for c in slow.comms]
    headers = list(OP_HEADERS)
    if train:
        headers = ["pass", *headers]
        rows = [[p, *r] for p, r in zip(slow.passes, rows, strict=True)]
        comms = [[c.pass_name, *r] for c, r in zip(slow.comms, comms, strict=True)]
        comms += [[c.pass_name, *comm_row(c, step)] for c in slow.step_comms]
    rate = (
        f"≤ {render.num(t['tokens_per_s'])} tokens/s"
        if t["tokens_per_s"] is not None
        else f"time to first token ≥ {duration(t['time_s'])}"
    )
    pipeline = "" if s.plan.pp == 1 else f", {SCHEDULE_NAMES[s.plan.schedule]}'s pipeline bubble"
    kinds = [
        [
            k["layer_kind"],
            duration(k["compute_time_s"]),
            duration(k["comm_time_s"]),
            "—" if k["flops_per_link_byte"] is None else render.num(k["flops_per_link_byte"]),
            k["limiter"],
        ]
        for k in slow.kinds()
    ]
    link = links.scaleup
    ridge = (
        f"; link ridge {render.num(setting.roof.peak_flops_per_s / link.bandwidth_bytes_per_s)} FLOP per link byte"
        if link is not None
        else ""
    )
    bubble = "" if s.plan.pp == 1 else f"; pipeline bubble {render.pct(t['bubble_share'])}"
    out = [
        *(head or header(setting, s.batch)),
        plan_line(s),
        links_line(links) + ridge,
        "",
        f"one device of the slowest stage (layers {layer_ranges(slow.ranges)}), one micro-batch:",
        table(headers, rows + comms, ("l" if train else "") + "llrrrrlr"),
        "",
        table(["layer kind", "compute ≥", "link ≥", "FLOP/link byte", "bound by"], kinds, "lrrrl"),
        "",
        f"step ≥ {duration(t['time_s'])} ({rate}): the bound, every collective hidden behind kernels"
        f"{pipeline}; per device {render.flops(t['flops'])}, {render.nbytes(t['bytes'])} through memory, "
        f"{render.nbytes(t['comm_bytes_per_device'])} over links",
        f"estimate {duration(t['estimate_time_s'])} with {estimate_schedule(s)}"
        + ("" if s.plan.overlap else " (--overlap: hidden behind each pass's kernels)"),
        f"communication {duration(t['comm_time_s'])} against computation {duration(t['compute_time_s'])}"
        + bubble,
    ]
    mem = replace(s.busiest_memory, max_batch=s.stage_max_batch)  # the tightest stage's
    if isinstance(mem, TrainMemory):
        out += _train_lines(s, t, mem)
    else:
        line = memory_line(mem, setting.device.name)
        out.append("per device " + line + global_batch(s))
    out += [f"note: {n}" for n in s.notes]
    return "\n".join(out)


def global_batch(s: Spread) -> str:
    """The largest batch of the memory line (a replica's, or a micro-batch's) as ``--batch``
    counts it: times the replicas (and the micro-batches); nothing on one replica."""
    if s.max_batch is None or s.max_batch == s.stage_max_batch:
        return ""
    micro = (
        f" × {render.plural(s.plan.microbatches, 'micro-batch', 'micro-batches')}"
        if s.phase == TRAIN and s.plan.microbatches > 1
        else ""
    )
    return f"; as --batch counts it, {s.max_batch:,} ({s.stage_max_batch:,}{micro} × {s.plan.dp} replicas)"


def estimate_schedule(s: Spread) -> str:
    """How the estimate schedules the collectives, in words."""
    return (
        "each pass's collectives hidden behind its kernels" if s.plan.overlap else "the collectives in series"
    )


def _train_lines(s: Spread, t: dict[str, Any], mem: TrainMemory) -> list[str]:
    from attnroof.text.training import train_memory_text

    zero = f"ZeRO {s.plan.zero}" if s.plan.zero else "no ZeRO sharding"
    policy = sharding_line(s.plan, t) if s.plan.replicas > 1 else None
    sync = (
        f"data-parallel sync ({zero}) once a step: {duration(t['sync_time_s'])}, "
        f"{duration(t['sync_exposed_s'])} of it exposed"
        if t["sync_time_s"]
        else None
    )
    memory = train_memory_text(
        mem,
        s.optimizer,
        s.recompute,
        zero=s.plan.zero,
        batch_word="micro-batch",
        sharded=sharded_words(s.plan),
    )
    return [
        *([policy] if policy else []),
        *([sync] if sync else []),
        f"model FLOPs {render.flops(t['model_flops'])} over {render.plural(s.plan.devices, 'device')}: "
        f"MFU ≤ {render.pct(t['mfu'])}, this device's HFU ≤ {render.pct(t['hfu'])} (the bound); "
        f"estimated MFU {render.pct(t['estimate_mfu'])}, HFU {render.pct(t['estimate_hfu'])}",
        f"per device {memory}{global_batch(s)}",
    ]


def sweep_text(
    setting: Setting, runs: Sequence[Spread], summary: dict[str, Any], head: list[str] | None = None
) -> str:
    rows = []
    for r in runs:
        t, mem = _totals(setting, r), r.busiest_memory
        rows.append(
            [
                str(r.plan.tp),
                str(r.plan.devices),
                duration(t["time_s"]),
                duration(t["estimate_time_s"]),
                duration(t["compute_time_s"]),
                duration(t["comm_time_s"]),
                "—" if t["tokens_per_s"] is None else render.num(t["tokens_per_s"]),
                render.nbytes(mem.total_bytes),
                {True: "yes", False: "no", None: "?"}[r.fits],
            ]
        )
    headers = [
        "TP",
        "devices",
        "step ≥",
        "estimate",
        "compute",
        "link",
        "tokens/s ≤",
        "memory/device",
        "fits",
    ]
    lines = [*(head or header(setting, runs[0].batch)), "", table(headers, rows, "rrrrrrrrl"), ""]
    if summary["best_tp"] is None:
        lines.append("none of these degrees fits in the device's memory")
    else:
        lines.append(
            f"fastest that fits, by the estimate ({estimate_schedule(runs[0])}): TP {summary['best_tp']}"
        )
    if summary["slower_from_tp"] is not None:
        lines.append(f"from TP {summary['slower_from_tp']} the all-reduces cost more than the cut saves")
    if summary["link_bound_from_tp"] is not None:
        lines.append(f"from TP {summary['link_bound_from_tp']} the link takes longer than the computation")
    return "\n".join(lines)


def fit_text(setting: Setting, found: Fit, best: Spread, links: Links, head: list[str] | None = None) -> str:
    """The fit: a line for each smaller device count searched, the plans that fit on the
    answer's count (fastest first, by the bound), and the chosen plan in full."""
    n = found.devices
    lines = [
        f"{render.plural(d, 'device')}: {render.plural(f.tried, 'plan')}, none fits"
        + (
            ""
            if f.least_misfit_bytes is None
            else f" (the least memory per device {render.nbytes(f.least_misfit_bytes)})"
        )
        for d, f in found.searches.items()
        if d < n
    ]
    here = found.searches[n]
    rows = [
        [plan_line(r.spread), render.nbytes(r.memory_bytes), duration(r.time_s), duration(r.estimate_time_s)]
        for r in sorted(here.rows, key=lambda r: (r.time_s, r.memory_bytes))
    ]
    return "\n".join(
        [
            f"fewest devices that hold it: {n} ({plan_line(best)}); the fastest of the "
            f"{render.plural(len(here.rows), 'plan')} that fit on {n}, by the bound (then memory)",
            "",
            *lines,
            *([""] if lines else []),
            table(["plan", "memory/device", "step ≥", "estimate"], rows, "lrrr"),
            "",
            spread_text(setting, best, links, head),
        ]
    )


def forecast_text(pred: dict[str, Any], batch: int, decode: bool) -> str:
    """The calibrated forecast of a plan: its slowest stage's kernels, and the step."""
    from attnroof.text.calibration import forecast_rows

    total, bound = pred["time_s"], pred["bound_time_s"]
    speed = f", {batch / total:,.0f} tokens/s" if decode else ""
    return "\n".join(
        [
            "calibrated forecast per operator (one device of the slowest stage, one micro-batch):",
            table(["operator", "runs", "time", "total", "forecast by"], forecast_rows(pred["ops"])),
            f"collectives at their link-roof time: {duration(pred['comm_time_s'])} (links are not calibrated)",
            f"step: forecast {duration(total)}{speed} (bound {duration(bound)}, {total / bound:.2f}× the bound; "
            f"{duration(pred['low_s'])} to {duration(pred['high_s'])})",
        ]
    )
