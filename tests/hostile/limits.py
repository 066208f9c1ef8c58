"""Limits (issue 32): every numeric flag with a physical range refused at both ends, each file's
records judged by one validator, a simulation or grid too large for the memory refused before it
starts naming the bytes it would need, a flag a mode does not read refused, and an empty path
refused rather than read as the flag left out. Each case was an internal error, a hang, a NaN or
a silently wrong answer once; the ends of each range are answered, with their exact figures."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from hostile import Case
from hostile.configs import config, model

S = ("serve-sim", "--model", "llama-3.1-8b", "--device", "h100", "--num-requests", "20")
REQ = (*S, "--requests-file", "{dir}/r.jsonl")
L8 = ("model", "--model", "llama-3.1-8b", "--device", "h100", "--context", "8192")
BUDGET = {"ATTNROOF_MEMORY_BUDGET": "8G"}
"""A fixed ceiling for the memory cases, so that each is refused on any machine, big or small."""
DIGITS = "9" * 5000
FIVE_THOUSAND = ",".join(str(i) for i in range(1, 5001))


def _requests(*rows: dict[str, Any]) -> dict[str, str]:
    return {"r.jsonl": "".join(json.dumps(r) + "\n" for r in rows)}


def _linear(n: int, time_s: float = 1e-5, **change: Any) -> str:
    """One linear record, n tokens × 64×64: 2·n·4096 FLOPs, 2·(128·n + 4096) bytes, in ``time_s``."""
    flops, nbytes = 2.0 * n * 64 * 64, 2.0 * (n * 64 + 64 * 64 + n * 64)
    rec = {
        "key": f"linear/linear/bf16/n={n},k=64,m=64", "kind": "linear", "impl": "linear",
        "shape": {"n": n, "k": 64, "m": 64}, "dtype": "bf16", "device": "cpu (test)", "status": "ok",
        "time_s": time_s, "flops": flops, "bytes": nbytes,
    }  # fmt: skip
    return json.dumps({**rec, **change}) + "\n"


def _attention(**shape: Any) -> str:
    s = {"s": 4096, "d": 128, "batch": 1, "heads": 8, "group": 1, "causal": False, **shape}
    rec = {"kind": "attention", "impl": "sdpa", "shape": s, "dtype": "bf16", "device": "cpu (test)",
           "status": "ok", "time_s": 1e-3, "flops": 1e12, "bytes": 1e9}  # fmt: skip
    return json.dumps(rec) + "\n"


def _summary(result: Any) -> dict[str, Any]:
    out: dict[str, Any] = result.json()["summary"]
    return out


def _alone(result: Any, _dir: Path) -> None:
    """At 0.001 requests a second (the range's low end) each request runs alone: its TTFT and E2E
    are a lone request's (--num-requests 1, all at once: 16.977 ms and 591.9 ms on an H100, its
    single-level bound)."""
    s = _summary(result)
    assert math.isclose(s["latency_s"]["ttft"]["p99"], 0.01697683478425688, rel_tol=1e-9), s["latency_s"]
    assert math.isclose(s["latency_s"]["e2e"]["p50"], 0.5918521359997158, rel_tol=1e-9), s["latency_s"]
    assert s["offered_rate_per_s"] == 0.001


def _steady(result: Any, _dir: Path) -> None:
    """Burstiness 1e4 (the high end): every gap within ~1% of 0.1 s, so 20 requests at 10/s span
    19 gaps of 0.1 s and the last one's lone E2E (0.59 s): 2.49 s."""
    s = _summary(result)
    assert abs(s["duration_s"] - (19 * 0.1 + 0.5916)) < 0.05, s["duration_s"]


def _finite(result: Any, _dir: Path) -> None:
    """Every figure of the answer finite: no 'nan s' anywhere."""
    assert "nan" not in result.stdout.lower(), result.stdout


def _noted(needle: str) -> Any:
    def check(result: Any, _dir: Path) -> None:
        assert needle in result.stdout + result.stderr, (needle, result.stdout, result.stderr)

    return check


GRID = ("model", "--model", "llama-3.1-8b", "--device", "h100", "--sweep-batch", FIVE_THOUSAND,
        "--sweep-context", FIVE_THOUSAND)  # fmt: skip
"""A 5,000 × 5,000 grid of batch × context (MemoryError at 6 GB once)."""


CASES: list[Case] = [
    # ------------------------------------------------------------ serve-sim: ranges, both ends
    Case("--seed -1", (*S, "--seed", "-1"), error=("--seed", "'-1'", "below 0", "numpy")),
    Case("--seed 2^64", (*S, "--seed", str(2**64)), error=("--seed", str(2**64), "64-bit")),
    Case("--seed 5,000 digits", (*S, "--seed", DIGITS), error=("--seed", "not a whole number")),
    Case("--seed 2^64 - 1 is a seed", (*S, "--seed", str(2**64 - 1), "--json"), error=None),
    Case(
        "--burstiness subnormal (hung)",
        (*S, "--rate", "10", "--burstiness", "1e-310"),
        error=("--burstiness", "'1e-310'", "below 0.01"),
    ),
    Case(
        "--burstiness 1e308 (ran all at once)",
        (*S, "--rate", "10", "--burstiness", "1e308"),
        error=("--burstiness", "'1e308'", "above 10000", "steady"),
    ),
    Case(
        "--burstiness 1e4 is steady arrivals",
        (*S, "--rate", "10", "--burstiness", "1e4", "--bound", "--json"),
        error=None,
        check=_steady,
    ),
    Case(
        "--rate 1e-308 (TTFT 0 s over inf s)",
        (*S, "--rate", "1e-308"),
        error=("--rate", "'1e-308'", "below 0.001 requests a second"),
    ),
    Case(
        "--rate 1e-14 (lost the milliseconds)",
        (*S, "--rate", "1e-14"),
        error=("--rate", "'1e-14'", "milliseconds"),
    ),
    Case(
        "--rate 0.001: each request alone",
        (*S[:5], "--num-requests", "3", "--rate", "0.001", "--bound", "--memory-levels", "1", "--json"),
        error=None,
        check=_alone,
    ),
    Case(
        "--max-rate stops at the lowest rate",
        (*S, "--max-rate", "--slo-ttft", "1ns", "--bound", "--memory-levels", "1"),
        error=None,
        check=_noted("max rate: none — even 0.00118 requests/s misses p90 TTFT ≤ 1 ns"),
    ),
    Case("--slo-ttft 1e-320", (*S, "--slo-ttft", "1e-320"), error=("--slo-ttft", "'1e-320'", "below 1 ns")),
    Case(
        "--input-len 2^40: the model's length, not the memory",
        (*S, "--input-len", str(2**40)),
        error=("request 0", "exceed the model length 131072"),
    ),
    # ------------------------------------------------------------ serve-sim: the requests file
    Case(
        "requests file tokens 2^63",
        REQ,
        files=_requests({"input_tokens": 2**63, "output_tokens": 5}),
        error=("r.jsonl:1", f"input_tokens = {2**63}", "at most 2,147,483,647"),
    ),
    Case(
        "requests file output tokens 2^31",
        REQ,
        files=_requests({"input_tokens": 5, "output_tokens": 2**31}),
        error=("r.jsonl:1", f"output_tokens = {2**31}", "more tokens than any model holds"),
    ),
    Case(
        "--warmup every request of the file",
        (*REQ, "--warmup", "3"),
        files=_requests(*[{"input_tokens": 100, "output_tokens": 5}] * 3),
        error=("--warmup 3", "none of the 3 requests", "r.jsonl"),
    ),
    Case(
        "--warmup all but one of the file",
        (*REQ, "--warmup", "2", "--json"),
        files=_requests(*[{"input_tokens": 100, "output_tokens": 5}] * 3),
        error=None,
        check=lambda r, _d: _summary(r)["requests"] == 1,
    ),
    # ------------------------------------------------------------ memory: refused before it starts
    Case(
        "serve-sim 1,000,000 requests (MemoryError at 7.2 GB)",
        (*S[:5], "--num-requests", "1000000"),
        # 1e6 × 1 KiB + 1.28e8 tokens × 32 B + 1.28e8 / 256 steps × 160 B + 1e6 chunks × 560 B
        error=("1,000,000 requests", "would need about 5.8 GB of memory", "1 GB is free", "--num-requests"),
        env={"ATTNROOF_MEMORY_BUDGET": "1G"},
    ),
    Case(
        "serve-sim --max-rate counts its judging runs",
        (*S[:5], "--num-requests", "100000", "--max-rate", "--slo-ttft", "2s"),
        error=("--max-rate's search over 100,000 requests", "would need about"),
        env={"ATTNROOF_MEMORY_BUDGET": "1G"},
    ),
    Case(
        "serve-sim 2^40 requests",
        (*S[:5], "--num-requests", str(2**40)),
        error=("1,099,511,627,776 requests", "would need about 6.3 PB"),
    ),
    Case(
        "model grid 5,000 × 5,000 (MemoryError at 6 GB)",
        GRID,
        # 2.5e7 points × (400 + 15 stages × 40) B
        error=(
            "5,000 batches × 5,000 contexts (25,000,000 points)",
            "would need about 25 GB",
            "--sweep-batch",
        ),
        env=BUDGET,
    ),
    Case(
        "model grid 5,000 × 5,000 as JSON",
        (*GRID, "--json"),
        error=("25,000,000 points", "would need about 55 GB"),  # 2.5e7 × (1,600 + 15 × 40) B
        env=BUDGET,
    ),
    Case(
        "a memory budget that is not one",
        (*S, "--num-requests", "5"),
        error=("ATTNROOF_MEMORY_BUDGET='lots'", "bytes"),
        env={"ATTNROOF_MEMORY_BUDGET": "lots"},
    ),
    # ------------------------------------------------------------ numbers too long to convert
    Case(
        "--where 5,000 digits",
        (
            "plan",
            "--model",
            "llama-3.1-8b",
            "--device",
            "h100",
            "--devices",
            "8",
            "--context",
            "8192",
            "--where",
            f"tp<{DIGITS}",
        ),
        error=("--where", "a number of 5,000 digits", "at most 18"),
    ),
    Case(
        "--weight-dtype int4-g 5,000 digits",
        (*L8, "--weight-dtype", f"int4-g{DIGITS}"),
        error=("--weight-dtype", "is not a weight format attnroof knows"),
    ),
    # ------------------------------------------------------------ link and device figures, both ends
    Case(
        "plan --link-bandwidth 1e-320 (nan s)",
        (
            "plan",
            "--model",
            "llama-3.1-8b",
            "--device",
            "h100",
            "--devices",
            "8",
            "--context",
            "8192",
            "--link-bandwidth",
            "1e-320",
        ),
        error=("--link-bandwidth = 1e-320 B/s", "implausibly small", "450G"),
    ),
    Case(
        "model --link-bandwidth 1e-320 (nan s)",
        (*L8, "--tp", "2", "--link-bandwidth", "1e-320"),
        error=("--link-bandwidth", "implausibly small"),
    ),
    Case(
        "serve-sim --link-bandwidth 1e-320 (nan s)",
        (*S, "--tp", "2", "--link-bandwidth", "1e-320"),
        error=("--link-bandwidth", "implausibly small"),
    ),
    Case(
        "--link-bandwidth 1, a byte a second",
        (*L8, "--tp", "2", "--link-bandwidth", "1"),
        error=("--link-bandwidth = 1.0 B/s", "implausibly small"),
    ),
    Case(
        "--scaleout-bandwidth 1e-320",
        (*L8, "--tp", "2", "--scaleout-bandwidth", "1e-320"),
        error=("--scaleout-bandwidth", "implausibly small", "50G"),
    ),
    Case(
        "--link-bandwidth 1e9, the floor, is answered",
        (*L8, "--tp", "2", "--link-bandwidth", "1e9"),
        error=None,
        check=_finite,
    ),
    Case(
        "footprint --peak-flops 1e-320",
        ("footprint", "-s", "8k", "--peak-flops", "1e-320"),
        error=("--peak-flops = 1e-320 FLOP/s", "implausibly small"),
    ),
    Case(
        "footprint --bandwidth, which it never reads",
        ("footprint", "-s", "8k", "--bandwidth", "3.35T"),
        error=("footprint reads only the device's --capacity", "--bandwidth"),
    ),
    Case(
        "footprint --capacity is read",
        ("footprint", "-s", "8k", "--capacity", "80G", "--json"),
        error=None,
        check=lambda r, _d: r.json()["capacity_bytes"] == 80e9,
    ),
    # ------------------------------------------------------------ results files: one validator
    Case(
        "calibrate time_s 5e-324",
        ("calibrate", "{dir}/m.jsonl", "--device", "h200"),
        files={"m.jsonl": "".join(_linear(n, 5e-324) for n in (1, 2, 4, 8))},
        error=("m.jsonl:1", "time_s = 5e-324", "at least 1e-09"),
    ),
    Case(
        "plot time_s 5e-324, the same line",
        ("plot", "-o", "{dir}/c.png", "--measured", "{dir}/m.jsonl"),
        files={"m.jsonl": _linear(1, 5e-324)},
        error=("m.jsonl:1", "time_s = 5e-324", "at least 1e-09"),
    ),
    Case(
        "calibrate 1e300 FLOPs in a millisecond",
        ("calibrate", "{dir}/m.jsonl", "--device", "h200"),
        files={"m.jsonl": _linear(1, 1e-3, flops=1e300)},
        error=("m.jsonl:1", "flops / time_s = 1e303 FLOP/s", "at most 1e20 FLOP/s"),
    ),
    Case(
        "plot --measured dtype banana",
        ("plot", "-o", "{dir}/c.png", "--measured", "{dir}/m.jsonl"),
        files={"m.jsonl": _linear(1, dtype="banana")},
        error=("m.jsonl:1", "dtype = 'banana'", "bf16"),
    ),
    Case(
        "calibrate dtype banana",
        ("calibrate", "{dir}/m.jsonl", "--device", "h200"),
        files={"m.jsonl": _linear(1, dtype="banana")},
        error=("m.jsonl:1", "dtype = 'banana'"),
    ),
    Case(
        "plot --measured s = 1e30",
        ("plot", "-o", "{dir}/c.png", "--measured", "{dir}/m.jsonl"),
        files={"m.jsonl": _attention(s=10**30)},
        error=("m.jsonl:1", "shape.s = 1000000000000000000000000000000", "at most 2^40"),
    ),
    Case(
        "a calibration's roof of 1e-300 FLOP/s",
        ("attention", "-s", "4096", "-d", "128", "--device", "h200", "--calibration", "{dir}/cal.json"),
        files={
            "cal.json": '{"format": "attnroof-calibration/1", "calibrations": [{"device": null, '
            '"catalog_device": "H200 SXM", "dtype": "bf16", "roofs": {"peak_flops_per_s": 1e-300, '
            '"bandwidth_bytes_per_s": 4.8e12}, "fits": []}]}'
        },
        error=("cal.json", "calibrations[0].roofs.peak_flops_per_s = 1e-300", "from 1e+06"),
    ),
    # ------------------------------------------------------------ a config's quant_method
    Case(
        "quant_method banana (analysed as bf16)",
        model(),
        files=config(quantization_config={"quant_method": "banana"}),
        error=("config.json", "quant_method = 'banana'", "no quantizer's name", "known:", "gptq"),
    ),
    Case(
        "quant_method misspelt",
        model(),
        files=config(quantization_config={"quant_method": "gtpq", "bits": 4}),
        error=("quant_method = 'gtpq'", "did you mean 'gptq'?"),
    ),
    Case(
        "quant_method a quantizer attnroof does not read",
        model(),
        files=config(quantization_config={"quant_method": "torchao"}),
        error=None,
        check=_noted("quant_method 'torchao' is a layout attnroof does not read"),
    ),
    # ------------------------------------------------------------ a flag a mode does not read
    Case(
        "sheet --variant --group (dropped silently)",
        ("sheet", "--variant", "softmax", "--group", "3"),
        error=("--variant (part H) does not read --group",),
    ),
    Case(
        "sheet --variant --batch --layers --heads",
        ("sheet", "--variant", "softmax", "--batch", "3", "--layers", "2", "--heads", "8"),
        error=("does not read --batch, --heads, --layers",),
    ),
    Case(
        "sheet --cache-factor without --variant",
        ("sheet", "--cache-factor", "3"),
        error=("--cache-factor is part H's", "--variant"),
    ),
    Case(
        "sheet --variant with -s and the device",
        ("sheet", "--variant", "linear", "-s", "4096", "--device", "h200", "--json"),
        error=None,
        check=lambda r, _d: [v["variant"] for v in r.json()["variants"]] == ["linear"],
    ),
    # ------------------------------------------------------------ an empty path is no path
    Case(
        "calibrate --output=",
        ("calibrate", "{dir}/m.jsonl", "--output="),
        files={"m.jsonl": _linear(1)},
        error=("--output", "'' is an empty path"),
    ),
    Case("serve-sim --chart=", (*S, "--chart="), error=("--chart", "an empty path")),
    Case("serve-sim --requests-file=", (*S, "--requests-file="), error=("--requests-file", "an empty path")),
    Case(
        "serve-sim --draft-model=",
        (*S, "--draft-model=", "--spec-tokens", "2", "--acceptance", "0.5"),
        error=("--draft-model", "an empty path"),
    ),
    Case("model --calibration=", (*L8, "--calibration="), error=("--calibration", "an empty path")),
    Case(
        "measure linear -o ' '",
        ("measure", "linear", "-n", "8", "-k", "8", "-m", "8", "-o", " "),
        error=("--output", "an empty path"),
    ),
]
