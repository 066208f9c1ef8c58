"""Calibration accuracy: leave-one-shape-out forecast error per implementation and pooled.

    python benchmarks/calibration.py                      # the H200 reference file
    python benchmarks/calibration.py RESULTS.jsonl ...    # any results files
    python benchmarks/calibration.py --markdown --chart docs/calibration.png

For every modelled implementation, each measured shape is forecast by a fit to the other shapes
of that implementation (``attnroof.calibration``); the error is |predicted / measured − 1|. The
raw roofline bound's error (bound / measured − 1, on the same roofs) is printed beside it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from attnroof import calibration  # noqa: E402
from attnroof.calibration.fit import summary  # noqa: E402
from attnroof.calibration.physics import Roofs, cost_of  # noqa: E402
from attnroof.errors import InputError, read_text  # noqa: E402
from attnroof.measure.reading import parse_results  # noqa: E402
from attnroof.roofline import Roof, place  # noqa: E402

DEFAULT = [
    p
    for p in (ROOT.parent / "shared/data/h200-reference.jsonl", ROOT / "tests/data/h200-reference.jsonl")
    if p.exists()
][:1]


def bound_error(f: calibration.ImplFit, roofs: Roofs, dt: str) -> list[float]:
    roof = Roof(roofs.peak_flops_per_s, roofs.bandwidth_bytes_per_s)
    out = []
    for h in f.held:
        cost = cost_of(f.kind, f.impl, h.point.shape, dt)
        out.append(sum(place((s.flops, s.bytes), roof).time_s for s in cost.stages) / h.point.time_s - 1)
    return out


def rows(cal: calibration.Calibration) -> list[list[str]]:
    out = []
    for f in cal.fits.values():
        held, raw = summary([h.error for h in f.held]), summary(bound_error(f, cal.roofs, cal.dtype))
        out.append(
            [f.kind, f.impl, str(held["n"]), _pct(held["median"]), _pct(held["p90"]), _pct(raw["median"])]
        )
    pooled = cal.pooled()
    raw_all = summary([e for f in cal.fits.values() for e in bound_error(f, cal.roofs, cal.dtype)])
    out.append(
        [
            "**pooled**",
            "all modelled",
            str(pooled["n"]),
            _pct(pooled["median"]),
            _pct(pooled["p90"]),
            _pct(raw_all["median"]),
        ]
    )
    return out


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def chart(cal: calibration.Calibration, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 5.6), dpi=120)
    lo, hi = float("inf"), 0.0
    for i, f in enumerate(cal.fits.values()):
        xs = [h.point.time_s * 1e6 for h in f.held]
        ys = [h.predicted_s * 1e6 for h in f.held]
        marker = "o" if f.kind == "attention" else "s" if f.kind == "decode" else "^"
        ax.scatter(xs, ys, s=22, marker=marker, color=plt.cm.tab10(i % 10), label=f"{f.kind} {f.impl}")
        lo, hi = min(lo, *xs, *ys), max(hi, *xs, *ys)
    ax.plot([lo / 1.5, hi * 1.5], [lo / 1.5, hi * 1.5], color="black", lw=1, label="y = x")
    for k in (1.25, 1 / 1.25):
        ax.plot([lo / 1.5, hi * 1.5], [k * lo / 1.5, k * hi * 1.5], color="grey", lw=0.6, ls=":")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("measured time (µs)")
    ax.set_ylabel("forecast, shape left out of the fit (µs)")
    p = cal.pooled()
    ax.set_title(
        f"{cal.catalog_device or cal.device} {cal.dtype}: leave-one-shape-out\n"
        f"median {_pct(p['median'])}, p90 {_pct(p['p90'])} (dotted: ±25%)",
        fontsize=10,
    )
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})
    print(f"wrote {path}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="*", default=[str(p) for p in DEFAULT])
    ap.add_argument(
        "--markdown", action="store_true", help="print the table as Markdown (for docs/forecasts.md)"
    )
    ap.add_argument("--chart", metavar="PNG", help="write the predicted-vs-measured chart")
    args = ap.parse_args(argv)
    if not args.results:
        print("calibration: no results file given and no reference file found", file=sys.stderr)
        return 2
    try:
        records = [
            r for p in args.results for r in parse_results(read_text(p, "results file", InputError), p)
        ]
        cals = calibration.calibrate(records)
    except InputError as e:
        print(f"calibration: error: {e}", file=sys.stderr)
        return 2
    headers = ["kind", "impl", "shapes", "held-out median", "held-out p90", "raw bound median"]
    for cal in cals:
        print(f"{cal.catalog_device or cal.device} {cal.dtype} — {', '.join(args.results)}")
        table = rows(cal)
        if args.markdown:
            print("| " + " | ".join(headers) + " |")
            print("|" + "|".join(":--" if i < 2 else "--:" for i in range(len(headers))) + "|")
            for r in table:
                print("| " + " | ".join(r) + " |")
        else:
            widths = [max(len(h), *(len(r[i]) for r in table)) for i, h in enumerate(headers)]
            print("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)))
            for r in table:
                print("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)))
        if args.chart:
            chart(cal, args.chart)
    return 0


if __name__ == "__main__":
    sys.exit(main())
