"""``--cp``: context parallelism's bad degrees, contexts, phases and pairings, each one line
naming the flag; and the answers it must give where it runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hostile import Case

L8 = ("model", "--model", "llama-3.1-8b", "--device", "h100")
P = ("--phase", "prefill", "--context", "8192")
EP8 = ("--cp", "2", "--dp", "2", "--ep", "8")
PREFILL = (*L8, "--phase", "prefill", "--context", "8192")


def _plan_and_ring(result: Any, _: Path) -> None:
    out = json.loads(result.stdout)
    assert out["parallel"]["cp"] == 2 and out["parallel"]["devices"] == 2
    ring = [o for o in out["ops"] if o["name"] == "K/V ring step"]
    # 4096 tokens × 2 · 8 · 128 elements × 2 B = 16,777,216 B, one step a layer, 32 layers
    assert ring and ring[0]["comm_bytes"] == 16_777_216 and ring[0]["count"] == 32


def _text_names_cp(result: Any, _: Path) -> None:
    assert "TP 1 × CP 2 × PP 1 × DP 1 = 2 devices" in result.stdout
    assert "K/V ring step [send/recv, p2p, 2 dev, scale-up]" in result.stdout


CASES = [
    Case("--cp 0", argv=(*PREFILL, "--cp", "0"), error=("--cp",)),
    Case("--cp -2", argv=(*PREFILL, "--cp", "-2"), error=("--cp",)),
    Case("--cp x", argv=(*PREFILL, "--cp", "x"), error=("--cp",)),
    Case(
        "--cp with a context that does not split into 2C chunks",
        argv=(*L8, "--phase", "prefill", "--context", "8190", "--cp", "2"),
        error=("--cp 2", "--context 8,190", "4"),
    ),
    Case("--cp at decode", argv=(*L8, "--context", "8192", "--cp", "2"), error=("--cp 2", "decode")),
    Case("--cp --unfused", argv=(*PREFILL, "--cp", "2", "--unfused"), error=("--cp 2", "--unfused")),
    Case(
        "--cp on sliding-window attention",
        argv=("model", "--model", "mistral-7b", "--device", "h100", *P, "--cp", "2"),
        error=("--cp 2", "sliding-window"),
    ),
    Case(
        "--cp on latent attention",
        argv=("model", "--model", "deepseek-v3", "--device", "h200", *P, "--cp", "2", "--tp", "8"),
        error=("latent attention", "context parallelism"),
    ),
    Case(
        "--ep must divide --dp × --cp",
        argv=("model", "--model", "qwen3-30b-a3b", "--device", "h100", *P, "--batch", "2", *EP8),
        error=("--ep 8", "--tp × --cp × --dp = 4", "--ep must divide --dp × --cp"),
    ),
    Case("--fit --cp", argv=(*PREFILL, "--fit", "--cp", "2"), error=("--fit", "--cp")),
    Case("--cp 2 JSON", argv=(*PREFILL, "--cp", "2", "--json"), error=None, check=_plan_and_ring),
    Case("--cp 2 text", argv=(*PREFILL, "--cp", "2"), error=None, check=_text_names_cp),
    Case(
        "--cp-comm without --cp", argv=(*PREFILL, "--tp", "2", "--cp-comm", "allgather"), error=("--cp-comm",)
    ),
    Case("--cp-comm unknown", argv=(*PREFILL, "--cp", "2", "--cp-comm", "tree"), error=("--cp-comm", "tree")),
]
