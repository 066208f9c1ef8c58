"""The backward pass of each operator, with its arithmetic worked by hand."""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp
from hypothesis import given
from hypothesis import strategies as st

from attnroof.ops import attention, linear
from attnroof.ops.backward import attention_backward, decode_backward, linear_backward
from attnroof.passes import BWD, FWD_BWD, pass_formula
from conftest import run_cli

S, D = 8192, 128


def test_fused_backward_is_ten_s2d_plus_the_elementwise_work():
    # five s×s×d products: 5 · 2·s²·d = 10 · 8192² · 128
    assert attention_backward(S, D, fused=True, softmax_flops_per_element=0).flops == 10 * S * S * D
    # plus 5 element-wise FLOPs per score by default: (10·128 + 5) · s²
    assert attention_backward(S, D, fused=True).flops == (10 * D + 5) * S * S


def test_fused_forward_plus_backward_is_3_5_times_the_forward_matmuls():
    fwd = attention(S, D, fused=True, softmax_flops_per_element=0).flops  # 4·s²·d
    assert fwd == 4 * S * S * D
    both = pass_formula("attention", FWD_BWD)(S, D, fused=True, softmax_flops_per_element=0).flops
    assert both * 2 == 7 * fwd  # 3.5×
    # the unfused backward keeps P and does four products: forward + backward = 3×
    unfused = pass_formula("attention", FWD_BWD)(S, D, softmax_flops_per_element=0).flops
    assert unfused == 3 * fwd


def test_causal_halves_the_backward_score_work_and_stays_whole():
    full = attention_backward(S, D, fused=True).flops
    assert attention_backward(S, D, fused=True, causal=True).flops * 2 == full
    odd = attention_backward(3, 2, fused=True, causal=True, softmax_flops_per_element=0).flops
    assert odd == 10 * 2 * 5 and isinstance(odd, int)  # ⌈9/2⌉ = 5 scores, 10·d each


def test_unfused_backward_bytes_against_its_stage_table():
    s, d, b = 1024, 64, 2  # bf16
    sd, ss = s * d * b, s * s * b
    table = {
        "dV = Pᵀ·dO": ss + sd + sd,  # reads P, dO; writes dV
        "dP = dO·Vᵀ": sd + sd + ss,  # reads dO, V; writes dP
        "softmax backward": ss + ss + ss,  # reads P, dP; writes dS
        "dQ = dS·K": ss + sd + sd,  # reads dS, K; writes dQ
        "dK = dSᵀ·Q": ss + sd + sd,  # reads dS, Q; writes dK
    }
    cost = attention_backward(s, d)
    assert {st.name: st.bytes for st in cost} == table
    assert cost.bytes == 2 * (7 * s * s + 8 * s * d)
    # with --softmax-flops 0 the four products alone: 4 · 2·s²·d
    assert attention_backward(s, d, softmax_flops_per_element=0).flops == 8 * s * s * d


def test_fused_backward_bytes():
    s, d, b = 1024, 64, 2
    sd, rows = s * d * b, s * 4  # L and D in fp32
    pre = 2 * sd + rows  # reads O, dO; writes D
    main = 4 * sd + 2 * rows + 3 * sd  # reads Q, K, V, dO, L, D; writes dQ, dK, dV
    assert attention_backward(s, d, fused=True).bytes == pre + main == 18 * s * d + 12 * s


def test_gqa_writes_dk_dv_once_per_kv_head():
    s, d, g = 512, 64, 8
    cost = attention_backward(s, d, fused=True, group=g)
    (main,) = [st for st in cost if st.name == "fused attention backward"]
    writes = {a.tensor: a.bytes for a in main.writes}
    assert writes == {"dQ": g * s * d * 2, "dK": s * d * 2, "dV": s * d * 2}
    # the FLOPs are those of g heads
    assert cost.flops == g * attention_backward(s, d, fused=True).flops


def test_linear_backward_is_twice_the_forward_with_its_own_intensities():
    n, k, m = 4096, 4096, 14336
    fwd, bwd = linear(n, k, m), linear_backward(n, k, m)
    assert bwd.flops == 2 * fwd.flops == 2 * 2 * n * k * m
    dx, dw = bwd.stages
    assert dx.bytes == 2 * (n * m + k * m + n * k)  # reads dY, W; writes dX
    assert dw.bytes == 2 * (n * k + n * m + k * m)  # reads X, dY; writes dW
    # dW's intensity grows with the tokens like the forward GEMM's
    small, big = linear_backward(16, k, m).stages[1], dw
    assert small.flops / small.bytes < big.flops / big.bytes
    # an fp32 gradient: dW written at 4 bytes
    assert linear_backward(n, k, m, grad_itemsize=4).stages[1].bytes == 2 * (n * k + n * m) + 4 * k * m


def test_decode_backward_is_one_query_row():
    assert decode_backward(S, D, fused=True, softmax_flops_per_element=0).flops == 10 * S * D


@given(s=st.integers(1, 5000), d=st.sampled_from([32, 64, 128, 256]), fused=st.booleans())
def test_symbolic_exact_and_vectorised_agree(s: int, d: int, fused: bool):
    x = sp.Symbol("s", positive=True)
    sym = attention_backward(x, d, fused=fused)
    exact = attention_backward(s, d, fused=fused)
    vec = attention_backward(np.array([s, s + 1]), d, fused=fused)
    assert sym.flops.subs(x, s) == exact.flops and sym.bytes.subs(x, s) == exact.bytes
    assert vec.flops[0] == exact.flops and vec.bytes[0] == exact.bytes


def _cli(*argv: str) -> dict:
    out = run_cli(*argv, "--json")
    assert out.returncode == 0, out.stderr
    return out.json()


def test_cli_pass_flag_and_crossover():
    data = _cli("attention", "-s", "8192", "-d", "128", "--pass", "bwd", "--softmax-flops", "0")
    assert data["pass"] == "bwd"
    assert data["fused"]["flops"] == 10 * S * S * D
    fwd = _cli("attention", "-s", "8192", "-d", "128")
    assert "pass" not in fwd  # the forward's JSON is unchanged
    cross = _cli("crossover", "-d", "128", "--pass", "bwd")
    # device R, ridge 300: 1285·s / 2316 ≥ 300 ⇔ s ≥ 138960/257 = 540.7; the forward needs 595
    assert (cross["fused"]["s_min"], cross["forward"]["fused"]["s_min"]) == (541, 595)
    assert cross["unfused"]["never"] and cross["unfused"]["limit_exact"] == "147/2"  # 1029/14
    lin = _cli("linear", "-n", "4096", "-k", "4096", "-m", "4096", "--pass", "fwd+bwd")
    assert lin["flops"] == 3 * 2 * 4096**3
    assert [s["name"] for s in lin["stages"]] == ["linear", "linear dX", "linear dW"]


@pytest.mark.parametrize("which", [BWD, FWD_BWD])
def test_every_operator_has_each_pass(which: str):
    from attnroof.operators import OPERATORS
    from test_operators import NO_BACKWARD

    # the recurrent decode steps, a serving chunk under chunked local attention and DeepSeek's
    # sparse attention have no backward (test_operators.py says why)
    assert all(callable(pass_formula(name, which)) for name in OPERATORS if name not in NO_BACKWARD)


def test_sheet_part_g():
    r = run_cli("sheet", "--pass", "fwd+bwd")
    assert r.returncode == 0 and "## Part G — The backward pass" in r.stdout
    plain = run_cli("sheet")
    assert "Part G" not in plain.stdout and r.stdout.startswith(plain.stdout)
    g = _cli("sheet", "--pass", "fwd+bwd")["backward_part"]
    # device R, s = 8192, d = 128: fused backward from s = 541, the forward from 595
    assert (g["crossover"]["fused"]["s_min"], g["forward_crossover"]["fused"]["s_min"]) == (541, 595)
    # recomputed S and softmax: (2·128 + 5)·8192² per head; P kept: 8192²·2 B × 8 × 32 × 80
    assert g["recompute_flops_per_head"] == (2 * 128 + 5) * S * S
    assert g["kept_p_bytes"] == S * S * 2 * 8 * 32 * 80
