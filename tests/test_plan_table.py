"""Training plans costed on arrays (:mod:`attnroof.model.plan_table`): every plan of several
searches — dense, mixture of experts with EP and ETP, windowed, latent, hybrid; context
parallelism; every schedule, ZeRO stage and recomputation — judged on arrays gives what
:func:`train_spread` gives for that plan alone: the same verdict, and the busiest device's
bytes, the bound and the estimate to 1e-12 (sums taken in another order differ in the last
bits). And the Pareto front on arrays is the definition's, checked pair by pair."""

from __future__ import annotations

import math
import random
from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest

from attnroof.devices import get_device
from attnroof.model.busy import Dense, Parts, pipelines, stage_times
from attnroof.model.config import builtin
from attnroof.model.parallel import Plan
from attnroof.model.plan_table import PlanTable, device_classes
from attnroof.model.schedules import SCHEDULES
from attnroof.model.search import NOT_FIT, NOT_SEQUENCE, NOT_STATES, Choices, options, pareto, search
from attnroof.model.train_spread import train_layout, train_spread
from attnroof.model.training_memory import TrainPrecision
from attnroof.roofline import Roof

H100 = get_device("h100")
ROOF = Roof.of(H100, "bf16")
PREC = TrainPrecision()

CASES = [  # model, devices, sequences, context, every k-th option, the capacity (None: every plan costed)
    ("llama-3.1-8b", 16, 32, 8192, 3, H100.capacity_bytes),
    ("mixtral-8x7b", 16, 16, 4096, 7, H100.capacity_bytes),
    ("gemma-2-9b", 8, 16, 4096, 1, H100.capacity_bytes),
    ("deepseek-v3", 64, 64, 4096, 97, None),  # 671B parameters: no plan on 64 H100s holds them
    ("nemotron-h-8b", 8, 8, 8192, 1, H100.capacity_bytes),
    ("qwen3-30b-a3b", 8, 16, 4096, 3, H100.capacity_bytes),
]


def _alone(model, batch, context, o, capacity):
    """One plan costed alone: its verdict, its busiest device's bytes, its bound and estimate."""
    try:
        s = train_spread(model, batch, context, ROOF, H100.links, o.plan, PREC, recompute=o.recompute)
    except Exception as e:  # the one reason a search's plan cannot run: --sp's tokens
        assert "--sp" in str(e)
        return (NOT_SEQUENCE,)
    held = s.busiest_memory.total_bytes
    if capacity is not None and held > capacity:
        return (NOT_FIT, held)
    return ("fit", held, None if capacity is None else True, s.bound_time_s, s.time_s, 1)


def _close(a, b):
    assert a[0] == b[0], (a, b)
    for x, y in zip(a[1:], b[1:], strict=True):
        if isinstance(x, float):
            assert math.isclose(x, y, rel_tol=1e-12), (a, b)
        else:
            assert x == y, (a, b)


@pytest.mark.parametrize(("name", "devices", "batch", "context", "every", "capacity"), CASES)
def test_every_plan_on_arrays_is_the_plan_alone(name, devices, batch, context, every, capacity):
    model = builtin(name)
    found = list(options(model, "train", batch, devices, Counter(), Choices(overlap=True), context=context))
    chosen = found[::every]
    table = PlanTable(model, batch, context, ROOF, H100.links, PREC)
    verdicts = table.judge(chosen, capacity)
    kinds = Counter(v[0] for v in verdicts)
    assert kinds["fit"] > 0 and len(chosen) >= 40, kinds  # a search that tests something
    for o, v in zip(chosen, verdicts, strict=True):
        _close(v, _alone(model, batch, context, o, capacity))


def test_without_overlap_and_without_a_capacity():
    """The estimate without overlap (collectives after the kernels) and a device with no
    capacity figure: every plan costed, ``fits`` None."""
    model = builtin("llama-3.1-8b")
    found = list(options(model, "train", 16, 8, Counter(), Choices(overlap=False), context=4096))
    verdicts = PlanTable(model, 16, 4096, ROOF, H100.links, PREC).judge(found, None)
    for o, v in zip(found, verdicts, strict=True):
        if v[0] == NOT_SEQUENCE:
            continue
        s = train_spread(model, 16, 4096, ROOF, H100.links, o.plan, PREC, recompute=o.recompute)
        assert v[0] == "fit" and v[2] is None
        assert math.isclose(v[3], s.bound_time_s, rel_tol=1e-12)
        assert math.isclose(v[4], s.time_s, rel_tol=1e-12)
        assert v[4] >= v[3] * (1 - 1e-12)  # the estimate never beats the bound


def test_long_contexts_do_not_wrap():
    """At 16M tokens a sequence a micro-batch of 64 sequences does 4·64·(16M)²·… FLOPs of
    attention a layer, past an int64 (9.2e18): the micro-batch sizes are costed as Python ints,
    so every plan is what it is alone (an int64 array made the largest micro-batch the fastest)."""
    model = builtin("llama-3.1-8b")
    context = 16 * 2**20
    found = list(
        options(
            model, "train", 64, 1, Counter(), Choices(overlap=True, recomputes=("full",)), context=context
        )
    )
    verdicts = PlanTable(model, 64, context, ROOF, H100.links, PREC).judge(found, None)
    assert len({round(v[3]) for v in verdicts}) == 1  # one device: every split of the batch takes as long
    for o, v in zip(found, verdicts, strict=True):
        _close(v, _alone(model, 64, context, o, None))


def test_plans_with_and_without_overlap_in_one_table():
    """One table handed plans of both kinds at once: each gets its own estimate."""
    model = builtin("llama-3.1-8b")
    both = [
        o
        for overlap in (True, False)
        for o in list(options(model, "train", 16, 4, Counter(), Choices(overlap=overlap), context=4096))[::5]
    ]
    verdicts = PlanTable(model, 16, 4096, ROOF, H100.links, PREC).judge(both, H100.capacity_bytes)
    assert {o.plan.overlap for o, v in zip(both, verdicts, strict=True) if v[0] == "fit"} == {True, False}
    for o, v in zip(both, verdicts, strict=True):
        _close(v, _alone(model, 16, 4096, o, H100.capacity_bytes))


def test_eighty_stages_are_three_classes():
    """Llama-3.1-70B on PP 80, 1F1B: one layer a device; the first device (the embedding), the
    last (the head) and the 78 between, each of those holding min(m, 80 − i) micro-batches in
    flight — at most 79, device 1's, with m = 128."""
    from attnroof.model.parallel import Plan

    model = builtin("llama-3.1-70b")
    lay = train_layout(model, 128, 4096, Plan(pp=80, microbatches=128), PREC, True)
    classes = device_classes(model, lay)
    assert [(c.devices, c.first, c.last, c.in_flight) for c in classes] == [
        (1, True, False, 80), (78, False, False, 79), (1, False, True, 1),
    ]  # fmt: skip


def test_a_stage_time_by_hand():
    """One stage, two keys (forward and backward of the layers) on one link. Kernels 3 s and 5 s;
    collectives 4 s (forward) and 1 s (backward); the K/V ring 2 s of the forward's 4, behind
    1.5 s of attention. Bound: max(8, 5) = 8. Estimate without overlap: 8 + 5 = 13; with it:
    max(3 + (2 − 1.5), 4) + max(5, 1) = 9. The gradients' sync, 6 s, hides behind the
    backward's idle link time 5 − 1 = 4: 2 s exposed."""
    p = Parts(
        kernels={("forward", "layer"): 3.0, ("backward", "layer"): 5.0},
        attention={("forward", "layer"): 1.5},
        comm={("forward", "layer", "scale-up"): 4.0, ("backward", "layer", "scale-up"): 1.0},
        behind={("forward", "layer"): 2.0},
        sync={("gradient sync", "scale-up"): 6.0},
        compute=8.0,
    )
    d = Dense.of([p])
    plain, hidden = stage_times(d, False), stage_times(d, True)
    assert plain.bound[0] == hidden.bound[0] == 8.0
    assert plain.estimate[0] == 13.0 and hidden.estimate[0] == 9.0
    assert plain.sync_exposed[0] == 6.0 and hidden.sync_exposed[0] == 2.0


def test_pipelines_of_many_plans_are_each_plans_schedule():
    """Two plans side by side (stages 1, 2, 3 a micro-batch, m = 4; and 2, 2, m = 8, v = 2),
    each counted once and with multiplicities: 1F1B's Σ t + (m − 1) max t = 6 + 9 = 15;
    interleaved's Σ t/v + (m − 1/v) max t = 2 + 15 = 17."""
    t = np.array([1.0, 2.0, 3.0, 2.0])
    n = np.ones(4)
    w = np.zeros(4)
    m, v = np.array([4, 4, 4, 8.0]), np.array([1, 1, 1, 2.0])
    one, inter = SCHEDULES["1f1b"], SCHEDULES["interleaved"]
    assert pipelines(one, t[:3], w[:3], n[:3], m[:3], v[:3], np.array([0])).tolist() == [15.0]
    assert one.time([1, 2, 3], [0, 0, 0], 4, 1) == 15.0
    assert pipelines(inter, t[3:], w[3:], np.array([2.0]), m[3:], v[3:], np.array([0])).tolist() == [17.0]
    assert inter.time([2, 2], [0, 0], 8, 2) == 17.0


def test_the_front_is_the_definition():
    """On random rows with ties: a row is on the front exactly when no other row is no slower,
    needs no more memory and no more devices, and is better in one (the first of equal rows
    stays)."""
    rng = random.Random(7)
    for _ in range(30):
        rows = [
            SimpleNamespace(time_s=rng.choice([1, 2, 3, 4]), memory_bytes=rng.choice([5, 6, 7]), estimate_time_s=0,
                            option=SimpleNamespace(plan=SimpleNamespace(devices=rng.choice([4, 8, 16])), fields=dict))
            for _ in range(25)
        ]  # fmt: skip

        def key(r):
            return (r.time_s, r.memory_bytes, r.option.plan.devices)

        ordered = sorted(rows, key=key)
        expected = [
            r for i, r in enumerate(ordered) if not any(all(a <= b for a, b in zip(key(q), key(r), strict=True)) for q in ordered[:i])
        ]  # fmt: skip
        assert [id(r) for r in pareto(rows)] == [id(r) for r in expected]


def test_states_alone_rule_out_a_policy_by_hand():
    """Llama 3.1 8B's 8,030,261,248 parameters at 16 B each (bf16 weights and gradients, fp32
    master, m and v): 128.5 GB on one H100 of 85.9 GB, so no plan of ZeRO 0 on one device can fit
    whatever its micro-batches; ZeRO 1 over DP 8 keeps 4 B a parameter and an eighth of the 12:
    8.03e9 × (4 + 12/8) = 44.2 GB, which fits."""
    model = builtin("llama-3.1-8b")
    table = PlanTable(model, 32, 4096, ROOF, H100.links, PREC)
    assert 8_030_261_248 * 16 > H100.capacity_bytes > 8_030_261_248 * (4 + 12 / 8)
    assert not table.states_fit(Plan(), H100.capacity_bytes)
    assert table.states_fit(Plan(dp=8, zero=1), H100.capacity_bytes)
    assert table.states_fit(Plan(), None)


@pytest.mark.parametrize(
    ("name", "devices", "batch", "context"), [("llama-3.1-70b", 16, 32, 4096), ("mixtral-8x7b", 32, 32, 4096)]
)
def test_pruning_by_states_keeps_every_plan_that_fits(name, devices, batch, context):
    """The search with the states rule and without: the same plans fit, with the same bounds and
    memory, the same front; what the rule leaves out is what the judge rejects for memory, and
    every plan considered is still counted once."""
    model = builtin(name)
    table = PlanTable(model, batch, context, ROOF, H100.links, PREC)

    def cost(o):
        return train_spread(model, batch, context, ROOF, H100.links, o.plan, PREC, recompute=o.recompute)

    def judge(opts):
        return table.judge(opts, H100.capacity_bytes)

    def run(states_fit):
        return search(
            model, "train", batch, devices, cost, lambda s: {}, H100.capacity_bytes, context=context,
            judge=judge, states_fit=states_fit,
        )  # fmt: skip

    plain = run(None)
    pruned = run(lambda p: table.states_fit(p, H100.capacity_bytes))
    left = pruned.rejected[NOT_STATES]
    assert left > 0 and pruned.tried + left == plain.tried
    assert pruned.rejected[NOT_FIT] + left == plain.rejected[NOT_FIT]

    def rows(found):
        return sorted((r.time_s, r.memory_bytes, tuple(r.option.fields().items())) for r in found.rows)

    assert rows(pruned) == rows(plain) and rows(plain)
    assert [r.option for r in pruned.front] == [r.option for r in plain.front]
