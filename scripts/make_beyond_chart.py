"""Regenerate the chart of docs/attention-beyond-softmax.md, ``docs/beyond-h200.png``: every
variant of ``attnroof sheet --variant all`` on the H200's bf16 roofline.

    python scripts/make_beyond_chart.py            # from the repository root
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from attnroof.plot import save_figure, use_agg  # noqa: E402
from attnroof.plot.beyond import beyond_figure  # noqa: E402

OUT = ROOT / "docs" / "beyond-h200.png"


def main() -> int:
    use_agg()
    print(save_figure(beyond_figure("h200", "bf16"), OUT).relative_to(ROOT))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
