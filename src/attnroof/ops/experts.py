"""Mixture-of-experts: a router sends each token to ``top_k`` of ``experts`` feed-forward
networks, so FLOPs follow the active experts while bytes follow the experts *touched*.

With ``n`` tokens routed independently and uniformly, each expert is missed by a token with
probability 1 − k/E, so the expected number of distinct experts a layer reads is

    E_touched(n) = E · (1 − (1 − k/E)ⁿ)          k at n = 1, → E as n grows

Each expert's GEMM then sees n·k / E_touched tokens: about one at small batches (every weight
byte serves one token, intensity ≈ 1) and n·k/E once every expert is touched. A dense layer's
GEMM sees all n tokens, so an expert GEMM needs E/k times the batch to reach the same intensity
(Mixtral 8/2 = 4×, DeepSeek-V3 256/8 = 32×). Other routings — skewed, a measured trace, the
fewest experts any router can read — are :mod:`attnroof.ops.routing`'s.

One expert GEMM kernel (grouped over the touched experts)::

    expert GEMM   reads X (n·k rows, gathered), W (E_touched weights)   writes Y (n·k rows)
                  2·n·k·K·M FLOPs
"""

from __future__ import annotations

import functools

from attnroof import validate
from attnroof.cost import Access, Cost, Num, Stage
from attnroof.dtypes import BF16_BYTES
from attnroof.ops.matmul import expected_matmul_flops
from attnroof.ops.routing import ALL, FEWEST, FORMS, UNIFORM, Routing, parse_routing

__all__ = [
    "ALL",
    "FEWEST",
    "ROUTINGS",
    "UNIFORM",
    "Routing",
    "as_routing",
    "expert_gemm",
    "expert_share",
    "touched_experts",
]

ROUTINGS = FORMS
"""The routings a step takes (:mod:`attnroof.ops.routing`): ``uniform`` (the expectation above),
``all`` (every expert read: what a kernel that streams every expert's weights reads),
``fewest`` (the top-k alone: the least any router reads), ``skewed:ALPHA``, ``trace:FILE``."""


def touched_experts(tokens: Num, experts: Num, top_k: Num, routing: Routing | str = UNIFORM) -> Num:
    """Expected distinct experts that ``tokens`` tokens routed to ``top_k`` of ``experts`` read
    under ``routing`` (:meth:`attnroof.ops.routing.Routing.touched`; a string is its form).

    >>> touched_experts(1, 8, 2), round(touched_experts(64, 8, 2), 3)   # Mixtral: 2, then all 8
    (2.0, 8.0)
    >>> round(touched_experts(8, 256, 8), 1)           # DeepSeek-V3 at batch 8: 57 of 256
    57.4
    >>> touched_experts(64, 8, 2, "fewest")            # no router reads fewer than its top-k
    2
    """
    return as_routing(routing).touched(tokens, experts, top_k)


@functools.lru_cache(maxsize=64)
def _parsed(text: str) -> Routing:
    return parse_routing(text)


def as_routing(routing: Routing | str) -> Routing:
    """``routing`` as a :class:`~attnroof.ops.routing.Routing` (a string is its ``--routing``
    form; a trace needs its file read, so comes as a Routing)."""
    return routing if isinstance(routing, Routing) else _parsed(routing)


def expert_gemm(
    tokens: Num,
    k: Num,
    m: Num,
    *,
    experts: Num,
    top_k: Num,
    routing: Routing | str = UNIFORM,
    itemsize: Num = BF16_BYTES,
    weight_itemsize: Num | None = None,
    bias: bool = False,
    ep: Num = 1,
    imbalance: Num = 1,
    name: str = "expert GEMM",
) -> Cost:
    """``tokens`` tokens, each through ``top_k`` experts' k × m weights (one grouped kernel).
    Under expert parallelism (``ep`` > 1) ``tokens`` are the pooled tokens of the ``ep`` devices
    of a group and the cost is one device's share (:func:`expert_share`); ``tokens`` is an
    expected count, which need not be whole (a TP rank's share of one decoding token). ``imbalance`` F ≥ 1:
    the device costed is the busiest, its routed rows F × the mean (FLOPs, X and Y); the weights
    it reads are still those its experts' tokens touch, once.

    >>> busy = expert_gemm(64, 4096, 28672, experts=8, top_k=2, ep=4, imbalance=2)
    >>> mean = expert_gemm(64, 4096, 28672, experts=8, top_k=2, ep=4)
    >>> busy.flops == 2 * mean.flops, busy.bytes - mean.bytes == 64 * 2 / 4 * (4096 + 28672) * 2
    (True, True)

    >>> c = expert_gemm(1, 4096, 28672, experts=8, top_k=2)   # Mixtral gate/up, one token
    >>> c.flops == 2 * 2 * 4096 * 28672, c.bytes == 2 * 2 * (4096 * 28672 + 4096 + 28672)
    (True, True)
    """
    validate.positive("tokens", tokens)  # an expectation: whole or not
    w_item = itemsize if weight_itemsize is None else weight_itemsize
    routed = tokens * top_k * imbalance  # token-expert pairs (the busiest device's: F × the mean)
    touched = touched_experts(tokens, experts, top_k, routing)
    reads = [Access("X", routed * k * itemsize), Access("W", touched * k * m * w_item, weight=True)]
    flops = expected_matmul_flops(routed, k, m)  # routed: an expectation, whole or not
    if bias:  # each expert's bias, added in the epilogue
        reads.append(Access("bias", touched * m * w_item, weight=True))
        flops = flops + routed * m
    return expert_share(Cost((Stage(name, flops, tuple(reads), (Access("Y", routed * m * itemsize),)),)), ep)


def expert_share(cost: Cost, ep: Num) -> Cost:
    """One device's 1/ep of an expert-parallel group's expert work: with balanced routing each of
    the ``ep`` devices runs as many routed tokens as it sends, on E/ep experts, each touched as
    often as the group's pooled tokens touch it.

    >>> expert_share(expert_gemm(8, 4096, 28672, experts=8, top_k=2), 2).flops == 8 * 2 * 2 * 4096 * 28672 / 2
    True
    """
    return cost if ep == 1 else Cost(tuple(s.scaled(1 / ep) for s in cost.stages))
