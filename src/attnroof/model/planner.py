"""A plan search as a library (issue 35): the question in plain values — a model, the roof and
links it runs on, the device's memory, the step, the device count, what to vary and what to keep
— and the answer as typed results: every plan judged (:class:`attnroof.model.search.Search`) and,
where a profile is given, the plans ranked by forecast. ``attnroof plan`` parses its flags into a
:class:`PlanQuery` and renders the :class:`PlanAnswer`; nothing here knows a flag.

>>> from attnroof.devices import get_device
>>> from attnroof.model.config import builtin
>>> h100 = get_device("h100")
>>> q = PlanQuery(builtin("llama-3.1-8b"), "train", 128, 8192, 8, Roof.of(h100, "bf16"), h100.links,
...               h100.capacity_bytes)
>>> a = search_plans(q)
>>> best = a.found.front[0]
>>> best.option.plan.devices, round(best.time_s, 2), best.memory_bytes <= q.usable_bytes
(8, 7.34, True)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from attnroof.devices.links import Links
from attnroof.model.forecast import Ranking, forecast_links, forecast_time, pareto_by_forecast, rank
from attnroof.model.layers import Precision
from attnroof.model.plan_table import PlanTable
from attnroof.model.search import Choices, Option, Row, Search, Where, search
from attnroof.model.spec import ModelConfig
from attnroof.model.spread import Spread, spread
from attnroof.model.train_options import MEMORY_HEADROOM, TRAIN
from attnroof.model.train_spread import step_totals, train_plan_memory, train_spread
from attnroof.model.training import model_flops
from attnroof.model.training_memory import TrainPrecision
from attnroof.roofline import Roof

Progress = Callable[[str, int, int | None], None]


@dataclass(frozen=True)
class PlanQuery:
    """What a plan search is asked: a step of ``batch`` sequences of ``context`` tokens (training,
    prefill or decode) of ``model`` on up to ``devices`` devices of ``roof`` joined by ``links``,
    each of ``capacity_bytes`` (None: memory unchecked) less its ``memory_headroom``; every
    plan ``choices`` allows and ``where`` keeps; ``forecast`` a :class:`attnroof.profiles.kernels.
    ForecastRoof` to rank the plans by (None: the bounds alone)."""

    model: ModelConfig
    phase: str
    batch: int
    context: int
    devices: int
    roof: Roof
    links: Links
    capacity_bytes: float | None
    itemsize: float = 2
    """Bytes of an element: activations, weights and gradients alike (the dtype's)."""
    fused: bool = True
    choices: Choices = field(default_factory=Choices)
    where: Sequence[Where] = ()
    memory_headroom: float = MEMORY_HEADROOM
    forecast: Any = None

    def __post_init__(self) -> None:
        if not 0 <= self.memory_headroom < 1:
            raise ValueError(f"memory headroom {self.memory_headroom!r} must be at least 0 and below 1")

    @property
    def train(self) -> bool:
        return self.phase == TRAIN

    @property
    def usable_bytes(self) -> float | None:
        """The memory a plan may use on each device."""
        return None if self.capacity_bytes is None else self.capacity_bytes * (1 - self.memory_headroom)

    def cost(self, o: Option, on: Roof | None = None, via: Links | None = None) -> Spread:
        """One plan's step in full, on ``on`` and ``via`` (the query's roof and links by default)."""
        on, via = on or self.roof, via or self.links
        if self.train:
            prec = TrainPrecision(self.itemsize, self.itemsize, self.itemsize)
            return train_spread(
                self.model, self.batch, self.context, on, via, o.plan, prec, fused=self.fused,
                recompute=o.recompute,
            )  # fmt: skip
        p = Precision(self.itemsize, self.itemsize, self.itemsize)
        return spread(self.model, self.phase, self.batch, self.context, on, via, o.plan, p, fused=self.fused)

    def memory(self, o: Option, stop_above: float) -> float:
        """A training plan's busiest device's bytes (stopping past ``stop_above``)."""
        prec = TrainPrecision(self.itemsize, self.itemsize, self.itemsize)
        return train_plan_memory(
            self.model, self.batch, self.context, o.plan, prec, fused=self.fused, recompute=o.recompute,
            stop_above=stop_above,
        )  # fmt: skip

    def totals(self, s: Spread) -> dict[str, Any]:
        return step_totals(s, self.model, self.context, self.roof.peak_flops_per_s)


@dataclass(frozen=True)
class PlanAnswer:
    """The search's answer: every plan judged (``found``: the front by bound first), and, with a
    profile, the plans ranked by forecast and their front."""

    query: PlanQuery
    found: Search
    ranking: Ranking | None = None
    front_by_forecast: list[tuple[Row, float]] = field(default_factory=list)

    def mfu(self, r: Row, forecast_s: float) -> float | None:
        """A training plan's model FLOPs utilisation at its forecast (PaLM's count)."""
        q = self.query
        if not q.train:
            return None
        flops = float(model_flops(q.model, q.batch, q.context))
        return flops / (r.option.plan.devices * forecast_s * q.roof.peak_flops_per_s)


def search_plans(q: PlanQuery, progress: Progress | None = None) -> PlanAnswer:
    """Every plan of ``q`` judged (training plans on arrays, :class:`PlanTable`, the policies
    whose states alone cannot fit never enumerated), their Pareto front, and with a profile the
    plans ranked by forecast (:func:`attnroof.model.forecast.rank`); ``progress(stage, done,
    total)`` hears each stage."""
    judge = states_fit = None
    if q.train:
        prec = TrainPrecision(q.itemsize, q.itemsize, q.itemsize)
        table = PlanTable(q.model, q.batch, q.context, q.roof, q.links, prec, fused=q.fused)

        def judge(options: Sequence[Option]) -> list[tuple[Any, ...]]:
            return table.judge(options, q.usable_bytes)

        def states_fit(plan: Any) -> bool:
            return table.states_fit(plan, q.usable_bytes)

    found = search(
        q.model, q.phase, q.batch, q.devices, q.cost, q.totals, q.usable_bytes, q.where, q.choices,
        context=q.context, memory=q.memory if q.train else None, judge=judge, states_fit=states_fit,
        progress=progress,
    )  # fmt: skip
    if q.forecast is None or not found.rows:
        return PlanAnswer(q, found)
    on, via = q.forecast, forecast_links(q.links, q.forecast.profile)

    def forecast_of(r: Row) -> float:
        serial = q.cost(replace(r.option, plan=replace(r.option.plan, overlap=False)), on, via)
        return forecast_time(serial, on.profile)

    ranking = rank(found.rows, forecast_of, found.front, progress=progress)
    return PlanAnswer(q, found, ranking, pareto_by_forecast(ranking.rows))
