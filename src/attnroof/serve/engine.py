"""A serving engine that schedules as vLLM's V1 engine does (vLLM 0.11,
``vllm/v1/core/sched/scheduler.py``, ``Scheduler.schedule``), each step timed by
:class:`attnroof.serve.step.StepCost`.

Each step, with a budget of ``max_num_batched_tokens`` tokens:

1. The running requests, in the order they were admitted, each take the tokens it still has
   to compute — one for a request that is decoding, the rest of its prompt (or as much of it
   as the budget leaves: chunked prefill) for one that is not — and the KV-cache blocks those
   tokens need. Where the free blocks run out, the request admitted last is preempted: its
   blocks freed, its work discarded, and it goes back to the front of the queue, to compute its
   prompt and the tokens it had generated again (recomputation; FCFS).
2. If nobody was preempted, waiting requests are admitted first come, first served, while
   fewer than ``max_num_seqs`` run, budget remains, and the blocks for their first chunk are
   free.
3. The step runs; a request whose computed tokens reach its prompt plus what it has generated
   samples its next token (a prefill's last chunk gives the first token). A request that has
   its ``output`` tokens finishes and frees its blocks.

The KV cache is ``blocks`` blocks of ``block_size`` tokens: what ``gpu_memory_utilization`` of
the device's memory leaves after the weights and the activations of a step of
``max_num_batched_tokens`` tokens (:func:`kv_blocks`). Not modelled: prefix caching, the
hybrid allocator's freeing of blocks outside a sliding window, CUDA graphs' padding, and the
host's own time beyond ``StepCost``'s per-step overhead.

Stretches where every running request decodes and nothing arrives, finishes or runs out of
blocks are costed as one array computation (many steps at once): the same steps, in less time.

Length: the scheduler's three phases and its fast path, which must agree step for step, are
kept in one class.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from attnroof.errors import InputError
from attnroof.serve.step import StepCost
from attnroof.serve.workload import Workload


@dataclass(frozen=True)
class EngineConfig:
    """vLLM's scheduler settings (its defaults: 16-token blocks, 90% of the memory)."""

    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    block_size: int = 16
    blocks: int = 0
    """KV-cache blocks (from :func:`kv_blocks`)."""
    max_model_len: int = 0


def kv_blocks(free_bytes: float, kv_bytes_per_token: float, block_size: int) -> int:
    """Blocks of ``block_size`` tokens that ``free_bytes`` hold.

    >>> kv_blocks(50e9, 131072, 16)          # Llama-3.1-8B in bf16: 128 KiB a token
    23841
    """
    return max(0, int(free_bytes // (kv_bytes_per_token * block_size)))


@dataclass
class Run:
    """One simulation: per request (arrays over the workload), and per step."""

    arrival_s: Any
    first_token_s: Any
    finish_s: Any
    input_tokens: Any
    output_tokens: Any
    preemptions: Any
    itl_s: Any
    """Every gap between two tokens of one request (seconds)."""
    step_end_s: Any
    step_s: Any
    step_tokens: Any
    step_prefill_tokens: Any
    """Of each step's tokens, those of prompts (recomputed ones included)."""
    step_running: Any
    step_waiting: Any
    step_blocks_used: Any
    step_preempted: Any
    """Requests preempted at each step."""
    blocks: int
    steps: int = 0
    preempted: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


class Engine:
    """Simulates ``workload`` on a deployment whose step ``cost`` knows; ``config`` its scheduler."""

    def __init__(self, cost: StepCost, config: EngineConfig) -> None:
        if config.blocks < 1:
            raise InputError("no memory is left for the KV cache", param="gpu_memory_utilization")
        self.cost, self.cfg = cost, config

    def run(self, w: Workload, *, precomputed: Any = None) -> Run:
        """Every request of ``w`` to its end. ``precomputed``: prompt tokens already in the cache
        when a request arrives (disaggregated decode: the prefill pool computed them)."""
        import numpy as np

        cfg, cost = self.cfg, self.cost
        n = w.n
        prompt = np.asarray(w.input_tokens, dtype=np.int64)
        output = np.asarray(w.output_tokens, dtype=np.int64)
        longest = int((prompt + output).max())
        limit = cfg.max_model_len or cost.max_context
        if longest > limit:
            i = int(np.argmax(prompt + output))
            raise InputError(
                f"request {i}: {int(prompt[i])} + {int(output[i])} tokens exceed the model length {limit}",
                param="max_model_len",
            )
        chunks = cost.chunks
        if not chunks and int((prompt + output).max()) > cfg.max_num_batched_tokens:
            i = int(np.argmax(prompt + output))
            raise InputError(
                f"request {i}: {int(prompt[i] + output[i])} tokens to (re)compute at once exceed --max-num-batched-tokens "
                f"{cfg.max_num_batched_tokens}, and this model's attention has no chunked prefill rule: raise it",
                param="max_num_batched_tokens",
            )
        need_blocks = -(-(prompt + output) // cfg.block_size)
        if int(need_blocks.max()) > cfg.blocks:
            raise InputError(
                f"one request needs {int(need_blocks.max())} KV blocks and the cache has {cfg.blocks}",
                param="gpu_memory_utilization",
            )
        arrival = np.array(w.arrival_s, dtype=np.float64)
        closed = w.concurrency > 0
        if closed:
            arrival[:] = np.inf
            arrival[: w.concurrency] = 0.0
        computed = np.zeros(n, dtype=np.int64)
        generated = np.zeros(n, dtype=np.int64)
        held = np.zeros(n, dtype=np.int64)  # blocks held
        first = np.full(n, np.nan)
        finish = np.full(n, np.nan)
        last_token = np.zeros(n)
        preempt = np.zeros(n, dtype=np.int64)
        start = (
            np.zeros(n, dtype=np.int64) if precomputed is None else np.asarray(precomputed, dtype=np.int64)
        )
        itl: list[Any] = []
        log = _Log()

        free = cfg.blocks
        running = np.zeros(0, dtype=np.int64)  # in admission order
        waiting: deque[int] = deque()
        order = np.argsort(arrival, kind="stable") if not closed else np.arange(n)
        nxt = 0  # the next request (in arrival order) not yet queued
        released = min(w.concurrency, n) if closed else n
        now = 0.0
        done = steps = 0
        bs, max_seqs = cfg.block_size, cfg.max_num_seqs

        while done < n:
            while nxt < released and arrival[order[nxt]] <= now:  # arrivals join the queue
                r = int(order[nxt])
                nxt += 1
                computed[r] = start[r]
                waiting.append(r)
            if not len(running) and not waiting:
                now = max(now, float(arrival[order[nxt]]))
                continue
            budget = cfg.max_num_batched_tokens
            # 1. the running requests, in admission order
            want = prompt[running] + generated[running] - computed[running]
            before = np.cumsum(want) - want
            take = np.minimum(want, np.maximum(budget - before, 0))
            if not chunks:  # a prompt runs whole or waits for a step with room for it
                take = np.where(take < want, 0, take)
            grow = np.where(take > 0, -(-(computed[running] + take) // bs) - held[running], 0)
            preempting = int(grow.sum()) > free
            evicted = 0
            if preempting:  # out of blocks: vLLM's loop, preempting from the back
                before_preempt = len(running)
                running, take, budget, free = self._preempt(
                    running, budget, free, prompt, generated, computed, held, preempt, waiting
                )
                evicted = before_preempt - len(running)
            else:
                held[running] += grow
                free -= int(grow.sum())
                budget -= int(take.sum())
            # 2. waiting requests, if nobody was preempted
            new, new_take = [], []
            while not preempting and waiting and len(running) + len(new) < max_seqs and budget > 0:
                r = waiting[0]
                t = min(int(prompt[r] + generated[r] - computed[r]), budget)
                if not chunks and t < prompt[r] + generated[r] - computed[r]:
                    break
                g = -(-(int(computed[r]) + t) // bs) - int(held[r])
                if g > free:
                    break
                waiting.popleft()
                new.append(r)
                new_take.append(t)
                held[r] += g
                free -= g
                budget -= t
            if new:
                running = np.concatenate((running, np.array(new, dtype=np.int64)))
                take = np.concatenate((take, np.array(new_take, dtype=np.int64)))
            on = take > 0
            ids, take = running[on], take[on]
            if not len(ids):
                raise InputError(
                    "a request can never be scheduled: the KV cache is too small", param="blocks"
                )
            ctx = computed[ids] + take
            decoding = bool((take == 1).all()) and bool((ctx == prompt[ids] + generated[ids]).all())
            if decoding and not waiting and len(ids) == len(running) and bool((generated[ids] > 0).all()):
                # nothing changes until a request finishes, the blocks run out or one arrives
                times, used = self._decode_stretch(ids, ctx, output[ids] - generated[ids], held, free)
                if nxt < released:  # stop at the step that starts after the next arrival
                    starts = now + np.cumsum(times) - times
                    k = max(1, int(np.searchsorted(starts, arrival[order[nxt]], side="left")))
                    times, used = times[:k], used[:k]
                k = len(times)
                ends = now + np.cumsum(times)
                gaps = np.empty((len(ids), k))
                gaps[:, 0] = ends[0] - last_token[ids]
                gaps[:, 1:] = times[1:]
                itl.append(gaps.ravel())
                more = -(-(ctx + k - 1) // bs) - held[ids]  # the blocks of the k − 1 further tokens
                held[ids] += more
                free -= int(more.sum())
                computed[ids] += k
                generated[ids] += k
                last_token[ids] = ends[-1]
                now = float(ends[-1])
                steps += k
                log.many(ends, times, len(ids), 0, len(ids), 0, used)
            else:
                one = take == 1
                # a decode: the one token sampled last step; everything else is prompt (or recomputed)
                decoding_each = one & (generated[ids] > 0) & (ctx == prompt[ids] + generated[ids])
                dt = cost.time_s(ctx[one], take[~one], ctx[~one])
                now += dt
                steps += 1
                computed[ids] += take
                emits = ids[computed[ids] == prompt[ids] + generated[ids]]
                fresh = generated[emits] == 0
                first[emits[fresh]] = now
                itl.append(now - last_token[emits[~fresh]])
                generated[emits] += 1
                last_token[emits] = now
                log.one(
                    now, dt, int(take.sum()), int(take[~decoding_each].sum()), len(running), len(waiting),
                    cfg.blocks - free, evicted,
                )  # fmt: skip
            # 3. finished requests leave and free their blocks
            ended = generated[running] >= output[running]
            if ended.any():
                gone = running[ended]
                running = running[~ended]
                finish[gone] = now
                free += int(held[gone].sum())
                held[gone] = 0
                done += len(gone)
                if closed:  # each finished client sends its next request now
                    more_ = min(len(gone), n - released)
                    arrival[released : released + more_] = now
                    released += more_
        return Run(
            arrival_s=arrival,
            first_token_s=first,
            finish_s=finish,
            input_tokens=prompt,
            output_tokens=output,
            preemptions=preempt,
            itl_s=np.concatenate(itl) if itl else np.zeros(0),
            **log.columns(),
            blocks=cfg.blocks,
            steps=steps,
            preempted=int(preempt.sum()),
        )

    def _preempt(
        self, running: Any, budget: int, free: int,
        prompt: Any, generated: Any, computed: Any, held: Any, preempt: Any, waiting: deque[int],
    ) -> tuple[Any, Any, int, int]:  # fmt: skip
        """vLLM's loop over the running requests when blocks run short: each in turn takes its
        tokens, preempting the request admitted last (possibly itself) until its blocks fit.
        Returns the requests still running, what each takes, and the budget and blocks left."""
        import numpy as np

        bs = self.cfg.block_size
        run = running.tolist()
        take = [0] * len(run)
        i = 0
        while i < len(run) and budget > 0:
            r = run[i]
            want = int(prompt[r] + generated[r] - computed[r])
            t = min(want, budget)
            if not self.cost.chunks and t < want:  # no chunked prefill: it waits for room
                i += 1
                continue
            g = -(-(int(computed[r]) + t) // bs) - int(held[r])
            while g > free and run[-1] != r:
                victim = run.pop()
                take.pop()
                free += int(held[victim])
                held[victim] = computed[victim] = 0
                preempt[victim] += 1
                waiting.appendleft(victim)
            if g > free:  # r itself is the last: preempted, and nothing after it runs
                run.pop()
                take.pop()
                free += int(held[r])
                held[r] = computed[r] = 0
                preempt[r] += 1
                waiting.appendleft(r)
                break
            take[i] = t
            held[r] += g
            free -= g
            budget -= t
            i += 1
        return np.array(run, dtype=np.int64), np.array(take, dtype=np.int64), budget, free

    def _decode_stretch(self, ids: Any, ctx: Any, left: Any, held: Any, free: int) -> tuple[Any, Any]:
        """The decode steps that run before a request finishes or the blocks run out (the
        first's blocks already taken): each one's time, and the blocks in use after it."""
        import numpy as np

        bs = self.cfg.block_size
        k = int(left.min())
        at = ctx[:, None] + np.arange(k)[None, :]  # each request's tokens after step j
        more = (-(-at // bs) - held[ids][:, None]).sum(axis=0)  # blocks beyond those held
        k = int(np.argmin(more <= free)) if not bool((more <= free).all()) else k
        used = self.cfg.blocks - free + more[:k]
        return self.cost.decode_steps_s(ctx, k), used


LOG_COLUMNS = (
    "step_end_s", "step_s", "step_tokens", "step_prefill_tokens", "step_running", "step_waiting",
    "step_blocks_used", "step_preempted",
)  # fmt: skip


class _Log:
    """The per-step record: single steps kept as Python tuples until a stretch of many (arrays)
    arrives, so that a step pays no array allocation."""

    def __init__(self) -> None:
        self._chunks: list[tuple[Any, ...]] = []
        self._rows: list[tuple[Any, ...]] = []

    def one(self, *row: Any) -> None:
        self._rows.append(row)

    def _flush(self) -> None:
        import numpy as np

        if self._rows:
            self._chunks.append(tuple(np.array(col) for col in zip(*self._rows, strict=True)))
            self._rows = []

    def many(
        self, ends: Any, times: Any, tokens: int, prefill: int, running: int, waiting: int, used: Any
    ) -> None:
        import numpy as np

        self._flush()
        k = len(ends)
        self._chunks.append((ends, times, np.full(k, tokens), np.full(k, prefill), np.full(k, running),
                             np.full(k, waiting), used, np.zeros(k, dtype=np.int64)))  # fmt: skip

    def columns(self) -> dict[str, Any]:
        import numpy as np

        self._flush()
        return {name: np.concatenate([c[i] for c in self._chunks]) for i, name in enumerate(LOG_COLUMNS)}
