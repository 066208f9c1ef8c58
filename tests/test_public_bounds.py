"""Every public measurement in ``data/public/`` held against attnroof's bound for it: the bound is
a lower bound on time, so for every row ``bound ≤ measured``.

The rows are other people's numbers (``data/public/README.md``: the format; ``sources.toml``:
where each came from). Each row names the rule of attnroof's it exercises (``rule``); the bound
is computed through the library alone:

    kind          bound                                                      measured
    collective    ops.collectives (α₀ + steps·α + bytes/β, the fastest      measured_s, or nccl-tests'
                  algorithm the link allows: ring, one-shot, two-shot,       busbw: bytes per device / busbw
                  NVLS; across nodes, hierarchical) on the link
                  ``model.parallel.group_link`` picks for the group (its
                  scale-up domain = one node's devices; a bridged pair:
                  the bridge; across nodes each device's share of the
                  NICs the row's ``fabric`` names)
    elementwise,  the ops.elementwise formula (its backward, ops.backward,   measured_s, or the source's
    norm,         for bwd) placed on the device's roof, max(F/P, bytes/B)    bytes / measured bytes/s
    activation    per kernel, summed over the passes
    train_step    model.train_spread's step bound (ZeRO 3 for FSDP's full    measured_s (the source's step)
                  shard), as ``attnroof model --phase train`` computes it
    launch        none: attnroof's roofline has no fixed cost (bound 0)      measured_s

A rule other engineers are still adding fails on its rows today: each such rule is marked
``xfail(strict=True)`` here (:data:`NEEDS`), so that the day the rule lands its rows pass, the
xfail flips to a failure and forces its removal. Whoever lands a rule routes the row's bound
through it (:func:`collective_bound`, :func:`kernel_bound`, :func:`train_bound`) and deletes its
entry in :data:`NEEDS`.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import math
import re
import tomllib
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from attnroof.devices import Device, get_device
from attnroof.model.config import builtin
from attnroof.model.parallel import Plan, group_link
from attnroof.model.train_spread import step_totals, train_spread
from attnroof.model.training_memory import TrainPrecision
from attnroof.ops import collectives as coll
from attnroof.profiles.measured import ELEMENTWISE, ELEMENTWISE_BACKWARD
from attnroof.roofline import Roof, place

DATA = Path(__file__).resolve().parents[1] / "data" / "public"
RULES = ("l2", "nvls", "one-shot", "bridge", "scale-out", "sharding", "ring", "hbm")
KINDS = ("collective", "elementwise", "norm", "activation", "launch", "train_step")
SLACK = 1e-9
"""Relative: a bound equal to the measurement (a rounded source figure) still holds."""

NEEDS: dict[str, str] = {}
"""The rules not in this tree whose rows fail today, with why."""


@dataclass(frozen=True)
class Checked:
    """One row with its bound and its measured time, both in seconds."""

    file: str
    line: int
    row: dict[str, Any]
    bound_s: float
    measured_s: float

    @property
    def ratio(self) -> float:
        """measured / bound: ≥ 1 where the bound holds (inf for a bound of 0)."""
        return self.measured_s / self.bound_s if self.bound_s > 0 else math.inf

    def label(self) -> str:
        r = self.row
        what = r.get("collective") or r.get("op") or r.get("model") or r.get("impl")
        return f"{self.file}:{self.line} {r['device']} {what} {r.get('impl', '')}: {r['where']}"


KERNEL_KINDS = ("gemm", "attention", "decode")
"""Kinds whose bound is the roofline alone, held by tests/test_public_kernel_bounds.py."""


def all_rows() -> list[tuple[str, int, dict[str, Any]]]:
    out = []
    for path in sorted(DATA.glob("*.jsonl")):
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            out.append((path.name, i, json.loads(line)))
    return out


def rows() -> list[tuple[str, int, dict[str, Any]]]:
    """The rows this file bounds: every kind but :data:`KERNEL_KINDS`."""
    return [(f, i, r) for f, i, r in all_rows() if r["kind"] not in KERNEL_KINDS]


@functools.cache
def device(name: str) -> Device:
    return get_device(name)


def roof(dev: Device, dtype: str, l2: str = "unknown") -> Roof:
    """The device's roof for ``dtype``; without a peak for it, its fastest peak (a lower compute
    time than the dtype's own, so still a bound). A row timed with L2 flushed (``l2`` cold) has
    nothing resident: the single-level roof; warm or unknown, the device's cache where it has a
    figure (rule l2, :func:`attnroof.roofline.loop_resident`)."""
    levels = 1 if l2 == "cold" else 2
    if dtype in dev.peak_flops_per_s:
        return Roof.of(dev, dtype, levels=levels)
    fastest = max(dev.peak_flops_per_s, key=lambda d: dev.peak_flops_per_s[d])
    return replace(Roof.of(dev, fastest, levels=levels), dtype=dtype)


# ---------------------------------------------------------------- collectives


def collective_comm(r: dict[str, Any]) -> coll.Comm:
    return coll.COLLECTIVE_FN[r["collective"]](r["message_bytes"], r["devices"])


FABRIC = re.compile(r"-(\d+)x(\d+)g$")
"""A cluster network as a row names it: ``roce-16x200g`` is 16 ports of 200 Gb/s a node."""


def fabric_nic(r: dict[str, Any]) -> float | None:
    """Each device's share of its node's NICs, bytes/s one way, where the row names its network
    (``roce-16x100g`` over 8 devices a node: 16 · 100e9 / 8 bits/s = 200 GB/s a node, 25 GB/s a
    device); None for a fabric inside one node."""
    found = FABRIC.search(r.get("fabric", ""))
    if found is None:
        return None
    ports, gbps = (int(x) for x in found.groups())
    return ports * gbps * 1e9 / 8 / (r["devices"] // r["nodes"])


def collective_link(dev: Device, r: dict[str, Any]) -> Any:
    """The link of a group of ``devices`` over ``nodes`` nodes: one node is the device's scale-up
    domain; across nodes the domain is one node's share of the group, whose devices each ride their
    share of the node's NICs as the row's fabric names them (the catalog's where it names none)."""
    links = dev.links
    if r["nodes"] > 1:
        nic = fabric_nic(r) or links.scaleout_bytes_per_s
        links = replace(links, scaleup_domain=r["devices"] // r["nodes"], scaleout_bytes_per_s=nic)
    return group_link(links, r["devices"], 1, f"{r['collective']} over {r['devices']} devices")


def collective_bound(r: dict[str, Any]) -> float:
    return collective_comm(r).on(collective_link(device(r["device"]), r))


def collective_measured(r: dict[str, Any]) -> float:
    if "measured_s" in r:
        return r["measured_s"]
    if "busbw_bytes_per_s" in r:  # nccl-tests: busbw = algbw · factor = bytes sent per device / time
        return collective_comm(r).bytes_per_device / r["busbw_bytes_per_s"]
    return r["message_bytes"] / r["algbw_bytes_per_s"]


# ---------------------------------------------------------------- element-wise kernels


def _n_h(r: dict[str, Any]) -> tuple[int, int]:
    return (1, r["elements"]) if "elements" in r else (r["tokens"], r.get("hidden") or r["width"])


def _item(r: dict[str, Any]) -> int:
    return {"bf16": 2, "fp16": 2, "fp32": 4, "fp64": 8}[r["dtype"]]


FORWARD, BACKWARD = ELEMENTWISE, ELEMENTWISE_BACKWARD
"""The formulas of each measured op, in attnroof.profiles.measured: the profiles' fit reads the same."""
PASSES = {"fwd": (FORWARD,), "bwd": (BACKWARD,), "fwd+bwd": (FORWARD, BACKWARD)}


def kernel_bound(r: dict[str, Any]) -> float:
    """Each pass's kernel placed on the roof, the times summed (the passes run one after another)."""
    n, h = _n_h(r)
    on = roof(device(r["device"]), r["dtype"], r["l2"])
    return sum(float(place(table[r["op"]](n, h, _item(r)), on).time_s) for table in PASSES[r["pass"]])


def kernel_measured(r: dict[str, Any]) -> float:
    return r["measured_s"] if "measured_s" in r else r["measured_bytes"] / r["measured_bytes_per_s"]


# ---------------------------------------------------------------- training steps

POLICY_ZERO = {"none": 0, "ddp": 0, "zero-1": 1, "zero-2": 2, "zero-3": 3, "fsdp-full-shard": 3}


def train_bound(r: dict[str, Any]) -> float:
    dev, p = device(r["device"]), r["plan"]
    links = dev.links
    if r["nodes"] > 1:
        links = replace(links, scaleup_domain=r["devices_per_node"])
    plan = Plan(
        tp=p["tp"], pp=p["pp"], dp=p["dp"], microbatches=p["microbatches"], zero=POLICY_ZERO[p["policy"]]
    )
    model, on = builtin(r["model"]), roof(dev, r["dtype"])
    s = train_spread(
        model, r["global_batch"], r["context"], on, links, plan, TrainPrecision(), recompute=p["recompute"]
    )
    return float(step_totals(s, model, r["context"], on.peak_flops_per_s)["time_s"])


BOUND = {"collective": collective_bound, "train_step": train_bound, "launch": lambda r: 0.0}
MEASURED = {"collective": collective_measured}


@functools.cache
def checked() -> tuple[Checked, ...]:
    out = []
    for file, line, r in rows():
        kind = r["kind"]
        bound = BOUND.get(kind, kernel_bound)(r)
        measured = MEASURED.get(kind, kernel_measured)(r)
        out.append(Checked(file, line, r, float(bound), float(measured)))
    return tuple(out)


# ---------------------------------------------------------------- the tests


def test_every_row_is_sourced_and_well_formed() -> None:
    sources = tomllib.loads((DATA / "sources.toml").read_text(encoding="utf-8"))
    for table in sources.values():
        assert {"title", "url", "date", "where", "notes"} <= set(table), table
    for file, line, r in rows():
        at = f"{file}:{line}"
        assert r["kind"] in KINDS, at
        assert r["source"] in sources, f"{at}: source {r['source']!r} is not in sources.toml"
        assert r["where"], at
        device(r["device"])  # a catalog name or alias
        assert r["rule"] in (*RULES, None) and (r["rule"] is None) == (r["kind"] == "launch"), at
        if r["kind"] in ("elementwise", "norm", "activation"):
            assert r["l2"] in ("warm", "cold", "unknown") and r["pass"] in PASSES, at
    used = {r["source"] for _, _, r in all_rows()}
    assert set(sources) == used, f"sources no row names: {sorted(set(sources) - used)}"


def test_no_source_is_reserved() -> None:
    """The sources held back for an outside check (data/validation/README.md's list, read by
    scripts/validation_table.py) appear nowhere here."""
    spec = importlib.util.spec_from_file_location(
        "validation_table", DATA.parents[1] / "scripts" / "validation_table.py"
    )
    assert spec and spec.loader
    table = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(table)
    sources = tomllib.loads((DATA / "sources.toml").read_text(encoding="utf-8"))
    for name, src in sources.items():
        text = " ".join((name, src["title"], src["url"]))
        for reserved, patterns in table.reserved():
            assert not any(p.search(text) for p in patterns), (name, reserved)


def test_measurements_are_positive_and_finite() -> None:
    for c in checked():
        assert 0 < c.measured_s < math.inf and 0 <= c.bound_s < math.inf, c.label()


@pytest.mark.parametrize(
    "rule",
    [
        pytest.param(rule, marks=pytest.mark.xfail(strict=True, reason=NEEDS[rule]))
        if rule in NEEDS
        else rule
        for rule in RULES
    ],
)
def test_bound_holds(rule: str) -> None:
    group = [c for c in checked() if c.row["rule"] == rule]
    assert group, f"no row exercises rule {rule!r}"
    broken = sorted((c for c in group if c.bound_s > c.measured_s * (1 + SLACK)), key=lambda c: c.ratio)
    worst = "\n".join(
        f"  measured/bound {c.ratio:.3f}: bound {c.bound_s:.4g} s > measured {c.measured_s:.4g} s  {c.label()}"
        for c in broken[:12]
    )
    assert not broken, (
        f"{len(broken)} of {len(group)} rows of rule {rule!r} measured below the bound:\n{worst}"
    )


def test_two_rows_by_hand() -> None:
    """The bound's arithmetic on two rows, worked from the catalog's figures.

    Liger's RMSNorm on an A100 80GB, 2048 tokens of 4096 in bf16 (forward, L2 flushed): it reads
    X and the scale and writes Y, 2·(2048·4096 + 4096 + 2048·4096) = 33,562,624 bytes, at
    2.039 TB/s 16.46 µs; measured 31.07 µs. OCI's 16 GiB all-reduce over 2 nodes of 8 H100s (16 ×
    200 Gb/s RoCE a node, 50 GB/s a GPU): each node sends 2 · 1/2 · M = M = 17,179,869,184 bytes
    out over its 8 NICs, 2,147,483,648 a NIC at 50 GB/s, 42.95 ms, more than each device's M in
    over NVLink and its NIC at once (M / 500 GB/s = 34.4 ms); latency 3.6 µs + 2 × 2.7 µs (one
    network hop each way) + 2 × 0.47 µs (one NVLink hop each way). 42.96 ms where NCCL measured
    69.3 ms: measured/bound 1.61 (a ring of all 16 at one NIC's β bound it at 0.644 s, 9.3× over).
    """
    by_where = {
        (c.row["source"], c.row["where"], c.row.get("hidden"), c.row.get("message_bytes")): c
        for c in checked()
    }
    norm = by_where[
        (
            "kern-liger-benchmark-csv",
            "benchmark/data/all_benchmark_data.csv: kernel_name=rms_norm, kernel_provider=liger, "
            "kernel_operation_mode=forward, H=4096, timestamp 2024-09-03 15:39:30",
            4096,
            None,
        )
    ]
    assert norm.bound_s == pytest.approx(2 * (2048 * 4096 + 4096 + 2048 * 4096) / 2.039e12)
    assert norm.bound_s == pytest.approx(16.46e-6, rel=1e-3) and norm.measured_s == pytest.approx(31.072e-6)
    ring = by_where[
        (
            "comm-oci-nccltests-h100",
            "section 3, all_reduce_perf -b 1G -e 16G -f 2 on 16 GPUs",
            None,
            17179869184,
        )
    ]
    per_nic = 17179869184 / 8
    assert ring.bound_s == pytest.approx(3.6e-6 + 2 * 2.7e-6 + 2 * 0.47e-6 + per_nic / 50e9)
    assert ring.measured_s / ring.bound_s == pytest.approx(1.614, rel=1e-3)


def test_the_fabric_a_row_names_sets_its_nics():
    """A row measured on another network than the catalog's: OCI's A100 nodes have 16 × 100 Gb/s
    RoCE ports (25 GB/s a GPU), not AWS p4d's 4 × 100 Gb/s (6.25 GB/s, the catalog's): its 10 GiB
    all-reduce is bound at M/8 / 25e9 + 9.94 µs = 53.70 ms against 90.33 ms measured."""
    row = {"fabric": "roce-16x100g", "devices": 16, "nodes": 2}
    assert fabric_nic(row) == 25e9 and fabric_nic({**row, "fabric": "nvswitch"}) is None
    assert fabric_nic({"fabric": "efa-v4-8x400g", "devices": 32, "nodes": 4}) == 50e9
    (a100,) = [c for c in checked() if c.row["source"] == "comm-oci-nccltests-a100"]
    assert a100.bound_s == pytest.approx(9.94e-6 + 10 * 2**30 / 8 / 25e9) and a100.measured_s == 0.09033


def summary() -> str:
    """Counts per kind, device and rule, and the worst (smallest) measured/bound per kind and rule:
    ``python -c 'import tests.test_public_bounds as t; print(t.summary())'``."""
    counts = Counter((c.row["kind"], c.row["device"], c.row["rule"]) for c in checked())
    lines = [f"{n:4d}  {k:12s} {d:16s} {r}" for (k, d, r), n in sorted(counts.items(), key=str)]
    worst: dict[tuple[str, Any], Checked] = {}
    for c in checked():
        key = (c.row["kind"], c.row["rule"])
        if key not in worst or c.ratio < worst[key].ratio:
            worst[key] = c
    lines += [
        f"worst {k:12s} {r!s:10s} measured/bound {c.ratio:.3f}  {c.label()}"
        for (k, r), c in sorted(worst.items(), key=str)
    ]
    return "\n".join(lines)
