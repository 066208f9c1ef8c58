"""Speed targets, measured (not a timed test): run ``python benchmarks/speed.py``.

- ``attnroof sheet`` from a cold start (a new interpreter each run): target < 1.5 s wall.
- a vectorised sweep of 1,000,000 (s, d) points, unfused and fused: target < 1 s.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from attnroof.analysis import sweep
from attnroof.roofline import Roof

SHEET_TARGET_S = 1.5
SWEEP_TARGET_S = 1.0
POINTS = 1_000_000


def time_sheet(runs: int = 5) -> list[float]:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "attnroof", "sheet"], check=True, capture_output=True)
        times.append(time.perf_counter() - t0)
    return times


def time_sweep(runs: int = 5) -> list[float]:
    rng = np.random.default_rng(0)
    s = rng.integers(1, 1 << 20, POINTS)
    d = rng.choice([32, 64, 80, 96, 128, 192, 256], POINTS)
    roof = Roof(1200e12, 4.0e12)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        out = sweep(s, d, roof)
        times.append(time.perf_counter() - t0)
        assert out["fused"].verdict.shape == (POINTS,)
    return times


def main() -> int:
    sheet = time_sheet()
    sw = time_sweep()
    ok = True
    for label, times, target in (
        ("attnroof sheet, cold start", sheet, SHEET_TARGET_S),
        (f"vectorised sweep, {POINTS:,} (s, d) points", sw, SWEEP_TARGET_S),
    ):
        med = statistics.median(times)
        verdict = "ok" if med < target else "SLOW"
        ok &= med < target
        print(
            f"{label:45s} median {med:.3f} s  (min {min(times):.3f}, max {max(times):.3f}; target < {target} s) {verdict}"
        )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
