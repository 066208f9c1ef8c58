"""Part H of the sheet (issue 23): the seed's questions for each kind of attention beyond
softmax, on the spec's device R and on an H200, and the hybrids' caches against their twins."""

from __future__ import annotations

import json

import pytest

from attnroof.beyond import analyse_variant, compare_cache
from attnroof.devices import get_device
from attnroof.roofline import Roof
from conftest import assert_one_line_error, run_cli

H200 = Roof.of(get_device("h200"), "bf16")  # ridge 989e12 / 4.8e12 = 206 FLOP/byte
R = Roof(1200e12, 4.0e12)  # the spec's device R: ridge 300


def test_linear_attention_never_crosses_and_its_limit_is_exact():
    a = analyse_variant("linear", H200)
    # per token and value head at C = 64, d = 128 (FLOPs): KKᵀ 2·64·128 + (I + A)⁻¹ 64·63·62/3/64
    # + w, u 2·64·256 + state 4·128² + output 2·128² + 2·64·256, and the conv's 2·4·8192/32;
    # over bytes of the same per token: the limit 91787/3080 = 29.8 FLOP/byte
    assert a.limit_exact == "91787/3080"
    assert a.crossover_s is None and a.decode_growth == "flat"


def test_softmax_fused_crosses_and_unfused_never():
    fused, unfused = analyse_variant("softmax", R), analyse_variant("softmax-unfused", R)
    assert fused.limit_intensity is None and fused.crossover_s is not None
    # unfused, group 8 on d = 256: (4d + 5)/8 = 1029/8 = 128.6 < 300
    assert unfused.limit_exact == "1029/8" and unfused.crossover_s is None


def test_chunked_attention_levels_off_at_its_chunk():
    a = analyse_variant("chunked", H200)
    # 40 heads on 8 KV heads, d = 128, C = 8192: per KV head 5·C²/2·517 FLOPs over (2·5 + 2)·C·128·2 B
    # per chunk: 5·8192·517/(2·12·256) = 10340/3 = 3,447
    assert a.limit_exact == "10340/3"
    assert a.crossover_s is not None and a.crossover_s < 8192
    assert a.decode_growth == "bounded"  # at most C keys


def test_sparse_decode_grows_only_through_the_indexer():
    a = analyse_variant("sparse", H200)
    (c0, b0, _), (c1, b1, _) = a.decode[-2], a.decode[-1]
    # past the top 2048: per extra key, 132 B of index key and a 4-byte logit written and read
    assert b1 - b0 == (c1 - c0) * (132 + 4 + 4)
    assert a.decode_growth == "grows"


def test_qwen3_next_cache_against_its_twin_by_hand():
    c = compare_cache("qwen3-next-80b-a3b", 2)
    # twin: 48 layers × 2 KV heads × 256 × 2 (K, V) × 2 B = 98,304 B/token; the hybrid: 12 such
    # layers (24,576 B/token) and 36 × 1,097,728 B of state. 98,304 s ≥ 2·(24,576 s + 39,518,208)
    # ⇔ s ≥ 2 · 39,518,208 / 49,152 = 1,608
    assert (c.twin_bytes_per_token, c.hybrid_bytes_per_token, c.state_bytes) == (98_304, 24_576, 39_518_208)
    assert c.context == 1608 and c.limit_ratio == 4
    assert compare_cache("qwen3-next-80b-a3b", 4).context is None  # the ratio only tends to 4
    assert compare_cache("falcon-h1-7b", 2).context is None  # attention in every layer, and a state


def test_cli_variant_part_h():
    r = run_cli("sheet", "--variant", "all", "--device", "h200")
    assert r.returncode == 0, r.stderr
    assert "## Part H — Attention beyond softmax" in r.stdout
    assert (
        "| qwen3-next-80b-a3b |      24.6 kB |     39.5 MB |             98.3 kB |   1,608 tokens |             4× |"
        in r.stdout
    )
    data = json.loads(run_cli("sheet", "--variant", "linear", "--device", "h200", "--json").stdout)
    assert data["variants"][0]["never"] is True
    assert data["variants"][0]["decode_bytes"] == "flat"


@pytest.mark.parametrize(
    "flags",
    [
        ["--variant", "all", "--cache-factor", "1"],
        ["--variant", "all", "--cache-factor", "inf"],
        ["--variant", "rwkv"],
    ],
)
def test_cli_variant_bad_input_is_one_line(flags):
    assert_one_line_error(run_cli("sheet", *flags), flags[-1])


def test_one_variant_shows_its_stage_tables():
    r = run_cli("sheet", "--variant", "mamba", "--device", "h200", "-s", "4096")
    assert r.returncode == 0, r.stderr
    assert "### H0. mamba: prefill of s = 4,096" in r.stdout
    assert "| selective scan |" in r.stdout and "| scan step " in r.stdout
    data = json.loads(run_cli("sheet", "--variant", "mamba", "-s", "4096", "--json").stdout)
    scan = data["variants"][0]["prefill_stages"][1]
    assert scan["flops"] == 4096 * 8192 * 16 * 7  # 7 FLOPs per state element and token


def test_each_variant_is_its_built_in_models_layer():
    """The sheet's variants are the built-in models' layers (their published configs), and the
    command's names are the variants'."""
    from attnroof.beyond import MAKERS, variant
    from attnroof.commands.sheet import VARIANT_NAMES
    from attnroof.model.config import builtin
    from attnroof.model.layers import layer_table

    assert set(VARIANT_NAMES) - {"all"} == set(MAKERS)
    scout = next(r for r in layer_table(builtin("llama-4-scout")) if r.operator == "chunked attention")
    assert variant("chunked").bound == scout.shape["attention_chunk"] == 8192
    # Nemotron-H's Mamba-2 conv has a bias (its config's use_conv_bias): the layer reads it
    ssd = next(r for r in layer_table(builtin("nemotron-h-8b")) if r.operator == "ssd")
    assert ssd.shape["conv_bias"] is True and "Nemotron-H-8B" in variant("mamba2").layer
