"""Fit the shipped efficiency profiles (src/attnroof/profiles/data/) on public kernel- and
collective-level measurements (data/public/), and write them with every number's origin.

    python scripts/fit_profiles.py            # fit, print each family's figures and held-out error
    python scripts/fit_profiles.py --write    # and write src/attnroof/profiles/data/<family>-<dtype>.toml

**Only kernel- and collective-level rows are fitted** (GEMMs, attention, decode, element-wise
kernels, collectives); the end-to-end results of data/validation/ are never read here.

Each kind is fitted by least squares in log time (scipy's ``least_squares``, soft-L1 loss) of
the very function the forecasts run (:mod:`attnroof.profiles.kernels`), so the shipped figures
are those of the model that uses them. The error written beside them is held out: each source's
rows forecast by a fit to the other sources of the family (leave one source out), or, for a
family with one source, each fifth of the rows by a fit to the rest. A family with no rows of a
kind takes its vendor's pooled fit, and says so in the figure's note. Figures no kernel row can
fit (the SM counts, the share of communication frameworks hide, the host's time a step) come
from the sources named in :data:`FAMILIES` and :data:`CONSTANTS`.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tomllib
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from attnroof.errors import AttnroofError  # noqa: E402
from attnroof.profiles import Gemm, Link, Memory, Profile  # noqa: E402
from attnroof.profiles.kernels import ForecastRoof  # noqa: E402
from attnroof.profiles.measured import KERNEL_KINDS, MEMORY_KINDS, Kernel, kernel  # noqa: E402

PUBLIC = Path(__import__("os").environ.get("ATTNROOF_PUBLIC", ROOT / "data" / "public"))
OUT = Path(
    __import__("os").environ.get("ATTNROOF_PROFILES_OUT", ROOT / "src" / "attnroof" / "profiles" / "data")
)

FAMILIES: dict[str, dict[str, Any]] = {
    "a100": {
        "vendor": "NVIDIA",
        "devices": {"A100 SXM 80GB": 108, "A100 SXM 40GB": 108, "A100 PCIe 80GB": 108},
        "sm_source": "sm-a100",
        "nearest": [
            "A40",
            "A10G",
            "RTX A6000",
            "L40S",
            "L40",
            "L4",
            "RTX 6000 Ada",
            "RTX 4090",
            "RTX 5090",
            "T4",
            "V100 SXM2 16GB",
        ],
    },
    "h100": {
        "vendor": "NVIDIA",
        "devices": {"H100 SXM": 132, "H100 PCIe": 114, "H100 NVL": 132, "H800 SXM": 132},
        "sm_source": "sm-h100",
        "nearest": ["H20"],
        "vendor_default": True,
    },
    "h200": {
        "vendor": "NVIDIA",
        "devices": {"H200 SXM": 132, "GH200": 132},
        "sm_source": "sm-h100",
        "nearest": [],
    },
    "b200": {
        "vendor": "NVIDIA",
        "devices": {"B200": 148, "GB200": 148, "B300": 148, "GB300": 148},
        "sm_source": "sm-b200",
        "nearest": [],
    },
    "mi300x": {
        "vendor": "AMD",
        "devices": {"MI300X": 304, "MI325X": 304},
        "sm_source": "sm-mi300x",
        "nearest": ["MI355X", "MI250X", "MI250"],
        "vendor_default": True,
    },
}
"""Each family's member devices with their SM (AMD: CU) counts, and the catalog devices it stands
in for. The counts' sources are in :data:`SOURCES`."""

SOURCES: dict[str, dict[str, str]] = {
    "sm-a100": {
        "title": "NVIDIA A100 Tensor Core GPU Architecture (whitepaper): 108 SMs in the A100",
        "url": "https://images.nvidia.com/aem-dam/en-zz/Solutions/data-center/nvidia-ampere-architecture-whitepaper.pdf",
        "date": "2020",
        "where": "the A100 vs V100 comparison table (SMs: 108)",
    },
    "sm-h100": {
        "title": "NVIDIA H100 SXM vs PCIe specification table (132 / 114 SMs)",
        "url": "https://archive-lib.hpctech.co.jp/gpuproduct/nvidia-h100.html",
        "date": "2023",
        "where": "the SXM/PCIe table, SMs row; H200 and GH200 use the same GH100 die with 132 SMs enabled",
    },
    "sm-b200": {
        "title": "NVIDIA Blackwell B200: 148 SMs (two dies of 74)",
        "url": "https://resources.nvidia.com/en-us-blackwell-architecture",
        "date": "2024",
        "where": "Blackwell architecture technical brief",
    },
    "sm-mi300x": {
        "title": "AMD Instinct MI300X: 304 compute units (ROCm hardware specifications)",
        "url": "https://rocm.docs.amd.com/en/latest/conceptual/gpu-arch/mi300.html",
        "date": "2024",
        "where": "the MI300 series table, compute units",
    },
    "fit": {
        "title": "scripts/fit_profiles.py: least squares in log time over data/public/ (kernel and collective rows only)",
        "where": "each figure's note names the rows and their sources",
    },
}

CONSTANTS: dict[str, tuple[float, str, str]] = {
    "overlap.tensor": (
        0.0,
        "megatron-tp",
        "tensor-parallel all-reduces sit between the layer's GEMMs (Megatron-LM's f and g): nothing to hide them behind",
    ),
    "overlap.data": (
        1.0,
        "pytorch-ddp",
        "gradients all-reduced in buckets as the backward pass produces them; the last bucket's exposure is not modelled",
    ),
    "overlap.pipeline": (1.0, "megatron-pp", "pipeline sends overlapped with the next micro-batch's compute"),
    "overlap.context": (
        1.0,
        "megatron-pp",
        "the K/V ring hidden behind each chunk's attention, as the bound has it",
    ),
}
STEP_LAUNCH = (
    3e-6,
    "host-tritonbench-pr-1017",
    "a kernel's fixed cost inside a step of many: cuLaunchKernel's host cost for a no-op kernel (GB200, "
    "raw driver launch), which each back-to-back kernel shorter than it waits for; a kernel timed alone "
    "pays its benchmark's whole fixed cost instead (the fitted launch_s)",
)
CONSTANT_SOURCES: dict[str, dict[str, str]] = {
    "megatron-tp": {
        "title": "Shoeybi et al. 2019, Megatron-LM: Training Multi-Billion Parameter Language Models Using Model Parallelism",
        "url": "https://arxiv.org/abs/1909.08053",
        "date": "2019-09",
        "where": "section 3, Figure 3: the f and g operators, all-reduces on the layer's critical path",
    },
    "pytorch-ddp": {
        "title": "Li et al. 2020, PyTorch Distributed: Experiences on Accelerating Data Parallel Training (VLDB)",
        "url": "https://arxiv.org/abs/2006.15704",
        "date": "2020-06",
        "where": "section 3.2.3, overlapping computation with communication (gradient bucketing)",
    },
    "megatron-pp": {
        "title": "Narayanan et al. 2021, Efficient Large-Scale Language Model Training on GPU Clusters Using Megatron-LM",
        "url": "https://arxiv.org/abs/2104.04473",
        "date": "2021-04",
        "where": "section 4.1, the scatter/gather optimization and overlapped point-to-point communication",
    },
}


# ---------------------------------------------------------------- rows


def public_rows() -> tuple[list[dict[str, Any]], dict[str, Any]]:
    rows = []
    for path in sorted(PUBLIC.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                rows.append(json.loads(line))
    sources = tomllib.loads((PUBLIC / "sources.toml").read_text(encoding="utf-8"))
    return rows, sources


def family_of(device: str) -> str | None:
    from attnroof.profiles.measured import device as get

    name = get(device).name
    return next((f for f, spec in FAMILIES.items() if name in spec["devices"]), None)


def dtype_group(dt: str) -> str:
    return "fp8" if dt in ("fp8", "int8") else "bf16"


@dataclass
class Fitted:
    """One kind's fit: the parameters, the rows, and each row's held-out forecast."""

    kind: str
    params: dict[str, float]
    rows: list[Kernel]
    held: list[float]
    """Held-out |forecast/measured − 1| per row."""
    note: str

    @property
    def median(self) -> float:
        return statistics.median(self.held) if self.held else math.nan

    @property
    def p90(self) -> float:
        return _quantile(self.held, 0.9)


def _quantile(xs: Sequence[float], q: float) -> float:
    if not xs:
        return math.nan
    s = sorted(xs)
    return s[min(len(s) - 1, math.ceil(q * len(s)) - 1)]


# ---------------------------------------------------------------- the kinds' models


@dataclass(frozen=True)
class Model:
    """A kind's parameters (names, start, bounds) and how they make a profile."""

    names: tuple[str, ...]
    start: tuple[float, ...]
    low: tuple[float, ...]
    high: tuple[float, ...]
    build: Callable[[Profile, dict[str, float]], Profile]


def _gemm(p: Profile, x: dict[str, float]) -> Profile:
    g = Gemm(x["ceiling"], x["k_half"], int(x["tile_t"]), int(x["tile_m"]), x["memory"], x["launch_s"])
    return replace(p, gemm=g)


def _attention(p: Profile, x: dict[str, float]) -> Profile:
    ceil = {int(k[8:]): v for k, v in x.items() if k.startswith("ceiling_")}
    a = replace(p.attention, ceiling=ceil or p.attention.ceiling, s_half=x.get("s_half", p.attention.s_half),
                block=int(x.get("block", p.attention.block)), launch_s=x.get("launch_s", p.attention.launch_s))  # fmt: skip
    return replace(p, attention=a)


def _decode(p: Profile, x: dict[str, float]) -> Profile:
    return replace(
        p,
        attention=replace(p.attention, decode=x["decode"], launch_s=x.get("launch_s", p.attention.launch_s)),
    )


def _memory(p: Profile, x: dict[str, float]) -> Profile:
    return replace(p, memory=Memory(x["fraction"], 1.0, x["launch_s"]))


def fit_kind(
    kind: str, base: Profile, rows: list[Kernel], names: list[str], start: list[float], low: list[float], high: list[float],
    build: Callable[[Profile, dict[str, float]], Profile], fixed: dict[str, float],
) -> dict[str, float]:  # fmt: skip
    """Least squares in log time of ``rows`` over the parameters ``names``."""
    import numpy as np
    from scipy.optimize import least_squares

    def residuals(v: Any) -> Any:
        x = {**fixed, **dict(zip(names, v, strict=True))}
        p = build(base, x)
        out = []
        for k in rows:
            fr = ForecastRoof.over(k.roof, p, FAMILY_SMS.get(k.roof.device, 0))
            out.append(math.log(k.forecast_s(fr) / k.measured_s))
        return np.array(out)

    res = least_squares(
        residuals, np.array(start), bounds=(np.array(low), np.array(high)), loss="soft_l1", f_scale=0.1
    )
    return {**fixed, **dict(zip(names, res.x.tolist(), strict=True))}


FAMILY_SMS: dict[str, int] = {d: n for spec in FAMILIES.values() for d, n in spec["devices"].items()}


# ---------------------------------------------------------------- fitting a family


def _loss(p: Profile, rows: list[Kernel]) -> list[float]:
    return [
        abs(k.forecast_s(ForecastRoof.over(k.roof, p, FAMILY_SMS.get(k.roof.device, 0))) / k.measured_s - 1)
        for k in rows
    ]


SPECS: dict[str, Model] = {
    # GEMM: ceiling, k_half, memory fraction, launch; tiles tried among TILES
    "gemm": Model(("ceiling", "k_half", "memory", "launch_s"), (0.8, 128.0, 0.85, 5e-6), (0.05, 0.0, 0.05, 0.0),
                  (1.0, 8192.0, 1.0, 1e-4), _gemm),
    "memory": Model(("fraction", "launch_s"), (0.8, 3e-6), (0.05, 0.0), (1.0, 1e-4), _memory),
    "decode": Model(("decode", "launch_s"), (0.7, 5e-6), (0.05, 0.0), (1.0, 1e-4), _decode),
}  # fmt: skip
TILES = ((128, 128), (128, 256), (256, 128))
BLOCKS = (64, 128)


def fit_rows(kind: str, base: Profile, rows: list[Kernel]) -> tuple[Profile, dict[str, float]]:
    """``base`` with ``kind``'s parameters fitted on ``rows`` (all of them)."""
    if kind == "gemm":
        best = None
        for tt, tm in TILES:
            m = SPECS["gemm"]
            x = fit_kind(kind, base, rows, list(m.names), list(m.start), list(m.low), list(m.high), m.build,
                         {"tile_t": tt, "tile_m": tm})  # fmt: skip
            p = m.build(base, x)
            score = sum(math.log1p(e) ** 2 for e in _loss(p, rows))
            if best is None or score < best[0]:
                best = (score, p, x)
        assert best is not None
        return best[1], best[2]
    if kind in ("attention", "backward"):
        heads = sorted({k.row["head_dim"] for k in rows})
        if kind == "backward":
            names, start, low, high = ["backward"], [0.7], [0.05], [1.0]

            def build(p: Profile, x: dict[str, float]) -> Profile:
                return replace(p, attention=replace(p.attention, backward=x["backward"]))

            x = fit_kind(kind, base, rows, names, start, low, high, build, {})
            return build(base, x), x
        best = None
        for block in BLOCKS:
            names = [f"ceiling_{d}" for d in heads] + ["s_half", "launch_s"]
            start = [0.6] * len(heads) + [256.0, 5e-6]
            low, high = [0.05] * len(heads) + [0.0, 0.0], [1.0] * len(heads) + [16384.0, 1e-4]
            x = fit_kind(kind, base, rows, names, start, low, high, _attention, {"block": block})
            p = _attention(base, x)
            score = sum(math.log1p(e) ** 2 for e in _loss(p, rows))
            if best is None or score < best[0]:
                best = (score, p, x)
        assert best is not None
        return best[1], best[2]
    m = SPECS[kind]
    x = fit_kind(kind, base, rows, list(m.names), list(m.start), list(m.low), list(m.high), m.build, {})
    return m.build(base, x), x


def held_out(kind: str, base: Profile, rows: list[Kernel]) -> list[float]:
    """Each row's |forecast/measured − 1| from a fit that did not see it: leave one source out
    (where the others have rows enough), else five folds."""
    by_source: dict[str, list[Kernel]] = defaultdict(list)
    for k in rows:
        by_source[k.row["source"]].append(k)
    folds: list[tuple[list[Kernel], list[Kernel]]] = []
    if len(by_source) >= 2:
        for s, mine in by_source.items():
            rest = [k for k in rows if k.row["source"] != s]
            if len(rest) >= 3:
                folds.append((rest, mine))
    if not folds:
        for f in range(5):
            test = rows[f::5]
            rest = [k for i, k in enumerate(rows) if i % 5 != f]
            if test and len(rest) >= 3:
                folds.append((rest, test))
    out: list[float] = []
    for train, test in folds:
        p, _ = fit_rows(kind, base, train)
        out += _loss(p, test)
    return out


KIND_ROWS: dict[str, Callable[[Kernel], bool]] = {
    "gemm": lambda k: k.kind == "gemm",
    "attention": lambda k: k.kind == "attention" and k.row.get("pass", "fwd") == "fwd",
    "backward": lambda k: k.kind == "attention" and k.row.get("pass") == "bwd",
    "decode": lambda k: k.kind == "decode",
    "memory": lambda k: k.kind in MEMORY_KINDS and k.row.get("l2", "cold") != "warm",
}
ORDER = ("memory", "gemm", "attention", "backward", "decode")
MIN_ROWS = 3


def fastest(kernels: list[Kernel]) -> list[Kernel]:
    """Of the rows that time one shape on one device in one pass (several implementations), the
    fastest: a forecast is of the kernel a tuned deployment runs."""
    best: dict[tuple[Any, ...], Kernel] = {}
    for k in kernels:
        r = k.row
        shape = tuple(
            r.get(f)
            for f in (
                "m",
                "n",
                "k",
                "batch",
                "heads",
                "kv_heads",
                "seq_q",
                "seq_k",
                "head_dim",
                "causal",
                "tokens",
                "hidden",
                "elements",
                "op",
            )
        )
        key = (k.roof.device, r["dtype"], r["kind"], r.get("pass", "fwd"), r.get("l2"), shape)
        if key not in best or k.measured_s < best[key].measured_s:
            best[key] = k
    return list(best.values())


def fit_family(
    name: str, group: str, kernels: list[Kernel], base: Profile | None = None, comms: list[Any] | None = None
) -> tuple[Profile, dict[str, str], dict[str, list[float]]]:
    """One family at one dtype group: each kind fitted on the family's own rows, or on its
    vendor's where it has fewer than :data:`MIN_ROWS`; each figure's note; the held-out errors.
    An fp8 profile starts from the family's bf16 one (``base``) and keeps what it cannot fit."""
    spec = FAMILIES[name]
    members = set(spec["devices"])
    vendor = {f for f, s in FAMILIES.items() if s["vendor"] == spec["vendor"]}
    vendor_devices = {d for f in vendor for d in FAMILIES[f]["devices"]}
    p = Profile(
        name,
        group,
        spec["vendor"],
        tuple(spec["nearest"]),
        bool(spec.get("vendor_default")),
        dict(spec["devices"]),
    )
    if base is not None:
        p = replace(base, dtype=group)
        if not any(k.roof.device in members and dtype_group(k.row["dtype"]) == group for k in kernels):
            return p, {}, {}  # no row of the family in this dtype: no profile of its own
    notes: dict[str, str] = {}
    errors: dict[str, list[float]] = {}
    for kind in ORDER:
        of_kind = [k for k in kernels if KIND_ROWS[kind](k) and dtype_group(k.row["dtype"]) == group]
        mine = [k for k in of_kind if k.roof.device in members]
        how = f"{len(mine)} rows of {name}"
        own = mine
        if len(mine) < MIN_ROWS:
            mine = [k for k in of_kind if k.roof.device in vendor_devices]
            how = f"no {name} rows enough: {len(mine)} rows of {spec['vendor']}'s families pooled"
        if len(mine) < MIN_ROWS and group == "bf16":
            mine = of_kind
            how = f"no {spec['vendor']} rows enough: {len(mine)} rows of every family pooled, as fractions of {name}'s own roofs"
        if len(mine) < MIN_ROWS:
            continue  # an fp8 profile keeps the bf16 figures it cannot fit
        p, x = fit_rows(kind, p, mine)
        errs = held_out(kind, p, mine)
        if kind == "gemm" and 0 < len(own) < MIN_ROWS:  # the family's own ceiling, on its few rows
            m = SPECS["gemm"]
            x = fit_kind(
                kind,
                p,
                own,
                ["ceiling"],
                [x["ceiling"]],
                [0.05],
                [1.0],
                m.build,
                {k: v for k, v in x.items() if k != "ceiling"},
            )
            p = m.build(p, x)
            errs = _loss(p, own) and errs
            how += f"; the ceiling refitted on the family's own {len(own)} row{'s' if len(own) > 1 else ''}"
        errors[kind] = errs
        sources = sorted({k.row["source"] for k in mine})
        med = statistics.median(errs) if errs else math.nan
        notes[kind] = f"{how} ({', '.join(sources)}); held-out median {med:.0%}"
    if group == "bf16" and comms:
        for which, test in (
            ("scaleup", lambda c: c.row["nodes"] == 1),
            ("scaleout", lambda c: c.row["nodes"] > 1),
        ):
            # the bandwidth regime (≥ 1 MiB), where the rows' NCCL runs the algorithms the bound takes;
            # smaller messages keep the bound's latency (the serving engines' one-shot kernels, not
            # nccl-tests'); a row below its bound is not fitted
            of = [
                c for c in comms
                if test(c) and c.row["message_bytes"] >= SMALLEST_FITTED and c.time_on(c.links) <= c.measured_s * (1 + 1e-9)
            ]  # fmt: skip
            mine = [c for c in of if _family_device(c.row["device"]) in members]
            how = f"{len(mine)} collective rows of {name}"
            if len(mine) < MIN_ROWS:
                mine = [c for c in of if _family_device(c.row["device"]) in vendor_devices] or of
                how = f"no {name} rows enough: {len(mine)} collective rows pooled"
            if len(mine) < MIN_ROWS:
                continue
            p, held = fit_link(which, p, mine)
            if not held:
                continue
            errors[which] = held
            sources = sorted({c.row["source"] for c in mine})
            notes[which] = f"{how} ({', '.join(sources)}); held-out median {statistics.median(held):.0%}"
    return p, notes, errors


def _family_device(name: str) -> str:
    from attnroof.profiles.measured import device

    return device(name).name


# ---------------------------------------------------------------- links


@dataclass(frozen=True)
class Collective:
    """One measured collective: the row, its message, the device's links, the time it took."""

    row: dict[str, Any]
    comm: Any
    links: Any
    measured_s: float

    def time_on(self, links: Any) -> float:
        from attnroof.model.parallel import group_link
        from attnroof.ops.collectives import fastest

        r = self.row
        if r["nodes"] > 1:
            links = replace(links, scaleup_domain=r["devices"] // r["nodes"])
        link = group_link(links, r["devices"], 1, f"{r['collective']} over {r['devices']} devices")
        return float(fastest(self.comm, link)[1])


def collectives(rows: list[dict[str, Any]]) -> list[Collective]:
    """The collective rows attnroof can cost (the way tests/test_public_bounds.py does)."""
    from attnroof.ops import collectives as coll
    from attnroof.profiles.measured import device

    out = []
    for r in rows:
        if r["kind"] != "collective" or r["collective"] not in coll.COLLECTIVE_FN:
            continue
        try:
            comm = coll.COLLECTIVE_FN[r["collective"]](r["message_bytes"], r["devices"])
            links = device(r["device"]).links
        except (KeyError, ValueError, AttnroofError):
            continue
        if "measured_s" in r:
            t = float(r["measured_s"])
        elif r.get("busbw_bytes_per_s"):
            t = float(comm.bytes_per_device) / r["busbw_bytes_per_s"]
        elif r.get("algbw_bytes_per_s"):
            t = r["message_bytes"] / r["algbw_bytes_per_s"]
        else:
            continue
        out.append(Collective(r, comm, links, t))
    return out


SMALLEST_FITTED = 1 << 20
"""Collective messages the link fit reads: from 1 MiB up, where bandwidth sets the time."""


def fit_link(which: str, base: Profile, rows: list[Collective]) -> tuple[Profile, list[float]]:
    """``base`` with the ``which`` link's share of its bandwidth fitted on ``rows`` (least squares
    in log time of the bound's own algorithm choice on the forecast's links; the latency stays the
    bound's), and each row's held-out error (five folds)."""
    import numpy as np
    from scipy.optimize import least_squares

    from attnroof.model.forecast import forecast_links

    def build(v: Any) -> Profile:
        return replace(base, **{which: Link(float(v[0]), 1.0)})

    def fit(train: list[Collective]) -> Profile:
        def res(v: Any) -> Any:
            p = build(v)
            return np.array([math.log(c.time_on(forecast_links(c.links, p)) / c.measured_s) for c in train])

        return build(
            least_squares(res, np.array([0.8]), bounds=([0.05], [1.0]), loss="soft_l1", f_scale=0.1).x
        )

    held: list[float] = []
    folds = min(5, len(rows))
    for f in range(folds):
        test = rows[f::folds]
        rest = [c for i, c in enumerate(rows) if i % folds != f]
        if test and len(rest) >= 2:
            p = fit(rest)
            held += [abs(c.time_on(forecast_links(c.links, p)) / c.measured_s - 1) for c in test]
    return fit(rows), held


# ---------------------------------------------------------------- writing a profile


def _q(s: str) -> str:
    return json.dumps(s, ensure_ascii=False)


def _fig(value: float, source: str, note: str = "") -> str:
    v = f"{value:.6g}" if isinstance(value, float) else str(value)
    return "{ value = " + v + ", source = " + _q(source) + (", note = " + _q(note) if note else "") + " }"


SECTION_FIELDS = {
    "gemm": ("ceiling", "k_half", "tile_t", "tile_m", "memory", "launch_s"),
    "attention": ("s_half", "block", "decode", "backward", "launch_s"),
    "memory": ("fraction", "launch_s"),
}
FIELD_KIND = {"attention": {"decode": "decode", "backward": "backward"}}


def render(p: Profile, notes: dict[str, str], errors: dict[str, list[float]], public: dict[str, Any]) -> str:
    """The profile's TOML, every figure with its source and note."""
    spec = FAMILIES[p.name]
    used = sorted({s for n in notes.values() for s in n[n.find("(") + 1 : n.find(")")].split(", ") if s})
    out = [
        f"# attnroof efficiency profile: {p.name} {p.dtype}. Written by scripts/fit_profiles.py --write; do not edit by hand.",
        f"name = {_q(p.name)}",
        f"dtype = {_q(p.dtype)}",
        f"vendor = {_q(p.vendor)}",
        f"nearest = [{', '.join(_q(d) for d in p.nearest)}]",
        f"vendor_default = {'true' if p.vendor_default else 'false'}",
        "",
        "[devices]",
        *(
            f"{_q(d)} = {_fig(n, spec['sm_source'], 'SMs (AMD: compute units)')}"
            for d, n in p.devices.items()
        ),
    ]
    fitted = {"gemm": "gemm", "memory": "memory"}
    for section, fields in SECTION_FIELDS.items():
        obj = getattr(p, section)
        lines = []
        for f in fields:
            kind = FIELD_KIND.get(section, {}).get(f, fitted.get(section, "attention"))
            if kind not in notes:
                continue
            lines.append(f"{f} = {_fig(getattr(obj, f), 'fit', notes[kind])}")
        if section == "attention" and "attention" in notes:
            cells = ", ".join(
                f"{d} = {_fig(v, 'fit', notes['attention'])}" for d, v in sorted(p.attention.ceiling.items())
            )
            lines.append("ceiling = { " + cells + " }")
        if lines:
            out += ["", f"[{section}]", *lines]
    for which in ("scaleup", "scaleout"):
        if which in notes:
            ln = getattr(p, which)
            out += ["", f"[{which}]", f"fraction = {_fig(ln.fraction, 'fit', notes[which])}"]
    step_launch, src, note = STEP_LAUNCH
    out += ["", "[step]", f"launch_s = {_fig(step_launch, src, note)}"]
    out += ["", "[overlap]"]
    for key, (value, src, note) in CONSTANTS.items():
        out.append(f"{key.split('.')[1]} = {_fig(value, src, note)}")
    errs = {k: v for k, v in errors.items() if v}
    pooled = [e for v in errs.values() for e in v]
    if pooled:
        out += ["", "[error.median]"]
        out += [
            f"{k} = {_fig(statistics.median(v), 'fit', f'{len(v)} held-out rows')}" for k, v in errs.items()
        ]
        out.append(
            f"kernel = {_fig(statistics.median(pooled), 'fit', f'{len(pooled)} held-out kernel rows, every kind')}"
        )
        out += ["", "[error.p90]"]
        out += [f"{k} = {_fig(_quantile(v, 0.9), 'fit', f'{len(v)} held-out rows')}" for k, v in errs.items()]
        out.append(
            f"kernel = {_fig(_quantile(pooled, 0.9), 'fit', f'{len(pooled)} held-out kernel rows, every kind')}"
        )
    srcs = {**{k: v for k, v in SOURCES.items() if k in (spec["sm_source"], "fit")}, **CONSTANT_SOURCES}
    srcs[STEP_LAUNCH[1]] = public[STEP_LAUNCH[1]]
    srcs |= {s: public[s] for s in used if s in public}
    for sid, s in srcs.items():
        out += ["", f"[sources.{_q(sid)}]"]
        out += [f"{k} = {_q(str(s[k]))}" for k in ("title", "url", "date", "where") if s.get(k)]
    return "\n".join(out) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="write the profiles into the package")
    ap.add_argument(
        "--markdown", action="store_true", help="print the held-out error table for docs/forecasts.md"
    )
    args = ap.parse_args(argv)
    table: list[str] = []
    rows, public = public_rows()
    kernels: list[Kernel] = []
    skipped: dict[str, int] = defaultdict(int)
    for r in rows:
        if r["kind"] not in KERNEL_KINDS:
            continue
        try:
            kernels.append(kernel(r))
        except (KeyError, ValueError, AttnroofError) as e:
            skipped[f"{r['kind']}: {type(e).__name__}: {str(e)[:80]}"] += 1
    print(f"{len(kernels)} kernel rows read; skipped: {dict(skipped) or 'none'}")
    below = [k for k in kernels if k.measured_s < k.bound_s * (1 - 1e-6)]
    for k in below:
        print(
            f"  below its bound, not fitted: {k.row['device']} {k.kind} {k.row.get('impl')} {k.row['where'][:90]} ({k.measured_s / k.bound_s:.2f})"
        )
    kernels = fastest([k for k in kernels if k not in below])
    comms = collectives(rows)
    print(f"{len(comms)} collective rows read")
    print(f"{len(kernels)} rows fitted: the fastest implementation of each shape")
    for name in FAMILIES:
        bf16 = None
        for group in ("bf16", "fp8"):
            p, notes, errors = fit_family(name, group, kernels, bf16, comms)
            bf16 = bf16 or p
            if not notes:
                continue
            print(f"\n{name} {group}")
            for kind, note in notes.items():
                print(f"  {kind:9} {note}")
            print(f"  gemm {p.gemm}\n  attention {p.attention}\n  memory {p.memory}")
            if args.write:
                (OUT / f"{name}-{group}.toml").write_text(render(p, notes, errors, public), encoding="utf-8")
            for kind, errs in errors.items():
                if errs:
                    pooled = "pooled" if "pooled" in notes[kind] else "own"
                    table.append(
                        f"| {name} | {group} | {kind} | {len(errs)} | {pooled} | {statistics.median(errs):.1%} | {_quantile(errs, 0.9):.1%} |"
                    )
    if args.markdown:
        print(
            "\n| family | dtype | kind | held-out rows | rows | median | p90 |\n|:--|:--|:--|--:|:--|--:|--:|"
        )
        print("\n".join(table))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
