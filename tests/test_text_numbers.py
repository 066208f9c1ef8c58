"""How text output writes numbers: a count of one takes the singular ("1 byte", "1 head"), and an
exact fraction that is not a whole number always has its decimal beside it ("19788/67 = 295.3"),
whatever the device, dtype or shape."""

from __future__ import annotations

import json
import re
from fractions import Fraction

import pytest

from attnroof.text import render
from conftest import run_cli
from test_architectures import MLA_FLAGS

NOUNS = (
    "bytes|heads|KV heads|layers|tokens|devices|ranks|micro-batches|experts|elements|sequences|"
    "parameters|measurements|cases|shapes|steps|runs|calls|processes|kernels"
)
ONE_PLURAL = re.compile(rf"(?<![\d.,/·=×^])\b1 ({NOUNS})\b")
"""``1 bytes``, ``1 KV heads``: a count of one with its noun in the plural."""

FRACTION = re.compile(r"(?<![\w/.])(-?\d+)/(\d+)(?![\w/.])")


@pytest.fixture(scope="module")
def one_kv_head_config(tmp_path_factory):
    """A small multi-query model: one query head on one KV head, a window on one layer of two."""
    path = tmp_path_factory.mktemp("cfg") / "config.json"
    path.write_text(
        json.dumps(
            {
                "architectures": ["MistralForCausalLM"],
                "model_type": "mistral",
                "hidden_size": 128,
                "intermediate_size": 512,
                "num_hidden_layers": 2,
                "num_attention_heads": 1,
                "num_key_value_heads": 1,
                "head_dim": 128,
                "vocab_size": 1000,
                "hidden_act": "silu",
                "max_position_embeddings": 4096,
                "tie_word_embeddings": False,
            }
        )
    )
    return str(path)


SINGULAR_CASES = [
    ("sheet", "--device", "h100", "--dtype", "fp8"),
    ("sheet", "--heads", "1", "--group", "1", "--layers", "1", "--batch", "1", "--pass", "fwd+bwd"),
    ("model", "--model", "{cfg}", "--context", "8"),
    ("model", "--model", "{cfg}", "--context", "8", "--phase", "train"),
    ("model", "--model", "{cfg}", "--context", "8", "--phase", "prefill", "--pp", "2"),
]


@pytest.mark.parametrize("args", SINGULAR_CASES, ids=" ".join)
def test_a_count_of_one_takes_the_singular(args, one_kv_head_config):
    argv = [a.replace("{cfg}", one_kv_head_config) for a in args]
    if "--pp" in argv:
        argv += ["--microbatches", "1", "--link-bandwidth", "400e9"]
    r = run_cli(*argv)
    assert r.returncode == 0, r.stderr
    bad = [line for line in r.stdout.splitlines() if ONE_PLURAL.search(line)]
    assert not bad, bad


def test_the_fp8_sheet_says_one_byte_per_element():
    r = run_cli("sheet", "--device", "h100", "--dtype", "fp8")
    assert "1 byte per element" in r.stdout


def test_the_html_report_says_one_byte(tmp_path):
    pytest.importorskip("matplotlib")
    out = tmp_path / "r.html"
    r = run_cli(
        "report", "-o", str(out), "--device", "h100", "--dtype", "fp8", "--heads", "1", "--layers", "1"
    )
    assert r.returncode == 0, r.stderr
    text = out.read_text(encoding="utf-8")
    assert "fp8 (1 byte)" in text and "1 head," in text and "1 layer" in text
    assert not ONE_PLURAL.search(text)


FRACTION_CASES = [
    ("sheet", "--device", "h100"),
    ("sheet", "--device", "h100", "--dtype", "fp8"),
    ("sheet", "--device", "b200", "--dtype", "fp4", "--pass", "fwd+bwd"),
    ("sheet",),
    ("crossover", "-d", "128", "--device", "h100"),
    ("crossover", "-d", "64", "--device", "h100", "--causal", "--pass", "bwd"),
    ("crossover", "-d", "128"),
    ("linear", "-n", "64", "-k", "4096", "-m", "4096", "--device", "h100"),
    ("decode", "-s", "32k", "--heads", "128", *MLA_FLAGS, "--device", "h200"),
]


def fractions_without_a_decimal(text: str) -> list[str]:
    """Each fraction p/q in ``text`` that is not a whole number and is not followed by
    ``= <its decimal>``."""
    bad = []
    for m in FRACTION.finditer(text):
        q = Fraction(int(m.group(1)), int(m.group(2)))
        if q.denominator == 1:
            continue
        after = re.match(r" = (-?[\d,]+\.\d+)", text[m.end() :])
        if not after or abs(float(after.group(1).replace(",", "")) - float(q)) > 0.05 * abs(float(q)):
            bad.append(text[max(0, m.start() - 40) : m.end() + 20])
    return bad


@pytest.mark.parametrize("args", FRACTION_CASES, ids=" ".join)
def test_every_fraction_has_its_decimal_beside_it(args):
    r = run_cli(*args)
    assert r.returncode == 0, r.stderr
    assert not fractions_without_a_decimal(r.stdout)


def test_the_h100_ridge_is_a_fraction_with_its_decimal():
    r = run_cli("crossover", "-d", "128", "--device", "h100")
    assert "I(s) ≥ 19788/67 = 295.3" in r.stdout
    assert "limit as s → ∞: 517/8 = 64.6" in r.stdout


def test_the_check_itself_finds_a_bare_fraction():
    assert fractions_without_a_decimal("ridge 19788/67 here")
    assert fractions_without_a_decimal("threshold 1842176/3149 = 585")  # looks like a whole number
    assert not fractions_without_a_decimal("threshold 1842176/3149 = 585.003, ridge 300, 600/2")


def test_a_decimal_never_looks_like_a_whole_number():
    for q in (
        Fraction(1842176, 3149),
        Fraction(517, 4),
        Fraction(19788, 67),
        Fraction(-1, 3),
        Fraction(10**6 + 1, 10**6),
    ):
        assert "." in render.decimal(q), q
        assert "." in render.decimal(q, 5), q
