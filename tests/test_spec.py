"""Every number of the specification (Solution 2, device R), each beside the part it comes from.

Device R: P = 1200e12 FLOP/s (bf16), B = 4.0e12 B/s, 192e9 B. bf16 = 2 bytes; one head.
"""

from __future__ import annotations

import pytest
import sympy as sp

from attnroof import Roof, attention, decode, get_device, linear, place
from attnroof.analysis import Comparison, softmax_share
from attnroof.footprint import footprint
from attnroof.solve import crossover

s, d = sp.symbols("s d", positive=True)
R = Roof(1200e12, 4.0e12)
P, B = 1200e12, 4.0e12


def same(a: sp.Expr, b: sp.Expr) -> bool:
    return sp.simplify(a - b) == 0


def elements(cost):  # itemsize 1: bytes are element counts
    return [(st.name, sp.expand(st.bytes_read), sp.expand(st.bytes_written)) for st in cost]


# ---------------------------------------------------------------- Part A: FLOPs


def test_A1_flops_formula():
    c = attention(s, d)
    qk, sm, pv = c.stages
    assert same(qk.flops, 2 * s * s * d)  # (s×d)·(d×s): 2·s·s·d
    assert same(pv.flops, 2 * s * s * d)  # (s×s)·(s×d): 2·s·s·d
    assert same(sm.flops, 5 * s**2)  # 5 FLOPs per score
    assert same(c.flops, s**2 * (4 * d + 5))  # F = 4s²d + 5s²


def test_A2_softmax_share_at_8192_128():
    c = attention(8192, 128)
    gemm = sum(st.flops for st in c if st.name != "softmax")
    assert gemm == 4 * 8192**2 * 128 == 34_359_738_368  # 3.436e10
    assert c.stages[1].flops == 5 * 8192**2 == 335_544_320  # 3.355e8
    assert softmax_share(c) == pytest.approx(5 / (4 * 128 + 5))  # 5/517
    assert round(100 * softmax_share(c), 2) == 0.97  # "0.97% of the total"
    assert round(100 * softmax_share(attention(1, 8))) == 14  # 5/37 = 13.5%: "at d = 8 it is 13%"
    assert 0.13 < softmax_share(attention(1, 8)) < 0.14


# ---------------------------------------------------------------- Part B: bytes


def test_B1_unfused_stage_table():
    # elements crossing HBM per stage (itemsize 1)
    assert elements(attention(s, d, itemsize=1)) == [
        ("Q·Kᵀ", 2 * s * d, s**2),  # reads Q, K (sd each), writes S (s²)
        ("softmax", s**2, s**2),  # reads S, writes P
        ("P·V", s**2 + s * d, s * d),  # reads P, V, writes O
    ]
    assert same(attention(s, d, itemsize=1).bytes, 4 * s * d + 4 * s**2)
    assert same(attention(s, d).bytes, 8 * s * d + 8 * s**2)  # × 2 bytes


def test_B2_fused_bytes():
    assert elements(attention(s, d, fused=True, itemsize=1)) == [("fused attention", 3 * s * d, s * d)]
    assert same(attention(s, d, fused=True).bytes, 8 * s * d)


def test_B3_traffic_ratio():
    ratio = attention(s, d).bytes / attention(s, d, fused=True).bytes
    assert same(ratio, 1 + s / d)
    assert attention(512, 128).bytes / attention(512, 128, fused=True).bytes == 5  # 1 + 512/128
    assert attention(8192, 128).bytes / attention(8192, 128, fused=True).bytes == 65  # 1 + 8192/128


# ---------------------------------------------------------------- Part C: intensity


def test_C1_C3_intensity_closed_forms():
    assert same(attention(s, d).intensity, s * (4 * d + 5) / (8 * (d + s)))
    assert same(attention(s, d, fused=True).intensity, s * (4 * d + 5) / (8 * d))
    assert same(attention(s, 128, fused=True).intensity, sp.Rational(517, 1024) * s)  # ≈ 0.505·s


def test_C2_unfused_limit():
    lim = sp.limit(attention(s, d).intensity, s, sp.oo)
    assert same(lim, (4 * d + 5) / sp.Integer(8))
    assert lim.subs(d, 128) == sp.Rational(517, 8)  # 64.6 FLOP/byte
    assert float(lim.subs(d, 128)) == pytest.approx(64.625)


@pytest.mark.parametrize(
    ("n", "i_unfused", "i_fused", "v_unfused", "v_fused"),
    [
        # C4, with the ±2× band of design.md (the spec's note: 512 and 1024 fused are in the band)
        (512, 51.7, 258, "memory-bound", "near ridge"),
        (1024, 57.4, 517, "memory-bound", "near ridge"),
        (2048, 60.8, 1034, "memory-bound", "compute-bound"),
        (4096, 62.7, 2068, "memory-bound", "compute-bound"),
        (8192, 63.6, 4136, "memory-bound", "compute-bound"),
        (32768, 64.4, 16544, "memory-bound", "compute-bound"),
    ],
)
def test_C4_sweep_table(n, i_unfused, i_fused, v_unfused, v_fused):
    u, f = place(attention(n, 128), R), place(attention(n, 128, fused=True), R)
    assert round(u.intensity, 1) == i_unfused
    assert round(f.intensity) == i_fused  # 517·s/1024
    assert u.limiter == "memory"
    assert f.limiter == ("memory" if n == 512 else "compute")  # 258 < 300 ≤ 517
    assert (u.verdict, f.verdict) == (v_unfused, v_fused)


# ---------------------------------------------------------------- Part D: ridge and crossovers


def test_D1_ridge():
    assert R.ridge == 300  # 1200e12 / 4.0e12
    assert get_device("R").ridge("bf16") == 300


def test_D2_fused_crossover():
    c = crossover(lambda x: attention(x, 128, fused=True).intensity, P, B)
    assert c.exact == "307200/517"  # 517·s/1024 ≥ 300 ⇔ s ≥ 307200/517
    assert round(c.threshold, 1) == 594.2
    assert c.s_min == 595
    assert not c.never


def test_D3_unfused_never_crosses():
    c = crossover(lambda x: attention(x, 128).intensity, P, B)
    # 517·s ≥ 2400·(128 + s) ⇔ −1883·s ≥ 307200 ⇔ s ≤ −163
    assert c.inequality == "-1883*s - 307200 >= 0"
    assert c.solution == "s <= -307200/1883"
    assert round(-307200 / 1883, 1) == -163.1
    assert c.never and c.s_min is None
    assert c.limit_intensity == pytest.approx(64.625)  # supremum 517/8
    assert round(300 / c.limit_intensity, 1) == 4.6  # "4.6× below the ridge"


def test_D4_attainable_and_time():
    F = attention(8192, 128).flops
    assert F == 34_695_282_688  # 3.470e10
    cmp = Comparison.of(attention(8192, 128), attention(8192, 128, fused=True), R)
    u, f = cmp.unfused.placement, cmp.fused.placement
    assert u.attainable_flops_per_s == pytest.approx(63.63 * 4.0e12, rel=1e-3)  # 63.6 × 4 TB/s ≈ 254 TFLOP/s
    assert u.time_s == pytest.approx(136e-6, rel=0.005)  # 545 MB / 4 TB/s = 136 µs
    assert u.limiter == "memory"
    assert f.attainable_flops_per_s == 1200e12  # min(1200, 4136×4)
    assert f.time_s == pytest.approx(28.9e-6, rel=0.005)  # 3.470e10 / 1200e12
    assert f.limiter == "compute"
    assert cmp.speedup_ceiling == pytest.approx(4.7, abs=0.05)  # 1200 / 254


# ---------------------------------------------------------------- Part E: footprint


def test_E1_score_matrix_footprint():
    one = footprint(8192)
    assert one.bytes_per_head == 8192**2 * 2 == 134_217_728  # 134.2 MB
    big = footprint(8192, batch=8, heads=32, capacity_bytes=192e9)
    assert big.bytes == 256 * 134_217_728  # 34.4 GB
    assert round(big.bytes / 1e9, 1) == 34.4
    assert round(big.fraction_of_capacity, 2) == 0.18  # 18% of 192 GB
    assert big.fits
    assert not footprint(8192, batch=8, heads=32, layers=80, capacity_bytes=192e9).fits  # "impossible"


# ---------------------------------------------------------------- Part F: variants


def test_F1_causal():
    assert same(attention(s, d, causal=True).flops, 2 * s**2 * d + sp.Rational(5, 2) * s**2)
    assert same(attention(s, d, causal=True).bytes, 8 * s * d + 4 * s**2)
    assert same(attention(s, d, causal=True, fused=True).bytes, 8 * s * d)
    lim = sp.limit(attention(s, d, causal=True).intensity, s, sp.oo)
    assert same(lim, (2 * d + sp.Rational(5, 2)) / 4)  # ≈ d/2, unchanged
    c = crossover(lambda x: attention(x, 128, fused=True, causal=True).intensity, P, B)
    assert round(c.threshold, 1) == 1188.4  # 2400·128/258.5 = 307200/258.5
    assert c.s_min == 1189
    full = crossover(lambda x: attention(x, 128, fused=True).intensity, P, B)
    assert c.threshold / full.threshold == pytest.approx(2)  # "exactly doubles"
    assert crossover(lambda x: attention(x, 128, causal=True).intensity, P, B).never


def test_F2_decode():
    c = decode(s, d, itemsize=1)
    assert same(c.flops, 4 * s * d + 5 * s)
    assert elements(c) == [
        ("Q·Kᵀ", d + s * d, s),  # q, K; scores
        ("softmax", s, s),
        ("P·V", s + s * d, d),  # p, V; o
    ]
    assert same(c.bytes, 2 * s * d + 4 * s + 2 * d)
    i = decode(8192, 128).intensity  # (4sd + 5s) / (2·(2sd + 4s + 2d))
    assert i == pytest.approx(4_235_264 / 4_260_352)
    assert round(i, 3) == 0.994
    assert round(300 / i) == 302  # "about 300× below the ridge"
    assert place(decode(8192, 128), R).verdict == "memory-bound"
    assert same(sp.limit(decode(s, d).intensity, s, sp.oo), (4 * d + 5) / (4 * d + 8))  # → 1 for d ≫ 1


def test_F3_gqa_and_batching():
    # GQA: I ≈ g·4sd / (2·2sd) = g
    for g in (1, 2, 4, 8):
        i = decode(8192, 128, group=g, fused=True).intensity
        assert i == pytest.approx(g, rel=0.02)
    assert decode(8192, 128, group=8).intensity == pytest.approx(8, rel=0.11)  # unfused: scores scale with g
    # batching decode does not raise attention's intensity: each KV cache is private
    assert decode(8192, 128, batch=16).intensity == decode(8192, 128).intensity
    # batching a GEMM amortises the weight: I = 2nkm / (2·(nk + km + nm)) ≈ n for n ≪ k, m
    for n in (1, 8, 64):
        assert linear(n, 8192, 8192).intensity == pytest.approx(n, rel=0.02)
