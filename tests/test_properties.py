"""Relations that hold for every shape, checked with hypothesis.

One formula serves three number systems: exact ints, numpy arrays and sympy symbols must agree.
"""

from __future__ import annotations

import numpy as np
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from attnroof import Roof, attention, decode, linear
from attnroof.cost import Cost
from attnroof.solve import crossover

sizes = st.integers(min_value=1, max_value=1 << 17)
heads_dims = st.sampled_from([8, 16, 32, 64, 80, 96, 128, 192, 256])
itemsizes = st.sampled_from([1, 2, 4])
flags = st.booleans()
groups = st.sampled_from([1, 2, 4, 8])
rates = st.floats(min_value=1e10, max_value=1e16)
bandwidths = st.floats(min_value=1e10, max_value=1e14)

S, D = sp.symbols("s d", positive=True)


@settings(max_examples=60, deadline=None)
@given(s=sizes, d=heads_dims, size=itemsizes, fused=flags, causal=flags)
def test_symbolic_equals_exact_equals_vectorised(s, d, size, fused, causal):
    exact = attention(s, d, itemsize=size, fused=fused, causal=causal)
    symbolic = attention(S, D, itemsize=size, fused=fused, causal=causal)
    ints = attention(np.array([s, s + 1]), d, itemsize=size, fused=fused, causal=causal)
    reals = attention(np.array([s, s + 1], dtype=np.float64), d, itemsize=size, fused=fused, causal=causal)
    # Causal with s odd: ints count ⌈s²/2⌉ = s²/2 + ½ whole scores, symbols and reals the continuous
    # s²/2. The extra half score costs ½·(2d + 5 + 2d) FLOPs and, unfused, ½ of S written, read,
    # P written, read: ½·4·itemsize bytes. With s even the forms agree exactly.
    half = sp.Rational(1, 2) if causal and s % 2 else 0
    extra_flops = half * (4 * d + 5)
    extra_bytes = 0 if fused else half * 4 * size
    assert symbolic.flops.subs({S: s, D: d}) + extra_flops == exact.flops
    assert symbolic.bytes.subs({S: s, D: d}) + extra_bytes == exact.bytes
    assert ints.flops[0] == exact.flops and ints.bytes[0] == exact.bytes
    assert reals.flops[0] == pytest.approx(float(exact.flops - extra_flops), rel=1e-12)
    assert reals.bytes[0] == pytest.approx(float(exact.bytes - extra_bytes), rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(s=sizes, d=heads_dims, g=groups, size=itemsizes)
def test_decode_symbolic_equals_exact(s, d, g, size):
    exact = decode(s, d, group=g, itemsize=size)
    symbolic = decode(S, D, group=g, itemsize=size)
    assert symbolic.flops.subs({S: s, D: d}) == exact.flops
    assert symbolic.bytes.subs({S: s, D: d}) == exact.bytes


@settings(max_examples=100, deadline=None)
@given(s=sizes, d=heads_dims, size=itemsizes)
def test_traffic_ratio_is_one_plus_s_over_d(s, d, size):
    ratio = sp.Rational(
        attention(s, d, itemsize=size).bytes, attention(s, d, fused=True, itemsize=size).bytes
    )
    assert ratio == 1 + sp.Rational(s, d)


@settings(max_examples=100, deadline=None)
@given(s=sizes, d=heads_dims, fused=flags)
def test_causal_halves_the_flops(s, d, fused):
    full, causal = attention(s, d, fused=fused).flops, attention(s, d, causal=True, fused=fused).flops
    per_score = 2 * d + 5 + 2 * d  # Q·Kᵀ dot product, softmax, P·V
    assert full == s * s * per_score
    assert causal == -(-s * s // 2) * per_score  # ⌈s²/2⌉ whole scores: never a fraction
    if s % 2 == 0:
        assert causal * 2 == full  # the spec's ½, exact
    else:
        assert causal * 2 == full + per_score  # (s² + 1)/2 scores


@settings(max_examples=30, deadline=None)
@given(d=heads_dims, peak=rates, bw=bandwidths, fused=flags, causal=flags, size=itemsizes)
def test_crossover_is_the_first_size_at_or_above_the_ridge(d, peak, bw, fused, causal, size):
    def intensity(x):
        return attention(x, d, fused=fused, causal=causal, itemsize=size).intensity

    c = crossover(intensity, peak, bw)
    ridge = sp.Rational(repr(peak)) / sp.Rational(repr(bw))
    if c.never:
        assert c.limit_intensity is not None and c.limit_intensity <= float(ridge) * (1 + 1e-12)
        return
    # The crossover solves the continuous form (causal: s²/2 scores), so check that form at s.
    continuous = sp.nsimplify(intensity(S))
    assert continuous.subs(S, c.s_min) >= ridge  # I(s_min) ≥ ridge
    if c.s_min > 1:
        assert continuous.subs(S, c.s_min - 1) < ridge  # > I(s_min − 1)


@settings(max_examples=60, deadline=None)
@given(n=sizes, k=sizes, m=sizes)
def test_costs_add_and_scale(n, k, m):
    a, b = linear(n, k, m), attention(n, 64)
    both = a + b
    assert both.flops == a.flops + b.flops and both.bytes == a.bytes + b.bytes
    assert (3 * a).flops == 3 * a.flops and (a * 3).bytes == 3 * a.bytes
    assert isinstance(both, Cost) and len(both.stages) == 4


@settings(max_examples=60, deadline=None)
@given(s=sizes, d=heads_dims, peak=rates, bw=bandwidths)
def test_roofline_time_is_the_slower_roof(s, d, peak, bw):
    roof = Roof(peak, bw)
    c = attention(s, d)
    t = roof.time(c.flops, c.bytes)
    assert t == max(c.flops / peak, c.bytes / bw)
    assert roof.attainable(c.intensity) <= peak
    assert roof.attainable(c.intensity) == pytest.approx(c.flops / t)


def test_verdict_band_edges():
    roof = Roof(1200e12, 4e12)  # ridge 300
    assert roof.verdict(149.9) == "memory-bound"
    assert roof.verdict(150.0) == "near ridge"
    assert roof.verdict(600.0) == "near ridge"
    assert roof.verdict(600.1) == "compute-bound"
    assert list(roof.verdict(np.array([1.0, 300.0, 1e4]))) == ["memory-bound", "near ridge", "compute-bound"]


def test_unfused_crosses_on_a_low_ridge_device():
    # ridge 25 < (4·128 + 5)/8 = 64.6: unfused attention does reach it (never special-cased)
    c = crossover(lambda x: attention(x, 128).intensity, 100e12, 4e12)
    assert not c.never and c.exact == "25600/317" and c.s_min == 81  # 517s ≥ 200(8s + 1024)


@settings(max_examples=60, deadline=None)
@given(s=sizes, d=heads_dims, size=itemsizes)
def test_masking_without_skipping_does_all_the_work_and_one_more_pass(s, d, size):
    # eager PyTorch: every score computed, then a pass reads S and the 1-byte mask and writes S
    masked = attention(s, d, causal=True, mask_pass=True, itemsize=size)
    full = attention(s, d, itemsize=size)
    assert masked.flops == full.flops
    assert masked.bytes == full.bytes + 2 * s * s * size + s * s
    assert [st.name for st in masked] == ["Q·Kᵀ", "mask", "softmax", "P·V"]
