"""The requests a deployment is simulated under: when each arrives, its prompt and its answer.

Arrivals as vLLM's serving benchmark draws them (``benchmarks/benchmark_serving.py``,
``get_request``): gaps from a gamma distribution of shape ``burstiness`` and mean 1/rate —
burstiness 1 is a Poisson process, below 1 burstier, above 1 more regular — or all at once
(rate ∞), or a closed loop of ``concurrency`` clients, each sending its next request when its
last one finishes. Prompt and answer lengths are fixed, drawn uniformly within ± ``range_ratio``
of their means (the benchmark's ``--random-range-ratio``), or read from a JSONL file of requests
(``{"input_tokens": 2048, "output_tokens": 256, "arrival_s": 0.5}``, arrival optional). One
seed draws everything, so the same seed gives the same requests.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from attnroof.errors import InputError, parse_json
from attnroof.validate import Range, size

FIELDS = ("input_tokens", "output_tokens", "arrival_s")

RATE = Range(
    1e-3, 1e9, "requests a second",
    "slower than one request in some 17 minutes, each request runs alone, and over the run's span "
    "a float's seconds lose the milliseconds",
    "implausibly many: no deployment's traffic comes a billion a second (inf sends every request at once)",
)  # fmt: skip
"""Arrivals a second (∞, every request at once, is taken beside it)."""
BURSTINESS = Range(
    1e-2, 1e4, "",
    "a gamma shape that small draws most gaps between arrivals as exactly 0 s, a float's "
    "underflow rather than a burst",
    "a gamma shape that large draws every gap within 1% of 1/rate: as steady as arrivals get",
)  # fmt: skip
"""The gamma shape of the gaps: 1 Poisson, below 1 burstier (a gap's coefficient of variation is
1/√shape: 10 at the low end, 0.01 at the high)."""
SEED = Range(
    0, 2**64 - 1, "", "a seed is a whole number from 0 (numpy's generators take no negative one)",
    "a seed is a 64-bit number, as numpy's generators take it",
)  # fmt: skip
MAX_REQUEST_TOKENS = 2**31 - 1
"""The most tokens one request of a file may have: the largest length any config may state
(:data:`attnroof.model.fields.MAX_CONFIG_INT`, not imported: this module is the flags'), so no
model holds a longer one."""


@dataclass(frozen=True)
class Workload:
    """``n`` requests: arrival times (s; all 0 in a closed loop, whose arrivals the engine sets),
    prompt and answer lengths (tokens), and the closed loop's clients (0: open loop)."""

    arrival_s: Any
    input_tokens: Any
    output_tokens: Any
    concurrency: int = 0
    rate: float = math.inf
    burstiness: float = 1.0

    @property
    def n(self) -> int:
        return len(self.input_tokens)


def arrivals(n: int, rate: float, burstiness: float, rng: Any) -> Any:
    """``n`` arrival times at ``rate`` requests/s: cumulative gamma gaps of shape ``burstiness``
    and scale 1/(rate · burstiness), so a mean gap of 1/rate; the first at the first gap, as the
    benchmark sleeps before each request. rate = ∞: all at 0.

    >>> import numpy as np
    >>> t = arrivals(100_000, 10.0, 1.0, np.random.default_rng(0))
    >>> round(float(t[-1] / len(t)), 3)                  # mean gap 1/rate
    0.1
    """
    import numpy as np

    if math.isinf(rate):
        return np.zeros(n)
    return np.cumsum(rng.gamma(burstiness, 1.0 / (rate * burstiness), n))


def upper_length(mean: int, range_ratio: float) -> int:
    """The longest length :func:`lengths` draws.

    >>> upper_length(1024, 0.0), upper_length(1024, 0.5)
    (1024, 1536)
    """
    if range_ratio == 0:
        return mean
    return max(max(1, math.floor(mean * (1 - range_ratio))), math.ceil(mean * (1 + range_ratio)))


def longest_request(traffic: Any, file: Workload | None, defaults: tuple[int, int]) -> int:
    """The most tokens a request of ``traffic`` may hold (its prompt and answer): the ``file``'s
    longest (a longer run cycles them), else the upper end of its lengths (``defaults`` where it
    gives none; a longer run draws more).

    >>> from types import SimpleNamespace
    >>> longest_request(SimpleNamespace(input_len=None, output_len=100, range_ratio=0.5), None, (1024, 128))
    1686
    """
    if file is not None:
        return int((file.input_tokens + file.output_tokens).max())
    ratio = traffic.range_ratio
    return upper_length(traffic.input_len or defaults[0], ratio) + upper_length(
        traffic.output_len or defaults[1], ratio
    )


def lengths(n: int, mean: int, range_ratio: float, rng: Any) -> Any:
    """``n`` lengths uniform over the whole numbers within mean·(1 ± range_ratio), at least 1."""
    import numpy as np

    if range_ratio == 0:
        return np.full(n, mean, dtype=np.int64)
    low = max(1, math.floor(mean * (1 - range_ratio)))
    high = upper_length(mean, range_ratio)
    return rng.integers(low, high + 1, n, dtype=np.int64)


def synthetic(
    n: int,
    *,
    input_tokens: int,
    output_tokens: int,
    rate: float = math.inf,
    burstiness: float = 1.0,
    concurrency: int = 0,
    range_ratio: float = 0.0,
    seed: int = 0,
) -> Workload:
    """``n`` requests of ``input_tokens`` and ``output_tokens`` (± ``range_ratio``), arriving at
    ``rate`` (open loop) or from ``concurrency`` clients (closed loop)."""
    import numpy as np

    size("num_requests", n)
    size("input_len", input_tokens)
    size("output_len", output_tokens)
    _check_draw(rate, burstiness, seed)
    if not 0 <= range_ratio < 1:
        raise InputError(f"range ratio {range_ratio} is not in [0, 1)", param="range_ratio")
    rng = np.random.default_rng(seed)
    ins = lengths(n, input_tokens, range_ratio, rng)
    outs = lengths(n, output_tokens, range_ratio, rng)
    at = np.zeros(n) if concurrency else arrivals(n, rate, burstiness, rng)
    return Workload(at, ins, outs, concurrency, math.inf if concurrency else rate, burstiness)


def from_jsonl(
    text: str,
    origin: str,
    *,
    rate: float | None = None,
    burstiness: float = 1.0,
    concurrency: int = 0,
    seed: int = 0,
    limit: int | None = None,
    cycle_to: int | None = None,
    warmup: int = 0,
) -> Workload:
    """Requests from JSONL text, one object a line: ``input_tokens``, ``output_tokens`` and,
    optionally, ``arrival_s`` (every line or none). Without arrival times they arrive at
    ``rate`` (or from ``concurrency`` clients); a rate with arrival times is refused.
    ``cycle_to``: the (first ``limit``) requests repeated in order until there are that many
    (a longer run of the same mix; not with arrival times). ``warmup``: requests not counted,
    which must leave some of the file's."""
    import numpy as np

    from attnroof.limits import require_memory

    _check_draw(math.inf if rate is None else rate, burstiness, seed)
    lines = min(limit or math.inf, text.count("\n") + 1)
    require_memory(f"reading {lines:,} requests", lines * FILE_ROW_BYTES, "fewer --num-requests")
    rows: list[dict[str, Any]] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{origin}:{number}"
        row = parse_json(line, where, InputError)  # strict: no NaN, no 5,000-digit number, no twin keys
        if not isinstance(row, dict):
            raise InputError(f"{where}: a request is a JSON object, not {type(row).__name__}")
        rows.append(_request(row, where))
        if limit is not None and len(rows) == limit:
            break
    if not rows:
        raise InputError(f"{origin}: no requests")
    if warmup >= len(rows):
        raise InputError(
            f"warmup {warmup} leaves none of the {len(rows):,} requests of {origin}", param="warmup"
        )
    timed = ["arrival_s" in r for r in rows]
    if any(timed) and not all(timed):
        line = timed.index(not timed[0]) + 1
        raise InputError(
            f"{origin}: request {line} {'lacks' if timed[0] else 'has'} arrival_s, the first does not agree"
        )
    ins = np.array([r["input_tokens"] for r in rows], dtype=np.int64)
    outs = np.array([r["output_tokens"] for r in rows], dtype=np.int64)
    if all(timed):
        if rate is not None or concurrency:
            raise InputError(
                f"{origin}: the requests carry arrival times; leave out --rate and --concurrency"
            )
        at = np.array([r["arrival_s"] for r in rows], dtype=np.float64)
        if (np.diff(at) < 0).any():
            raise InputError(f"{origin}: arrival_s must not decrease from one request to the next")
        return Workload(at, ins, outs, 0, math.inf, burstiness)
    if cycle_to is not None and cycle_to > len(rows):
        ins, outs = np.resize(ins, cycle_to), np.resize(outs, cycle_to)
    rng = np.random.default_rng(seed)
    r = math.inf if rate is None else rate
    at = np.zeros(len(ins)) if concurrency else arrivals(len(ins), r, burstiness, rng)
    return Workload(at, ins, outs, concurrency, r, burstiness)


def _check_draw(rate: float, burstiness: float, seed: int) -> None:
    """The rate (or ∞), the burstiness and the seed inside their ranges."""
    if not (math.isinf(rate) and rate > 0):
        RATE.check("rate", rate)
    BURSTINESS.check("burstiness", burstiness)
    SEED.check("seed", seed)


FILE_ROW_BYTES = 600
"""One request of a requests file while the file is read: the parsed JSON object and the checked
copy of it (two small dicts of Python ints)."""
MAX_ARRIVAL_S = 1e12
"""The latest arrival a file may give (some 30,000 years): past it a time is a typo."""


def _seconds(value: Any) -> float | None:
    """An arrival time in seconds, or None for one that is not a number in [0, 10^12)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        seconds = float(value)
    except OverflowError:
        return None
    return seconds if 0 <= seconds < MAX_ARRIVAL_S else None


def _request(row: dict[str, Any], where: str) -> dict[str, Any]:
    unknown = sorted(set(row) - set(FIELDS))
    if unknown:
        raise InputError(f"{where}: unknown field {unknown[0]!r} (fields: {', '.join(FIELDS)})")
    out: dict[str, Any] = {}
    for key in ("input_tokens", "output_tokens"):
        value = row.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"{where}: {key} = {json.dumps(value)} is not a positive whole number")
        if value > MAX_REQUEST_TOKENS:
            raise InputError(
                f"{where}: {key} = {value} is more tokens than any model holds (at most {MAX_REQUEST_TOKENS:,})"
            )
        out[key] = value
    if "arrival_s" in row:
        value = row["arrival_s"]
        seconds = _seconds(value)
        if seconds is None:
            shown = json.dumps(value) if len(str(value)) <= 40 else f"a {len(str(value))}-digit number"
            raise InputError(f"{where}: arrival_s = {shown} is not a time ≥ 0 in seconds (below 10^12)")
        out["arrival_s"] = seconds
    return out
