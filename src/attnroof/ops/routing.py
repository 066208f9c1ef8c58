"""How a mixture of experts' router spreads a batch over its experts: how many distinct experts the
batch touches (whose weights a step reads) and how unevenly it loads them.

Every routing here is a per-token inclusion probability π_e: the chance that one token sends to
expert e, with Σ_e π_e = k (a token picks k distinct experts) and each π_e ≤ 1. With tokens
routed independently of each other, n tokens all miss expert e with probability (1 − π_e)ⁿ,
however a token's own k choices depend on each other, so

    touched(n) = Σ_e 1 − (1 − π_e)ⁿ            expected distinct experts n tokens read

    uniform     π_e = k/E                       → E·(1 − (1 − k/E)ⁿ), the closed form
    skewed:α    π_r ∝ r^−α over the experts ranked r = 1..E by popularity (Zipf; α = 0 is uniform),
                scaled to sum to k, any π_e past 1 capped at 1 and its excess spread over the
                rest in proportion (the inclusion probabilities of a sample of k drawn with
                probability proportional to size, Hájek's πps design)
    trace       π_e = c_e / T from the token counts c_e of one router over T tokens
                (Σ_e c_e = k·T): a measured popularity
    all         every expert read, E: the most a step can read
    fewest      k: every token sends to the same k experts. No batch touches fewer (a token's k
                experts are distinct), and every batch can touch that few, so it is the least any
                router reads: the bound over every routing (each of the k experts then serves all
                n tokens, n·k token-expert pairs over k weights)

The expectation assumes independent tokens. Real routing also correlates tokens of one sequence
(a code prompt keeps choosing the same experts), which makes a batch touch fewer experts still:
``fewest`` is the floor whatever the correlation.

A trace file is one count per line, expert 0 first, the E counts of one MoE layer's router over
the T tokens it routed (``#`` starts a comment; blank lines are skipped)::

    # experts 0..7 of Mixtral's layer 0 over 64 tokens (top-2: the counts sum to 128)
    31
    9
    ...

Under expert parallelism over ``ep`` devices, expert e sits on device e // (E/ep) (Megatron-LM's
and DeepSeek's contiguous placement), so a trace also says how much more the busiest device
receives than the mean (:meth:`Routing.busiest_device`): the slowest device, which sets an
expert-parallel group's pace.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from attnroof.cost import Num
from attnroof.errors import InputError

UNIFORM_KIND, ALL_KIND, FEWEST_KIND, SKEWED_KIND, TRACE_KIND = "uniform", "all", "fewest", "skewed", "trace"
KINDS = (UNIFORM_KIND, ALL_KIND, FEWEST_KIND, SKEWED_KIND, TRACE_KIND)
FORMS = "uniform, all, fewest, skewed:ALPHA (e.g. skewed:1.2) or trace:FILE"
"""The ``--routing`` forms, as an error lists them."""
MAX_ALPHA = 16.0
"""The largest Zipf exponent taken: at α = 16 the second expert is already 2⁻¹⁶ as popular as
the first, so past it every skew reads alike (the top k, capped); a larger figure is a typo."""
MAX_TRACE_EXPERTS = 65_536
"""Counts a trace may hold: the largest routers have a few hundred experts (Qwen3-Next 512)."""
TRACE_LIMIT = 2**20
"""Bytes of a trace file read at most (1 MiB: 65,536 counts of up to 16 digits)."""
MAX_COUNT = 2**53
"""The largest count taken: exact as a float (a trace of 2⁵³ tokens is past any measurement)."""


@dataclass(frozen=True, slots=True)
class Routing:
    """One routing (the module's table): ``kind``, a Zipf exponent ``alpha`` for ``skewed``, the
    per-expert token ``counts`` of a ``trace`` (and the file they came from, ``source``)."""

    kind: str = UNIFORM_KIND
    alpha: float = 0.0
    counts: tuple[int, ...] = ()
    source: str = ""

    def __str__(self) -> str:
        """The ``--routing`` form that gives it back: ``uniform``, ``skewed:1.2``, ``trace:FILE``."""
        if self.kind == SKEWED_KIND:
            return f"skewed:{self.alpha:g}"
        if self.kind == TRACE_KIND:
            return f"trace:{self.source}"
        return self.kind

    @property
    def words(self) -> str:
        """The routing in words, as a note says it."""
        return {
            UNIFORM_KIND: "uniform routing",
            ALL_KIND: "every expert read (--routing all)",
            FEWEST_KIND: "--routing fewest: every token to the same top-k",
            SKEWED_KIND: f"skewed routing, Zipf α = {self.alpha:g}",
            TRACE_KIND: f"the routing trace {self.source}",
        }[self.kind]

    def check(self, experts: int, top_k: int) -> None:
        """:class:`InputError` (``--routing``) when a trace cannot be ``experts`` experts' counts
        at ``top_k`` per token."""
        if self.kind != TRACE_KIND:
            return
        c, where = self.counts, f"--routing trace:{self.source}"
        if len(c) != experts:
            raise InputError(
                f"{where}: {len(c):,} counts for the model's {experts:,} experts", param="--routing"
            )
        total = sum(c)
        if total % top_k:
            raise InputError(
                f"{where}: the counts sum to {total:,}, not a multiple of top-k {top_k} (each token sends to "
                f"{top_k} experts)",
                param="--routing",
            )
        tokens = total // top_k
        e = max(range(experts), key=c.__getitem__)
        if c[e] > tokens:
            raise InputError(
                f"{where}: expert {e} has {c[e]:,} tokens of the trace's {tokens:,} (a token sends to an "
                "expert at most once)",
                param="--routing",
            )

    def inclusion(self, experts: int, top_k: int) -> tuple[tuple[float, int], ...]:
        """π: (probability, how many experts have it) pairs, Σ = ``top_k`` (the module's table).

        >>> [(round(p, 3), m) for p, m in Routing("skewed", 1.0).inclusion(4, 2)]  # 1, 1/2, 1/3, 1/4 × 24/25
        [(0.96, 1), (0.48, 1), (0.32, 1), (0.24, 1)]
        >>> Routing("skewed", 3.0).inclusion(4, 2)[0]     # the first capped at 1
        (1.0, 1)
        """
        if self.kind == TRACE_KIND:
            tokens = sum(self.counts) / top_k
            return _grouped(c / tokens for c in self.counts)
        if self.kind == SKEWED_KIND:
            return _grouped(zipf_inclusion(experts, top_k, self.alpha))
        return ((top_k / experts, experts),)

    def touched(self, tokens: Num, experts: Num, top_k: Num) -> Num:
        """Expected distinct experts ``tokens`` tokens read (the module's table); numbers, numpy
        arrays or sympy symbols (uniform, all and fewest) alike.

        >>> round(Routing().touched(8, 256, 8), 1), Routing("fewest").touched(8, 256, 8)
        (57.4, 8)
        >>> round(Routing("skewed", 1.0).touched(8, 256, 8), 1)   # a Zipf-1 router: fewer
        39.5
        """
        if self.kind == ALL_KIND:
            return experts
        if self.kind == FEWEST_KIND:
            return top_k
        if self.kind == UNIFORM_KIND:
            return experts * (1 - (1 - top_k / experts) ** tokens)
        return sum(m * (1 - (1 - p) ** tokens) for p, m in self.inclusion(int(experts), int(top_k)))

    def busiest_expert(self) -> tuple[int, float]:
        """A trace's most-loaded expert and its tokens over the mean expert's (Σc/E).

        >>> Routing("trace", counts=(3, 2, 2, 1)).busiest_expert()    # 4 tokens, top-2
        (0, 1.5)
        """
        c = self.counts
        e = max(range(len(c)), key=c.__getitem__)
        return e, c[e] * len(c) / sum(c)

    def busiest_device(self, ep: int) -> float:
        """A trace's busiest expert-parallel device over the mean, E/ep experts a device in order
        (1 for any other routing: uniform on average, or a skew whose placement is not known).

        >>> Routing("trace", counts=(3, 2, 2, 1)).busiest_device(2)   # devices get 5 and 3
        1.25
        """
        if self.kind != TRACE_KIND or ep == 1:
            return 1.0
        c, per = self.counts, len(self.counts) // ep
        loads = [sum(c[d * per : (d + 1) * per]) for d in range(ep)]
        return max(loads) * ep / sum(loads)

    def to_json(self) -> dict[str, Any]:
        """What a result's JSON says of it beyond its ``--routing`` form: a trace's tokens and
        busiest expert."""
        if self.kind != TRACE_KIND:
            return {}
        e, ratio = self.busiest_expert()
        return {
            "routing_trace": {
                "file": self.source,
                "experts": len(self.counts),
                "token_expert_pairs": sum(self.counts),
                "busiest_expert": e,
                "busiest_expert_tokens": self.counts[e],
                "busiest_expert_over_mean": ratio,
            }
        }


UNIFORM = Routing()
ALL = Routing(ALL_KIND)
FEWEST = Routing(FEWEST_KIND)


def _grouped(values: Any) -> tuple[tuple[float, int], ...]:
    """Equal probabilities summed once: a trace's many experts of the same count, one term."""
    out: dict[float, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return tuple(out.items())


def zipf_inclusion(experts: int, top_k: int, alpha: float) -> list[float]:
    """π_r ∝ r^−α for the experts ranked r = 1..E, Σ π = k, each at most 1: the experts whose
    share would pass 1 are capped, and the rest rescaled to carry what is left.

    >>> [round(p, 3) for p in zipf_inclusion(8, 2, 0.0)]       # α = 0: uniform, k/E each
    [0.25, 0.25, 0.25, 0.25, 0.25, 0.25, 0.25, 0.25]
    """
    weights = [(r + 1) ** -alpha for r in range(experts)]
    capped = 0
    while True:  # at most k rounds: each caps the most popular expert left
        rest = sum(weights[capped:])
        scale = (top_k - capped) / rest
        if capped == top_k or weights[capped] * scale <= 1:
            return [1.0] * capped + [w * scale for w in weights[capped:]]
        capped += 1


def parse_routing(text: str, read: Any = None) -> Routing:
    """A ``--routing`` form: ``uniform``, ``all``, ``fewest``, ``skewed:ALPHA`` or
    ``trace:FILE`` (``read(path)`` gives the file's text). :class:`InputError` naming the bad
    part otherwise.

    >>> parse_routing("skewed:1.2")
    Routing(kind='skewed', alpha=1.2, counts=(), source='')
    """
    kind, sep, rest = text.partition(":")
    if kind in (UNIFORM_KIND, ALL_KIND, FEWEST_KIND) and not sep:
        return Routing(kind)
    if kind == SKEWED_KIND and sep:
        try:
            alpha = float(rest)
        except ValueError:
            alpha = math.nan
        if not 0 <= alpha <= MAX_ALPHA:  # also NaN
            raise InputError(
                f"--routing {text}: the Zipf exponent {rest!r} is not a number from 0 to {MAX_ALPHA:g} "
                "(0 is uniform)",
                param="--routing",
            )
        return Routing(SKEWED_KIND, alpha)
    if kind == TRACE_KIND and sep and rest:
        if read is None:
            raise InputError(f"--routing {text}: no file reader given", param="--routing")
        return Routing(TRACE_KIND, counts=trace_counts(read(rest), rest), source=rest)
    raise InputError(f"--routing {text!r}: expected {FORMS}", param="--routing")


def trace_counts(text: str, where: str) -> tuple[int, ...]:
    """A trace file's counts (the module's format): one whole number ≥ 0 a line, not all 0.

    >>> trace_counts("# two experts\\n3\\n\\n5  # the second\\n", "t.txt")
    (3, 5)
    """
    out: list[int] = []
    for number, line in enumerate(text.splitlines(), 1):
        word = line.split("#", 1)[0].strip()
        if not word:
            continue
        if not (word.isascii() and word.isdigit()) or int(word) > MAX_COUNT:
            raise InputError(
                f"--routing trace:{where}: line {number}: {_shown(word)} is not a count of tokens (a whole "
                f"number from 0 to 2^53, one a line)",
                param="--routing",
            )
        out.append(int(word))
        if len(out) > MAX_TRACE_EXPERTS:
            raise InputError(
                f"--routing trace:{where}: more than {MAX_TRACE_EXPERTS:,} counts (one a line, one per expert)",
                param="--routing",
            )
    if not out:
        raise InputError(
            f"--routing trace:{where}: no counts (one a line, one per expert)", param="--routing"
        )
    if not any(out):
        raise InputError(f"--routing trace:{where}: every count is 0 (no token routed)", param="--routing")
    return tuple(out)


def _shown(word: str) -> str:
    return repr(word if len(word) <= 40 else word[:40] + "…")
