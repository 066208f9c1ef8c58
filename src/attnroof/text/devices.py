"""The device catalog in words: the listing ``attnroof devices`` prints (and the README
carries, through ``scripts/catalog_table.py``), and one device with every figure and its source.
Figures are SI inside; each is divided by its unit here, at the edge."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from attnroof.devices import Device
from attnroof.devices.links import BRIDGE, Link
from attnroof.dtypes import DTYPES, rate_unit
from attnroof.escaping import escaped
from attnroof.text.render import table
from attnroof.units import GB, MB, TB_PER_S, TERA

HEADLINE_DTYPE = "bf16"
"""The dtype the listing ranks parts by: what attention and training kernels run in."""
FALLBACK_DTYPE = "fp16"
"""Shown (and marked) for a part that has no bf16 figure but an fp16 one."""
MISSING = "—"
WRAP = 100
"""Characters per line for the notes and sources of ``attnroof devices NAME``."""

LIST_HEADERS = (
    "device", "vendor", "{dt} {unit}", "TB/s", "GB", "cache MB @ TB/s", "W", "link GB/s", "domain",
    "ridge FLOP/B", "aliases",
)  # fmt: skip
"""GB: the memory the device has (decimal GB of its real bytes, not the marketed figure); cache:
the last-level cache's size and bandwidth, which the bound charges resident bytes at (— where no
source gives a bandwidth: the bound is single-level); W: the board power (the vendor's maximum TDP
or board power; — where no source gives one); link: the scale-up bandwidth one way per device;
domain: the devices one scale-up domain joins."""


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


def cache_fig(dev: Device) -> str:
    """The last-level cache as the listing shows it: ``50 @ 12`` (MB, TB/s), or — without a
    bandwidth (a size alone leaves the bound single-level).

    >>> from attnroof.devices import get_device
    >>> cache_fig(get_device("h100")), cache_fig(get_device("gb200"))
    ('50 @ 12', '—')
    """
    if dev.onchip_bytes is None or dev.cache_bandwidth_bytes_per_s is None:
        return MISSING
    return f"{fig(dev.onchip_bytes, MB)} @ {fig(dev.cache_bandwidth_bytes_per_s, TB_PER_S)}"


# ---------------------------------------------------------------- the listing


def catalog_rows(devices: Sequence[Device], dt: str = HEADLINE_DTYPE) -> list[list[str]]:
    """One row per device: name, vendor, peak (TFLOP/s), bandwidth (TB/s), capacity (GB), board
    power (W), scale-up link and domain, ridge, aliases."""
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
                escaped(dev.name),
                dev.vendor or MISSING,
                peak,
                fig(dev.bandwidth_bytes_per_s, TB_PER_S),
                fig(_round(dev.capacity_bytes), GB),
                cache_fig(dev),
                fig(dev.board_power_w, 1),
                fig(dev.links.scaleup_bytes_per_s, GB),
                MISSING if dev.links.scaleup_domain is None else str(dev.links.scaleup_domain),
                ridge,
                ", ".join(dev.aliases),
            ]
        )
    return rows


def catalog_table(devices: Sequence[Device], dt: str = HEADLINE_DTYPE) -> str:
    """The Markdown table of ``devices`` that ``attnroof devices`` prints and the README carries."""
    headers = [h.format(dt=dt, unit=peak_unit(dt)) for h in LIST_HEADERS]
    return table(headers, catalog_rows(devices, dt), "llrrrrrrrrl")


def _round(capacity: float | None) -> float | None:
    """Bytes rounded to 0.1 GB for the listing (85.9e9 for 80 GiB)."""
    return None if capacity is None else round(capacity / 1e8) * 1e8


# ---------------------------------------------------------------- one device


def peak_unit(dt: str) -> str:
    return "T" + rate_unit(dt)


def device_text(dev: Device) -> str:
    """Every figure of one device, with its ridge per dtype, notes and source, for people."""
    kind = " ".join(x for x in (dev.vendor, dev.kind) if x)
    memory = [f"bandwidth {fig(dev.bandwidth_bytes_per_s, TB_PER_S)} TB/s"]
    if dev.capacity_bytes is not None:
        sold = f", sold as {dev.capacity_marketed}" if dev.capacity_marketed else ""
        memory.append(
            f"capacity {dev.capacity_bytes:,.0f} B ({fig(_round(dev.capacity_bytes), GB)} GB{sold})"
        )
    if dev.onchip_bytes is not None:
        speed = dev.cache_bandwidth_bytes_per_s
        at = (
            f" at {fig(speed, TB_PER_S)} TB/s"
            if speed is not None
            else " (no bandwidth: a single-level bound)"
        )
        memory.append(f"on-chip {fig(dev.onchip_bytes, MB)} MB{at}")
    order = [d for d in DTYPES if d in dev.peak_flops_per_s]
    rows = [[d, f"{fig(dev.peak(d), TERA)} {peak_unit(d)}", f"{dev.ridge(d):.1f}"] for d in order]
    lines = [
        escaped(dev.name) + (f" ({kind})" if kind else ""),
        "aliases: " + (", ".join(map(escaped, dev.aliases)) or MISSING),
        "memory: " + ", ".join(memory),
        "links: " + link_text(dev),
        "board power: " + power_text(dev),
        "",
        table(["dtype", "dense peak", "ridge FLOP/B"], rows),
        "",
    ]
    for label, text in (
        ("capacity source", dev.capacity_source),
        ("links source", dev.links.source),
        ("links notes", dev.links.notes),
        ("cache source", dev.cache_source),
        ("cache notes", dev.cache_note),
        ("board power source", dev.board_power_source),
        ("sparsity", dev.sparse_headline),
        ("notes", dev.notes),
        ("source", dev.source or "(none given)"),
        ("from", dev.origin),
    ):
        if text:
            lines.append(textwrap.fill(text, WRAP, initial_indent=f"{label}: ", subsequent_indent="  "))
    return "\n".join(lines)


def link_abilities(link: Link) -> list[str]:
    """What a link's fabric allows beyond NCCL's ring, in words (a bridge always has peer access,
    so it goes unsaid there)."""
    out = ["NVLS"] if link.switch_reduction else []
    return out + (["peer access"] if link.peer_access and link.kind != BRIDGE else [])


def link_text(dev: Device) -> str:
    """Scale-up and scale-out links in words: bandwidth one way per device, domain, latency."""
    parts = []
    for link, domain in dev.links.each():
        name = f" ({escaped(link.name)})" if link.name else ""
        size = f", {domain} devices a domain" if domain and link.kind != BRIDGE else ""
        size += f", joining {domain} cards" if link.kind == BRIDGE else ""
        size += "".join(f", {t}" for t in link_abilities(link))
        parts.append(
            f"{link.kind} {fig(link.bandwidth_bytes_per_s, GB)} GB/s one way{name}{size}, "
            f"{link.base_latency_s * 1e6:g} µs a call + {link.latency_s * 1e6:g} µs a step"
        )
    return "; ".join(parts) or "none in the catalog (give --link-bandwidth)"


def power_text(dev: Device) -> str:
    """The board power in words: watts and which figure it is, or why there is none."""
    note = f". {dev.board_power_note}" if dev.board_power_note else ""
    if dev.board_power_w is None:
        return f"none{note}{'' if note.endswith('.') else '.'} Give --board-power W for energy."
    return f"{fig(dev.board_power_w, 1)} W{note}"
