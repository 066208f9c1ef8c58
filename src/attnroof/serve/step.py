"""One step of a serving engine: some sequences prefilling a chunk, the rest decoding a token,
each at its own context, costed from the layer table on arrays.

A step of T tokens over n sequences splits the layer table three ways:

    token rows      every row that works token by token (projections, MLP or experts, norms,
                    adds, the KV-cache write, the embedding): the step's T tokens at once, its
                    weights read once — the row at decode with a batch of T
    last-token rows the LM head (and its logits all-gather): one position per sequence, n
    attention rows  per sequence, its chunk of q new queries against its cache of s keys
                    (:func:`attnroof.ops.attention.chunk`); one kernel over the step's decoding
                    sequences and one over its prefilling ones, each placed on its summed
                    FLOPs and bytes (vLLM's FlashInfer and MLA backends split the two)

    step time = Σ token rows + Σ last-token rows + Σ attention kernels + the plan's collectives
                + the engine's fixed overhead per step

each row as :mod:`attnroof.model.analysis` times it (count × Σ kernels max(F/P, bytes/B), with
the bytes of each kernel that may be in the last-level cache at its bandwidth, by the model
step's rule: :func:`attnroof.roofline.step_resident`, each row told what the row before it writes
at the same step), the
collectives of a tensor-parallel plan in series with the kernels (vLLM does not overlap its
all-reduces). A step of one sequence is therefore the model's prefill or decode step to the
last digit. The token and last-token parts depend on T and n alone and decode attention on each
sequence's cache alone, so all three are tabled once, on arrays, and a step is three lookups and
one chunk formula: a simulation pays no Python per sequence per step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from attnroof.errors import InputError
from attnroof.model.comms import stage_comms
from attnroof.model.layers import DECODE, PREFILL, Precision, Step, layer_table, weight_bytes
from attnroof.model.spec import ModelConfig
from attnroof.operators import ATTENTION, rule
from attnroof.ops.experts import UNIFORM, Routing
from attnroof.ops.latent import ABSORBED
from attnroof.ops.softmax import SOFTMAX_FLOPS_PER_ELEMENT
from attnroof.roofline import Roof, kernel_resident, place, step_resident, weights_fit
from attnroof.row import CHUNK, HEAD, LAST_TOKEN, OpInstance

DECODE_KERNEL = {"kernel": "decode"}
"""Attention of one new token a sequence against its cache, as a forecast's roof times it."""

if TYPE_CHECKING:
    from attnroof.devices.links import Links
    from attnroof.model.parallel import Plan


@dataclass(frozen=True)
class StepOptions:
    """How the step's kernels run: as ``attnroof model``'s flags say."""

    prec: Precision = field(default_factory=Precision)
    fused: bool = True
    softmax_flops_per_element: float = SOFTMAX_FLOPS_PER_ELEMENT
    routing: Routing | str = UNIFORM
    latent_form: str = ABSORBED

    def step(self, phase: str, batch: Any, context: Any, queries: Any = 1) -> Step:
        return Step(
            phase, batch, context, self.prec, self.fused, self.softmax_flops_per_element,
            self.routing, self.latent_form, queries,
        )  # fmt: skip


def written_before(table: list[OpInstance], i: int, step: Step) -> Any:
    """What the kernel before row ``i``'s first one writes at ``step``: the last kernel of the row
    before it (:func:`attnroof.model.costs.in_order`'s rule; none before the table's first)."""
    if i == 0:
        return 0
    prev = table[i - 1]
    return rule(prev).cost(prev, step).stages[-1].bytes_written


def _row_time(table: list[OpInstance], i: int, step: Step, roof: Roof, held: Any) -> Any:
    """count × Σ over row ``i``'s kernels of max(F/P, (bytes − R)/B + R/B_c) — or, on a
    forecast's roof, of the time a real kernel of that shape takes — element-wise on array steps;
    ``held`` the bytes of the weights the device holds."""
    row = table[i]
    stages = rule(row).cost(row, step).stages
    kernel = rule(row).kernel_shape(row, step) if roof.forecasts else None
    before = written_before(table, i, step) if roof.levels == 2 else 0
    total: Any = 0.0
    for stage, r in zip(stages, step_resident(stages, roof, before, held), strict=True):
        t = (
            roof.kernel_time(stage.flops, stage.bytes, kernel, r)
            if kernel
            else place((stage.flops, stage.bytes), roof, r).time_s
        )
        total = total + t
    return row.count * total


class StepCost:
    """The time of a mixed step of ``model`` on one device of ``plan`` (a replica: its tensor-
    and expert-parallel group), for up to ``max_tokens`` tokens, ``max_seqs`` sequences and
    contexts up to ``max_context``. :meth:`time_s` costs one step."""

    def __init__(
        self,
        model: ModelConfig,
        roof: Roof,
        *,
        max_tokens: int,
        max_seqs: int,
        max_context: int,
        options: StepOptions | None = None,
        plan: Plan | None = None,
        links: Links | None = None,
        overhead_s: float = 0.0,
        layers: tuple[int, int] | None = None,
    ) -> None:
        import numpy as np

        self.model, self.roof, self.overhead_s = model, roof, overhead_s
        self.options = o = options or StepOptions()
        self.plan = plan
        first, stop = layers or (0, model.layers)
        self.last_stage = stop == model.layers
        shard = None if plan is None or plan.single else plan.shard(first, stop)
        self.table = layer_table(model, shard)
        self.attention_rows = [r for r in self.table if rule(r).kind == ATTENTION]
        # index k holds a step of k tokens (k sequences); a step of none costs nothing
        tokens = np.arange(1, max_tokens + 1, dtype=np.int64)
        seqs = np.arange(1, max_seqs + 1, dtype=np.int64)
        by_tokens, by_seqs = o.step(DECODE, tokens, 1), o.step(DECODE, seqs, 1)
        self._held = held = weight_bytes(model, o.prec, shard)
        self._fit = weights_fit(roof, held)
        token_s: Any = 0.0
        last_s: Any = 0.0
        # each attention row's kernels follow what the row before it writes at a step of T tokens
        self._before: list[Any] = []
        for i, row in enumerate(self.table):
            if rule(row).kind == ATTENTION:
                before = written_before(self.table, i, by_tokens) if roof.levels == 2 else 0
                self._before.append(np.concatenate(([0.0], before + np.zeros(max_tokens))))
            elif row.tokens == LAST_TOKEN:
                last_s = last_s + _row_time(self.table, i, by_seqs, roof, held)
            else:
                token_s = token_s + _row_time(self.table, i, by_tokens, roof, held)
        if shard is not None:
            assert plan is not None and links is not None
            token_s = token_s + _comm_time(
                model, plan, shard, by_tokens, links, head=False, last=self.last_stage
            )
            last_s = last_s + _comm_time(model, plan, shard, by_seqs, links, head=True, last=self.last_stage)
        self.token_s = np.concatenate(([0.0], token_s + np.zeros(max_tokens)))
        self.last_s = np.concatenate(([0.0], last_s + np.zeros(max_seqs)))
        # decode attention, per sequence, by its cache length: each kernel's FLOPs and bytes
        contexts = np.arange(max_context + 1, dtype=np.int64)
        contexts[0] = 1  # context 0 never runs; keep the formulas' arguments positive
        self._decode = [self._split(row, DECODE, contexts) for row in self.attention_rows]
        # a whole prompt (nothing cached before it), by its length: the prefill step's attention
        fresh = np.arange(max_tokens + 1, dtype=np.int64)
        fresh[0] = 1
        self._fresh = [self._split(row, PREFILL, fresh) for row in self.attention_rows]
        self.chunks = self._chunkable()
        self.max_tokens, self.max_seqs, self.max_context = max_tokens, max_seqs, max_context

    def _chunkable(self) -> bool:
        """Whether every attention row has a rule for a chunk against a cache (chunked prefill);
        without one, the engine runs each prompt whole, as vLLM does without chunked prefill."""
        import numpy as np

        try:
            for row in self.attention_rows:
                rule(row).cost(row, self.options.step(CHUNK, 1, np.array([4]), np.array([2])))
        except InputError as e:
            if getattr(e, "param", None) != "chunk":
                raise
            return False
        return True

    def _split(self, row: OpInstance, phase: str, contexts: Any, queries: Any = 1) -> list[tuple[Any, ...]]:
        """Each kernel of ``row`` over sequences at ``contexts`` (and ``queries``), split into what
        one launch pays once — the weights latent attention reads inside the kernel — and what
        each sequence adds: cost(batch 2) − cost(batch 1) a sequence, 2·cost(1) − cost(2) once
        (exact, every formula being affine in its batch). A kernel over n sequences costs its
        once-part plus the n sequences' parts. Per stage, pairs (a sequence's, once): F, bytes
        and, where the roof counts a cache, its activation reads, weight reads and writes (what the
        cache's rule asks); the parts a sequence are arrays over ``contexts``."""
        import numpy as np

        one = rule(row).cost(row, self.options.step(phase, 1, contexts, queries))
        two = rule(row).cost(row, self.options.step(phase, 2, contexts, queries))  # per sequence: the batch's
        shape = np.shape(contexts)

        def parts(x1: Any, x2: Any) -> tuple[Any, float]:
            x1 = np.broadcast_to(np.asarray(x1, float), shape)
            x2 = np.broadcast_to(np.asarray(x2, float), shape)
            return x2 - x1, float((2 * x1 - x2).flat[0])

        out = []
        for s1, s2 in zip(one, two, strict=True):
            stage: tuple[Any, ...] = (*parts(s1.flops, s2.flops), *parts(s1.bytes, s2.bytes))
            if self.roof.levels == 2:
                w1, w2 = s1.weight_bytes_read, s2.weight_bytes_read
                stage += (
                    *parts(s1.bytes_read - w1, s2.bytes_read - w2),
                    *parts(w1, w2),
                    *parts(s1.bytes_written, s2.bytes_written),
                )
            out.append(stage)
        return out

    @staticmethod
    def _over(st: tuple[Any, ...], pick: Any) -> tuple[Any, ...]:
        """A kernel's figures over the sequences ``pick`` selects from its :meth:`_split` stage
        (``pick`` maps an array over contexts to its sum): F, bytes, and the cache's three."""
        return tuple(once + pick(each) for each, once in zip(st[::2], st[1::2], strict=True))

    def _kernels(
        self, parts: list[tuple[int, Any, list[tuple[Any, ...]]]], kernel: dict[str, Any] | None = None
    ) -> Any:
        """Σ over rows of count × Σ over its kernels of max(F/P, (bytes − R)/B + R/B_c) (on a
        forecast's roof, each as the attention ``kernel`` it is); numbers or arrays. Each part:
        the row's count, what the row before it wrote, its kernels' figures."""
        time: Any = 0.0
        for count, before, stages in parts:
            row: Any = 0.0
            for f, b, *cache in stages:
                r: Any = 0
                if cache:
                    activations, weights, writes = cache
                    r = kernel_resident(self.roof, activations, weights, before, self._fit)
                    before = writes
                row = row + self.roof.kernel_time(f, b, kernel, r)
            time = time + count * row
        return time

    def decode_attention_s(self, contexts: Any, steps: int = 0, tokens: int | None = None) -> Any:
        """One kernel a layer over sequences decoding one token each at ``contexts`` keys, in a
        step of ``tokens`` tokens (by default theirs alone); with ``steps``, an array: each of
        that many steps in a row, every context one longer."""
        if len(contexts) == 0:
            return 0.0
        n = len(contexts) if tokens is None else tokens
        if steps:
            import numpy as np

            at = contexts[:, None] + np.arange(steps)[None, :]
            return self._kernels(
                [
                    (row.count, before[n], [self._over(s, lambda x: x[at].sum(axis=0)) for s in st])
                    for row, before, st in zip(self.attention_rows, self._before, self._decode, strict=True)
                ],
                DECODE_KERNEL,
            )
        return self._kernels(
            [
                (row.count, before[n], [self._over(s, lambda x: x[contexts].sum()) for s in st])
                for row, before, st in zip(self.attention_rows, self._before, self._decode, strict=True)
            ],
            DECODE_KERNEL,
        )

    def decode_steps_s(self, contexts: Any, steps: int) -> Any:
        """``steps`` decode steps in a row of the sequences at ``contexts`` (each step one token
        longer), the same sums in the same order as :meth:`time_s`."""
        n = len(contexts)
        return (
            self.token_s[n]
            + self.last_s[n]
            + self.decode_attention_s(contexts, steps)
            + 0.0
            + self.overhead_s
        )

    def chunk_attention_s(self, queries: Any, contexts: Any, tokens: int | None = None) -> float:
        """One kernel a layer over sequences running ``queries`` new tokens against caches
        that end at ``contexts`` (the new tokens included), in a step of ``tokens`` tokens (by
        default the chunks' own)."""
        if len(queries) == 0:
            return 0.0
        t = int(queries.sum()) if tokens is None else tokens
        whole = queries == contexts  # whole prompts, from the table; the rest by the formula
        rest = None if whole.all() else ~whole
        parts = []
        for row, before, table in zip(self.attention_rows, self._before, self._fresh, strict=True):
            # per stage, per figure: [once, Σ over the sequences]
            sums = [[[st[k + 1], st[k][queries[whole]].sum()] for k in range(0, len(st), 2)] for st in table]
            if rest is not None:
                for acc, st in zip(sums, self._split(row, CHUNK, contexts[rest], queries[rest]), strict=True):
                    for pair, k in zip(acc, range(0, len(st), 2), strict=True):
                        pair[1] += st[k].sum()
            parts.append((row.count, before[t], [tuple(float(o + x) for o, x in acc) for acc in sums]))
        return self._kernels(parts, self._chunk_kernel(queries, contexts))

    def _chunk_kernel(self, queries: Any, contexts: Any) -> dict[str, Any]:
        """The prefill kernel over chunks, as a forecast sees it: fused attention at the model's
        head dimension over the chunks' mean keys (decode's kernel for chunks of a token or two)."""
        if not self.roof.forecasts or float(queries.mean()) <= 2:
            return DECODE_KERNEL
        return {"kernel": "attention", "d": self.model.head_dim, "s": float(contexts.mean()), "causal": True}

    def time_s(self, decode_contexts: Any, chunk_queries: Any, chunk_contexts: Any) -> float:
        """A step of sequences decoding at ``decode_contexts`` and others running chunks of
        ``chunk_queries`` tokens against ``chunk_contexts``; the engine's overhead included."""
        n = len(decode_contexts) + len(chunk_queries)
        tokens = len(decode_contexts) + int(chunk_queries.sum())
        if tokens > self.max_tokens or n > self.max_seqs:
            raise InputError(
                f"a step of {tokens} tokens over {n} sequences is beyond the tables", param="tokens"
            )
        return float(
            self.token_s[tokens]
            + self.last_s[n]
            + self.decode_attention_s(decode_contexts, tokens=tokens)
            + self.chunk_attention_s(chunk_queries, chunk_contexts, tokens)
            + self.overhead_s
        )


def _comm_time(
    model: ModelConfig, plan: Plan, shard: Any, step: Step, links: Links, *, head: bool, last: bool
) -> Any:
    """The plan's collectives over a step of ``step.batch`` tokens (or, ``head``, the logits of
    that many sequences), in series: Σ count × time, each at the fastest algorithm its link
    allows (the engines' one-shot and two-shot all-reduces on NVLink; :class:`CommOp`)."""
    total: Any = 0.0
    for c in stage_comms(model, plan, shard, step, links, last=last):
        if (c.layer_kind == HEAD) == head:
            total = total + c.count * c.time_s
    return total


class PipelineStepCost:
    """A step through a pipeline of stages (``--pp``): each stage's device runs its layers (and
    sends its activations on), one after another, so a step takes the sum of the stages'
    times; the engine's overhead is paid once."""

    def __init__(self, stages: list[StepCost]) -> None:
        self.stages = stages
        first = stages[0]
        self.model, self.roof, self.options, self.plan = first.model, first.roof, first.options, first.plan
        self.max_tokens, self.max_seqs, self.max_context = first.max_tokens, first.max_seqs, first.max_context
        self.overhead_s = sum(s.overhead_s for s in stages)
        self.chunks = all(s.chunks for s in stages)

    def time_s(self, decode_contexts: Any, chunk_queries: Any, chunk_contexts: Any) -> float:
        return sum(s.time_s(decode_contexts, chunk_queries, chunk_contexts) for s in self.stages)

    def decode_steps_s(self, contexts: Any, steps: int) -> Any:
        total: Any = 0.0
        for s in self.stages:
            total = total + s.decode_steps_s(contexts, steps)
        return total
