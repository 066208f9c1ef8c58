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

from attnroof import profiles  # noqa: E402
from attnroof.profiles import Attention, Gemm, Link, Memory, Profile  # noqa: E402
from attnroof.profiles.kernels import ForecastRoof  # noqa: E402
from attnroof.profiles.measured import KERNEL_KINDS, MEMORY_KINDS, Kernel, kernel  # noqa: E402

PUBLIC = ROOT / "data" / "public"
OUT = ROOT / "src" / "attnroof" / "profiles" / "data"

FAMILIES: dict[str, dict[str, Any]] = {
    "a100": {
        "vendor": "NVIDIA",
        "devices": {"A100 SXM 80GB": 108, "A100 SXM 40GB": 108, "A100 PCIe 80GB": 108},
        "sm_source": "sm-a100",
        "nearest": ["A40", "A10G", "RTX A6000", "L40S", "L40", "L4", "RTX 6000 Ada", "RTX 4090", "RTX 5090", "T4", "V100 SXM2 16GB"],
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
    "overlap.context": (1.0, "megatron-pp", "the K/V ring hidden behind each chunk's attention, as the bound has it"),
}
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
    return s[min(len(s) - 1, int(math.ceil(q * len(s))) - 1)]


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
    return replace(p, attention=replace(p.attention, decode=x["decode"], launch_s=x.get("launch_s", p.attention.launch_s)))


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

    res = least_squares(residuals, np.array(start), bounds=(np.array(low), np.array(high)), loss="soft_l1", f_scale=0.1)
    return {**fixed, **dict(zip(names, res.x.tolist(), strict=True))}


FAMILY_SMS: dict[str, int] = {d: n for spec in FAMILIES.values() for d, n in spec["devices"].items()}
