"""Model configs (``config.json``) that were read wrongly, hung, or printed a wrong line: each is
refused in one line naming the field and the file, or answered right."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hostile import Case
from test_config_reading import OLMOE_1B_7B  # the published config, with its source

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


"""allenai/OLMoE-1B-7B-0924's sizes."""


CASES: list[Case] = [
    Case(
        "gpt-oss-120b's stored-weights note states its itemsize (it printed the f-string's braces)",
        ("model", "--model", "gpt-oss-120b", "--context", "4k", "--device", "h200"),
        error=None,
        check=_prints("expert gate/up and expert down at 4.25 bits a weight", absent=("{prec", "{g.")),
    ),
    Case(
        "a million layers (23 s, one row list built per layer)",
        model(),
        files=config(num_hidden_layers=10**6),
        error=("config.json", "num_hidden_layers = 1,000,000", "at most 10,000"),
    ),
    Case(
        "a billion layers (MemoryError)",
        model(),
        files=config(num_hidden_layers=10**9),
        error=("config.json", "num_hidden_layers = 1,000,000,000"),
    ),
    Case(
        "ten thousand alternating layers are read, each kind costed once",
        model(),
        files=config(model_type="gemma2", num_hidden_layers=10_000, sliding_window=64),
        error=None,
        check=_prints("attention (window 64)", "×5000"),
    ),
    Case(
        "mlp_only_layers outside the layers",
        model(),
        files=config(
            model_type="qwen2_moe", num_experts=8, num_experts_per_tok=2, mlp_only_layers=[-1, 1000]
        ),
        error=("config.json", "mlp_only_layers", "layer -1", "0 to 3"),
    ),
    Case(
        "first_k_dense_replace beyond the layers",
        model(),
        files=config(
            model_type="deepseek_v3", num_experts=8, num_experts_per_tok=2, first_k_dense_replace=1000
        ),
        error=("config.json", "first_k_dense_replace = 1000", "4 layers"),
    ),
    Case(
        "an unknown model_type (granite) was read as an ungated MLP",
        model(),
        files=config(model_type="granite", hidden_act="silu"),
        error=("config.json", "model_type = 'granite'", "it reads", "llama"),
    ),
    Case(
        "an unknown model_type (olmo2) was read as an ungated MLP",
        model(),
        files=config(model_type="olmo2", hidden_act="silu"),
        error=("config.json", "model_type = 'olmo2'", "it reads"),
    ),
    Case(
        "a window on every layer printed the rate written per token as the rate held",
        model(),
        files=config(model_type="mistral", sliding_window=1024),
        error=None,
        # 4 layers × 2 KV heads × 32 × 2 (K, V) × 2 B = 1,024 B written per token; at 4096 tokens
        # each layer holds 1024 of them: 1,024 × 1024 / 4096 = 256 B per token of context
        check=_prints("(256 B/token held at this context, 1.02 kB/token written)"),
    ),
    Case(
        "OLMoE's whole-width QK norm was left out",
        model("--json"),
        files=config(**OLMOE_1B_7B),
        error=None,
        check=lambda r, _dir: _olmoe(r.json()),
    ),
]


def _olmoe(out: dict[str, Any]) -> None:
    """OLMoE-1B-7B: 6,919,161,856 parameters, as transformers builds it (tests/test_config_reading.py)."""
    assert out["config"]["params"] == 6_919_161_856
    assert out["config"]["qk_norm"] == "width"
