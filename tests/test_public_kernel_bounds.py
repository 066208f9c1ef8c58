"""Every published kernel time in data/public/ (GEMM, fused attention, decode) is at least
attnroof's roofline bound on its device: measured ≥ max(F/P, bytes/B), with P and B from the
catalog and F, bytes from the formulas the commands use (``linear``, ``attention`` fused,
``decode``; a latent cache's fused stage for FlashMLA).

A measured rate above its roof is a catalog error or a misread source, never an efficiency above
one. The ratio measured/bound per kind and device (:func:`summary`, printed by running this file)
is the first input to the efficiency fit: ``python tests/test_public_kernel_bounds.py``.

Sources print times, or rates in their own FLOP count; a rate becomes a time with that count:
2·m·n·k for a GEMM, FlashAttention's 4·b·h·s_q·s_k·d forward (×2.5 backward, ×3.5 both, halved
when causal), and a decode's share of the bandwidth with the bytes the kernel moves.
"""

from __future__ import annotations

import json
import statistics
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from attnroof.devices import get_device  # noqa: E402
from attnroof.dtypes import dtype  # noqa: E402
from attnroof.ops.attention import FUSED, chunk  # noqa: E402
from attnroof.ops.latent import latent_attention  # noqa: E402
from attnroof.ops.matmul import matmul_flops  # noqa: E402
from attnroof.passes import BWD, FWD, FWD_BWD, pass_formula  # noqa: E402
from attnroof.roofline import Roof, place  # noqa: E402

PUBLIC = ROOT / "data" / "public"
FILES = {"gemm": "gemm.jsonl", "attention": "attention.jsonl", "decode": "decode.jsonl"}
MEASURED = ("measured_s", "measured_flops_per_s", "measured_bandwidth_fraction")
FA_PASS_FACTOR = {FWD: 1.0, BWD: 2.5, FWD_BWD: 3.5}
"""FlashAttention's benchmarks count the backward as 2.5 forwards (5 matmuls against 2)."""
MLA_NOPE, MLA_V = 128, 128
"""DeepSeek-V3's widths: only the absorb GEMMs use them, not the fused stage bounded here."""


def load(kind: str) -> list[dict]:
    path = PUBLIC / FILES[kind]
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


ROWS = [row for kind in FILES for row in load(kind)]
SOURCES = tomllib.loads((PUBLIC / "sources.toml").read_text(encoding="utf-8"))


def roof(row: dict) -> Roof:
    """The catalog's roof; single-level for a row timed with L2 flushed (``l2`` cold), else with
    the device's cache where it has a figure (a kernel timed in a loop: rule l2)."""
    return Roof.of(get_device(row["device"]), row["dtype"], levels=1 if row.get("l2") == "cold" else 2)


def fa_flops(row: dict) -> float:
    """FlashAttention's count: 4·b·h·s_q·s_k·d, halved when causal, times the pass factor."""
    f = 4 * row["batch"] * row["heads"] * row["seq_q"] * row["seq_k"] * row["head_dim"]
    return (f // 2 if row["causal"] else f) * FA_PASS_FACTOR[row["pass"]]


def attention_cost(row: dict):
    """The fused kernel's FLOPs and bytes for the row's pass (self-attention, s_q = s_k)."""
    assert row["seq_q"] == row["seq_k"], "every attention row is self-attention"
    kw = dict(
        fused=True,
        causal=row["causal"],
        group=row["heads"] // row["kv_heads"],
        batch=row["batch"],
        kv_heads=row["kv_heads"],
        itemsize=dtype(row["dtype"]).itemsize,
        d_v=row.get("head_dim_v"),
        window=row.get("window"),
    )
    return pass_formula("attention", row["pass"])(row["seq_k"], row["head_dim"], **kw)


def decode_cost(row: dict) -> tuple[float, float]:
    """(FLOPs, bytes) of the decode kernel: s_q new tokens a sequence against s_k cached ones
    (the chunk formula, causal among themselves, when s_q > 1), or, for a latent (MLA) cache,
    the fused stage of absorbed latent attention: the r + ρ latent read once for every head."""
    s_q, s_k, it = row.get("seq_q", 1), row["seq_k"], dtype(row["dtype"]).itemsize
    if row.get("latent"):
        r = row["head_dim_v"]
        cost = latent_attention(
            s_q, s_k, heads=row["heads"], kv_lora_rank=r, qk_rope_head_dim=row["head_dim"] - r,
            qk_nope_head_dim=MLA_NOPE, v_head_dim=MLA_V, causal=s_q > 1, batch=row["batch"], itemsize=it,
        )  # fmt: skip
        (stage,) = [s for s in cost if s.name == FUSED]
        return stage.flops, stage.bytes
    kw = dict(
        group=row["heads"] // row["kv_heads"], batch=row["batch"], kv_heads=row["kv_heads"], itemsize=it
    )
    if s_q > 1:
        cost = chunk(s_q, s_k, row["head_dim"], d_v=row.get("head_dim_v"), **kw)
    else:
        cost = pass_formula("decode")(s_k, row["head_dim"], fused=True, d_v=row.get("head_dim_v"), **kw)
    return cost.flops, cost.bytes


def gemm_cost(row: dict):
    """C[m×n] = A[m×k]·B[k×n] as the ``linear`` command costs it (m tokens through a k×n
    weight), once a group. An fp8 GEMM's output is counted at one byte: a lower bound still."""
    cost = pass_formula("linear")(row["m"], row["k"], row["n"], itemsize=dtype(row["dtype"]).itemsize)
    return cost * row.get("groups", 1)


def bound_s(row: dict) -> float:
    """attnroof's lower bound on the kernel's time, in seconds: max(F/P, (bytes − R)/B + R/B_c)."""
    if row["kind"] == "gemm":
        return place(gemm_cost(row), roof(row)).time_s
    if row["kind"] == "attention":
        return place(attention_cost(row), roof(row)).time_s
    return place(decode_cost(row), roof(row)).time_s


def measured_s(row: dict) -> float:
    """The published time, or the published rate turned into one with the source's own count."""
    if "measured_s" in row:
        return row["measured_s"]
    if "measured_bandwidth_fraction" in row:  # FlashInfer: bytes moved / time / the GPU's bandwidth
        achieved = row["measured_bandwidth_fraction"] * row["source_bandwidth_bytes_per_s"]
        return decode_cost(row)[1] / achieved
    rate = row["measured_flops_per_s"]
    if row["kind"] == "gemm":
        return row.get("groups", 1) * matmul_flops(row["m"], row["k"], row["n"]) / rate
    return fa_flops(row) / rate


def ident(row: dict) -> str:
    return f"{row['source']}:{row['device']}:{row['where'][:60]}"


@pytest.mark.parametrize("kind", FILES)
def test_every_row_is_sourced_and_complete(kind):
    rows = load(kind)
    assert rows, f"{FILES[kind]} is empty"
    for row in rows:
        assert row["kind"] == kind, ident(row)
        assert row["source"] in SOURCES, f"{ident(row)}: source not in sources.toml"
        assert row["where"].strip(), ident(row)
        assert sum(k in row for k in MEASURED) == 1, f"{ident(row)}: one measured value"
        assert get_device(row["device"]).peak(row["dtype"]) > 0
        assert row["impl"], ident(row)


def test_every_source_is_described():
    for key in {row["source"] for row in ROWS}:
        entry = SOURCES[key]
        assert {"title", "url", "date", "where", "notes"} <= set(entry), key
        assert entry["url"].startswith("https://"), key


@pytest.mark.parametrize("row", ROWS, ids=[f"{i}-{r['kind']}-{r['device']}" for i, r in enumerate(ROWS)])
def test_the_bound_is_below_the_measured_time(row):
    b, m = bound_s(row), measured_s(row)
    assert 0 < b <= m, f"{ident(row)}: bound {b:.4g} s > measured {m:.4g} s (ratio {m / b:.3f})"


def by(where: str, **fields) -> dict:
    """The one row of the data whose ``where`` holds ``where`` and whose fields match."""
    (row,) = [r for r in ROWS if where in r["where"] and all(r.get(k) == v for k, v in fields.items())]
    return row


def test_deepgemm_row_by_hand():
    # H800 fp8, 4096 × 7168 × 16384 at 1426 TFLOPS: 2·4096·7168·16384 = 962,072,674,304 FLOP
    row = by("dense models", m=4096, n=7168, k=16384)
    flops = 2 * 4096 * 7168 * 16384
    assert flops == 962_072_674_304
    assert measured_s(row) == pytest.approx(flops / 1426e12)  # 674.7 µs
    # compute-bound: F/P = 962.07e9 / 1978.9e12 = 486.2 µs; bytes 4096·16384 + 16384·7168 + 4096·7168
    # (one byte each) = 218.1 MB / 3.35 TB/s = 65.1 µs
    assert bound_s(row) == pytest.approx(flops / 1978.9e12)
    assert measured_s(row) / bound_s(row) == pytest.approx(1978.9 / 1426)


def test_fa2_figure_row_by_hand():
    # A100 fwd+bwd, causal, d = 128, s = 16k, batch 1, 16 heads at 189 TFLOPs/s (FA2's figure):
    # FA's count 3.5 · 4·1·16·16384²·128 / 2 = 1.0522e14 FLOP → 556.7 ms
    row = by("flash2_a100", causal=True, head_dim=128, seq_q=16384)
    assert fa_flops(row) == 3.5 * 4 * 16 * 16384**2 * 128 // 2
    assert measured_s(row) == pytest.approx(fa_flops(row) / 189e12)
    # attnroof's fused count has the same matmul FLOPs (4·d forward, 10·d backward per kept
    # score) plus the softmax's, so its compute time is a little above FA's FLOPs / 312e12
    assert fa_flops(row) / 312e12 < bound_s(row) < measured_s(row)


def test_flashinfer_decode_row_by_hand():
    # H100 SXM, batch 64, 32 heads, d = 128, 1024 tokens: K and V are 2·64·1024·32·128·2 B =
    # 1,073,741,824 B, Q and O 2·64·32·128·2 B = 1,048,576 B. At 88 % of 3,352 GB/s the kernel
    # takes 1,074,790,400 / (0.883 · 3.352e12) = 363 µs; the bound (3.35 TB/s) is 320.8 µs.
    row = by("'H100 SXM', FlashInfer (batch_size=64) at 1024 tokens")
    assert decode_cost(row)[1] == 1_073_741_824 + 1_048_576
    frac = row["measured_bandwidth_fraction"]
    assert measured_s(row) == pytest.approx(1_074_790_400 / (frac * 3.352e12))
    assert bound_s(row) == pytest.approx(1_074_790_400 / 3.35e12)
    assert 0.85 < bound_s(row) / measured_s(row) < 0.92


def summary() -> dict[tuple[str, str], tuple[int, float, float, float]]:
    """(kind, device) → (rows, p10, median, p90) of measured/bound."""
    groups: dict[tuple[str, str], list[float]] = {}
    for row in ROWS:
        groups.setdefault((row["kind"], row["device"]), []).append(measured_s(row) / bound_s(row))
    out = {}
    for key, ratios in sorted(groups.items()):
        ratios.sort()
        if len(ratios) == 1:
            out[key] = (1, ratios[0], ratios[0], ratios[0])
            continue
        deciles = statistics.quantiles(ratios, n=10, method="inclusive")
        out[key] = (len(ratios), deciles[0], statistics.median(ratios), deciles[-1])
    return out


def test_summary_covers_every_kind():
    kinds = {kind for kind, _ in summary()}
    assert kinds == set(FILES)


if __name__ == "__main__":
    print(f"{'kind':<10} {'device':<16} {'rows':>5} {'p10':>7} {'median':>7} {'p90':>7}   measured/bound")
    for (kind, device), (n, p10, med, p90) in summary().items():
        print(f"{kind:<10} {device:<16} {n:>5} {p10:>7.3f} {med:>7.3f} {p90:>7.3f}")
