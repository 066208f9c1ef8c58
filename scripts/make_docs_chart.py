"""Regenerate the worked analysis's chart (docs/charts.md), ``docs/roofline-R.png``: device R (the spec's), bf16.

    python scripts/make_docs_chart.py            # from the repository root

It is the same chart as ``attnroof plot -o docs/roofline-R.png --decode --groups 1,8``.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from attnroof.plot import roofline_figure, save_figure, use_agg  # noqa: E402

OUT = ROOT / "docs" / "roofline-R.png"


def main() -> int:
    use_agg()
    fig = roofline_figure("R", "bf16", d=128, decode=True, groups=[1, 8])
    print(save_figure(fig, OUT).relative_to(ROOT))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
