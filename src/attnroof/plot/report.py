"""The visual report: one self-contained HTML file (inline CSS, charts as inline SVG, no
scripts, nothing fetched) with the charts, the measured results and the worked analysis of
``attnroof sheet``, for one device, dtype and shape."""

from __future__ import annotations

import html
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from attnroof import __version__, outfile
from attnroof.devices import Device, get_device
from attnroof.dtypes import DType, dtype
from attnroof.errors import InputError
from attnroof.escaping import escaped
from attnroof.plot.chart import draw_roofline, mark_shape
from attnroof.plot.files import CREATOR, figure_svg
from attnroof.plot.inputs import (
    DECODE_KINDS,
    LINEAR_KINDS,
    Measured,
    measured_inputs,
    model_point,
)
from attnroof.plot.markdown import to_html
from attnroof.plot.series import DEFAULT_N, DEFAULT_S, trajectories
from attnroof.roofline import Roof
from attnroof.text import render
from attnroof.units import duration

CSS = """
:root { --ink: #1d1f23; --muted: #5f6670; --rule: #d9dde3; --band: #f4f6f9; --accent: #1f5fbf; }
* { box-sizing: border-box; }
body { margin: 0; color: var(--ink); background: #fff;
  font: 16px/1.6 -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, "Noto Sans", sans-serif; }
main { max-width: 68rem; margin: 0 auto; padding: 2.5rem 1.5rem 4rem; }
h1, h2, h3, h4 { line-height: 1.25; margin: 2.2rem 0 0.8rem; font-weight: 650; }
h1 { font-size: 2rem; margin-top: 0; }
h2 { font-size: 1.45rem; padding-bottom: 0.3rem; border-bottom: 1px solid var(--rule); }
h3 { font-size: 1.15rem; }
p, ul, ol { margin: 0.6rem 0; max-width: 46rem; }
li { margin: 0.2rem 0; }
a { color: var(--accent); }
.lede { color: var(--muted); margin-top: 0.2rem; }
code, pre { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, "Liberation Mono", monospace;
  font-size: 0.88em; }
code { background: var(--band); padding: 0.1em 0.35em; border-radius: 4px; }
pre { background: var(--band); padding: 0.9rem 1rem; border-radius: 6px; overflow-x: auto; }
pre code { background: none; padding: 0; }
blockquote { margin: 1rem 0; padding: 0.2rem 1rem; border-left: 3px solid var(--rule); color: var(--muted); }
table { border-collapse: collapse; margin: 1rem 0 1.4rem; font-size: 0.92rem;
  font-variant-numeric: tabular-nums; display: block; overflow-x: auto; max-width: 100%; }
th, td { padding: 0.4rem 0.8rem; border-bottom: 1px solid var(--rule); text-align: left;
  vertical-align: top; }
thead th { border-bottom: 2px solid var(--ink); font-weight: 600; white-space: nowrap; }
tbody tr:nth-child(even) { background: var(--band); }
.right { text-align: right; white-space: nowrap; } .center { text-align: center; } .left { text-align: left; }
figure { margin: 1.5rem 0 2.5rem; }
figure svg { width: 100%; height: auto; display: block; }
figcaption { color: var(--muted); font-size: 0.92rem; margin-top: 0.4rem; max-width: 46rem; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 0.2rem 1.2rem; margin: 1rem 0; }
dl.facts dt { color: var(--muted); } dl.facts dd { margin: 0; }
footer { margin-top: 3rem; color: var(--muted); font-size: 0.85rem; border-top: 1px solid var(--rule);
  padding-top: 0.8rem; }
@media print { main { max-width: none; } figure { break-inside: avoid; } }
"""


def _e(text: object) -> str:
    """``text`` as HTML text, its control characters shown escaped (a device file's name)."""
    return html.escape(escaped(str(text)), quote=True)


def _figure(svg: str, caption: str, gid: str) -> str:
    return f'<figure id="{gid}">\n{svg}\n<figcaption>{caption}</figcaption>\n</figure>'


MAX_TABLE_ROWS = 200
"""Most measured kernels listed in the report's table (the charts draw them all): a page of a
results file of thousands of measurements stays a few MB."""


def _measured_table(measured: Sequence[Measured], device: Device, ceilings: Sequence[Roof] = ()) -> str:
    """The first :data:`MAX_TABLE_ROWS` measured kernels, each beside the model's bound on the
    roof it ran under, and a line saying how many more there are."""
    head = [
        "kind",
        "implementation",
        "shape",
        "dtype",
        "time",
        "FLOP/byte",
        "achieved",
        "model bound",
        "of bound",
    ]
    align = ["", "", "", "", "right", "right", "right", "right", "right"]
    rows = []
    for m in measured[:MAX_TABLE_ROWS]:
        mp = model_point(m, device, ceilings)
        bound = render.rate(mp[1]) if mp else "—"
        share = render.pct(m.achieved_flops_per_s / mp[1]) if mp else "—"
        cells = [
            m.kind,
            m.impl,
            m.shape_text(),
            m.dtype,
            duration(m.time_s),
            render.num(m.intensity),
            render.rate(m.achieved_flops_per_s),
            bound,
            share,
        ]
        rows.append(
            "<tr>"
            + "".join(
                f'<td class="{a}">{_e(c)}</td>' if a else f"<td>{_e(c)}</td>"
                for c, a in zip(cells, align, strict=True)
            )
            + "</tr>"
        )
    ths = "".join(
        f'<th class="{a}">{_e(h)}</th>' if a else f"<th>{_e(h)}</th>"
        for h, a in zip(head, align, strict=True)
    )
    more = len(measured) - MAX_TABLE_ROWS
    tail = (
        f"\n<p>… and {more:,} more measured kernels, drawn in the charts above but not listed "
        f"(the table shows the first {MAX_TABLE_ROWS} of the file).</p>"
        if more > 0
        else ""
    )
    return (
        f"<table>\n<thead><tr>{ths}</tr></thead>\n<tbody>\n" + "\n".join(rows) + "\n</tbody>\n</table>" + tail
    )


def report_html(
    device: Device | str = "R",
    dt: DType | str = "bf16",
    *,
    measured: Sequence[Measured] | str | Path | None = None,
    ceilings: Sequence[Roof] | str | Path | None = None,
    sheet: str | None = None,
    notes: list[str] | None = None,
    **shape: Any,
) -> str:
    """The report as one HTML document (a string) for ``device`` and the worked analysis's shape:
    ``shape`` takes :func:`attnroof.sheet.build_sheet`'s keywords (s, d, batch, heads, layers,
    group, softmax_flops_per_element; its defaults otherwise). ``sheet`` is the analysis in
    Markdown; by default :func:`attnroof.text.sheet.render_sheet` writes it. ``notes``, when
    given, gets what the reader should know about the measured inputs (``report`` prints it)."""
    from attnroof.sheet import build_sheet
    from attnroof.text.sheet import render_sheet

    dev = get_device(device) if isinstance(device, str) else device
    dty = dtype(dt)
    sh = build_sheet(dev, dty, **shape)  # checks the shape (group divides heads) before drawing
    s, d, batch, heads, layers, group = sh.s, sh.d, sh.batch, sh.heads, sh.layers, sh.group
    softmax_flops_per_element = sh.softmax_flops_per_element
    roof = sh.roof
    if sheet is None:
        sheet = render_sheet(sh)
    side = measured_inputs(measured, ceilings, dev)
    if notes is not None:
        notes += side.notes
    meas = side.points
    ceil = [r for r in side.ceilings if r.dtype == dty.name]
    kw: dict[str, Any] = dict(itemsize=dty.itemsize, softmax_flops_per_element=softmax_flops_per_element)

    s_values = sorted(set(DEFAULT_S) | {s})
    prefill = trajectories(roof, d=d, s_values=s_values, causal=True, **kw)
    attn_meas = [m for m in meas if m.kind.lower() not in DECODE_KINDS | LINEAR_KINDS]
    fig1 = draw_roofline(
        [roof],
        prefill,
        measured=attn_meas,
        model_device=dev,
        ceilings=ceil,
        title=f"{dev.name} ({dty.name}): attention prefill over sequence length, d={d}",
    )
    mark_shape(fig1, prefill, s, f"this report's shape, s = {s}")
    hidden = heads * d
    groups = sorted({1, group})
    other = trajectories(
        roof,
        d=d,
        s_values=s_values,
        attention=False,
        groups=groups,
        linear=(hidden, hidden),
        n_values=DEFAULT_N,
        **kw,
    )
    other_meas = [m for m in meas if m.kind.lower() in DECODE_KINDS | LINEAR_KINDS]
    fig2 = draw_roofline(
        [roof],
        other,
        measured=other_meas,
        model_device=dev,
        ceilings=ceil,
        title=f"{dev.name} ({dty.name}): decode (GQA g={', '.join(map(str, groups))}) "
        f"and a {hidden}×{hidden} linear layer",
    )
    mark_shape(fig2, other, s, f"this report's shape, s = {s}")
    cap1 = (
        f"Unfused attention saturates below the ridge ({render.num(roof.ridge)} FLOP/byte) however long the "
        "sequence; fused attention climbs through it, linearly in s. Dashed: causal. Points are labelled "
        "with s; the shaded band is within 2× of the ridge."
    )
    if attn_meas:
        cap1 += " Diamonds: measured kernels, each linked to the model's point for its shape (open circle)."
    cap2 = (
        "Decode reads the whole KV cache for one token: about 1 FLOP/byte, times g with grouped-query "
        "attention. A linear layer gains intensity with the tokens n that share its weight "
        f"(hidden {hidden})."
    )
    charts = [
        _figure(figure_svg(fig1, "c1-"), cap1, "chart-attention"),
        _figure(figure_svg(fig2, "c2-"), cap2, "chart-decode"),
    ]

    facts = [
        ("device", render.device_line(dev, roof)),
        (
            "shape",
            f"s = {s}, d = {d}, batch {batch}, {render.plural(heads, 'head')}, GQA group {group}, {render.plural(layers, 'layer')}",
        ),
        (
            "conventions",
            f"{softmax_flops_per_element} softmax FLOPs per score; {dty.name} ({render.plural(dty.itemsize, 'byte')})",
        ),
    ]
    if dev.source:
        facts.append(("source", dev.source))
    if ceil:
        facts.append(
            (
                "measured ceilings",
                ", ".join(
                    f"{r.dtype}: {render.peak(r.peak_flops_per_s, r.dtype)}, "
                    f"{render.bandwidth(r.bandwidth_bytes_per_s)}"
                    for r in ceil
                ),
            )
        )
    dl = "\n".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in facts)
    parts = [
        f"<h1>Roofline report: {_e(dev.name)}, {_e(dty.name)}</h1>",
        f'<p class="lede">Attention and transformer operators on {_e(dev.name)}: what bounds the time, '
        "by how much, and where that changes.</p>",
        f'<dl class="facts">\n{dl}\n</dl>',
        '<h2 id="charts">Charts</h2>',
        *charts,
    ]
    if meas:
        parts += ['<h2 id="measured">Measured kernels</h2>', _measured_table(meas, dev, ceil)]
    parts += ['<section id="sheet">', to_html(sheet, heading_offset=1), "</section>"]
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    title = f"attnroof report: {dev.name} {dty.name}"
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        f'<meta name="generator" content="{_e(CREATOR)}">\n'  # how a later run knows its own
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{_e(title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n<main>\n"
        + "\n".join(parts)
        + f"\n<footer>Generated by attnroof {_e(__version__)} on {stamp}.</footer>\n"
        + "</main>\n</body>\n</html>\n"
    )


def write_report(path: str | Path, text: str) -> Path:
    """Write the report to ``path`` (which must end in .html or .htm), by the rules of
    :mod:`attnroof.outfile`."""
    p = Path(path)
    if p.suffix.lower() not in (".html", ".htm"):
        raise InputError(f"{str(p)!r}: a report is HTML; name it with .html")
    return outfile.write_text(p, text)
