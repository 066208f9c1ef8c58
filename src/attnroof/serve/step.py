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

each row as :mod:`attnroof.model.analysis` times it (count × Σ kernels max(F/P, bytes/B)), the
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
from attnroof.model.layers import DECODE, PREFILL, Precision, Step, layer_table
from attnroof.model.spec import ModelConfig
from attnroof.operators import ATTENTION, rule
from attnroof.ops.experts import UNIFORM, Routing
from attnroof.ops.latent import ABSORBED
from attnroof.ops.softmax import SOFTMAX_FLOPS_PER_ELEMENT
from attnroof.roofline import Roof, place
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


def _row_time(row: OpInstance, step: Step, roof: Roof) -> Any:
    """count × Σ over the row's kernels of max(F/P, bytes/B) — or, on a forecast's roof, of the
    time a real kernel of that shape takes — element-wise on array steps."""
    total: Any = 0.0
    kernel = rule(row).kernel_shape(row, step) if roof.forecasts else None
    for stage in rule(row).cost(row, step):
        t = (
            roof.kernel_time(stage.flops, stage.bytes, kernel)
            if kernel
            else place((stage.flops, stage.bytes), roof).time_s
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
        token_s: Any = 0.0
        last_s: Any = 0.0
        for row in self.table:
            if rule(row).kind == ATTENTION:
                continue
            if row.tokens == LAST_TOKEN:
                last_s = last_s + _row_time(row, by_seqs, roof)
            else:
                token_s = token_s + _row_time(row, by_tokens, roof)
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
        once-part plus the n sequences' parts. Per stage: (F a sequence, bytes a sequence,
        F once, bytes once), the first two arrays over ``contexts``."""
        import numpy as np

        one = rule(row).cost(row, self.options.step(phase, 1, contexts, queries))
        two = rule(row).cost(row, self.options.step(phase, 2, contexts, queries))  # per sequence: the batch's
        shape = np.shape(contexts)
        out = []
        for s1, s2 in zip(one, two, strict=True):
            f1, b1 = (
                np.broadcast_to(np.asarray(s1.flops, float), shape),
                np.broadcast_to(np.asarray(s1.bytes, float), shape),
            )
            f2, b2 = (
                np.broadcast_to(np.asarray(s2.flops, float), shape),
                np.broadcast_to(np.asarray(s2.bytes, float), shape),
            )
            once_f, once_b = 2 * f1 - f2, 2 * b1 - b2
            out.append((f2 - f1, b2 - b1, float(once_f.flat[0]), float(once_b.flat[0])))
        return out

    def _kernels(
        self, parts: list[tuple[int, list[tuple[Any, Any]]]], kernel: dict[str, Any] | None = None
    ) -> Any:
        """Σ over rows of count × Σ over its kernels of max(F/P, bytes/B) (on a forecast's roof,
        each as the attention ``kernel`` it is); numbers or arrays."""
        time: Any = 0.0
        for count, stages in parts:
            row: Any = 0.0
            for f, b in stages:
                row = row + self.roof.kernel_time(f, b, kernel)
            time = time + count * row
        return time

    def decode_attention_s(self, contexts: Any, steps: int = 0) -> Any:
        """One kernel a layer over sequences decoding one token each at ``contexts`` keys; with
        ``steps``, an array: each of that many steps in a row, every context one longer."""
        if len(contexts) == 0:
            return 0.0
        if steps:
            import numpy as np

            at = contexts[:, None] + np.arange(steps)[None, :]
            return self._kernels(
                [
                    (row.count, [(of + f[at].sum(axis=0), ob + b[at].sum(axis=0)) for f, b, of, ob in st])
                    for row, st in zip(self.attention_rows, self._decode, strict=True)
                ],
                DECODE_KERNEL,
            )
        return self._kernels(
            [
                (row.count, [(of + f[contexts].sum(), ob + b[contexts].sum()) for f, b, of, ob in st])
                for row, st in zip(self.attention_rows, self._decode, strict=True)
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

    def chunk_attention_s(self, queries: Any, contexts: Any) -> float:
        """One kernel a layer over sequences running ``queries`` new tokens against caches
        that end at ``contexts`` (the new tokens included)."""
        if len(queries) == 0:
            return 0.0
        whole = queries == contexts  # whole prompts, from the table; the rest by the formula
        rest = None if whole.all() else ~whole
        parts = []
        for row, table in zip(self.attention_rows, self._fresh, strict=True):
            sums = [[of, ob, f[queries[whole]].sum(), b[queries[whole]].sum()] for f, b, of, ob in table]
            if rest is not None:
                for acc, (f, b, _, _) in zip(
                    sums, self._split(row, CHUNK, contexts[rest], queries[rest]), strict=True
                ):
                    acc[2] += f.sum()
                    acc[3] += b.sum()
            parts.append((row.count, [(float(of + f), float(ob + b)) for of, ob, f, b in sums]))
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
            + self.decode_attention_s(decode_contexts)
            + self.chunk_attention_s(chunk_queries, chunk_contexts)
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
