"""Fitting the parameters of :mod:`attnroof.calibration.physics` to measured records.

scipy's ``least_squares`` with a robust loss (``soft_l1``, scale 5%) on the log of the time, so
that a 10% miss weighs the same on a 30 µs call as on a 30 ms one and a stray point (host
jitter on a 40 µs call) cannot drag the fit. Parameters are fitted in log space within bounds
that keep their meaning (an efficiency between 1% and 150% of the measured roof: above 100%
says the measured ceiling is low).

A parameter the data cannot pin down is **not fitted**, and the fit says why:

- ``eta_compute`` at a head dimension with no point whose compute time reaches 30% of its
  memory time (decode, small GEMMs): the measured peak is used as is;
- ``eta_memory`` with no point whose memory time reaches 30% of its compute time: the
  measured bandwidth is used;
- ``eta_pass`` for a fused kernel (it has no element-wise passes), and at a softmax row length
  where no point's softmax pass takes 30% of its time at the measured roofs (eager decode: the
  score rows are a sliver of the cache it reads): the kernel's ``eta_memory`` is used;
- ``eta_mask`` with fewer than two points whose mask pass takes 30% of their time: the
  softmax's ``eta_pass`` is used;
- ``sharpness`` with fewer than three points near the ridge (compute and memory time within
  4× of each other): the default ``p`` = 4;
- ``l2_speedup`` without two points that fit in the L2 cache and two that do not;
- ``causal_block`` without two causal points of a fused kernel (default 128);
- ``split_kv`` (fused decode, where the implementation's kernels are not known) without two
  points that a split-KV kernel would split (default: no split);
- ``t0`` of a fit with too few points: held at ``t0_prior`` (s), the median fixed cost of the
  device's other fits of the kind (:func:`t0_prior`), else 0;
- with no more points than free parameters, the last ones of :data:`DROP_LAST` are held until
  there are fewer (two points: ``t0`` and ``eta_memory``; one: ``eta_memory`` alone).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from attnroof.calibration import splitkv
from attnroof.calibration.physics import (
    ATTENTION,
    CAUSAL_BLOCKS,
    DECODE,
    DEFAULT_SHARPNESS,
    MASK,
    PASS,
    UNFUSED,
    Features,
    Params,
    Roofs,
    call_features,
    features,
    predict,
)
from attnroof.errors import MissingExtra

INSTALL_HINT = "pip install 'attnroof[calibrate]' (or pip install scipy)"
LOSS, LOSS_SCALE = "soft_l1", 0.05
"""The robust loss and its scale in log time (5%: a residual beyond it counts linearly)."""
COMPUTE_SHARE = 0.3
"""A head dimension's η_c is fitted only if some point's compute time is this share of its
memory time (at the measured roofs) or more."""
LAUNCH_VISIBLE_S = 1e-6
"""A fitted ``t0`` below this is a fit to large calls, where the fixed cost cannot be seen."""
PRIOR_SHAPES = 3
"""A fit of fewer shapes than this cannot see its own fixed cost in every leave-one-out fold: it
holds ``t0`` at the median of the device's fits of the same kind that saw one (:func:`t0_prior`)."""
PASS_SHARE = 0.3
"""A softmax row length's η_pass (and η_mask) is fitted only if some point's pass (mask) takes
this share of its time or more (at the measured roofs)."""
NEAR_RIDGE = 4.0
DEFAULT_BLOCK = 128

# name: (initial value, lower bound, upper bound)
BOUNDS = {
    "t0_s": (5e-6, 1e-8, 1e-2),
    "eta_compute": (0.5, 0.01, 1.5),
    "eta_memory": (0.7, 0.01, 1.5),
    "eta_pass": (0.5, 0.01, 1.5),
    "eta_mask": (0.5, 0.01, 1.5),
    "sharpness": (DEFAULT_SHARPNESS, 1.0, 50.0),
    "l2_speedup": (2.0, 1.0, 10.0),
}


def least_squares() -> Callable[..., Any]:
    """scipy's ``least_squares``, or :class:`MissingExtra` naming the extra to install."""
    try:
        from scipy.optimize import least_squares as ls
    except ImportError:
        raise MissingExtra(f"calibrating needs scipy, which is not installed: {INSTALL_HINT}") from None
    return ls  # type: ignore[no-any-return]


@dataclass(frozen=True)
class Point:
    """One measured call: its shape and time (s)."""

    kind: str
    impl: str
    shape: Mapping[str, Any]
    dtype: str
    time_s: float

    @property
    def shape_key(self) -> str:
        return ",".join(f"{k}={int(v) if isinstance(v, bool) else v}" for k, v in sorted(self.shape.items()))


@dataclass
class Fit:
    """The fitted parameters of one (kind, implementation) and what was not fitted, and why."""

    params: Params
    fitted: list[str]
    notes: list[str] = field(default_factory=list)


def _ratio(f: Features, roofs: Roofs) -> float:
    """Compute time over memory time at the measured roofs (largest over the kernels)."""
    return max(
        (k.flops / roofs.peak_flops_per_s) / (k.bytes / roofs.bandwidth_bytes_per_s) if k.bytes else math.inf
        for k in f.kernels
    )


def _share(f: Features, roofs: Roofs, role: str) -> float:
    """The memory time of the kernels of ``role`` over the whole call's time, at the measured
    roofs (each kernel at the larger of its compute and memory times)."""
    mem = [k.bytes / roofs.bandwidth_bytes_per_s for k in f.kernels]
    total = sum(max(k.flops / roofs.peak_flops_per_s, m) for k, m in zip(f.kernels, mem, strict=True))
    return sum(m for k, m in zip(f.kernels, mem, strict=True) if k.role == role) / total if total else 0.0


def _pass_rows(f: Features) -> set[int]:
    return {k.row for k in f.kernels if k.role == PASS}


def fit_points(points: Sequence[Point], roofs: Roofs, t0_prior: float | None = None) -> Fit:
    """Fit one implementation's parameters to ``points`` (all of one kind, implementation and
    dtype). Whole-number choices are made by the robust cost: the causal block among
    :data:`CAUSAL_BLOCKS`, and whether fused decode splits the cache where the implementation's
    own kernels are not known (:mod:`attnroof.calibration.splitkv`). ``t0_prior`` (s) is the
    fixed cost held when the points are too few to fit one (else 0)."""
    kind, impl = points[0].kind, points[0].impl
    fused = impl not in UNFUSED
    blocks, splits, chosen, notes = [DEFAULT_BLOCK], [False], [], []
    if sum(1 for p in points if kind == ATTENTION and p.shape.get("causal") and fused) >= 2:
        blocks, chosen = list(CAUSAL_BLOCKS), ["causal_block"]
    elif kind == ATTENTION and fused:
        notes.append(f"causal_block: fewer than 2 causal points; {DEFAULT_BLOCK} assumed")
    known = splitkv.KNOWN.get(impl) if roofs.sms else None
    if kind == DECODE and fused and known is not None:
        splits = [bool(known.splits)]
        notes.append("split_kv: the implementation's own plan (query tiles and splits from its source)")
    elif kind == DECODE and fused:
        would = sum(1 for p in points if _would_split(p, roofs))
        if would >= 2:
            splits, chosen = [False, True], [*chosen, "split_kv"]
        else:
            notes.append(f"split_kv: {would} point(s) a split-KV kernel would split; not assumed")
    fits = [_fit_block(points, roofs, b, sp, t0_prior) for b in blocks for sp in splits]
    best = min(fits, key=lambda fc: fc[1])[0]
    best.fitted += chosen
    best.notes += notes
    return best


def _would_split(p: Point, roofs: Roofs) -> bool:
    g = p.shape.get("group", 1)
    units = p.shape["batch"] * p.shape["heads"] // g
    return splitkv.plan(p.impl, p.shape["s"], p.shape["d"], units, g, roofs.sms, True).splits > 1


def _fit_block(
    points: Sequence[Point], roofs: Roofs, block: int, split: bool, t0_prior: float | None
) -> tuple[Fit, float]:
    ls = least_squares()
    feats = [features(p.kind, p.impl, p.shape, p.dtype, roofs, block, split) for p in points]
    y = [math.log(p.time_s) for p in points]
    notes: list[str] = []
    free: list[str] = ["t0_s"]
    if any(_ratio(f, roofs) <= 1 / COMPUTE_SHARE for f in feats):
        free.append("eta_memory")
    else:
        notes.append("eta_memory: no memory-heavy point; the measured bandwidth is used (1.0)")
    dims = sorted({f.d for f in feats})
    for d in dims:
        if any(_ratio(f, roofs) >= COMPUTE_SHARE for f in feats if f.d == d):
            free.append(f"eta_compute@{d}")
        else:
            notes.append(f"eta_compute{_at(d)}: no compute-heavy point; the measured peak is used (1.0)")
    if points[0].impl in UNFUSED:
        free += _pass_params(feats, roofs, notes)
    near = sum(1 for f in feats if 1 / NEAR_RIDGE <= _ratio(f, roofs) <= NEAR_RIDGE)
    if near >= 3:
        free.append("sharpness")
    else:
        notes.append(f"sharpness: {near} point(s) near the ridge; p = {DEFAULT_SHARPNESS:g} assumed")
    in_l2 = sum(f.in_l2 for f in feats)
    if in_l2 >= 2 and len(feats) - in_l2 >= 2:
        free.append("l2_speedup")
    elif roofs.l2_bytes is not None:
        notes.append(f"l2_speedup: {in_l2} point(s) fit in L2; not fitted (1.0)")
    if len(points) <= len(free):
        keep = sorted(free, key=_priority)[: max(len(points) - 1, min(len(points), 2))]
        dropped = [n for n in free if n not in keep]
        free = [n for n in free if n in keep]
        if dropped:
            notes.append(f"{len(points)} point(s): only {', '.join(free)} fitted ({', '.join(dropped)} held)")
    if "t0_s" not in free and t0_prior is not None:
        notes.append(
            f"t0: held at {t0_prior * 1e6:.3g} µs, the fixed cost of the device's other fits of this kind"
        )

    def params(x: Sequence[float]) -> Params:
        v = {n: math.exp(xi) for n, xi in zip(free, x, strict=True)}
        eta_c = {d: v.get(f"eta_compute@{d}", 1.0) for d in dims}
        eta_p = {int(n.split("@")[1]): x for n, x in v.items() if n.startswith("eta_pass@")}
        return Params(
            t0_s=v.get("t0_s", t0_prior or 0.0),
            eta_compute=eta_c,
            eta_memory=v.get("eta_memory", 1.0),
            eta_pass=eta_p or {0: v.get("eta_memory", 1.0)},
            sharpness=v.get("sharpness", DEFAULT_SHARPNESS),
            l2_speedup=v.get("l2_speedup", 1.0),
            causal_block=block,
            split_kv=split,
            eta_mask=v.get("eta_mask"),
        )

    def residuals(x: Sequence[float]) -> list[float]:
        p = params(x)
        return [math.log(predict(f, p, roofs)) - yi for f, yi in zip(feats, y, strict=True)]

    spec = [BOUNDS[n.split("@")[0]] for n in free]
    x0 = [math.log(s[0]) for s in spec]
    lo, hi = [math.log(s[1]) for s in spec], [math.log(s[2]) for s in spec]
    res = ls(residuals, x0, bounds=(lo, hi), loss=LOSS, f_scale=LOSS_SCALE)
    return Fit(params(res.x), [n.replace("@0", "") for n in free], notes), float(res.cost)


DROP_LAST = ("eta_memory", "t0_s", "eta_compute", "eta_pass", "eta_mask", "l2_speedup", "sharpness")
"""With no more points than free parameters, the fit keeps them in this order (the first ones
longest): a fixed cost and an efficiency before the finer terms."""


def _priority(name: str) -> int:
    return DROP_LAST.index(name.split("@")[0])


def _pass_params(feats: Sequence[Features], roofs: Roofs, notes: list[str]) -> list[str]:
    """The pass efficiencies the points can pin: η_pass at each softmax row length where some
    point's softmax takes :data:`PASS_SHARE` of its time, η_mask where two points' masks do."""
    free = []
    for r in sorted(set().union(*(_pass_rows(f) for f in feats))):
        if any(_share(f, roofs, PASS) >= PASS_SHARE for f in feats if r in _pass_rows(f)):
            free.append(f"eta_pass@{r}")
        else:
            notes.append(
                f"eta_pass at s={r}: the softmax is under {PASS_SHARE:.0%} of every such call; η_m used"
            )
    masked = sum(_share(f, roofs, MASK) >= PASS_SHARE for f in feats)
    if masked >= 2:
        free.append("eta_mask")
    elif any(k.role == MASK for f in feats for k in f.kernels):
        notes.append(
            f"eta_mask: {masked} point(s) where the mask pass is {PASS_SHARE:.0%} of the time; η_pass used"
        )
    return free


def _at(d: int) -> str:
    return f" at d={d}" if d else ""


def t0_prior(fits: Sequence[Fit]) -> float | None:
    """The fixed cost (s) a thin fit holds: the median ``t0`` of ``fits`` (the device's other fits
    of the same kind, each with :data:`PRIOR_SHAPES` shapes or more) that could see one. The
    fixed cost of a call is mostly the host's dispatch and the launch, which one implementation
    shares with the others."""
    seen = [f.params.t0_s for f in fits if f.params.t0_s >= LAUNCH_VISIBLE_S]
    return statistics.median(seen) if seen else None


@dataclass(frozen=True)
class Held:
    """One held-out forecast: a point and the time predicted for it by a fit without its shape."""

    point: Point
    predicted_s: float

    @property
    def error(self) -> float:
        """Signed relative error, predicted / measured − 1."""
        return self.predicted_s / self.point.time_s - 1


def leave_one_shape_out(points: Sequence[Point], roofs: Roofs, t0_prior: float | None = None) -> list[Held]:
    """Each shape forecast by a fit to the other shapes (none when fewer than two shapes)."""
    keys = sorted({p.shape_key for p in points})
    if len(keys) < 2:
        return []
    out = []
    for key in keys:
        train = [p for p in points if p.shape_key != key]
        fit = fit_points(train, roofs, t0_prior)
        for p in points:
            if p.shape_key == key:
                f = call_features(p.kind, p.impl, p.shape, p.dtype, roofs, fit.params)
                out.append(Held(p, predict(f, fit.params, roofs)))
    return out


def summary(errors: Sequence[float]) -> dict[str, float | None]:
    """Median and 90th percentile of the absolute relative errors (``None`` without errors)."""
    a = sorted(abs(e) for e in errors)
    if not a:
        return {"median": None, "p90": None, "n": 0}
    return {"median": statistics.median(a), "p90": percentile(a, 0.9), "n": len(a)}


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile ``q`` of ``values`` (numpy's default method).

    >>> percentile([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 0.9)   # 9 + 0.1 · (10 − 9)
    9.1
    """
    a = sorted(values)
    pos = q * (len(a) - 1)
    i = math.floor(pos)
    return a[i] if i + 1 >= len(a) else a[i] + (pos - i) * (a[i + 1] - a[i])
