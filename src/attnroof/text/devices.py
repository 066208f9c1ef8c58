"""The device catalog in words: the listing ``attnroof devices`` prints (and the README
carries, through ``scripts/catalog_table.py``), and one device with every figure and its source.
Figures are SI inside; each is divided by its unit here, at the edge."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from attnroof.devices import Device
from attnroof.dtypes import DTYPES, rate_unit
from attnroof.text.render import table
from attnroof.units import GB, MB, TB_PER_S, TERA

HEADLINE_DTYPE = "bf16"
"""The dtype the listing ranks parts by: what attention and training kernels run in."""
FALLBACK_DTYPE = "fp16"
"""Shown (and marked) for a part that has no bf16 figure but an fp16 one."""
MISSING = "—"
WRAP = 100
"""Characters per line for the notes and sources of ``attnroof devices NAME``."""

LIST_HEADERS = ("device", "vendor", "{dt} {unit}", "TB/s", "GB", "ridge FLOP/B", "aliases")


# ---------------------------------------------------------------- figures


def shown_dtype(dev: Device, dt: str = HEADLINE_DTYPE) -> str | None:
    """The dtype whose peak the listing shows for ``dev``: ``dt``, else fp16 in place of bf16, else None.

    >>> from attnroof.devices import get_device
    >>> shown_dtype(get_device("h100"))
    'bf16'
    """
    if dt in dev.peak_flops_per_s:
        return dt
    if dt == HEADLINE_DTYPE and FALLBACK_DTYPE in dev.peak_flops_per_s:
        return FALLBACK_DTYPE
    return None


def fig(value: float | None, unit: float) -> str:
    """``value`` in ``unit`` (divide to leave SI), at the precision the source gave: 2.039, 989.4."""
    return MISSING if value is None else f"{value / unit:g}"


# ---------------------------------------------------------------- the listing


def catalog_rows(devices: Sequence[Device], dt: str = HEADLINE_DTYPE) -> list[list[str]]:
    """One row per device: name, vendor, peak (TFLOP/s), bandwidth (TB/s), capacity (GB), ridge, aliases."""
    rows = []
    for dev in devices:
        shown = shown_dtype(dev, dt)
        if shown is None:
            peak = ridge = MISSING
        else:
            peak = fig(dev.peak(shown), TERA) + ("" if shown == dt else f" ({shown})")
            ridge = f"{dev.ridge(shown):.1f}"
        rows.append(
            [
                dev.name,
                dev.vendor or MISSING,
                peak,
                fig(dev.bandwidth_bytes_per_s, TB_PER_S),
                fig(dev.capacity_bytes, GB),
                ridge,
                ", ".join(dev.aliases),
            ]
        )
    return rows


def catalog_table(devices: Sequence[Device], dt: str = HEADLINE_DTYPE) -> str:
    """The Markdown table of ``devices`` that ``attnroof devices`` prints and the README carries."""
    headers = [h.format(dt=dt, unit=peak_unit(dt)) for h in LIST_HEADERS]
    return table(headers, catalog_rows(devices, dt), "llrrrrl")


# ---------------------------------------------------------------- one device


def peak_unit(dt: str) -> str:
    return "T" + rate_unit(dt)


def device_text(dev: Device) -> str:
    """Every figure of one device, with its ridge per dtype, notes and source, for people."""
    kind = " ".join(x for x in (dev.vendor, dev.kind) if x)
    memory = [f"bandwidth {fig(dev.bandwidth_bytes_per_s, TB_PER_S)} TB/s"]
    if dev.capacity_bytes is not None:
        memory.append(f"capacity {fig(dev.capacity_bytes, GB)} GB")
    if dev.onchip_bytes is not None:
        memory.append(f"on-chip {fig(dev.onchip_bytes, MB)} MB")
    if dev.interconnect_bytes_per_s is not None:
        memory.append(f"interconnect {fig(dev.interconnect_bytes_per_s, GB)} GB/s")
    order = [d for d in DTYPES if d in dev.peak_flops_per_s]
    rows = [[d, f"{fig(dev.peak(d), TERA)} {peak_unit(d)}", f"{dev.ridge(d):.1f}"] for d in order]
    lines = [
        dev.name + (f" ({kind})" if kind else ""),
        "aliases: " + (", ".join(dev.aliases) or MISSING),
        "memory: " + ", ".join(memory),
        "",
        table(["dtype", "dense peak", "ridge FLOP/B"], rows),
        "",
    ]
    for label, text in (
        ("sparsity", dev.sparse_headline),
        ("notes", dev.notes),
        ("source", dev.source or "(none given)"),
        ("from", dev.origin),
    ):
        if text:
            lines.append(textwrap.fill(text, WRAP, initial_indent=f"{label}: ", subsequent_indent="  "))
    return "\n".join(lines)
