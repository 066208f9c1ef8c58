"""Writing charts: an image file whose format is its suffix, or an SVG element to inline in HTML."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

from matplotlib import rc_context
from matplotlib.figure import Figure
from matplotlib.text import Text

from attnroof import __version__, outfile
from attnroof.errors import InputError
from attnroof.escaping import escape_output

FORMATS = {".png": "png", ".svg": "svg", ".pdf": "pdf"}
"""File suffix → format matplotlib writes."""

CREATOR = f"attnroof {__version__}"
"""The creator a chart names (PNG ``Software``, SVG and PDF ``Creator``) and a report's
``generator``: how a later run knows the file for its own (:data:`attnroof.outfile.OWN_MARKS`)."""

PNG_DPI = 150
"""Pixels per inch of a PNG: 1650 × 975 pixels for the 11 × 6.5 in chart."""


def save_figure(fig: Figure, path: str | Path) -> Path:
    """Write ``fig`` to ``path``, the format taken from the suffix (.png, .svg, .pdf), by the
    rules of :mod:`attnroof.outfile` (a symlink written through, a device written in place; the
    caller has judged, with :func:`outfile.check_overwrite`, whether what is there may go)."""
    p = Path(path)
    fmt = FORMATS.get(p.suffix.lower())
    if fmt is None:
        known = ", ".join(FORMATS)
        raise InputError(f"{str(p)!r}: unknown image format {p.suffix or '(no suffix)'!r}; use {known}")
    outfile.target(p)  # a missing folder is refused before the figure is drawn
    _escape_text(fig)
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=PNG_DPI, metadata=_metadata(fmt))
    return outfile.write_bytes(p, buf.getvalue())


def _metadata(fmt: str) -> dict[str, Any]:
    """No creation date in the file, so that a regenerated chart is byte-identical; attnroof as its
    creator, the mark by which a later run knows the file for its own (:data:`outfile.OWN_MARKS`)
    and replaces it without ``--force``."""
    if fmt == "svg":
        return {"Date": None, "Creator": CREATOR}
    if fmt == "pdf":
        return {"CreationDate": None, "Creator": CREATOR}
    return {"Software": CREATOR}


def _escape_text(fig: Figure) -> None:
    """Every text of ``fig`` (titles, labels, legends) with its control characters shown
    escaped: a device file's name may hold them, and an SVG cannot (XML has no ESC)."""
    for text in fig.findobj(Text):
        old = text.get_text()
        new = escape_output(old)
        if new != old:
            text.set_text(new)


_SVG_START = re.compile(r"<svg\b")
_METADATA = re.compile(r"\s*<metadata>.*?</metadata>", re.S)


def figure_svg(fig: Figure, id_prefix: str = "") -> str:
    """``fig`` as an ``<svg>`` element to inline in HTML: text kept as text, no XML prolog.
    ``id_prefix`` keeps element ids unique when several charts share a page."""
    _escape_text(fig)
    buf = io.StringIO()
    with rc_context({"svg.fonttype": "none", "svg.hashsalt": id_prefix or "attnroof"}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    text = buf.getvalue()
    match = _SVG_START.search(text)
    svg = _METADATA.sub("", text[match.start() :] if match else text)
    if id_prefix:
        svg = re.sub(r'\b(id="|url\(#|href="#)', lambda m: m.group(1) + id_prefix, svg)
    return svg
