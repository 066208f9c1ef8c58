"""Flags that were silently ignored, or answered with a figure the text and JSON disagreed on."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from hostile import Case

TRAIN_8X8 = ("--phase", "train", "--tp", "8", "--pp", "8")
L8 = ("model", "--model", "llama-3.1-8b", "--device", "h100", "--context", "8192")


def _largest_context_is_the_models(result: Any, _: Path) -> None:
    # memory alone would hold more, but Llama 3.1 has 131,072 positions (max_position_embeddings)
    assert "largest context at this batch 131,072 (the model's limit" in result.stdout


def _checkpoint_note(result: Any, _: Path) -> None:
    # inference counts DeepSeek-V3's weights as stored; training at its own dtype, and says which
    assert re.search(
        r"note: (weights counted as the|the) checkpoint stores (them \(fp8|weights as fp8)", result.stdout
    )


def _fit_only_tries(tps: set[int]) -> Any:
    def check(result: Any, _: Path) -> None:
        tried = json.loads(result.stdout)["fit"]["plans"]
        assert tried and {t["parallel"]["tp"] for t in tried} <= tps

    return check


def _no_fastest(result: Any, _: Path) -> None:
    assert "none of these degrees fits" in result.stdout and "fastest" not in result.stdout
    assert re.search(r"\| +8 \| +8 \|.*\| no +\|", result.stdout)


CASES = [
    Case(
        "train --calibration on one device",
        argv=(*L8, "--phase", "train", "--calibration", "{dir}/cal.json"),
        error=("--calibration", "--phase train"),
    ),
    Case(
        "--sweep-batch --calibration",
        argv=(*L8, "--sweep-batch", "1,8", "--calibration", "{dir}/cal.json"),
        error=("--calibration", "--sweep-batch"),
    ),
    Case(
        "--fit --sweep-tp only tries the listed degrees",
        argv=(*L8, "--batch", "8", "--fit", "--sweep-tp", "1,2", "--json"),
        error=None,
        check=_fit_only_tries({1, 2}),
    ),
    Case("--fit --tp", argv=(*L8, "--fit", "--tp", "4"), error=("--fit", "--tp")),
    Case(
        "--sweep-tp where nothing fits names no fastest",
        argv=(*L8, "--batch", "4096", "--sweep-tp", "1,2,4,8"),
        error=None,
        check=_no_fastest,
    ),
    Case(
        "--tp keeps the model's max_position_embeddings",
        argv=(*L8, "--tp", "2"),
        error=None,
        check=_largest_context_is_the_models,
    ),
    Case(
        "--tp keeps the model's notes",
        argv=("model", "--model", "deepseek-v3", "--device", "h200", "--context", "4096", "--tp", "8"),
        error=None,
        check=_checkpoint_note,
    ),
    Case(
        "a training plan keeps the model's notes",
        argv=("model", "--model", "deepseek-v3", "--device", "h200", "--context", "4096", *TRAIN_8X8),
        error=None,
        check=_checkpoint_note,
    ),
]

PLAN = ("plan", "--model", "llama-3.1-8b", "--device", "h100", "--context", "8k", "--batch", "8")
CASES += [
    Case("plan --devices beyond any cluster", argv=(*PLAN, "--devices", "1000000000"), error=("--devices",)),
    # a training search of 4M tokens on up to 65,536 devices: more than 500,000 plans, refused at
    # once (counted before any is costed), not left to run for minutes
    Case(
        "plan with too many plans",
        argv=(
            "plan",
            "--model",
            "llama-3.1-8b",
            "--device",
            "h100",
            "--phase",
            "train",
            "--context",
            "4096",
            "--global-batch",
            "4M",
            "--devices",
            "65536",
        ),
        error=("--where", "500,000"),
    ),
    Case("plan --where garbage", argv=(*PLAN, "--devices", "8", "--where", "tp<<8"), error=("--where",)),
]
