"""Speed targets, measured (not a timed test): run ``python benchmarks/speed.py``.

Throughput, the median of several runs:

- ``attnroof sheet`` from a cold start (a new interpreter each run): target < 1.5 s wall.
- a vectorised sweep of 1,000,000 (s, d) points, unfused and fused: target < 1 s.
- a whole model (Llama-3.1-8B decode) on a 100 × 100 grid of batch × context, one evaluation
  of its layer table on arrays and the grid's summary: target < 1 s; and the same grid as a
  command (``attnroof model --sweep-batch 1,…,100 --sweep-context 256,…,25600``, a new
  interpreter each run), its table and ``--json``: target < 1 s wall.
- a plan search, ``attnroof plan`` for Llama-3.1-70B on 64 H100s, 4M tokens of 8192 a step (a new
  interpreter each run): target ≤ 5 s wall, and the plans it tries a second reported; the whole
  search (every CP degree and schedule) and the 1F1B, CP-1 part of it (``--where``); and the
  whole search on up to 256 H100s, 110,790 plans: target ≥ 100,000 plans in ≤ 5 s.
- serving: 10,000 requests (2048 → 256 tokens, Poisson at 10/s) through the simulated engine,
  Llama-3.1-8B on an H100, the simulation alone: target ≤ 2 s; and ``serve-sim --max-rate`` with
  its SLOs (a new interpreter, 1,000 requests a simulation): target ≤ 10 s wall.

Start-up beside peers, whole processes, paired: each round runs every command once, in a
shuffled order, so that the machine's load falls on attnroof and its peers alike; each figure
is the median of the rounds (15 unless ``--runs`` says more), never the best run.

- ``attnroof --help`` against ``llm-flops --help``: target ≤ 1.0×.
- ``attnroof attention``, ``decode``, ``linear`` and ``model`` (``--json``; the same analysis of
  Llama-3.1-8B at 8k on an H100 for ``model``) each against ``llm-flops estimate`` of that
  model: target ≤ 1.0×.
- beside each, the ratio to ridgepoint (``ridgepoint fit llama-3-8b --gpu h100-80gb --ctx 8192
  --json``, and its ``--help``), the lightest peer: reported, no target.

The peers are never attnroof's dependencies. Install them in a scratch environment and name
its interpreter::

    python -m venv /tmp/peers && /tmp/peers/bin/pip install llm-flops ridgepoint
    python benchmarks/speed.py --peer-python /tmp/peers/bin/python   # or $ATTNROOF_PEER_PYTHON

By default a peer runs on this interpreter with that environment's packages on PYTHONPATH, so
that every command starts the same interpreter with the same site set-up (a site-packages
``.pth`` hook can cost a plain ``python -c pass`` 20 ms here that a bare venv does not pay);
``--peer-run own`` runs the peers by their own interpreter instead. A peer not installed there
is skipped, with a line that says so.

attnroof's source is byte-compiled first, as ``pip install`` does for the peers, so that no
run pays for compiling it (``PYTHONDONTWRITEBYTECODE`` would otherwise make every run do so).
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

SRC = Path(__file__).resolve().parents[1] / "src"
sys.path.insert(0, str(SRC))

from attnroof.analysis import sweep  # noqa: E402 (after the path insert)
from attnroof.model.config import builtin  # noqa: E402
from attnroof.model.grid import grid, summary  # noqa: E402
from attnroof.model.search import NOT_STATES  # noqa: E402
from attnroof.roofline import Roof  # noqa: E402

SHEET_TARGET_S = 1.5
SWEEP_TARGET_S = 1.0
GRID_TARGET_S = 1.0
GRID_COMMAND_TARGET_S = 1.0
PEER_RATIO_TARGET = 1.0
POINTS = 1_000_000
GRID_SIDE = 100
SHEET_RUNS = 7
MIN_ROUNDS = 15

LLM_FLOPS = "import sys; from llmflops.cli import main; sys.exit(main())"  # its console script
RIDGEPOINT = "import sys; from ridgepoint.cli import main; sys.exit(main())"  # its console script
PEER = ["estimate", "meta-llama/Llama-3.1-8B", "-s", "8192", "-g", "H100-SXM", "--no-hf", "--json"]
LIGHT_PEER = ["fit", "llama-3-8b", "--gpu", "h100-80gb", "--ctx", "8192", "--json"]
"""ridgepoint has Llama-3-8B (the same shape as 3.1-8B) and no 3.1; its H100 is "h100-80gb"."""
PAIRS = {
    "attention": ["attention", "-s", "8192", "-d", "128", "--device", "h100", "--json"],
    "decode": ["decode", "-s", "8192", "-d", "128", "--heads", "32", "--group", "4", "--device", "h100", "--json"],
    "linear": ["linear", "-n", "8192", "-k", "4096", "-m", "4096", "--device", "h100", "--json"],
    "model": [
        "model", "--model", "llama-3.1-8b", "--phase", "decode", "--context", "8192", "--device", "h100", "--json",
    ],
}  # fmt: skip
PEER_PACKAGES = {"llm-flops": "llmflops", "ridgepoint": "ridgepoint"}

Command = tuple[list[str], dict[str, str]]


def _attnroof(argv: list[str]) -> Command:
    return [sys.executable, "-m", "attnroof", *argv], dict(os.environ, PYTHONPATH=str(SRC))


def _once(command: Command) -> float:
    argv, env = command
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True, env=env)
    return time.perf_counter() - t0


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
    return _warm(lambda: summary(grid(model, "decode", batches, contexts, roof, capacity_bytes=80e9)))


GRID_COMMAND = ["model", "--model", "llama-3.1-8b", "--device", "h100",
                "--sweep-batch", ",".join(str(b) for b in range(1, GRID_SIDE + 1)),
                "--sweep-context", ",".join(str(256 * i) for i in range(1, GRID_SIDE + 1))]  # fmt: skip
"""The grid as a user runs it: 10,000 decode steps, batch 1..100 × context 256..25,600."""


def paired(commands: dict[str, Command], rounds: int, seed: int = 0) -> dict[str, list[float]]:
    """Wall times of each command: every round runs each once, in a new shuffled order."""
    rng = random.Random(seed)
    times: dict[str, list[float]] = {label: [] for label in commands}
    for command in commands.values():  # a first run of each, not timed: files in the page cache
        _once(command)
    for _ in range(rounds):
        order = list(commands)
        rng.shuffle(order)
        for label in order:
            times[label].append(_once(commands[label]))
    return times


# ---------------------------------------------------------------- the peers


def find_peers(python: str) -> dict[str, Any] | None:
    """What ``python`` has: each peer's version (None: not installed), its package folders and
    its Python version; None when ``python`` does not run."""
    probe = (
        "import importlib.metadata as m, importlib.util as u, json, sys, sysconfig\n"
        "def version(dist, pkg):\n"
        "    try:\n"
        "        return m.version(dist) if u.find_spec(pkg) else None\n"
        "    except m.PackageNotFoundError:\n"
        "        return None\n"
        f"peers = {{d: version(d, p) for d, p in {PEER_PACKAGES!r}.items()}}\n"
        "paths = list(dict.fromkeys([sysconfig.get_path('purelib'), sysconfig.get_path('platlib')]))\n"
        "print(json.dumps({'peers': peers, 'paths': paths, 'python': list(sys.version_info[:2])}))\n"
    )
    try:
        r = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=60)
    except OSError:
        return None
    if r.returncode != 0:
        return None
    found: dict[str, Any] = json.loads(r.stdout)
    return found


def peer_commands(python: str, found: dict[str, Any], run: str) -> tuple[str, dict[str, Command]]:
    """How the peers are run (a line saying so) and their commands, by label."""
    same = run == "same" and found["python"] == list(sys.version_info[:2])
    if same:
        interpreter, env = sys.executable, dict(os.environ, PYTHONPATH=os.pathsep.join(found["paths"]))
        how = f"run by this interpreter ({sys.executable}) with {python}'s packages on PYTHONPATH"
    else:
        interpreter, env = python, {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        how = f"run by their own interpreter, {python}" + (
            "" if run == "own" else " (its Python version differs from this one's)"
        )
    peers: dict[str, str | None] = found["peers"]
    commands: dict[str, Command] = {}
    if peers["llm-flops"]:
        commands["llm-flops estimate"] = ([interpreter, "-c", LLM_FLOPS, *PEER], env)
        commands["llm-flops --help"] = ([interpreter, "-c", LLM_FLOPS, "--help"], env)
    if peers["ridgepoint"]:
        commands["ridgepoint fit"] = ([interpreter, "-c", RIDGEPOINT, *LIGHT_PEER], env)
        commands["ridgepoint --help"] = ([interpreter, "-c", RIDGEPOINT, "--help"], env)
    if not same:
        commands["peers' interpreter alone (-c pass)"] = ([interpreter, "-c", "pass"], env)
    versions = ", ".join(f"{name} {v}" for name, v in peers.items() if v)
    return f"peers: {versions}; {how}", commands


# ---------------------------------------------------------------- the run


PLAN = ["plan", "--model", "llama-3.1-70b", "--device", "h100", "--devices", "64", "--phase", "train",
        "--global-batch", "4M", "--context", "8192", "--json"]  # fmt: skip
PLAN_1F1B = [*PLAN, "--where", "cp=1", "--where", "schedule=1f1b"]
PLAN_MANY = [*PLAN[:6], "256", *PLAN[7:]]
"""The same search on up to 256 H100s: 110,790 plans, the issue's 100,000 in 5 s."""
PLAN_LARGEST = ["plan", "--model", "llama-3.1-405b", "--device", "h100", "--devices", "16384", "--phase", "train",
                "--global-batch", "16M", "--context", "8192", "--json"]  # fmt: skip
"""Llama 3's run (issue 35): 405B on up to 16,384 H100s, 16M tokens of 8192 a step, no --where."""
PLAN_LARGEST_TARGET_S = 10.0
MANY_PLANS = 100_000
PLAN_TARGET_S = 5.0
PLAN_RUNS = 3
SERVE_REQUESTS = 10_000
SERVE_TARGET_S = 2.0
MAX_RATE = ["serve-sim", "--model", "llama-3.1-8b", "--device", "h100", "--input-len", "2048", "--output-len",
            "256", "--max-rate", "--slo-ttft", "2s", "--slo-tpot", "50ms", "--json"]  # fmt: skip
MAX_RATE_TARGET_S = 10.0


def time_serving() -> list[float]:
    """The engine alone over 10,000 requests (the deployment built once, outside the timing)."""
    from attnroof.devices import get_device
    from attnroof.serve.deploy import pool
    from attnroof.serve.engine import Engine, EngineConfig
    from attnroof.serve.step import StepOptions
    from attnroof.serve.workload import synthetic

    h100 = get_device("h100")
    p = pool(builtin("llama-3.1-8b"), Roof.of(h100, "bf16"), h100.capacity_bytes, EngineConfig(),
             options=StepOptions(), memory_utilization=0.9)  # fmt: skip
    w = synthetic(SERVE_REQUESTS, input_tokens=2048, output_tokens=256, rate=10.0, seed=0)
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        Engine(p.cost, p.config).run(w)
        times.append(time.perf_counter() - t0)
    return times


def time_max_rate() -> float:
    times = []
    for _ in range(PLAN_RUNS):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "attnroof", *MAX_RATE], capture_output=True, text=True,
                       check=True, env={**os.environ, "PYTHONPATH": str(SRC)})  # fmt: skip
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def time_plan(argv: list[str]) -> tuple[float, int]:
    """The median wall time of a plan search in a new interpreter, and the plans it covers: those
    it tries and those it rules out whole by their states alone (a policy none of whose
    micro-batch counts, schedules or recomputations can fit), which it never enumerates."""
    times, tried = [], 0
    for _ in range(PLAN_RUNS):
        t0 = time.perf_counter()
        out = subprocess.run([sys.executable, "-m", "attnroof", *argv], capture_output=True, text=True,
                             check=True, env={**os.environ, "PYTHONPATH": str(SRC)})  # fmt: skip
        times.append(time.perf_counter() - t0)
        found = json.loads(out.stdout)
        tried = found["tried"] + found["refused"].get(NOT_STATES, 0)
    return statistics.median(times), tried


GPU_CHECK_CPU_TARGET_S = 120.0
FLUSH_TARGET_S = 0.5


def gpu_check_targets(report: Callable[[str, float, float, str], None]) -> None:
    """The targets tests/test_gpu_check.py and tests/test_gpu_path.py once asserted (a test asserts
    no time): ``benchmarks/gpu_check.sh`` without CUDA, the whole flow on the CPU (one thread, a
    new output folder): ≤ 120 s wall; and the CPU cache flush between timed calls, 64 MiB read
    as 8-byte words: < 0.5 s a flush (a sum of int8 widened each byte: ~1.5 s)."""
    import shutil
    import tempfile

    root = Path(__file__).resolve().parents[1]
    out = tempfile.mkdtemp(prefix="gpu_check-speed-")
    env = dict(os.environ, PYTHON=sys.executable, CUDA_VISIBLE_DEVICES="", ATTNROOF_CPU_THREADS="1")
    t0 = time.perf_counter()
    subprocess.run(["bash", str(root / "benchmarks" / "gpu_check.sh"), out], env=env, capture_output=True)
    wall = time.perf_counter() - t0
    shutil.rmtree(out, ignore_errors=True)
    report("gpu_check.sh on the CPU, whole flow, one thread", wall, GPU_CHECK_CPU_TARGET_S, "s")

    from attnroof.measure import env as measure_env

    sized = measure_env.cpu_flush_bytes
    measure_env.cpu_flush_bytes = lambda: 64 * measure_env.MiB
    try:
        dev = measure_env.local_device("cpu")
        dev.flush_caches()  # the buffer made and zeroed, as the first flush does
        t0 = time.perf_counter()
        for _ in range(3):
            dev.flush_caches()
    finally:
        measure_env.cpu_flush_bytes = sized
    report("CPU cache flush, 64 MiB, mean of 3", (time.perf_counter() - t0) / 3, FLUSH_TARGET_S, "s")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--runs", type=int, default=MIN_ROUNDS, help=f"rounds of start-ups (default {MIN_ROUNDS})"
    )
    ap.add_argument(
        "--peer-python",
        default=os.environ.get("ATTNROOF_PEER_PYTHON", sys.executable),
        metavar="PATH",
        help="the interpreter of the environment llm-flops and ridgepoint are installed in "
        "(default $ATTNROOF_PEER_PYTHON, else this one)",
    )
    ap.add_argument(
        "--peer-run",
        choices=("same", "own"),
        default="same",
        help="run the peers by this interpreter with their packages on the path (same, the default) "
        "or by their own interpreter (own)",
    )
    ap.add_argument("--startup-only", action="store_true", help="skip the throughput targets")
    args = ap.parse_args(argv)
    ok = True

    def report(label: str, value: float, target: float, unit: str, detail: str = "") -> None:
        nonlocal ok
        good = value <= target
        ok &= good
        print(f"{label:56s} {value:8.3f} {unit:2s} (target ≤ {target}{detail}) {'ok' if good else 'SLOW'}")

    compileall.compile_dir(str(SRC), quiet=1)  # as an installed package is: no run compiles it
    if not args.startup_only:
        report(
            f"attnroof sheet, cold start, median of {SHEET_RUNS}",
            statistics.median(_once(_attnroof(["sheet"])) for _ in range(SHEET_RUNS)),
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
        for extra in ([], ["--json"]):
            report(
                f"model --sweep-batch × --sweep-context{' --json' if extra else ''}, new interpreter, "
                f"median of {SHEET_RUNS}",
                statistics.median(_once(_attnroof([*GRID_COMMAND, *extra])) for _ in range(SHEET_RUNS)),
                GRID_COMMAND_TARGET_S,
                "s",
            )

        for *label, argv in (("70B", "64", "every plan", PLAN), ("70B", "64", "1F1B, CP 1", PLAN_1F1B),
                             ("70B", "256", "every plan", PLAN_MANY), ("405B", "16,384", "every plan", PLAN_LARGEST)):  # fmt: skip
            wall, tried = time_plan(argv)
            report(
                f"plan search, {label[0]} on {label[1]} H100s, {label[2]}, median of {PLAN_RUNS}", wall,
                PLAN_LARGEST_TARGET_S if argv is PLAN_LARGEST else PLAN_TARGET_S,
                "s", f"; {tried:,} plans covered, {tried / wall:,.0f} plans/s",
            )  # fmt: skip
            if argv is PLAN_MANY and tried < MANY_PLANS:
                print(
                    f"  (fewer than {MANY_PLANS:,} plans: the target is {MANY_PLANS:,} in {PLAN_TARGET_S} s)"
                )
                ok = False

        report(
            f"serving, {SERVE_REQUESTS:,} requests simulated, median of 3",
            statistics.median(time_serving()),
            SERVE_TARGET_S,
            "s",
        )
        report(
            f"serve-sim --max-rate, new interpreter, median of {PLAN_RUNS}",
            time_max_rate(),
            MAX_RATE_TARGET_S,
            "s",
        )
        gpu_check_targets(report)

    found = find_peers(args.peer_python)
    if not found or not any(found["peers"].values()):
        print(
            f"no peers at {args.peer_python}: start-up pairs skipped (install them apart: python -m venv "
            "/tmp/peers && /tmp/peers/bin/pip install llm-flops ridgepoint; then --peer-python "
            "/tmp/peers/bin/python or ATTNROOF_PEER_PYTHON=/tmp/peers/bin/python)"
        )
        return 0 if ok else 1
    how, commands = peer_commands(args.peer_python, found, args.peer_run)
    ours: dict[str, Command] = {"attnroof --help": _attnroof(["--help"])}
    ours |= {f"attnroof {name} --json": _attnroof(argv) for name, argv in PAIRS.items()}
    alone: dict[str, Command] = {"this interpreter alone (-c pass)": ([sys.executable, "-c", "pass"], {})}
    rounds = max(args.runs, 1)
    print(
        f"start-up, whole processes: median of {rounds} rounds, each running every command once in "
        f"a shuffled order\n{how}"
    )
    times = paired(ours | commands | alone, rounds)
    med = {label: statistics.median(t) for label, t in times.items()}
    for label in [*alone, *commands, *ours]:
        print(f"  {label:54s} {1e3 * med[label]:7.1f} ms")
    for label in ours:
        versus = "llm-flops --help" if label.endswith("--help") else "llm-flops estimate"
        light = "ridgepoint --help" if label.endswith("--help") else "ridgepoint fit"
        beside = f"; ÷ {light} {med[label] / med[light]:.2f}×" if light in med else ""
        if versus in med:
            report(f"{label} ÷ {versus}", med[label] / med[versus], PEER_RATIO_TARGET, "×", beside)
        else:
            print(f"{label}: llm-flops is not installed at {args.peer_python}: no target{beside}")
    if rounds < MIN_ROUNDS:
        print(f"(only {rounds} rounds: the targets ask for the median of {MIN_ROUNDS} or more)")
        ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
