"""Issue 9, "small things a user notices": each one as the user met it, and its fix."""

from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp

from attnroof import attention, decode, linear
from attnroof.errors import InputError
from attnroof.footprint import footprint
from attnroof.ops import activation, add, copy, matmul_flops, norm, softmax_flops
from attnroof.ops.attention import causal_half
from attnroof.text.measure import roof_check
from attnroof.text.render import plural
from attnroof.validate import kv_heads
from conftest import assert_one_line_error, run_cli

# ---------------------------------------------------------------- --heads defaults to --group


def test_decode_group_without_heads_means_one_kv_head():
    r = run_cli("decode", "-s", "8192", "-d", "128", "--group", "8", "--json")
    assert r.returncode == 0, r.stderr
    out = r.json()
    assert (out["heads"], out["group"]) == (8, 8)  # 8 query heads on 8/8 = 1 KV head
    per_head = 4 * 8192 * 128 + 5 * 8192  # 4sd + 5s = 4,235,264 FLOPs per query head
    assert out["flops"] == 8 * per_head == 33_882_112


def test_attention_group_without_heads_and_a_bad_pair_names_both_flags():
    r = run_cli("attention", "-s", "1k", "-d", "64", "--group", "4", "--json")
    assert r.returncode == 0 and r.json()["heads"] == 4
    bad = run_cli("attention", "-s", "1k", "-d", "64", "--heads", "6", "--group", "4")  # 6 = 4 + 2
    assert_one_line_error(bad, "--heads 6", "--group 4")


def test_one_helper_checks_heads_and_group():
    assert kv_heads(32, 8) == 4
    with pytest.raises(InputError, match="heads 6 is not a multiple of group 4"):
        kv_heads(6, 4)
    with pytest.raises(InputError, match="--heads 3 is not a multiple of --group 2"):
        kv_heads(3, 2, heads_name="--heads", group_name="--group")


# ---------------------------------------------------------------- the sheet's --heads and --group


def _f3(*args: str) -> str:
    r = run_cli("sheet", *args)
    assert r.returncode == 0, r.stderr
    return r.stdout.split("### F3.", 1)[1].split("Batching does not help", 1)[0]


def test_sheet_group_that_does_not_divide_heads_is_refused():
    for group in ("3", "64"):  # 32 heads: 32 = 3·10 + 2; 64 > 32
        assert_one_line_error(run_cli("sheet", "--group", group), "default --heads 32", f"--group {group}")
    assert_one_line_error(run_cli("sheet", "--heads", "3", "--group", "2"), "--heads 3", "--group 2")


def test_sheet_group_is_visible():
    plain = _f3()
    assert "| **8** |" in plain and "g = 8: 4 KV heads" in plain  # the default: 32 heads, g = 8
    four = _f3("--group", "4")
    assert "| **4** |" in four and "g = 4: 8 KV heads" in four and four != plain
    many = _f3("--heads", "64", "--group", "64")  # multi-query: one KV head
    assert "| **64** |" in many and "g = 64: 1 KV head." in many


def test_sheet_heads_3_lists_the_divisors_of_3():
    text = _f3("--heads", "3")
    rows = [ln.split("|")[1].strip() for ln in text.splitlines() if ln.startswith("|")][2:]
    assert rows == ["**1**", "3"]  # g ∈ {1, 3}; 2, 4 and 8 do not divide 3
    assert "from 1.01 at g = 1 to 3.03 at g = 3" in text  # fused I ≈ g at s = 8192


def test_sheet_one_head_has_nothing_to_group():
    text = _f3("--heads", "1")
    assert "nothing to group" in text and "at g = 1 to" not in text


# ---------------------------------------------------------------- whole counts under causal


def test_causal_half_is_whole_for_integers_and_continuous_for_symbols():
    assert causal_half(8192 * 8192) == 8192 * 8192 // 2  # even: exactly ½
    assert (causal_half(1), causal_half(9)) == (1, 5)  # ⌈1/2⌉, ⌈9/2⌉
    assert list(causal_half(np.array([1, 4, 9]))) == [1, 2, 5]
    s = sp.Symbol("s", positive=True)
    assert causal_half(s**2) == s**2 / 2
    assert causal_half(9.0) == 4.5


def test_causal_attention_at_s_1_counts_one_whole_score():
    r = run_cli("attention", "-s", "1", "-d", "128", "--causal", "--json").json()
    assert r["flops"] == 2 * 128 + 5 + 2 * 128 == 517  # ⌈1/2⌉ = 1 score: Q·Kᵀ, softmax, P·V
    stages = {st["name"]: st for st in r["unfused"]["stages"]}
    assert stages["Q·Kᵀ"]["writes"] == {"S": 2}  # one bf16 element of S, not half of one
    assert stages["Q·Kᵀ"]["flops"] == 256 and stages["P·V"]["flops"] == 256  # 2d each


@pytest.mark.parametrize("s", [1, 3, 7, 8191])
def test_causal_counts_are_never_fractional(s):
    c = attention(s, 128, causal=True, group=4)
    assert c.flops == 4 * ((s * s + 1) // 2) * (4 * 128 + 5)  # g·⌈s²/2⌉ scores · (4d + 5)
    assert all(float(a.bytes).is_integer() for st in c for a in (*st.reads, *st.writes))


# ---------------------------------------------------------------- the library checks its inputs


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: attention(-1, 128), "s"),
        (lambda: attention(0, 128), "s"),
        (lambda: attention(math.nan, 128), "s"),
        (lambda: attention(math.inf, 128), "s"),
        (lambda: attention(2.5, 128), "s"),
        (lambda: attention(8192, -128), "d"),
        (lambda: attention(8192, 128, group=0), "group"),
        (lambda: attention(8192, 128, itemsize=math.nan), "itemsize"),
        (lambda: attention(8192, 128, softmax_flops_per_element=-1), "softmax_flops_per_element"),
        (lambda: decode(True, 128), "s"),
        (lambda: decode("8192", 128), "s"),
        (lambda: linear(0, 8, 8), "n"),
        (lambda: linear(1, 8, 8, weight_itemsize=0), "weight_itemsize"),
        (lambda: matmul_flops(1, -2, 3), "k"),
        (lambda: softmax_flops(math.inf), "elements"),
        (lambda: norm(-1, 8), "n"),
        (lambda: add(1, math.nan), "h"),
        (lambda: activation(1, 0, gated=True), "width"),
        (lambda: copy(-8), "elements"),
        (lambda: footprint(-1), "s"),
        (lambda: footprint(8, heads=0), "heads"),
        (lambda: attention(np.array([1, -3]), 128), "s"),
        (lambda: attention(np.array([1.0, np.nan]), 128), "s"),
    ],
)
def test_library_refuses_bad_numbers_naming_the_parameter(call, name):
    with pytest.raises(InputError) as err:
        call()
    assert str(err.value).startswith(f"{name} must be")


def test_symbols_arrays_and_exact_numbers_pass():
    s = sp.Symbol("s", positive=True)
    assert attention(s, 128).flops == s**2 * (4 * 128 + 5)  # s²(4d + 5), part A2
    assert list(attention(np.array([1, 2]), 128).flops) == [517, 4 * 517]
    assert attention(8192.0, 128).flops == attention(8192, 128).flops  # a whole float is a size
    assert attention(8192, 128, itemsize=0.5).bytes == attention(8192, 128, itemsize=1).bytes / 2  # fp4


# ---------------------------------------------------------------- the command line


@pytest.mark.parametrize(
    "args",
    [
        ["attention", "-s", "8k", "-d", "128", "--dtype=--"],
        ["attention", "-s", "8k", "-d", "128", "--device=--"],
        ["attention", "-s=--", "-d", "128"],
        ["model", "--model=--", "--context", "8k"],
        ["plot", "--output=--"],
    ],
)
def test_a_double_dash_value_is_one_line(args):
    assert_one_line_error(run_cli(*args), "expected a value, got '--'")


def test_a_newline_in_an_argument_stays_on_one_line():
    assert_one_line_error(run_cli("attention", "-s", "8k", "-d", "128", "--device", "zz\nqq"), "zz\\nqq")
    assert_one_line_error(run_cli("attention", "-s", "8k", "-d", "128", "--x\ny"), "--x\\ny")
    assert_one_line_error(run_cli("attention", "-s", "8\nk", "-d", "128"), "'8\\nk'")


def test_did_you_mean():
    assert_one_line_error(run_cli("atention"), "did you mean 'attention'?")
    assert_one_line_error(run_cli("measure", "lineer"), "did you mean 'linear'?")
    assert_one_line_error(
        run_cli("attention", "-s", "8k", "-d", "128", "--dtype", "bf61"), "did you mean bf16?"
    )
    assert_one_line_error(run_cli("attention", "-s", "8k", "-d", "128", "--device", "h10"), "did you mean")


def test_errors_say_which_forms_are_accepted():
    assert_one_line_error(run_cli("attention", "-s", "1e3", "-d", "128"), "'1e3'", "such as 8192 or 8k")
    too_far = run_cli("attention", "-s", "8k", "-d", "128", "--bandwidth", "3.35TB/s")
    assert_one_line_error(too_far, "'3.35TB/s'", "such as 3.35e12 or 3.35T")


@pytest.mark.parametrize(
    ("flag", "value", "limit"),
    [
        ("--peak-flops", "1e300", "at most 1e20 FLOP/s"),
        ("--peak-flops", "2e20", "at most 1e20 FLOP/s"),
        ("--bandwidth", "1e300", "at most 1e17 B/s"),
        ("--capacity", "1e17", "at most 1e16 B"),
    ],
)
def test_implausibly_large_device_figures(flag, value, limit):
    r = run_cli("attention", "-s", "8k", "-d", "128", flag, value)
    assert_one_line_error(r, f"'{value}' is implausibly large for {flag} ({limit})")


def test_largest_plausible_figures_pass():
    r = run_cli("attention", "-s", "8k", "-d", "128", "--peak-flops", "1e20", "--bandwidth", "1e16", "--json")
    assert r.returncode == 0 and r.json()["ridge"] == 1e4  # 1e20 / 1e16


def test_int8_peaks_are_ops_everywhere():
    line = run_cli("attention", "-s", "8k", "-d", "128", "--device", "h100", "--dtype", "int8").stdout
    assert "(int8): peak 1.98 POP/s" in line  # 1978.9 TOP/s dense
    table = run_cli("devices", "h100").stdout
    int8 = next(ln for ln in table.splitlines() if ln.startswith("| int8"))
    assert "1978.9 TOP/s" in int8 and "FLOP/s" not in int8
    sheet = run_cli("sheet", "--device", "h100", "--dtype", "int8").stdout
    assert "Ridge = P / B = 1.98 POP/s" in sheet


def test_plurals():
    assert (plural(1, "token"), plural(2, "token"), plural(0, "point")) == ("1 token", "2 tokens", "0 points")
    assert run_cli("linear", "-n", "1", "-k", "8", "-m", "8").stdout.startswith("linear: 1 token through")
    assert (
        roof_check([]) == "roof check: no point has an efficiency to check (nothing was timed against a roof)"
    )
    one = roof_check([{"efficiency": 0.5, "impossible": False}])
    assert one.startswith("roof check: the one placed point lies under the measured roof")
    two = roof_check([{"efficiency": 0.5}, {"efficiency": 0.7}])
    assert two.startswith("roof check: all 2 placed points lie")
