"""The GEMM crossover solved with exact fractions (solve.affine_crossover) agrees, field for
field and character for character, with the general sympy solver (solve.crossover)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from attnroof.ops import linear
from attnroof.ops.attention import attention
from attnroof.solve import affine_crossover, crossover

ITEMSIZES = st.sampled_from([0.5, 1, 2, 4])
FIGURES = st.builds(lambda m, e: float(f"{m}e{e}"), st.integers(1, 9999), st.integers(8, 15))


@settings(max_examples=60, deadline=None)
@given(
    k=st.integers(1, 1 << 17),
    m=st.integers(1, 1 << 17),
    a=ITEMSIZES,
    w=ITEMSIZES,
    peak=FIGURES,
    bandwidth=FIGURES,
)
def test_affine_equals_sympy(k: int, m: int, a: float, w: float, peak: float, bandwidth: float) -> None:
    def cost(n):
        return linear(n, k, m, itemsize=a, weight_itemsize=w)

    fast = affine_crossover(cost, peak, bandwidth)
    slow = crossover(lambda n: cost(n).intensity, peak, bandwidth, variable="n")
    assert fast == slow


def test_part_f3_numbers():
    # I(n) = 2·n·4096² / (2·(4096n + 4096² + 4096n)) = 2048n/(n + 2048) ≥ 300  ⇔  n ≥ 153600/437
    c = affine_crossover(lambda n: linear(n, 4096, 4096), 1200e12, 4.0e12)
    assert (c.s_min, c.exact, c.limit_exact) == (352, "153600/437", "2048")


def test_never_when_the_supremum_is_below_the_ridge():
    # 1×1 weight: I → 2/(2·2) = ½ FLOP/byte at most, far below a ridge of 10⁶
    c = affine_crossover(lambda n: linear(n, 1, 1), 1e15, 1e9)
    assert c.never and c.s_min is None and c.limit_exact == "1/2"


def test_other_shapes_fall_back_to_sympy():
    # attention's FLOPs grow as s², not affinely: the general solver answers (part D2)
    c = affine_crossover(lambda s: attention(s, 128, fused=True), 1200e12, 4.0e12, variable="s")
    assert (c.s_min, c.exact) == (595, "307200/517")


def test_the_gemm_crossover_never_loads_sympy():
    """The point of the fraction solver: `attnroof linear` starts without sympy's import."""
    import subprocess
    import sys

    code = (
        "import sys; from attnroof.ops import linear; from attnroof.solve import affine_crossover;"
        "c = affine_crossover(lambda n: linear(n, 4096, 4096), 1200e12, 4e12);"
        "assert c.s_min == 352, c; assert 'sympy' not in sys.modules, 'sympy was imported'"
    )
    from conftest import SRC

    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={"PYTHONPATH": str(SRC)}
    )
    assert r.returncode == 0, r.stderr
