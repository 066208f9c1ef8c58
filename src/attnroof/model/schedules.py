"""Pipeline schedules as they run: one entry per schedule, with its source, and for ``p`` stages
(devices), ``m`` micro-batches and ``v`` model chunks per device, three rules:

    schedule      pipeline time, stage i taking t_i a       activations stage i holds     p2p sends per
                  micro-batch (w_i of it weight gradients)  (micro-batches of its layers)  micro-batch
    1f1b          Σ t_i + (m − 1)·max t_i                   min(m, p − i)                 1
    interleaved   Σ t_i/v + (m − 1/v)·max t_i               min(m·v, 2(p − i − 1)         v
                                                                + (v − 1)·p + 1) / v
    zb-h1         Σ (t_i − 2w_i) + max ((m − 1)·t_i + 2w_i) min(m, p)                     1

For equal stages (t a micro-batch) the bubbles are (p − 1)·t (1F1B: (p − 1)/(m + p − 1) of the
pipeline), (p − 1)·t/v (interleaved: (p − 1)/(v·m) of the ideal m·t), and (p − 1)·(t − 2w) =
(p − 1)(T_F + T_B − T_W) against 1F1B's (p − 1)(T_F + T_B + T_W) (ZB-H1, B the input's gradient
and W the weights', t = T_F + T_B + T_W: a third of 1F1B's when the three are equal).

- ``1f1b``: PipeDream-Flush, Narayanan et al. 2021, "Efficient Large-Scale Language Model Training
  on GPU Clusters Using Megatron-LM", §2.2.1: stage i runs p − i forwards before its first
  backward, so it holds that many micro-batches' activations.
- ``interleaved``: the same paper, §2.2.2: each device holds v chunks of L/(p·v) layers,
  non-contiguous (device d holds chunks d, d + p, …), so the fill and drain take a chunk's time,
  t/v, per stage; each chunk boundary is a send, v of them per device and micro-batch. In flight:
  Megatron-LM's ``get_pp_rank_microbatches`` (megatron/core/pipeline_parallel/schedules.py): rank
  i runs 2(p − i − 1) + (v − 1)·N warm-up chunk forwards (N, ``microbatch_group_size_per_vp_stage``,
  defaults to p) and one more before its first backward, each chunk 1/v of its layers. The first
  device holds L·(1 + (p − 1)/(p·v)) layers' activations of one micro-batch, Korthikanti et al.
  2022 ("Reducing Activation Recomputation in Large Transformer Models", §4.2.3). Megatron runs
  micro-batches in groups of N = p per chunk, so m must be a multiple of p; the layers must split
  into p·v equal chunks, or, counting the embedding and the loss as a layer each
  (``account_for_embedding_in_pipeline_split`` and ``…_loss_…``, as Llama 3 split 126 layers
  over 16 stages), L + 2 must.
- ``zb-h1``: Qi et al. 2024, "Zero Bubble Pipeline Parallelism" (ICLR 2024), §2.1: the backward
  split into B and W; ZB-H1 delays each stage's W passes to fill the drain, keeping the peak
  memory of 1F1B: a stage holds at most p micro-batches' activations (those waiting for B and
  those waiting for W; attnroof counts the latter whole, an upper bound), the first stage's
  1F1B figure. A training schedule: prefill and decode have no backward to split.

The pipeline time is the bound's (each stage's bound) and the estimate's (each stage's
estimate) alike: both grow with every t_i, so the bound stays below the estimate.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from attnroof.errors import InputError

ONE_F_ONE_B, INTERLEAVED, ZB_H1 = "1f1b", "interleaved", "zb-h1"


@dataclass(frozen=True, slots=True)
class Schedule:
    """One pipeline schedule: its source and its rules (the module's table)."""

    name: str
    source: str
    fill: Callable[[Any, Any, Any], Any]
    """(a stage's time a micro-batch t, the weight-gradient part of it w, v) → what the stage
    adds to the pipeline's fill and drain (floats or arrays, element by element)."""
    pace: Callable[[Any, Any, Any, Any], Any]
    """(t, w, m, v) → the pipeline's steady part were this stage the slowest (the largest
    sets the pace)."""
    in_flight: Callable[[int, int, int, int], float]
    """(stage i, p, m, v) → the micro-batches of its layers' activations stage i holds at most."""
    sends: Callable[[int], int]
    """v → the point-to-point sends a device makes each micro-batch, each way (a chunk boundary each)."""
    training_only: bool = False

    def time(self, t: Sequence[float], w: Sequence[float], m: int, v: int) -> float:
        """The pipeline's time over stages taking ``t`` a micro-batch (``w`` of it their weight
        gradients): Σ fill + max pace (the module's table;
        :func:`attnroof.model.busy.pipelines` for many plans at once)."""
        return sum(self.fill(ti, wi, v) for ti, wi in zip(t, w, strict=True)) + max(
            self.pace(ti, wi, m, v) for ti, wi in zip(t, w, strict=True)
        )


# Each schedule's time as Σ fill + max pace: 1F1B's Σ t + (m − 1)·max t; interleaved's
# Σ t/v + (m − 1/v)·max t; ZB-H1's fill and drain less each stage's W twice (the W it defers
# fills the bubble it would leave), the stage that sets the pace running m micro-batches whole.


def _interleaved_in_flight(i: int, p: int, m: int, v: int) -> float:
    return min(m * v, 2 * (p - i - 1) + (v - 1) * p + 1) / v


SCHEDULES: dict[str, Schedule] = {
    s.name: s
    for s in (
        Schedule(
            ONE_F_ONE_B,
            "Narayanan et al. 2021 (Megatron-LM at scale), §2.2.1: PipeDream-Flush",
            lambda t, w, v: t,
            lambda t, w, m, v: (m - 1) * t,
            lambda i, p, m, v: min(m, p - i),
            lambda v: 1,
        ),
        Schedule(
            INTERLEAVED,
            "Narayanan et al. 2021, §2.2.2; in flight: megatron/core/pipeline_parallel/schedules.py",
            lambda t, w, v: t / v,
            lambda t, w, m, v: (m - 1 / v) * t,
            _interleaved_in_flight,
            lambda v: v,
        ),
        Schedule(
            ZB_H1,
            "Qi et al. 2024, Zero Bubble Pipeline Parallelism (ICLR 2024), §2.1",
            lambda t, dw, v: t - 2 * dw,
            lambda t, dw, m, v: (m - 1) * t + 2 * dw,
            lambda i, p, m, v: min(m, p),
            lambda v: 1,
            training_only=True,
        ),
    )
}


def schedule(name: str) -> Schedule:
    """The schedule ``name``; :class:`InputError` naming ``--schedule`` otherwise."""
    try:
        return SCHEDULES[name]
    except KeyError:
        raise InputError(
            f"--schedule {name!r} is not one of {', '.join(SCHEDULES)}", param="--schedule"
        ) from None


def splits(layers: int, pp: int, v: int) -> bool:
    """Whether ``layers`` cut into pp · v interleaved chunks (:func:`chunks`): equal ones, or, counting
    the embedding and the loss as a layer each as Megatron-LM can, layers + 2 into chunks of at
    least two.

    >>> splits(80, 4, 5), splits(126, 16, 2), splits(126, 16, 3)
    (True, True, False)
    """
    n = pp * v
    return layers % n == 0 or ((layers + 2) % n == 0 and (layers + 2) // n >= 2)


def chunks(layers: int, pp: int, v: int) -> list[tuple[int, int]]:
    """The contiguous layer ranges of ``pp · v`` model chunks, in pipeline order (chunk c on
    device c mod pp). ``v`` = 1: 1F1B's stages, the first ``layers mod pp`` one layer longer.
    Interleaved: equal chunks, or, where only ``layers + 2`` divides, the first and last chunks
    one layer shorter (Megatron-LM's embedding and loss counted as a layer each).

    >>> chunks(8, 2, 2)
    [(0, 2), (2, 4), (4, 6), (6, 8)]
    >>> chunks(126, 16, 2)[:2], chunks(126, 16, 2)[-1]    # Llama 3 405B: 128 slots of 4
    ([(0, 3), (3, 7)], (123, 126))
    """
    if v == 1:
        size, extra = divmod(layers, pp)
        sizes = [size + (s < extra) for s in range(pp)]
    else:
        n = pp * v
        if layers % n == 0:
            sizes = [layers // n] * n
        elif splits(layers, pp, v):  # the embedding and the loss counted as a layer each
            size = (layers + 2) // n
            sizes = [size - 1] + [size] * (n - 2) + [size - 1]
        else:
            raise InputError(
                f"--virtual-stages {v}: {layers} layers do not split into --pp × --virtual-stages = "
                f"{n} equal chunks, nor do {layers} + 2 (the embedding and the loss counted as a "
                "layer each, as Megatron-LM can)",
                param="--virtual-stages",
            )
    out, start = [], 0
    for size in sizes:
        out.append((start, start + size))
        start += size
    return out


def device_chunks(layers: int, pp: int, v: int) -> list[tuple[tuple[int, int], ...]]:
    """Each device's chunks: device d holds chunks d, d + pp, … (non-contiguous when v > 1).

    >>> device_chunks(8, 2, 2)
    [((0, 2), (4, 6)), ((2, 4), (6, 8))]
    """
    every = chunks(layers, pp, v)
    return [tuple(every[d::pp]) for d in range(pp)]


def check_schedule(name: str, v: int, pp: int, microbatches: int, *, training: bool) -> None:
    """:class:`InputError`, naming the flag, for a schedule the plan cannot run."""
    s = schedule(name)
    if v < 1:
        raise InputError(f"--virtual-stages {v} must be a whole number ≥ 1", param="--virtual-stages")
    if name != INTERLEAVED and v != 1:
        raise InputError(
            f"--virtual-stages {v}: model chunks per device are the interleaved schedule's "
            "(--schedule interleaved)",
            param="--virtual-stages",
        )
    if s.training_only and not training:
        raise InputError(
            f"--schedule {name} splits each backward pass in two: a training schedule "
            "(--phase train); prefill and decode pipelines run 1f1b or interleaved",
            param="--schedule",
        )
    if name == INTERLEAVED:
        if pp < 2 or v < 2:
            raise InputError(
                "--schedule interleaved needs --pp 2 or more and --virtual-stages 2 or more",
                param="--schedule",
            )
        if microbatches % pp:
            raise InputError(
                f"--schedule interleaved runs micro-batches in groups of --pp {pp} (Megatron-LM's "
                f"default): --microbatches {microbatches} must be a multiple of it",
                param="--microbatches",
            )
