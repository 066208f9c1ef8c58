"""Speed targets, measured (not a timed test): run ``python benchmarks/speed.py``.

- ``attnroof sheet`` from a cold start (a new interpreter each run): target < 1.5 s wall.
- a vectorised sweep of 1,000,000 (s, d) points, unfused and fused: target < 1 s.
- a whole model (Llama-3.1-8B decode) on a 100 × 100 grid of batch × context, one evaluation
  of its layer table on arrays: target < 1 s.
- start-up beside a peer: ``attention``, ``decode``, ``linear`` and ``model`` each against
  ``llm-flops estimate`` (PyPI's llm-flops, the same analysis of Llama-3.1-8B at 8k on an H100),
  both run by this interpreter, best of several cold starts each: target ≤ 1.0× the peer.
  Without llm-flops installed (``pip install llm-flops``) the pairs are skipped.

Wall times on a shared machine are noisy: start-ups are compared by their best run (the least
disturbed), throughput targets by their median.
"""

from __future__ import annotations

import importlib.util
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

SRC = Path(__file__).resolve().parents[1] / "src"
sys.path.insert(0, str(SRC))

from attnroof.analysis import sweep  # noqa: E402 (after the path insert)
from attnroof.model.config import builtin  # noqa: E402
from attnroof.model.grid import grid  # noqa: E402
from attnroof.roofline import Roof  # noqa: E402

SHEET_TARGET_S = 1.5
SWEEP_TARGET_S = 1.0
GRID_TARGET_S = 1.0
PEER_RATIO_TARGET = 1.0
POINTS = 1_000_000
GRID_SIDE = 100
RUNS = 7

PEER = [
    "-c",
    "import sys; from llmflops.cli import main; sys.exit(main())",  # the llm-flops console script
    "estimate",
    "meta-llama/Llama-3.1-8B",
    "-s",
    "8192",
    "-g",
    "H100-SXM",
    "--no-hf",
    "--json",
]
PAIRS = {
    "attention": ["attention", "-s", "8192", "-d", "128", "--device", "h100", "--json"],
    "decode": ["decode", "-s", "8192", "-d", "128", "--heads", "32", "--group", "4", "--device", "h100", "--json"],
    "linear": ["linear", "-n", "8192", "-k", "4096", "-m", "4096", "--device", "h100", "--json"],
    "model": [
        "model", "--model", "llama-3.1-8b", "--phase", "decode", "--context", "8192", "--device", "h100", "--json",
    ],
}  # fmt: skip


def _cold(argv: list[str], runs: int = RUNS) -> list[float]:
    env = dict(os.environ, PYTHONPATH=str(SRC))
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, *argv], check=True, capture_output=True, env=env)
        times.append(time.perf_counter() - t0)
    return times


def _warm(fn: Callable[[], object], runs: int = 5) -> list[float]:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def time_sweep() -> list[float]:
    rng = np.random.default_rng(0)
    s = rng.integers(1, 1 << 20, POINTS)
    d = rng.choice([32, 64, 80, 96, 128, 192, 256], POINTS)
    roof = Roof(1200e12, 4.0e12)
    return _warm(lambda: sweep(s, d, roof))


def time_grid() -> list[float]:
    model, roof = builtin("llama-3.1-8b"), Roof(989e12, 3.35e12)
    batches = np.arange(1, GRID_SIDE + 1)
    contexts = np.linspace(128, 131072, GRID_SIDE).round()
    g = grid(model, "decode", batches, contexts, roof, capacity_bytes=80e9)
    assert g.time_s.size == GRID_SIDE * GRID_SIDE
    return _warm(lambda: grid(model, "decode", batches, contexts, roof, capacity_bytes=80e9))


def main() -> int:
    ok = True

    def report(label: str, value: float, target: float, unit: str, detail: str = "") -> None:
        nonlocal ok
        good = value <= target
        ok &= good
        print(f"{label:52s} {value:8.3f} {unit:2s} (target ≤ {target}{detail}) {'ok' if good else 'SLOW'}")

    report(
        "attnroof sheet, cold start, median",
        statistics.median(_cold(["-m", "attnroof", "sheet"])),
        SHEET_TARGET_S,
        "s",
    )
    report(
        f"vectorised sweep, {POINTS:,} (s, d) points, median",
        statistics.median(time_sweep()),
        SWEEP_TARGET_S,
        "s",
    )
    report(
        f"Llama-3.1-8B decode, {GRID_SIDE}×{GRID_SIDE} batch × context grid, median",
        statistics.median(time_grid()),
        GRID_TARGET_S,
        "s",
    )
    if importlib.util.find_spec("llmflops") is None:
        print("llm-flops is not installed (pip install llm-flops): start-up pairs skipped")
        return 0 if ok else 1
    peer = min(_cold(PEER))
    print(f"{'llm-flops estimate (Llama-3.1-8B, 8k, H100), best':52s} {peer:8.3f} s")
    for name, argv in PAIRS.items():
        best = min(_cold(["-m", "attnroof", *argv]))
        report(
            f"attnroof {name} --json, best of {RUNS}, ÷ llm-flops",
            best / peer,
            PEER_RATIO_TARGET,
            "×",
            f"; {best:.3f} s",
        )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
