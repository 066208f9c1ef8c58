"""--schedule and --virtual-stages: each bad combination refused in one line naming the flag,
and a pipeline schedule never silently ignored."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hostile import Case

L8_TRAIN = (
    "model", "--model", "llama-3.1-8b", "--device", "h100", "--phase", "train", "--context", "4096",
    "--batch", "8",
)  # fmt: skip
PP4 = ("--pp", "4", "--microbatches", "8")


def _schedule_in_json(name: str, v: int) -> Any:
    def check(result: Any, _: Path) -> None:
        plan = json.loads(result.stdout)["parallel"]
        assert (plan["schedule"], plan["virtual_stages"]) == (name, v)

    return check


def _said(*words: str) -> Any:
    def check(result: Any, _: Path) -> None:
        assert all(w in result.stdout for w in words), words

    return check


CASES = [
    Case("schedule unknown", (*L8_TRAIN, *PP4, "--schedule", "gpipe"), error=("--schedule", "gpipe")),
    Case(
        "virtual stages without interleaved",
        (*L8_TRAIN, *PP4, "--virtual-stages", "2"),
        error=("--virtual-stages 2", "--schedule interleaved"),
    ),
    Case(
        "virtual stages with zb-h1",
        (*L8_TRAIN, *PP4, "--schedule", "zb-h1", "--virtual-stages", "2"),
        error=("--virtual-stages 2",),
    ),
    Case(
        "virtual stages zero",
        (*L8_TRAIN, *PP4, "--schedule", "interleaved", "--virtual-stages", "0"),
        error=("--virtual-stages",),
    ),
    Case(
        "interleaved without virtual stages",
        (*L8_TRAIN, *PP4, "--schedule", "interleaved"),
        error=("--schedule interleaved", "--virtual-stages"),
    ),
    Case(
        "interleaved without a pipeline",
        (*L8_TRAIN, "--tp", "2", "--schedule", "interleaved", "--virtual-stages", "2"),
        error=("--schedule interleaved", "--pp 2"),
    ),
    Case(
        "interleaved micro-batches not a multiple of the stages",
        (*L8_TRAIN, "--pp", "4", "--microbatches", "2", "--schedule", "interleaved", "--virtual-stages", "2"),
        error=("--microbatches 2", "multiple", "--pp 4"),
    ),
    Case(
        "interleaved chunks that do not divide the layers",  # 32 layers, 12 chunks; 34 neither
        (*L8_TRAIN, *PP4, "--schedule", "interleaved", "--virtual-stages", "3"),
        error=("--virtual-stages 3", "32 layers", "12 equal chunks"),
    ),
    Case(
        "zb-h1 at decode",
        (
            "model",
            "--model",
            "llama-3.1-8b",
            "--device",
            "h100",
            "--phase",
            "decode",
            "--batch",
            "8",
            "--context",
            "4096",
            "--pp",
            "2",
            "--schedule",
            "zb-h1",
        ),
        error=("--schedule zb-h1", "--phase train"),
    ),
    Case(
        "schedule with fit",
        (*L8_TRAIN, "--fit", "--schedule", "zb-h1"),
        error=("--fit", "--schedule zb-h1"),
    ),
    Case(
        "schedule alone still asks for the parallel form",
        (*L8_TRAIN, "--schedule", "zb-h1", "--json"),
        error=None,
        check=_schedule_in_json("zb-h1", 1),
    ),
    Case(
        "interleaved named in the plan line",
        (*L8_TRAIN, *PP4, "--schedule", "interleaved", "--virtual-stages", "2"),
        error=None,
        check=_said("8 micro-batches, interleaved × 2 chunks a device", "(layers 12–15, 28–31)"),
    ),
    Case(
        "interleaved at prefill",
        (
            "model",
            "--model",
            "llama-3.1-8b",
            "--device",
            "h100",
            "--phase",
            "prefill",
            "--batch",
            "4",
            "--context",
            "4096",
            "--pp",
            "2",
            "--microbatches",
            "4",
            "--schedule",
            "interleaved",
            "--virtual-stages",
            "2",
            "--json",
        ),
        error=None,
        check=_schedule_in_json("interleaved", 2),
    ),
]
