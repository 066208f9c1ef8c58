"""``decode -q Q``: a chunk of Q new tokens against a cache, by the seed's method."""

from __future__ import annotations

import argparse

from attnroof.analysis import Comparison
from attnroof.commands import _calibration
from attnroof.commands._common import emit_json, require, resolve_heads, roof_from_args
from attnroof.commands._passes import pass_json
from attnroof.passes import WORDS, pass_formula
from attnroof.text import render
from attnroof.text.operators import chunk_crossover_text, comparison_text


def chunk_run(args: argparse.Namespace) -> int:
    """Q new queries against a cache that holds S tokens with them: unfused against fused, the
    chunk length where it turns compute-bound after the same cached prefix, and the intensity it
    tends to as the cache grows."""
    from attnroof.solve import crossover, fraction_text, limit

    q, s = args.queries, args.s
    require(q <= s, f"--queries {q} is more than the {s} tokens the cache holds with them (-s)")
    require(
        _calibration.load(args, *roof_from_args(args)[:2]) is None,
        "--calibration forecasts decode (--queries 1)",
    )
    dev, dt, roof = roof_from_args(args)
    formula = pass_formula("chunk", args.pass_)
    kw = dict(
        group=args.group, itemsize=dt.itemsize, softmax_flops_per_element=args.softmax_flops,
        batch=args.batch, kv_heads=resolve_heads(args),
    )  # fmt: skip
    cmp = Comparison.of(formula(q, s, args.d, fused=False, **kw), formula(q, s, args.d, **kw), roof)
    past = s - q
    crosses = {
        name: crossover(
            lambda x, fused=fused: formula(x, past + x, args.d, fused=fused, **kw).intensity,
            roof.peak_flops_per_s, roof.bandwidth_bytes_per_s, variable="q",
        )
        for name, fused in (("unfused", False), ("fused", True))
    }  # fmt: skip
    tends = limit(lambda p: formula(q, p + q, args.d, **kw).intensity, "p")
    if args.json:
        emit_json(
            {
                "device": dev.name, "dtype": dt.name, **{k: getattr(args, k) for k in ("s", "d", "batch", "heads", "group", "softmax_flops")}, "queries": q, "cached": past,
                **pass_json(args), **cmp.to_json(),
                "crossover_queries": {k: c.to_json() for k, c in crosses.items()},
                "fused_intensity_as_cache_grows": float(tends), "fused_intensity_as_cache_grows_exact": fraction_text(tends),
            }
        )  # fmt: skip
        return 0
    what = "" if args.pass_ == "fwd" else f" {WORDS[args.pass_]}"
    heads = f"batch={args.batch} heads={args.heads} group={args.group}"
    title = f"chunk{what}: {q} new tokens after {past} cached (a cache of {s}), d={args.d} {heads}"
    print(comparison_text(title, cmp, render.device_line(dev, roof)))
    print()
    print(chunk_crossover_text(crosses, past, q, tends))
    return 0
