"""Speculative decoding as a closed form (Leviathan, Kalman & Matias, "Fast Inference from
Transformers via Speculative Decoding", ICML 2023, §3): a draft model proposes k tokens, the
target verifies them in one step, and with each token accepted independently at rate α

    tokens per target step  E = (1 − α^(k+1)) / (1 − α)        (k + 1 when α = 1)

A round costs the target's step over k + 1 new tokens per sequence — a chunk of k + 1 queries
against each cache (:func:`attnroof.ops.attention.chunk`) — plus k decode steps of the draft,
each what the draft model costs at that batch and context:

    time per token = (verify step + k · draft step) / E,   against the plain decode step
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from attnroof.errors import InputError
from attnroof.serve.step import StepCost


def tokens_per_step(k: int, alpha: float) -> float:
    """E = (1 − α^(k+1)) / (1 − α): the expected tokens one target step yields.

    >>> round(tokens_per_step(4, 0.8), 4)       # (1 − 0.8⁵) / 0.2
    3.3616
    >>> tokens_per_step(4, 1.0), tokens_per_step(4, 0.0)
    (5.0, 1.0)
    """
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise InputError(f"speculative tokens {k!r} must be a positive whole number", param="spec_tokens")
    if not 0 <= alpha <= 1:
        raise InputError(f"acceptance rate {alpha!r} is not in [0, 1]", param="acceptance")
    if alpha == 1:
        return float(k + 1)
    return (1 - alpha ** (k + 1)) / (1 - alpha)


@dataclass(frozen=True)
class Speculation:
    k: int
    alpha: float
    batch: int
    context: int
    tokens_per_step: float
    plain_step_s: float
    verify_step_s: float
    draft_step_s: float

    @property
    def round_s(self) -> float:
        return self.verify_step_s + self.k * self.draft_step_s

    @property
    def time_per_token_s(self) -> float:
        return self.round_s / self.tokens_per_step

    @property
    def speedup(self) -> float:
        return self.plain_step_s / self.time_per_token_s

    def to_json(self) -> dict[str, Any]:
        return {
            "spec_tokens": self.k,
            "acceptance": self.alpha,
            "batch": self.batch,
            "context": self.context,
            "tokens_per_target_step": self.tokens_per_step,
            "plain_decode_step_s": self.plain_step_s,
            "verify_step_s": self.verify_step_s,
            "draft_step_s": self.draft_step_s,
            "time_per_token_s": self.time_per_token_s,
            "speedup": self.speedup,
        }


def speculate(
    target: StepCost, draft: StepCost, *, k: int, alpha: float, batch: int, context: int
) -> Speculation:
    """One round at ``batch`` sequences of ``context`` tokens, against plain decoding there."""
    import numpy as np

    e = tokens_per_step(k, alpha)
    if batch * (k + 1) > target.max_tokens or batch > target.max_seqs:
        raise InputError(
            f"a verify step of {batch} × {k + 1} tokens is beyond the engine's step", param="spec_tokens"
        )
    ctx = np.full(batch, context, dtype=np.int64)
    none = np.zeros(0, dtype=np.int64)
    plain = target.time_s(ctx, none, none)
    verify = target.time_s(none, np.full(batch, k + 1, dtype=np.int64), ctx + k)
    drafting = draft.time_s(ctx, none, none)
    return Speculation(k, alpha, batch, context, e, plain, verify, drafting)
