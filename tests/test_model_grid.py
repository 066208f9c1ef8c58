"""The whole-model grid (one evaluation of the layer table on arrays) gives, at every point, the
numbers of a scalar analysis of that point — the same relation as symbolic = numeric = vectorised
for the single-operator formulas."""

from __future__ import annotations

import math

import pytest

from attnroof.model.analysis import analyse
from attnroof.model.config import builtin
from attnroof.model.grid import grid
from attnroof.model.layers import Precision, params
from attnroof.roofline import Roof

H100 = Roof(989e12, 3.35e12)
BATCHES = [1, 3, 16, 64, 256]
CONTEXTS = [128, 4096, 8192, 32768]


@pytest.mark.parametrize("name", ["llama-3.1-8b", "gpt2", "mistral-7b"])
@pytest.mark.parametrize("phase", ["prefill", "decode"])
@pytest.mark.parametrize("fused", [True, False])
def test_grid_equals_pointwise_analysis(name: str, phase: str, fused: bool) -> None:
    model = builtin(name)
    prec = Precision(2, 1, 1)
    g = grid(model, phase, BATCHES, CONTEXTS, H100, prec, capacity_bytes=80e9, fused=fused)
    assert g.time_s.shape == (len(BATCHES), len(CONTEXTS))
    for i, b in enumerate(BATCHES):
        for j, c in enumerate(CONTEXTS):
            a = analyse(model, phase, b, c, H100, prec, capacity_bytes=80e9, fused=fused)
            t, mem = a.totals, a.memory
            assert math.isclose(g.flops[i, j], t.flops, rel_tol=1e-12)
            assert math.isclose(g.bytes[i, j], t.bytes, rel_tol=1e-12)
            assert math.isclose(g.time_s[i, j], t.time_s, rel_tol=1e-12)
            assert math.isclose(g.memory_bound_share[i, j], t.memory_bound_share, rel_tol=1e-9)
            assert math.isclose(g.attention_share[i, j], t.attention_share, rel_tol=1e-9)
            assert math.isclose(g.memory_bytes[i, j], mem.total_bytes, rel_tol=1e-12)
            assert bool(g.fits[i, j]) == mem.fits
            if phase == "decode":
                assert math.isclose(g.tokens_per_s[i, j], t.tokens_per_s, rel_tol=1e-12)


def test_mistral_window_caps_the_cache_on_the_grid() -> None:
    # 32 layers × 2 × 8 KV heads × 128 × 2 B = 131072 B/token, at most 4096 tokens kept
    g = grid(builtin("mistral-7b"), "decode", [1], [1024, 4096, 65536], H100)
    weights = params(builtin("mistral-7b")) * 2
    kv = g.memory_bytes[0] - weights
    assert kv[2] == kv[1] > kv[0]
