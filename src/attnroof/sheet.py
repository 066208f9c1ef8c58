"""The worked analysis (parts A–F) for any device, dtype and shape, as data (:class:`Sheet`, with
``to_json``); :mod:`attnroof.text.sheet` writes it as Markdown.

Every number is computed here from the formulas of the operator table; the algebra (closed
forms, limits, thresholds) comes from evaluating the same formulas on sympy symbols. Nothing is
typed in by hand, so another device, dtype or head dimension redoes the whole argument.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from attnroof import validate
from attnroof.analysis import Comparison, attention_crossover, softmax_share
from attnroof.cost import Cost
from attnroof.devices import Device
from attnroof.dtypes import DType
from attnroof.footprint import Footprint, footprint
from attnroof.ops import SOFTMAX_FLOPS_PER_ELEMENT, attention, decode, linear
from attnroof.roofline import NEAR_RIDGE_FACTOR, Placement, Roof, place
from attnroof.solve import Crossover, crossover, exact_expr
from attnroof.solve import limit as solve_limit

SHAPE_DEFAULTS: dict[str, int] = {"s": 8192, "d": 128, "batch": 8, "heads": 32, "layers": 80}
"""The sheet's default shape, one place for the library, the CLI and the report: the spec's
s = 8192, d = 128, and a Llama-70B-class model (32 query heads, 80 layers) at batch 8."""
SWEEP_S = (512, 1024, 2048, 4096, 8192, 32768)
"""The sequence lengths of part C's table (the spec's)."""
SHARE_D = (8, 64, 128, 256)
GROUPS = (1, 2, 4, 8)
"""The GQA groups part F3 compares (those that divide the head count), beside the user's group
and multi-query attention (g = heads, one KV head)."""
SOFTMAX_SHARE_WORTH_NOTING = 0.05
"""A softmax share at or above 5% of the FLOPs is worth counting even for an envelope estimate."""
TOKENS = (1, 8, 64, 512, 4096)

if TYPE_CHECKING:
    import sympy as sp


@dataclass(frozen=True)
class Sheet:
    """The whole analysis for one device, dtype and shape."""

    device: Device
    dtype: DType
    roof: Roof
    s: int
    d: int
    batch: int
    heads: int
    layers: int
    group: int
    softmax_flops_per_element: float
    prefill: Comparison
    causal: Comparison
    decode: Comparison
    sweep: list[tuple[int, Placement, Placement]]
    crossover: dict[str, Crossover]
    crossover_causal: dict[str, Crossover]
    crossover_clear: Crossover
    """Fused attention against twice the ridge: where it leaves the "near ridge" band."""
    footprint_layer: Footprint
    footprint_model: Footprint
    share_by_d: dict[int, float]
    gqa: list[tuple[int, Placement, Placement, float]]
    decode_batched: Placement
    decode_limit: float
    linear_k: int
    linear_rows: list[tuple[int, Placement]]
    linear_crossover: Crossover
    algebra: dict[str, Any]
    symbolic: dict[str, Cost]
    """The stage tables on symbols s and d, counted in elements (itemsize 1): "unfused",
    "fused" (prefill) and "decode" (unfused), for the text's tables of parts B and F2."""

    def to_json(self) -> dict[str, Any]:
        return {
            "device": self.device.to_json(),
            "dtype": self.dtype.name,
            "itemsize": self.dtype.itemsize,
            "shape": {
                "s": self.s,
                "d": self.d,
                "batch": self.batch,
                "heads": self.heads,
                "layers": self.layers,
                "group": self.group,
            },
            "softmax_flops_per_element": self.softmax_flops_per_element,
            "ridge": self.roof.ridge,
            "attention": self.prefill.to_json(),
            "softmax_share_by_d": {str(k): v for k, v in self.share_by_d.items()},
            "sweep": [{"s": n, "unfused": u.to_json(), "fused": f.to_json()} for n, u, f in self.sweep],
            "crossover": {k: v.to_json() for k, v in self.crossover.items()},
            "clear_of_band": {"fused": self.crossover_clear.to_json()},
            "causal": {
                **self.causal.to_json(),
                "crossover": {k: v.to_json() for k, v in self.crossover_causal.items()},
            },
            "footprint": {"layer": self.footprint_layer.to_json(), "model": self.footprint_model.to_json()},
            "decode": {
                **self.decode.to_json(),
                "limit_intensity": self.decode_limit,
                "batched": self.decode_batched.to_json(),
            },
            "gqa": [
                {"group": g, "unfused": u.to_json(), "fused": f.to_json(), "fused_limit_intensity": lim}
                for g, u, f, lim in self.gqa
            ],
            "linear": {
                "k": self.linear_k,
                "m": self.linear_k,
                "rows": [{"n": n, **p.to_json()} for n, p in self.linear_rows],
                "crossover": {"n_min": self.linear_crossover.s_min, **self.linear_crossover.to_json()},
            },
            "algebra": {k: str(v) for k, v in self.algebra.items()},
        }


def build_sheet(
    device: Device,
    dtype: DType,
    *,
    s: int = SHAPE_DEFAULTS["s"],
    d: int = SHAPE_DEFAULTS["d"],
    batch: int = SHAPE_DEFAULTS["batch"],
    heads: int = SHAPE_DEFAULTS["heads"],
    layers: int = SHAPE_DEFAULTS["layers"],
    group: int | None = None,
    softmax_flops_per_element: float = SOFTMAX_FLOPS_PER_ELEMENT,
) -> Sheet:
    """The analysis at one shape. ``group`` is the GQA group part F3 highlights; by default the
    largest of 1, 2, 4, 8 that divides ``heads`` (8 for 32 heads). It must divide ``heads``."""
    import sympy as sp  # the algebra below; imported here, not with the module

    S, D = sp.symbols("s d", positive=True)
    validate.sizes(s=s, d=d, batch=batch, heads=heads, layers=layers)
    if group is None:
        group = default_group(heads)
    validate.kv_heads(heads, group)
    roof = Roof.of(device, dtype)
    kw: dict[str, Any] = {"itemsize": dtype.itemsize, "softmax_flops_per_element": softmax_flops_per_element}

    def att(n: Any, dd: Any = d, **extra: Any) -> Cost:
        return attention(n, dd, **kw, **extra)

    def dec(n: Any, dd: Any = d, **extra: Any) -> Cost:
        return decode(n, dd, **kw, **extra)

    def cross(**extra: Any) -> Crossover:
        return attention_crossover(d, roof, **kw, **extra)

    def limit(cost_of: Any) -> float:
        return float(solve_limit(lambda x: cost_of(x).intensity))

    def alg(expr: Any) -> sp.Expr:  # exact closed form, factored the way the spec writes it
        return sp.factor(exact_expr(expr))

    hidden = heads * d
    cap = device.capacity_bytes
    unfused_sym, fused_sym = att(S, D), att(S, D, fused=True)
    elements: dict[str, Any] = {"itemsize": 1, "softmax_flops_per_element": softmax_flops_per_element}
    algebra = {
        "flops": alg(unfused_sym.flops),
        "bytes_unfused": alg(unfused_sym.bytes),
        "bytes_fused": alg(fused_sym.bytes),
        "traffic_ratio": sp.expand(exact_expr(unfused_sym.bytes / fused_sym.bytes)),
        "softmax_share": alg(softmax_share(unfused_sym)),
        "intensity_unfused": alg(unfused_sym.intensity),
        "intensity_fused": alg(fused_sym.intensity),
        "limit_unfused": sp.factor(solve_limit(lambda x: att(x, D).intensity)),
        "intensity_unfused_causal": alg(att(S, D, causal=True).intensity),
        "intensity_fused_causal": alg(att(S, D, fused=True, causal=True).intensity),
        "decode_flops": alg(decode(S, D, **elements).flops),
        "decode_elements": sp.expand(exact_expr(decode(S, D, **elements).bytes)),
        "decode_intensity": alg(dec(S, D).intensity),
    }
    in_elements: dict[str, Any] = {"itemsize": 1, "softmax_flops_per_element": softmax_flops_per_element}
    symbolic = {
        "unfused": attention(S, D, **in_elements),
        "fused": attention(S, D, fused=True, **in_elements),
        "decode": decode(S, D, **in_elements),
    }
    return Sheet(
        symbolic=symbolic,
        device=device,
        dtype=dtype,
        roof=roof,
        s=s,
        d=d,
        batch=batch,
        heads=heads,
        layers=layers,
        group=group,
        softmax_flops_per_element=softmax_flops_per_element,
        prefill=Comparison.of(att(s), att(s, fused=True), roof),
        causal=Comparison.of(att(s, causal=True), att(s, fused=True, causal=True), roof),
        decode=Comparison.of(dec(s), dec(s, fused=True), roof),
        sweep=[(n, place(att(n), roof), place(att(n, fused=True), roof)) for n in SWEEP_S],
        crossover={"unfused": cross(), "fused": cross(fused=True)},
        crossover_causal={"unfused": cross(causal=True), "fused": cross(fused=True, causal=True)},
        crossover_clear=attention_crossover(
            d, Roof(NEAR_RIDGE_FACTOR * roof.peak_flops_per_s, roof.bandwidth_bytes_per_s), fused=True, **kw
        ),
        footprint_layer=footprint(s, itemsize=dtype.itemsize, batch=batch, heads=heads, capacity_bytes=cap),
        footprint_model=footprint(
            s, itemsize=dtype.itemsize, batch=batch, heads=heads, layers=layers, capacity_bytes=cap
        ),
        share_by_d={dd: softmax_share(att(1, dd)) for dd in sorted({*SHARE_D, d})},
        gqa=[
            (
                g,
                place(dec(s, group=g, kv_heads=heads // g), roof),
                place(dec(s, group=g, kv_heads=heads // g, fused=True), roof),
                limit(lambda x, g=g: dec(x, group=g, fused=True)),
            )
            for g in gqa_groups(heads, group)
        ],
        decode_batched=place(dec(s, batch=batch), roof),
        decode_limit=limit(dec),
        linear_k=hidden,
        linear_rows=[(n, place(linear(n, hidden, hidden, itemsize=dtype.itemsize), roof)) for n in TOKENS],
        linear_crossover=crossover(
            lambda n: linear(n, hidden, hidden, itemsize=dtype.itemsize).intensity,
            roof.peak_flops_per_s,
            roof.bandwidth_bytes_per_s,
            variable="n",
        ),
        algebra=algebra,
    )


def default_group(heads: int) -> int:
    """The largest of :data:`GROUPS` that divides ``heads``: 8 for 32 heads, 1 for 3."""
    return max(g for g in GROUPS if heads % g == 0)


def gqa_groups(heads: int, group: int) -> list[int]:
    """The groups part F3 compares: those of :data:`GROUPS` that divide ``heads``, the user's
    ``group`` and ``heads`` itself (multi-query attention).

    >>> gqa_groups(32, 8), gqa_groups(3, 1), gqa_groups(1, 1)
    ([1, 2, 4, 8, 32], [1, 3], [1])
    """
    return sorted({g for g in (*GROUPS, group, heads) if heads % g == 0})


# ---------------------------------------------------------------- Markdown
