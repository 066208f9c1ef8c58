"""Results files (JSON lines) and ceilings files, as plot, report, calibrate and measure read
them: one device per file, figures that agree with their counts, bounded lines, repeated
measurements resolved by one rule (tests/test_results_files.py has the detailed tests)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hostile import Case

GPU = "cuda:0 (NVIDIA H200)"


def _linear(n: int, device: str = "cpu (test)", time_s: float = 1e-5, **change: Any) -> str:
    """One linear record, n tokens × 64×64: 2·n·4096 FLOPs, 2·(128·n + 4096) bytes, in ``time_s``."""
    flops, nbytes = 2.0 * n * 64 * 64, 2.0 * (n * 64 + 64 * 64 + n * 64)
    rec = {
        "key": f"linear/linear/bf16/n={n},k=64,m=64", "kind": "linear", "impl": "linear",
        "shape": {"n": n, "k": 64, "m": 64}, "dtype": "bf16", "device": device, "status": "ok",
        "time_s": time_s, "flops": flops, "bytes": nbytes, "intensity": flops / nbytes,
        "achieved_flops_per_s": flops / time_s, "achieved_bytes_per_s": nbytes / time_s,
    }  # fmt: skip
    return json.dumps({**rec, **change}) + "\n"


def _plot(*extra: str) -> tuple[str, ...]:
    return ("plot", "-o", "{dir}/c.png", "--measured", "{dir}/m.jsonl", *extra)


def _noted(needle: str) -> Any:
    def check(result: Any, folder: Path) -> None:
        assert needle in result.stderr, result.stderr

    return check


CASES: list[Case] = [
    Case("results /dev/zero", ("plot", "-o", "{dir}/c.png", "--measured", "/dev/zero"),
         error=("/dev/zero:1", "longer than 64 KiB")),
    Case("results line of 1 MB", _plot(), files={"m.jsonl": _linear(1) + "[" * 2**20 + "\n"},
         error=("m.jsonl:2", "longer than 64 KiB")),
    Case("results achieved 1e30", _plot(), files={"m.jsonl": _linear(1, achieved_flops_per_s=1e30)},
         error=("m.jsonl:1", "achieved_flops_per_s = 1e+30", "is not what flops, bytes and time_s make")),
    Case("results intensity off 10x", ("report", "-o", "{dir}/r.html", "--measured", "{dir}/m.jsonl"),
         files={"m.jsonl": _linear(1, intensity=9.7)}, error=("m.jsonl:1", "intensity = 9.7")),
    Case("results two devices plot", _plot(), files={"m.jsonl": _linear(1) + _linear(2, device=GPU)},
         error=("m.jsonl:2", f"measured on {GPU!r}", "line 1 on 'cpu (test)'")),
    Case("results two devices calibrate", ("calibrate", "{dir}/m.jsonl"),
         files={"m.jsonl": _linear(1, device=GPU) + _linear(2)},
         error=("m.jsonl:2", "measured on 'cpu (test)'", f"line 1 on {GPU!r}")),
    Case("results ceilings of another device",
         _plot("--ceilings", "{dir}/c.json"),
         files={"m.jsonl": _linear(1),
                "c.json": json.dumps({"device": {"name": f"measured {GPU}", "peak_flops_per_s": {"bf16": 7.9e14},
                                                 "bandwidth_bytes_per_s": 4.2e12}})},
         error=("c.json", f"measured on {GPU!r}", "on 'cpu (test)'")),
    Case("results measured twice: fastest kept", _plot(),
         files={"m.jsonl": _linear(1, time_s=2e-5) + _linear(1)}, error=None,
         check=_noted("lines 1 and 2); the fastest ok record of each is kept")),
    Case("results measured twice: calibrate notes it", ("calibrate", "{dir}/m.jsonl", "--device", "h200"),
         files={"m.jsonl": "".join(_linear(n) for n in (1, 2, 4, 8)) + _linear(1, time_s=2e-5)}, error=None,
         check=_noted("lines 1 and 5); the fastest ok record of each is kept")),
    Case("results not UTF-8", _plot(), files={"m.jsonl": _linear(1).encode() + b"\xff\xfe\n"},
         error=("m.jsonl:2", "not UTF-8")),
]  # fmt: skip
