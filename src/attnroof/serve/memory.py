"""The memory a serving simulation takes, from its own arrays, and the refusal of one that would
not fit before it starts (:func:`attnroof.limits.require_memory`): a kilobyte a request, 32 bytes
an answer token and 160 a decode step (:func:`simulation_bytes`), as many runs as are held at once."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from attnroof.limits import require_memory
from attnroof.serve.workload import Workload, longest_request, upper_length

if TYPE_CHECKING:
    from attnroof.serve.deploy import Pool

SIM_BYTES_PER_REQUEST = 1024
"""A request's own arrays through one simulation: its arrival and lengths in the workload, the
engine's working copies (computed, generated, blocks held, its last token's time), the run's
record (arrival, first token, finish, preemptions) and the summary's latencies, some 25 int64 and
float64 values, and the Python tuples of the single steps its arrival and its end break out of a
stretch of decode steps (each pool's run and their merge hold their own)."""
SIM_BYTES_PER_TOKEN = 32
"""An answer token's gap to the token before it (ITL, float64): kept per stretch, concatenated
into the run, and copied once more to take its percentiles."""
SIM_BYTES_PER_STEP = 160
"""A step's log, eight int64/float64 columns (end, time, tokens, prompt tokens, running, waiting,
blocks used, preempted) kept per stretch and concatenated once, with the stretch arrays' headers."""
SIM_BYTES_PER_SINGLE_STEP = 560
"""A step costed alone (a prompt's chunk): its row as a Python tuple of eight numbers until the
next stretch, then its columns (:data:`SIM_BYTES_PER_STEP`)."""


def simulation_bytes(n: int, answer_tokens: float, chunks: float, batch: int, pools: int = 1) -> float:
    """The most memory one simulation of ``n`` requests takes: ``answer_tokens`` generated in all,
    ``chunks`` prompt steps in all, at least ``batch`` sequences a decode step (1 unless every
    request arrives at once), over ``pools`` engines (disaggregated: two). Measured against peak
    RSS (Llama-3.1-8B on an H100, 20,000 to 1,000,000 requests): within 1.5× for all at once, and
    up to 6× above it at a finite rate, where the estimate takes one sequence a step (a rate that
    leaves each request alone; at a higher rate the batch is larger and the steps fewer).

    >>> simulation_bytes(1000, 128_000, 1000, 256)   # 1,000 requests of 1024 → 128 tokens, 256 a step
    5760000.0

    (1,000 × 1,024 + 128,000 × 32 + 128,000 / 256 × 160 + 1,000 × 560 bytes.)
    """
    decode_steps = answer_tokens / max(1, batch)
    return (
        n * pools * SIM_BYTES_PER_REQUEST
        + answer_tokens * SIM_BYTES_PER_TOKEN
        + decode_steps * SIM_BYTES_PER_STEP
        + chunks * SIM_BYTES_PER_SINGLE_STEP
    )


def require_simulation_memory(
    pools: Mapping[str, Pool], file: Workload | None, traffic: Any, defaults: tuple[int, int], *,
    runs: int, search: bool,
) -> None:  # fmt: skip
    """:func:`attnroof.limits.require_memory` for the simulations a job holds at once: ``runs`` of
    its requests (``file``'s, or the ``traffic``'s synthetic ones, whose lengths default to
    ``defaults``, prompt and answer), and with a rate search (``search``) the two judging runs it
    keeps (the best so far and the one being judged) of max(requests,
    :data:`~attnroof.serve.search.STEADY_SPANS` × the sequences the engines run at once) requests.
    A request is counted at most the model's length: a longer one the engine refuses, in its own
    words."""
    import numpy as np

    from attnroof.serve.search import STEADY_SPANS

    most = min(p.config.max_model_len or p.cost.max_context for p in pools.values())
    if file is not None:
        n = file.n
        answers = float(np.minimum(file.output_tokens, most).sum())
        prompts = np.minimum(file.input_tokens, most)
    else:
        n, ratio = traffic.num_requests, traffic.range_ratio
        answers = float(n) * min(most, upper_length(traffic.output_len or defaults[1], ratio))
        prompts = np.array([min(most, upper_length(traffic.input_len or defaults[0], ratio))])
    longest = min(most, longest_request(traffic, file, defaults))
    budget = min(p.config.max_num_batched_tokens for p in pools.values())
    chunks = float((-(-prompts // budget)).sum()) * (1 if file is not None else n)
    seqs = sum(p.config.max_num_seqs for p in pools.values())
    batch = 1
    if (
        traffic.rate is None and not traffic.concurrency
    ):  # every request at once: the engine is full (of sequences, or of KV blocks)
        per = -(-longest // min(p.config.block_size for p in pools.values()))
        batch = max(1, min(n, seqs, *(p.config.blocks // max(1, per) for p in pools.values())))
    need = runs * simulation_bytes(n, answers, chunks, batch, len(pools))
    what = f"a simulation of {n:,} requests ({answers:,.0f} answer tokens)"
    if search:
        judged = max(n, STEADY_SPANS * seqs)
        scale = judged / n
        need += 2 * simulation_bytes(judged, answers * scale, chunks * scale, 1, len(pools))
        what = f"--max-rate's search over {judged:,} requests a rate ({answers * scale:,.0f} answer tokens)"
    require_memory(what, need, "fewer --num-requests (or shorter --output-len)")
