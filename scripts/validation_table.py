"""The held-out validation table (data/validation, issue 34): load its rows and sources, and count them.

    python scripts/validation_table.py    # rows per level, device and source; the rows attnroof cannot cost

The rows are for validation only, never fitted on (data/validation/README.md). This module only reads
them: the checks live in tests/test_validation_table.py, and the measured field names live here, once.
"""

from __future__ import annotations

import json
import re
import sys
import tomllib
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
FOLDER = ROOT / "data" / "validation"
LEVELS = ("training", "serving")

MEASURED = {
    "training": (
        "measured_step_s",
        "measured_tokens_per_s",
        "measured_tflops_per_gpu",
        "measured_mfu",
        "measured_hfu",
        "measured_peak_fraction",
        "measured_aggregate_pflops",
    ),
    "serving": (
        "output_tokens_per_s",
        "input_tokens_per_s",
        "total_tokens_per_s",
        "tokens_per_s",
        "request_per_s",
        "ttft_mean_s",
        "ttft_median_s",
        "ttft_p99_s",
        "ttft_min_s",
        "ttft_max_s",
        "tpot_mean_s",
        "tpot_median_s",
        "tpot_p99_s",
        "itl_mean_s",
        "itl_median_s",
        "itl_p99_s",
        "token_latency_p50_s",
        "token_latency_p75_s",
        "token_latency_p95_s",
        "token_latency_p99_s",
        "e2e_latency_s",
        "duration_s",
        "completed_requests",
        "total_input_tokens",
        "total_output_tokens",
        "gpu_memory_gb",
        "itl_fit_intercept_s",
        "itl_fit_slope_s_per_token",
    ),
}
"""The measured fields a row of each level may carry (data/validation/README.md describes each)."""

DESCRIBED = {
    "training": (
        "id", "source", "where", "model", "model_config", "device", "devices", "resolvable", "unresolvable_why",
        "notes", "plan", "global_batch_sequences", "global_batch_tokens", "context", "dtype", "attention_kernel",
        "flop_convention", "measured_tokens_per_s_scope",
    ),
    "serving": (
        "id", "source", "where", "model", "model_config", "device", "devices", "resolvable", "unresolvable_why",
        "notes", "checkpoint", "tp", "pp", "ep", "dp", "instances", "engine", "engine_version", "weights_dtype",
        "kv_cache_dtype", "phase", "workload", "throughput_per", "gpus_per_node", "speculative_decoding",
    ),
}  # fmt: skip
"""The other fields a row of each level may carry."""

PLAN = (
    "tp", "pp", "cp", "ep", "dp", "virtual_stages", "micro_batch_size", "sequence_parallel", "recompute",
    "zero", "schedule",
)  # fmt: skip
WORKLOAD = (
    "dataset",
    "input_len",
    "output_len",
    "num_prompts",
    "request_rate",
    "max_concurrency",
    "batch_size",
)


def rows(level: str) -> list[dict[str, Any]]:
    """The rows of ``<level>.jsonl``, in file order; a line that is not a JSON object raises ValueError."""
    out = []
    path = FOLDER / f"{level}.jsonl"
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        row = json.loads(line)
        if not isinstance(row, dict):
            raise ValueError(f"{path.name} line {number}: not a JSON object")
        out.append(row)
    return out


def sources() -> dict[str, dict[str, Any]]:
    """``sources.toml``: source id to its table."""
    return tomllib.loads((FOLDER / "sources.toml").read_text(encoding="utf-8"))


def reserved() -> list[tuple[str, list[re.Pattern[str]]]]:
    """The README's reserved sources: each name with its patterns (case-insensitive regular expressions)."""
    text = (FOLDER / "README.md").read_text(encoding="utf-8")
    section = text.split("## Reserved sources", 1)[1].split("\n## ", 1)[0]
    out = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 2 or "`" not in cells[1]:
            continue
        patterns = [re.compile(p, re.IGNORECASE) for p in re.findall(r"`([^`]+)`", cells[1])]
        out.append((cells[0], patterns))
    return out


def summary() -> str:
    """Rows per level, device and source, and the rows marked unresolvable, as text."""
    lines = []
    for level in LEVELS:
        table = rows(level)
        lines.append(f"{level}: {len(table)} rows")
        for title, key in (("device", "device"), ("source", "source")):
            counts = Counter(row[key] for row in table)
            lines.append(f"  by {title}: " + ", ".join(f"{k} {n}" for k, n in counts.most_common()))
        for row in table:
            if row.get("resolvable") is False:
                lines.append(f"  unresolvable {row['id']}: {row['unresolvable_why']}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.stdout.write(summary() + "\n")
