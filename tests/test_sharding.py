"""The data-parallel sharding policies (:mod:`attnroof.model.sharding`) by hand: the bytes each
sends from a device over a step and the states each leaves on it, for a 7B model (Mistral 7B,
N = 7,241,732,096 parameters, bf16 weights and gradients, AdamW's fp32 master and moments) on
8 devices with 4 micro-batches; hybrid sharding on two boards of 8; the plan search costing
plans under each policy exactly as one plan alone; and the command line's flags, text and JSON.

Every count is a ring's (nccl-tests' convention, :mod:`attnroof.ops.collectives`): an all-gather
or a reduce-scatter of B bytes over n devices sends (n − 1)/n · B from each, an all-reduce twice
that. The policies' traffic is the ZeRO paper's accounting (Rajbhandari et al. 2020, section 7:
DP and P_os+g send 2Ψ, P_os+g+p 3Ψ, per step of one micro-batch) carried to M micro-batches."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from attnroof.devices import get_device
from attnroof.devices.links import Links
from attnroof.model.config import builtin
from attnroof.model.layers import params
from attnroof.model.parallel import Plan
from attnroof.model.plan_table import PlanTable
from attnroof.model.search import NOT_FIT, NOT_SEQUENCE, Choices, options
from attnroof.model.sharding import check_sharding, policy_name, sharding_json
from attnroof.model.train_options import GRAD_REDUCES, WEIGHT_GATHERS
from attnroof.model.train_spread import train_spread
from attnroof.model.training_memory import TrainPrecision
from attnroof.roofline import Roof
from conftest import assert_one_line_error, run_cli

ROOF = Roof(989.4e12, 3.35e12)
BOARDS = Links(scaleup_bytes_per_s=450e9, scaleup_domain=8, scaleout_bytes_per_s=50e9)
M7 = builtin("mistral-7b")
N = params(M7)  # 7,241,732,096
F8 = 7 / 8  # a ring over 8 devices: (n − 1)/n
W = G = 2 * N  # bf16 weights and gradients: 14.48 GB each


def run(plan, batch=32, model=M7, links=BOARDS, **kw):
    return train_spread(model, batch, 4096, ROOF, links, plan, **kw)


def test_the_model_is_seven_billion():
    assert N == 7_241_732_096 and not M7.tied  # no tied embedding's sync beside the policy's


@pytest.mark.parametrize(
    ("policy", "sent", "kept"),
    [
        # ddp: one all-reduce of the gradients a step, 2 · 7/8 · 14.48 GB = 25.3 GB
        (dict(zero=0), 2 * F8 * G, (W, G, 12 * N)),
        # zero-1: a reduce-scatter of the gradients and an all-gather of the updated weights, a step
        (dict(zero=1), F8 * G + F8 * W, (W, G, 12 * N / 8)),
        # zero-2: the reduce-scatter after each of the 4 micro-batches, the gather once: 63.4 GB
        (dict(zero=2), 4 * F8 * G + F8 * W, (W, G / 8, 12 * N / 8)),
        # zero-2 reducing once a step keeps the whole gradient to accumulate into: zero-1 exactly
        (dict(zero=2, grad_reduce="step"), F8 * G + F8 * W, (W, G, 12 * N / 8)),
        # fsdp: per micro-batch the weights gathered for the forward and again for the backward,
        # the gradients scattered: 4 · 3 · 7/8 · 14.48 GB = 152 GB, 6× ddp
        (dict(zero=3), 4 * (2 * F8 * W + F8 * G), (W / 8, G / 8, 12 * N / 8)),
        # no reshard after forward: one gather a micro-batch, the gathered copy (14.48 GB) kept
        (dict(zero=3, weight_gather="microbatch"), 4 * (F8 * W + F8 * G), (W / 8 + W, G / 8, 12 * N / 8)),
        # ... and the gradients accumulated whole, scattered once: 4 gathers + 1 scatter
        (
            dict(zero=3, weight_gather="microbatch", grad_reduce="step"),
            4 * F8 * W + F8 * G,
            (W / 8 + W, G, 12 * N / 8),
        ),
        # gathered once a step and kept through every micro-batch, the gradients scattered each
        (dict(zero=3, weight_gather="step"), F8 * W + 4 * F8 * G, (W / 8 + W, G / 8, 12 * N / 8)),
        # weights resharded, gradients once a step: 8 gathers, 1 scatter
        (dict(zero=3, grad_reduce="step"), 4 * 2 * F8 * W + F8 * G, (W / 8, G, 12 * N / 8)),
        # PyTorch's pipeline schedules' FSDP2: one gather and one scatter a step, zero-1's 25.3 GB
        (
            dict(zero=3, weight_gather="step", grad_reduce="step"),
            F8 * W + F8 * G,
            (W / 8 + W, G, 12 * N / 8),
        ),
    ],
)
def test_bytes_sent_and_states_kept_under_each_policy(policy, sent, kept):
    s = run(Plan(dp=8, microbatches=4, **policy))
    t = s.totals()
    assert t["comm_bytes_per_device"] == pytest.approx(sent, rel=1e-12)  # nothing but the DP sync
    from attnroof.model.train_spread import train_totals

    assert train_totals(s, M7, 4096, ROOF.peak_flops_per_s)["dp_sync_bytes_per_device"] == pytest.approx(sent)
    mem = s.busiest_memory
    assert (mem.weights_bytes, mem.gradient_bytes, mem.optimizer_bytes) == pytest.approx(kept, rel=1e-12)


def test_the_zero_papers_ratios_at_one_micro_batch():
    """Section 7: P_os+g sends DP's 2Ψ, P_os+g+p 3Ψ (1.5×); without resharding after the forward
    ZeRO 3 drops the backward's gather and is back at 2Ψ."""
    sent = {
        name: run(Plan(dp=8, **p), batch=8).totals()["comm_bytes_per_device"]
        for name, p in {
            "ddp": dict(zero=0),
            "zero-2": dict(zero=2),
            "fsdp": dict(zero=3),
            "keep": dict(zero=3, weight_gather="microbatch"),
        }.items()
    }
    assert sent["zero-2"] / sent["ddp"] == pytest.approx(1.0)
    assert sent["fsdp"] / sent["ddp"] == pytest.approx(1.5)
    assert sent["keep"] / sent["ddp"] == pytest.approx(1.0)


def _on_links(s, m):
    """Bytes a device sends over the step on each link kind (a collective across nodes: its
    network share on scale-out, the rest on scale-up)."""
    out: Counter[str] = Counter()
    for c, runs in [(c, m) for c in s.slowest.comms] + [(c, 1) for c in s.slowest.step_comms]:
        sent, network = (
            runs * c.count * float(c.comm.bytes_per_device),
            runs * c.count * float(c.comm.network_bytes),
        )
        if c.comm.per_node:
            out["scale-out"] += network
            out["scale-up"] += sent - network
        else:
            out[c.link.kind] += sent
    return +out


def test_hybrid_sharding_keeps_the_gathers_inside_a_board():
    """16 devices on two boards of 8, 4 micro-batches. FSDP over all 16 spans the boards: each of
    its gathers and reduce-scatters sends 1/2 of the 2N bytes out of a board over its 8 NICs, N/8 a
    device on the 50 GB/s network, the rest of a ring's 15/16 · 2N inside the board (7/8 · 2N), and
    moves 15/16 · 2N into (or out of) each device over NVLink and its NIC at once (the hierarchical
    bound): 3 · N/8 a micro-batch on the network. HSDP with
    shard groups of 8 (a board) gathers and scatters on NVLink, 3 · 7/8 · 2N = 5.25 N, and sends
    the network only the all-reduce of each device's 1/8 of the gradients across the 2 copies,
    2 · 1/2 · 2N/8 = N/4 once a step; its memory is the 8-way cut, (2 + 2 + 12) N / 8 = 2N, not the
    16-way N."""
    fsdp = run(Plan(dp=16, microbatches=4, zero=3), batch=64)
    hsdp = run(Plan(dp=16, microbatches=4, zero=3, dp_shard=8), batch=64)
    assert _on_links(fsdp, 4) == pytest.approx(
        {"scale-out": 4 * 3 * 2 * N / 16, "scale-up": 4 * 3 * 7 / 8 * 2 * N}
    )
    assert _on_links(hsdp, 4) == pytest.approx({"scale-up": 4 * 3 * F8 * 2 * N, "scale-out": 4 * N / 4})
    states = lambda s: sum(  # noqa: E731
        getattr(s.busiest_memory, f) for f in ("weights_bytes", "gradient_bytes", "optimizer_bytes")
    )
    assert states(fsdp) == pytest.approx(16 * N / 16) and states(hsdp) == pytest.approx(16 * N / 8)
    # the bound covers each policy's traffic: FSDP's 12 collectives, each at least a device's
    # 15/16 · 2N over NVLink and its NIC (500 GB/s), 22.5 N / 500e9 = 326 ms
    assert fsdp.bound_time_s >= 4 * 3 * 15 / 16 * 2 * N / 500e9
    # ... which the kernels outlast under both policies: their bounds are the kernels' alike (a
    # ring of all 16 on one NIC each, 22.5 N / 50 GB/s = 3.26 s, bound FSDP at 3.26 s, 3.9× HSDP)
    assert hsdp.bound_time_s == pytest.approx(fsdp.bound_time_s) and fsdp.bound_time_s < 22.5 * N / 50e9 / 3
    assert sharding_json(hsdp.plan) == {
        "policy": "hsdp", "zero": 3, "weight_gather": "pass", "grad_reduce": "microbatch", "shard_group": 8,
        "copies": 2,
    }  # fmt: skip


def test_zero_one_in_instances_as_megatron_runs_it():
    """``--num-distributed-optimizer-instances 2`` on 16 devices: the optimizer cut 8 ways within
    each instance; a step reduce-scatters within it (7/8 · 2N), all-reduces the 1/8 across the two
    (2 · 1/2 · 2N/8), and gathers the updated weights within it (7/8 · 2N): 3.75 N."""
    s = run(Plan(dp=16, zero=1, dp_shard=8), batch=16)
    assert s.totals()["comm_bytes_per_device"] == pytest.approx(F8 * G + N / 4 + F8 * W)
    assert s.busiest_memory.optimizer_bytes == pytest.approx(12 * N / 8)
    assert policy_name(s.plan) == "zero-1-hybrid"


def test_once_a_step_sends_hide_where_they_can():
    """Gathered once a step, ZeRO 3's weights are a once-a-step gather (hidden, with --overlap,
    behind the first forward, as the updated weights' gather of ZeRO 1 is); reduced once a step,
    the gradients a once-a-step reduction (behind the last backward)."""
    s = run(Plan(dp=8, microbatches=4, zero=3, weight_gather="step", grad_reduce="step", overlap=True))
    assert [(c.comm.name, c.layer_kind) for c in s.slowest.step_comms] == [
        ("gradient reduce-scatter", "gradient sync"),
        ("weight all-gather", "weight gather"),
    ]
    assert not [c for c in s.slowest.comms if c.sync]
    keep = run(Plan(dp=8, microbatches=4, zero=3, weight_gather="microbatch"))
    assert sorted((c.pass_name, c.comm.collective) for c in keep.slowest.comms) == [
        ("backward", "reduce-scatter"),
        ("forward", "all-gather"),
    ]


@pytest.mark.parametrize(
    ("plan", "needle"),
    [
        (Plan(dp=8, zero=2, weight_gather="step"), "--weight-gather step applies to --zero 3"),
        (Plan(dp=8, zero=1, grad_reduce="step"), "--grad-reduce step applies to --zero 2 or 3"),
        (Plan(dp=8, zero=3, dp_shard=3), "--dp-shard 3 does not divide --dp 8"),
        (Plan(dp=8, zero=0, dp_shard=4), "give --zero 1, 2 or 3"),
        (Plan(dp=8, zero=3, weight_gather="never"), "--weight-gather 'never' is not one of"),
        (Plan(dp=8, ep=8, zero=3, dp_shard=4), "must divide the experts' data-parallel degree"),
    ],
)
def test_a_policy_the_plan_cannot_run_is_refused_naming_the_flag(plan, needle):
    from attnroof.errors import InputError

    with pytest.raises(InputError, match=needle.replace("'", ".").replace("(", ".")):
        check_sharding(plan)


H100 = get_device("h100")


def _alone(model, batch, context, o, capacity):
    s = train_spread(model, batch, context, Roof.of(H100, "bf16"), H100.links, o.plan, TrainPrecision(),
                     recompute=o.recompute)  # fmt: skip
    held = s.busiest_memory.total_bytes
    if capacity is not None and held > capacity:
        return (NOT_FIT, held)
    return ("fit", held, True, s.bound_time_s, s.time_s, 1)


@pytest.mark.parametrize(
    ("name", "devices", "batch", "every"), [("llama-3.1-8b", 16, 32, 5), ("mixtral-8x7b", 16, 16, 9)]
)
def test_the_search_costs_each_policy_as_the_plan_alone(name, devices, batch, every):
    """Every policy a search may try — each weight gather and gradient reduction, hybrid shard
    groups of 2 and 4 — judged on arrays as :func:`train_spread` costs the plan alone."""
    model = builtin(name)
    choices = Choices(overlap=True, gathers=WEIGHT_GATHERS, grad_reduces=GRAD_REDUCES, dp_shards=(2, 4, 8))
    found = list(options(model, "train", batch, devices, Counter(), choices, context=4096))
    chosen = found[::every]
    policies = {(o.plan.zero, o.plan.weight_gather, o.plan.grad_reduce, o.plan.dp_replicate) for o in chosen}
    assert len(policies) >= 12, policies
    table = PlanTable(model, batch, 4096, Roof.of(H100, "bf16"), H100.links, TrainPrecision())
    for o, v in zip(chosen, table.judge(chosen, H100.capacity_bytes), strict=True):
        if v[0] == NOT_SEQUENCE:
            continue
        alone = _alone(model, batch, 4096, o, H100.capacity_bytes)
        assert v[0] == alone[0], (o, v, alone)
        assert all(
            math.isclose(x, y, rel_tol=1e-12)
            for x, y in zip(v[1:], alone[1:], strict=True)
            if isinstance(x, float)
        )


# ---------------------------------------------------------------- the command line

BASE = ("model", "--model", "mistral-7b", "--phase", "train", "--batch", "32", "--context", "4096",
        "--device", "h100", "--dp", "8", "--microbatches", "4")  # fmt: skip


def test_the_text_names_the_policy_and_what_it_sends_a_step():
    out = run_cli(*BASE, "--zero", "3", "--weight-gather", "step", "--grad-reduce", "step").stdout
    line = next(x for x in out.splitlines() if x.startswith("sharding:"))
    # 7/8 · (14.48 + 14.48) GB = 25.3 GB
    assert line == (
        "sharding: fsdp (ZeRO 3) over 8 replicas: weights all-gathered once a step, kept through every "
        "micro-batch, gradients reduce-scattered once a step; 25.3 GB sent per device a step"
    )
    assert "ZeRO 3 (weights gathered once a step; gradients reduced once a step)" in out
    assert "gradients accumulated whole; the gathered weights kept)" in out


def test_the_json_names_the_policy():
    doc = run_cli(*BASE, "--zero", "3", "--dp-shard", "4", "--json").json()
    sharding = doc["parallel"]["sharding"]
    # per micro-batch 3 · 3/4 · 2N on the board, 2 · 1/2 · 2N/4 across the copies: 5N; 4 of them
    assert sharding == {
        "policy": "hsdp", "zero": 3, "weight_gather": "pass", "grad_reduce": "microbatch", "shard_group": 4,
        "copies": 2, "sent_bytes_per_step": pytest.approx(20 * N),
    }  # fmt: skip
    assert doc["totals"]["dp_sync_bytes_per_device"] == pytest.approx(20 * N)
    plain = run_cli(*BASE, "--json").json()["parallel"]["sharding"]  # no --zero: ddp
    assert (plain["policy"], plain["weight_gather"], plain["grad_reduce"]) == ("ddp", None, "step")


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--weight-gather", "step"], "--weight-gather step applies to --zero 3"),
        (["--zero", "1", "--grad-reduce", "step"], "--grad-reduce step applies to --zero 2 or 3"),
        (["--zero", "3", "--dp-shard", "3"], "--dp-shard 3 does not divide --dp 8"),
        (["--zero", "3", "--weight-gather", "never"], "--weight-gather"),
        (["--zero", "3", "--dp-shard", "0"], "--dp-shard"),
    ],
)
def test_bad_policies_are_one_line(flags, needle):
    assert_one_line_error(run_cli(*BASE, *flags), needle)


def test_policy_flags_apply_to_training_only():
    r = run_cli(
        "model", "--model", "mistral-7b", "--context", "4096", "--dp", "2", "--batch", "2", "--dp-shard", "2"
    )
    assert_one_line_error(r, "--dp-shard applies to --phase train only")
    r = run_cli("plan", "--model", "mistral-7b", "--devices", "8", "--phase", "prefill", "--context", "4096",
                "--weight-gather", "step")  # fmt: skip
    assert_one_line_error(r, "--weight-gather applies to --phase train only")


def test_the_plan_search_tries_the_policies_named():
    """``plan --weight-gather pass,step --dp-shard 4``: each ZeRO 3 plan under both gathers, every
    ZeRO 1–3 plan whose DP 4 divides sharded over 4; each plan's JSON names its policy."""
    doc = run_cli("plan", "--model", "mistral-7b", "--device", "h100", "--devices", "8", "--phase", "train",
                  "--context", "4096", "--batch", "32", "--where", "tp=1", "--where", "pp=1", "--where", "cp=1",
                  "--weight-gather", "pass,step", "--dp-shard", "4", "--json").json()  # fmt: skip
    plans = [p["parallel"] for p in doc["plans"]]
    zero3 = {(p["sharding"]["weight_gather"], p["sharding"]["policy"]) for p in plans if p["zero"] == 3}
    assert zero3 == {("pass", "hsdp"), ("step", "hsdp"), ("pass", "fsdp"), ("step", "fsdp")}
    assert {p["sharding"]["shard_group"] for p in plans if p["zero"]} == {4}
    where = run_cli("plan", "--model", "mistral-7b", "--device", "h100", "--devices", "8", "--phase", "train",
                    "--context", "4096", "--batch", "32", "--where", "tp=1", "--where", "pp=1", "--weight-gather",
                    "pass,step", "--where", "weight_gather=step", "--json").json()  # fmt: skip
    assert {p["parallel"]["sharding"]["weight_gather"] for p in where["plans"]} == {"step"}
