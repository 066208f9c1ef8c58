"""Model configs (``config.json``) that were read wrongly, hung, or printed a wrong line: each is
refused in one line naming the field and the file, or answered right."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hostile import Case

TINY = {
    "model_type": "llama",
    "hidden_size": 128,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 256,
    "vocab_size": 1000,
    "rms_norm_eps": 1e-5,
}
"""A four-layer Llama, small enough to read in no time; each case changes a few fields."""


def config(**fields: Any) -> dict[str, str]:
    """``files`` holding a config.json: :data:`TINY` with ``fields`` (None: the field removed)."""
    cfg = {k: v for k, v in {**TINY, **fields}.items() if v is not None}
    return {"config.json": json.dumps(cfg)}


def model(*extra: str) -> tuple[str, ...]:
    return ("model", "--model", "{dir}/config.json", "--context", "4096", *extra)


def _prints(*needles: str, absent: tuple[str, ...] = ()) -> Any:
    def check(result: Any, _dir: Path) -> None:
        for needle in needles:
            assert needle in result.stdout, (needle, result.stdout)
        for needle in absent:
            assert needle not in result.stdout, (needle, result.stdout)

    return check


CASES: list[Case] = [
    Case(
        "gpt-oss-120b's stored-weights note states its itemsize (it printed the f-string's braces)",
        ("model", "--model", "gpt-oss-120b", "--context", "4k", "--device", "h200"),
        error=None,
        check=_prints("counted here at 2 B each", absent=("{prec",)),
    ),
]
