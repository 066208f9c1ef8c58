"""The single-device model answer names what it counts (issue 20): active parameters without and
with the input embedding, and the KV cache's bytes per token written against those held."""

from __future__ import annotations

from attnroof.model import builtin
from attnroof.model.layers import active_params, config_json
from conftest import run_cli

# ---------------------------------------------------------------- active parameters


def test_gpt_oss_active_parameters_are_the_cards_without_the_input_embedding() -> None:
    """The gpt-oss model card (table 1) gives 5.13 B active of 116.83 B for gpt-oss-120b and
    3.61 B of 20.91 B for gpt-oss-20b: everything a token runs through but the input embedding
    (201,088 × 2,880 = 579,133,440). The LM head stays in: without it too, 120b would be 4.55 B."""
    table = 201_088 * 2_880
    for name, card in (("gpt-oss-120b", 5.13e9), ("gpt-oss-20b", 3.61e9)):
        m = builtin(name)
        without, with_ = active_params(m, embedding=False), active_params(m)
        assert with_ - without == table
        assert round(without / 1e7) == round(card / 1e7), without
    assert active_params(builtin("gpt-oss-120b"), embedding=False) == 5_132_849_472


def test_the_headline_shows_both_active_counts_named_without_first() -> None:
    r = run_cli("model", "--model", "gpt-oss-120b", "--context", "4096", "--device", "h200")
    assert r.returncode == 0, r.stderr
    head = r.stdout.splitlines()[0]
    assert "117 B parameters (5.13 B active without the input embedding, 5.71 B with it)" in head


def test_the_list_and_the_json_show_both_named() -> None:
    r = run_cli("model", "--list")
    header = r.stdout.splitlines()[0]
    assert header.index("active w/o embedding (B)") < header.index("active with embedding (B)")
    row = next(line for line in r.stdout.splitlines() if line.startswith("| gpt-oss-120b "))
    assert "5.13" in row and "5.71" in row
    counts = config_json(builtin("gpt-oss-120b"))
    keys = [k for k in counts if k.startswith("active_params")]
    assert keys == ["active_params_excluding_embedding", "active_params_including_embedding"]
    assert counts["active_params_excluding_embedding"] == 5_132_849_472
    assert counts["active_params_including_embedding"] == 5_132_849_472 + 201_088 * 2_880


# ---------------------------------------------------------------- KV cache per token


def test_gpt_oss_kv_cache_per_token_written_and_held_at_8k() -> None:
    """gpt-oss-120b: 36 layers, 8 KV heads of 64, bf16; 18 global layers, 18 with a window of 128.

    One layer's K and V of one token: 8 × 64 × 2 (K, V) × 2 B = 2,048 B.
    Written per token, every layer: 36 × 2,048 = 73,728 B (73.7 kB).
    Held at 8,192 tokens: the global layers keep every token, 18 × 2,048 = 36,864 B per token of
    context; the windowed layers keep at most 128 tokens, 18 × 2,048 × 128 = 4,718,592 B per
    sequence, which over 8,192 tokens is 576 B per token. 36,864 + 576 = 37,440 B (37.4 kB).
    """
    r = run_cli("model", "--model", "gpt-oss-120b", "--context", "8192", "--device", "h200", "--json")
    mem = r.json()["memory"]
    assert mem["kv_cache_bytes_per_token_written"] == 36 * 8 * 64 * 2 * 2 == 73_728
    assert mem["kv_cache_bytes_per_sequence"] == 18 * 2_048 * 8_192 + 18 * 2_048 * 128 == 306_708_480
    assert mem["kv_cache_bytes_per_token_held"] == 306_708_480 / 8_192 == 37_440
    text = run_cli("model", "--model", "gpt-oss-120b", "--context", "8192", "--device", "h200").stdout
    assert "(37.4 kB/token held at this context, 73.7 kB/token written)" in text


def test_a_cache_without_windows_holds_what_it_writes() -> None:
    # Llama 3.1 8B: 32 layers × 8 KV heads × 128 × 2 (K, V) × 2 B = 131,072 B, one figure printed
    r = run_cli("model", "--model", "llama-3.1-8b", "--context", "8192", "--device", "h200")
    assert "(131 kB/token)" in r.stdout and "held" not in r.stdout
