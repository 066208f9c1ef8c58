"""Write (or check) the JSON snapshots the structure test compares against:
``python scripts/snapshot_json.py`` rewrites tests/data/snapshots/*.json from the current code.

Each command's ``--json`` output on a few shapes, taken once before a restructuring, guards that
refactoring changes no number and no field. Regenerate only when a change of output is intended.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

SNAPSHOTS = ROOT / "tests" / "data" / "snapshots"

COMMANDS: dict[str, list[str]] = {
    "sheet": ["sheet"],
    "sheet-h100-fp8": ["sheet", "--device", "h100", "--dtype", "fp8", "-s", "32k", "-d", "64"],
    "attention": ["attention", "-s", "8192", "-d", "128"],
    "attention-causal-gqa": [
        "attention",
        "-s",
        "4096",
        "-d",
        "64",
        "--causal",
        "--heads",
        "32",
        "--group",
        "4",
        "--batch",
        "2",
    ],
    "decode": ["decode", "-s", "8192", "-d", "128", "--heads", "32", "--group", "8"],
    "linear": ["linear", "-n", "64", "-k", "4096", "-m", "4096"],
    "linear-fp8": [
        "linear",
        "-n",
        "16",
        "-k",
        "8192",
        "-m",
        "8192",
        "--weight-dtype",
        "fp8",
        "--device",
        "h200",
    ],
    "sweep": ["sweep", "-d", "128"],
    "sweep-causal": ["sweep", "-d", "64", "--causal", "-s", "512..65536", "--device", "a100"],
    "crossover": ["crossover", "-d", "128"],
    "crossover-causal": ["crossover", "-d", "64", "--causal", "--device", "mi300x"],
    "footprint": ["footprint", "-s", "32768", "--batch", "4", "--heads", "32", "--layers", "32"],
    "devices": ["devices"],
    "devices-h100": ["devices", "h100"],
    "model-decode": [
        "model",
        "--model",
        "llama-3.1-8b",
        "--phase",
        "decode",
        "--context",
        "8192",
        "--device",
        "h100",
    ],
    "model-prefill": [
        "model",
        "--model",
        "qwen2.5-7b",
        "--phase",
        "prefill",
        "--context",
        "4096",
        "--batch",
        "2",
        "--device",
        "h200",
    ],
    "model-gpt2": ["model", "--model", "gpt2", "--phase", "decode", "--context", "1024", "--batch", "8"],
    "model-mistral-unfused": [
        "model",
        "--model",
        "mistral-7b",
        "--phase",
        "decode",
        "--context",
        "32768",
        "--unfused",
        "--device",
        "h100",
    ],
    "model-sweep": [
        "model",
        "--model",
        "llama-3.1-70b",
        "--context",
        "4096",
        "--device",
        "h200",
        "--dtype",
        "fp8",
        "--sweep-batch",
        "1,16,64,256",
    ],
}


def run(argv: list[str]) -> object:
    from attnroof.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([*argv, "--json"])
    if code != 0:
        raise SystemExit(f"{' '.join(argv)}: exit {code}: {err.getvalue().strip()}")
    return json.loads(out.getvalue())


def main() -> int:
    SNAPSHOTS.mkdir(parents=True, exist_ok=True)
    for name, argv in COMMANDS.items():
        data = {"argv": argv, "json": run(argv)}
        (SNAPSHOTS / f"{name}.json").write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {len(COMMANDS)} snapshots to {SNAPSHOTS.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
