"""A training plan's sharding policy in words (:mod:`attnroof.model.sharding`): its ZeRO stage
with where it departs from the stage's default, when it sends what, and what it cuts."""

from __future__ import annotations

from typing import Any

from attnroof.model.parallel import Plan
from attnroof.model.sharding import policy_name, when_sent
from attnroof.model.train_options import EVERY_MICROBATCH, EVERY_PASS, ONCE_A_STEP
from attnroof.text import render


def zero_words(p: Plan) -> str:
    """A plan's ZeRO stage, and where its policy departs from the stage's default."""
    bits = []
    if p.zero == 3 and p.weight_gather != EVERY_PASS:
        bits.append(f"weights gathered once a {'step' if p.weight_gather == ONCE_A_STEP else 'micro-batch'}")
    if p.zero >= 2 and p.grad_reduce != EVERY_MICROBATCH:
        bits.append("gradients reduced once a step")
    if p.dp_replicate > 1:
        bits.append(f"shard groups of {p.replicas // p.dp_replicate}, {p.dp_replicate} copies")
    return f"ZeRO {p.zero}" + (f" ({'; '.join(bits)})" if bits else "")


GATHER_WORDS = {
    EVERY_PASS: "weights all-gathered before each pass of every micro-batch",
    EVERY_MICROBATCH: "weights all-gathered once a micro-batch, kept to its backward",
    ONCE_A_STEP: "weights all-gathered once a step, kept through every micro-batch",
}


def sharding_line(p: Plan, t: dict[str, Any]) -> str:
    """The plan's sharding policy by name, when it sends what (in the order it sends it), and
    its bytes a step."""
    gather, reduce_ = when_sent(p)
    r = p.dp_replicate
    where = (
        f"in shard groups of {p.replicas // r} devices, {r} copies"
        if r > 1
        else f"over {p.replicas} replicas"
    )
    if p.zero == 0:
        sends = ["gradients all-reduced once a step"]
    else:
        when = "after every micro-batch" if reduce_ == EVERY_MICROBATCH else "once a step"
        across = f", then all-reduced across the {r} copies" if r > 1 else ""
        sends = [f"gradients reduce-scattered {when}{across}"]
        if p.zero == 3:
            sends.insert(0, GATHER_WORDS[str(gather)])
        else:
            sends.append("the updated weights all-gathered once a step")
    name = policy_name(p) + (f" (ZeRO {p.zero})" if p.zero == 3 else "")
    return (
        f"sharding: {name} {where}: {', '.join(sends)}; "
        f"{render.nbytes(t['dp_sync_bytes_per_device'])} sent per device a step"
    )


CUT_WORDS = {
    (False, False): "the optimizer state",
    (False, True): "the optimizer state and gradients",
    (True, False): "weights and optimizer state",
    (True, True): "weights, gradients and optimizer state",
}
"""What ZeRO cuts, by (weights cut, gradients cut): the optimizer state always."""


def sharded_words(p: Plan) -> str:
    """What the plan's policy cuts, for the memory line: the stage's states over the replicas
    (or a hybrid's shard groups), the gradients kept whole when reduced once a step, and ZeRO
    3's gathered weights kept."""
    if not p.zero:
        return ""
    whole = p.zero >= 2 and p.grad_reduce == ONCE_A_STEP
    kept = p.zero == 3 and p.weight_gather != EVERY_PASS
    cut = CUT_WORDS[p.zero == 3, p.zero >= 2 and not whole]
    r = p.dp_replicate
    over = "over the data-parallel replicas" if r == 1 else f"over shard groups of {p.replicas // r} devices"
    notes = [
        n for n, on in (("gradients accumulated whole", whole), ("the gathered weights kept", kept)) if on
    ]
    return f" (ZeRO {p.zero}: {cut} sharded {over}" + "".join(f"; {n}" for n in notes) + ")"
