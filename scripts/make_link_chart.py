"""Regenerate the link roofline of docs/parallel.md, ``docs/link-roofline-70b.png``: Llama-3.1-70B on H200s,
decode (batch 8 at 8k tokens) and prefill (one 8k prompt), tensor parallelism over 2 to 16
devices (16 crosses the 8-GPU NVLink domain onto the network), and a training step (one 8k
sequence, full recomputation: the forward, recomputed forward and backward passes, each with its
all-reduces) at TP 8 and 16.

    python scripts/make_link_chart.py            # from the repository root
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from attnroof.devices import get_device  # noqa: E402
from attnroof.model.config import builtin  # noqa: E402
from attnroof.model.parallel import Plan  # noqa: E402
from attnroof.model.spread import spread  # noqa: E402
from attnroof.model.train_spread import train_spread  # noqa: E402
from attnroof.plot import save_figure, use_agg  # noqa: E402
from attnroof.plot.links import link_roofline_figure  # noqa: E402
from attnroof.roofline import Roof  # noqa: E402

OUT = ROOT / "docs" / "link-roofline-70b.png"


def main() -> int:
    use_agg()
    dev, model = get_device("h200"), builtin("llama-3.1-70b")
    roof = Roof.of(dev, "bf16")
    runs = []
    for phase, batch in (("decode", 8), ("prefill", 1)):
        for tp in (2, 4, 8, 16):
            s = spread(
                model, phase, batch, 8192, roof, dev.links, Plan(tp=tp), capacity_bytes=dev.capacity_bytes
            )
            runs.append((f"{phase} TP {tp}", s))
    for tp in (8, 16):
        s = train_spread(
            model, 1, 8192, roof, dev.links, Plan(tp=tp), capacity_bytes=dev.capacity_bytes, recompute="full"
        )
        runs.append((f"train TP {tp}", s))
    fig = link_roofline_figure(
        roof, dev.links, runs, "Llama-3.1-70B on H200s: one layer per plan on the link roofs"
    )
    print(save_figure(fig, OUT).relative_to(ROOT))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
