"""The link roofline: a layer's FLOPs per byte it sends over the links, against the links' roofs.

    link ridge      = P / β                      FLOP per link byte where the two roofs meet
    attainable      = min(P, I_link · β)         FLOP/s a layer can keep while its collectives run
    a point         = (layer FLOPs / bytes sent, layer FLOPs / layer time)

A layer to the left of a link's ridge waits on that link whatever its kernels do; one to the
right is bound by its own kernels (the device roofline). Each point is one plan's transformer
layer on its slowest device (the JAX scaling book's view of communication as a second roofline).
"""

from __future__ import annotations

from collections.abc import Sequence

from matplotlib.figure import Figure

from attnroof.devices.links import Links
from attnroof.model.layers import LAYER
from attnroof.model.spread import Spread
from attnroof.roofline import Roof


def link_roofline_figure(
    roof: Roof, links: Links, runs: Sequence[tuple[str, Spread]], title: str = ""
) -> Figure:
    """One roof per link (scale-up, scale-out) and a point per labelled plan's layer."""
    fig = Figure(figsize=(7.2, 4.8), dpi=120)
    ax = fig.add_subplot()
    xs = [10.0**e for e in range(0, 7)]
    lo, hi = xs[0], xs[-1]
    for link, style in ((links.scaleup, "-"), (links.scaleout, "--")):
        if link is None:
            continue
        beta = link.bandwidth_bytes_per_s
        ridge = roof.peak_flops_per_s / beta
        grid = [lo * (hi / lo) ** (i / 200) for i in range(201)]
        ax.plot(grid, [min(roof.peak_flops_per_s, x * beta) for x in grid], style, color="black", lw=1.2)
        ax.annotate(
            f"{link.kind} {beta / 1e9:g} GB/s one way\nridge {ridge:,.0f} FLOP/B",
            (ridge, roof.peak_flops_per_s),
            textcoords="offset points",
            xytext=(4, -28 if style == "-" else -52),
            fontsize=7,
        )
    for i, (label, s) in enumerate(runs):
        st = s.slowest
        kind = next(k for k in st.kinds() if k["layer_kind"] == LAYER)
        if not kind["comm_bytes"]:
            continue
        flops = sum(o.count * o.flops for o in st.ops if o.layer_kind == LAYER)
        time = kind["compute_time_s"] + kind["comm_time_s"]
        ax.scatter([kind["flops_per_link_byte"]], [flops / time], color=f"C{i % 10}", zorder=3, label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_xlabel("FLOPs per byte sent over the links (per layer, per device)")
    ax.set_ylabel("FLOP/s")
    ax.set_title(title or f"link roofline, {roof.device} {roof.dtype}", fontsize=9)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    return fig
