"""Roofline charts and a self-contained HTML report (the ``attnroof[plot]`` extra).

Importing this package needs matplotlib; without it the import raises
:class:`attnroof.errors.MissingExtra` naming the extra to install. ``import attnroof`` never
loads it. The figures are plain :class:`matplotlib.figure.Figure` objects built without pyplot,
so a notebook shows them and no global backend is switched::

    from attnroof.plot import roofline_figure
    fig = roofline_figure("R", ["bf16"], d=128, causal=True)
    fig.savefig("roofline.svg")
"""

from __future__ import annotations

from attnroof.errors import MissingExtra

INSTALL_HINT = "pip install 'attnroof[plot]'"

try:
    import matplotlib
except ImportError:  # pragma: no cover - exercised through a subprocess test
    raise MissingExtra(f"charts need matplotlib: {INSTALL_HINT}") from None

from attnroof.plot.figure import ChartInputs, chart_inputs, roofline_figure  # noqa: E402
from attnroof.plot.files import FORMATS, figure_svg, save_figure  # noqa: E402
from attnroof.plot.inputs import Measured, read_ceilings, read_measured  # noqa: E402
from attnroof.plot.report import report_html, write_report  # noqa: E402


def use_agg() -> None:
    """Switch matplotlib to the Agg backend: files only, no display (what the commands use)."""
    matplotlib.use("Agg")


__all__ = [
    "FORMATS",
    "INSTALL_HINT",
    "ChartInputs",
    "Measured",
    "chart_inputs",
    "figure_svg",
    "read_ceilings",
    "read_measured",
    "report_html",
    "roofline_figure",
    "save_figure",
    "use_agg",
    "write_report",
]
