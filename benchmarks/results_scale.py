"""Reading a results file of a million lines: ``plot``, ``report`` and ``calibrate``, each in a
new process, timed (wall) with its peak memory (``resource.getrusage``, max RSS). Not a test:
run ``python benchmarks/results_scale.py [--lines N]``.

The file (written to a temporary folder, removed after) is the reference H200 campaign
(``tests/data/h200-reference.jsonl``, 81 lines, 78 measurements) written again and again, each
copy's times a little slower (up to +10%), as a campaign run in a loop into one file makes it:
1,000,000 lines, 78 measurements, the fastest of each kept. The reader streams it (one line in
memory at a time, one record per measurement), so memory stays flat however long the file.

Targets: each command well under 30 s and a few hundred MB; the report page a few MB.

Before issue 20 (the issue's figures, 1,000,000 lines): plot 96 s / 3 GB, report 160 s / 7.9 GB
and a 694 MB page, calibrate > 300 s.

After, on this 2-core machine with nothing else running, 1,000,000 lines (861 MB): plot 14.9 s
/ 80 MB, report 15.6 s / 115 MB and a 0.17 MB page, calibrate 16.4 s / 80 MB. Memory does not
grow with the lines (one record per measurement is kept); time does, about 15 µs a line, most of
it the strict JSON parse and the record's checks.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "tests" / "data" / "h200-reference.jsonl"

RUN = """
import resource, sys
from attnroof.cli import main
code = main(sys.argv[1:])
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)
sys.exit(code)
"""
"""A command in a new interpreter; its peak RSS (KiB, Linux) as the last line of stderr."""


def write_file(path: Path, lines: int) -> None:
    """``lines`` lines of the reference campaign repeated, copy c's times × (1 + (c mod 10)/100)."""
    base = [json.loads(line) for line in REFERENCE.read_text().splitlines() if line.strip()]
    with path.open("w", encoding="utf-8") as f:
        for i in range(lines):
            rec = dict(base[i % len(base)])
            if rec.get("time_s"):
                slower = 1 + ((i // len(base)) % 10) / 100
                t = rec["time_s"] * slower
                rec.update(
                    time_s=t, achieved_flops_per_s=rec["flops"] / t, achieved_bytes_per_s=rec["bytes"] / t
                )
            f.write(json.dumps(rec) + "\n")


def run(argv: list[str]) -> tuple[float, float, str]:
    """(wall s, peak MB, stderr's notes) of ``attnroof ARGV`` in a new process."""
    env = {"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"}
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", RUN, *argv], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - start
    *notes, rss = proc.stderr.strip().splitlines() or ["0"]
    if proc.returncode != 0:
        raise SystemExit(f"attnroof {' '.join(argv)} failed: {proc.stderr.strip()}")
    return wall, int(rss) / 1024, " | ".join(notes)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lines", type=int, default=1_000_000)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "results.jsonl"
        start = time.perf_counter()
        write_file(data, args.lines)
        size = data.stat().st_size
        print(f"{args.lines:,} lines, {size / 1e6:,.0f} MB, written in {time.perf_counter() - start:.0f} s")
        page = Path(tmp) / "r.html"
        commands = {
            "plot": ["plot", "-o", str(Path(tmp) / "c.png"), "--measured", str(data), "--device", "h200"],
            "report": ["report", "-o", str(page), "--measured", str(data), "--device", "h200"],
            "calibrate": ["calibrate", str(data)],
        }
        print(f"{'command':10} {'wall s':>8} {'peak MB':>8}  output")
        for name, argv in commands.items():
            wall, peak, notes = run(argv)
            out = f"page {page.stat().st_size / 1e6:.2f} MB" if name == "report" else ""
            print(f"{name:10} {wall:8.1f} {peak:8.0f}  {out}")
        print(f"notes: {notes}")


if __name__ == "__main__":
    main()
