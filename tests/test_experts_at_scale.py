"""Expert parallelism as big MoE runs deploy it, by hand: the all-to-all of an EP group that spans
scale-up domains split by destination, the expert-tensor-parallel degree (Megatron-LM's expert
grid ETP × EP × EDP), and the routing imbalance F on the busiest device."""

from __future__ import annotations

import json

import pytest

from attnroof.devices.links import Links
from attnroof.errors import InputError
from attnroof.model.config import builtin
from attnroof.model.parallel import Plan, local_members
from attnroof.model.spread import spread
from attnroof.model.train_spread import train_spread
from attnroof.model.training_memory import TrainPrecision, expert_params
from attnroof.ops import collectives as coll
from attnroof.roofline import Roof
from conftest import run_cli

ROOF = Roof(989.4e12, 4.8e12)
LINKS = Links(scaleup_bytes_per_s=450e9, scaleup_domain=8, scaleout_bytes_per_s=50e9)
QWEN = builtin("qwen3-30b-a3b")  # 128 experts of width 768, top 8, hidden 2048, 48 MoE layers
MIX = builtin("mixtral-8x7b")  # 8 experts of width 14336, top 2, hidden 4096, 32 MoE layers


def prefill(model, plan, batch, context=4096):
    return spread(model, "prefill", batch, context, ROOF, LINKS, plan)


def comms(s, collective=None):
    return {c.comm.name: c for c in s.slowest.comms if collective in (None, c.comm.collective)}


def op(s, name):
    return next(o for o in s.slowest.ops if o.name == name)


def test_an_all_to_all_across_domains_sends_the_share_that_leaves_on_scale_out():
    """EP 16, one device apart, in domains of 8: each device keeps 1/16 of its send buffer, sends
    7/16 to the 7 others of its node (scale-up) and 8/16 to the 8 of the other node (scale-out).
    Qwen3-30B-A3B, one sequence of 4,096 tokens a device: 4,096 · top-8 · hidden 2,048 · 2 B =
    134,217,728 B a buffer: 58,720,256 B in the node, 67,108,864 B across."""
    s = prefill(QWEN, Plan(ep=16, dp=16), 16)
    c = comms(s)
    inside, across = c["expert dispatch (in domain)"], c["expert dispatch (across)"]
    assert inside.comm.message_bytes == across.comm.message_bytes == 4096 * 8 * 2048 * 2 == 134_217_728
    assert inside.comm.bytes_per_device == 7 / 16 * 134_217_728 == 58_720_256
    assert across.comm.bytes_per_device == 8 / 16 * 134_217_728 == 67_108_864
    assert (inside.link.kind, across.link.kind) == ("scale-up", "scale-out")
    # the two links carry theirs at once: the stage's bound sees each link's own traffic, so the
    # scale-out part alone, 67.1 MB / 50 GB/s + 8 steps of its latency, is what it waits for
    per_link = s.slowest.link_times()
    assert per_link["scale-out"] == pytest.approx(2 * 48 * across.time_s)
    assert across.time_s == pytest.approx(67_108_864 / 50e9 + 8 * LINKS.scaleout.latency_s
                                          + LINKS.scaleout.base_latency_s)  # fmt: skip
    # before the split the whole 15/16 rode scale-out: 125.8 MB, 1.9× the 67.1 MB that leaves
    assert coll.all_to_all(134_217_728, 16).bytes_per_device / across.comm.bytes_per_device == 15 / 8


def test_local_members_of_a_group():
    # EP 16 of devices 2 apart (ETP 2) in domains of 8: 4 in each domain; 8 apart: each alone
    assert local_members(LINKS, 16, 2) == 4 and local_members(LINKS, 4, 8) == 1
    assert local_members(LINKS, 8, 1) == 8  # fits: one domain


def test_a_group_inside_a_domain_is_one_all_to_all_as_before():
    s = prefill(MIX, Plan(ep=2, dp=2), 2)
    assert [*comms(s, "all-to-all")] == ["expert dispatch", "expert combine"]


def test_etp_one_cuts_no_expert_and_the_device_runs_its_tokens_share():
    """Mixtral, TP 2 × DP 2 (4 devices), prefill of one 4,096-token sequence a replica. ETP 1 × EP 4:
    each device holds 2 whole experts of 8 and runs the expert GEMMs on 1/4 of the 2 × 4,096 tokens'
    8,192 · 2 routed rows (4,096 rows): gate/up 2 · 4,096 · 4,096 · 28,672 FLOPs. Each device
    dispatches its 1/tp of its replica's tokens: 4,096/2 · 2 · 4,096 · 2 B = 33,554,432 B; with
    experts whole there is no expert-TP exchange."""
    s = prefill(MIX, Plan(tp=2, dp=2, ep=4, etp=1), 2)
    assert op(s, "expert gate/up").flops == 2 * 4096 * 4096 * 28672
    # the same FLOPs as ETP = TP (the work is spread over the same 4 devices), weights half as wide
    # but twice as many experts — and fewer collectives
    same = prefill(MIX, Plan(tp=2, dp=2, ep=2), 2)
    assert op(same, "expert gate/up").flops == op(s, "expert gate/up").flops
    c = comms(s)
    assert c["expert dispatch"].comm.message_bytes == 4096 / 2 * 2 * 4096 * 2 == 33_554_432
    assert "expert-TP all-gather" not in c and "expert-TP all-gather" in comms(same)
    j = s.plan.to_json()
    assert (j["etp"], j["edp"]) == (1, 1) and (same.plan.to_json()["etp"], same.plan.to_json()["edp"]) == (
        2,
        1,
    )


def test_the_expert_tp_group_gathers_what_its_experts_received():
    """ETP = TP = 2 with EP 2 (Megatron's default ETP): each device receives its 1/2 of the routed
    rows by all-to-all, and the expert-TP pair all-gathers them (2 × 33,554,432 B gathered, half of
    it sent) and reduce-scatters the outputs back."""
    s = prefill(MIX, Plan(tp=2, dp=2, ep=2), 2)
    c = comms(s)
    ag, rs = c["expert-TP all-gather"], c["expert-TP reduce-scatter"]
    assert ag.comm.message_bytes == rs.comm.message_bytes == 2 * 33_554_432
    assert ag.comm.bytes_per_device == 33_554_432 and ag.count == 32


def test_expert_weights_and_their_sync_follow_the_expert_grid():
    """Mixtral's routed experts: 32 layers × 8 × 3 · 4,096 · 14,336 = 45,097,156,608 parameters.
    On TP 2 × DP 4 (8 devices a stage): ETP 2 × EP 4 × EDP 1 keeps 1/8 of them a device and syncs
    no expert gradient; ETP 1 × EP 4 × EDP 2 keeps 1/4 (whole experts, 2 of 8) and all-reduces
    their gradients over the 2 EDP replicas (ETP · EP = 4 devices apart)."""
    experts = 32 * 8 * 3 * 4096 * 14336
    assert experts == 45_097_156_608
    wide = Plan(tp=2, dp=4, ep=4)
    whole = Plan(tp=2, dp=4, ep=4, etp=1)
    assert expert_params(MIX, wide.shard(0, 32)) == experts / 8
    assert expert_params(MIX, whole.shard(0, 32)) == experts / 4
    assert (wide.edp, whole.edp) == (1, 2)
    s = train_spread(MIX, 8, 4096, ROOF, LINKS, whole)
    sync = {c.comm.name: c for c in s.slowest.step_comms}["expert gradient all-reduce"]
    assert sync.comm.devices == 2 and sync.comm.message_bytes == experts / 4 * TrainPrecision().grad_itemsize
    s = train_spread(MIX, 8, 4096, ROOF, LINKS, wide)
    assert "expert gradient all-reduce" not in {c.comm.name for c in s.slowest.step_comms}


def test_imbalance_doubles_the_busiest_devices_expert_work_and_exchange():
    """F = 2 on Qwen3-30B-A3B, EP 8 (one domain): the expert GEMMs' FLOPs and the all-to-all bytes
    double; the expert weights are read once as before (the bytes grow by the routed rows only:
    X and Y, 4,096 · 8 · (2,048 + 1,536) · 2 B = 234,881,024 B for gate/up)."""
    even = prefill(QWEN, Plan(ep=8, dp=8), 8)
    busy = prefill(QWEN, Plan(ep=8, dp=8, expert_imbalance=2), 8)
    for name in ("expert gate/up", "expert down", "expert activation (SiLU·up)"):
        assert op(busy, name).flops == 2 * op(even, name).flops
    assert op(busy, "expert gate/up").bytes - op(even, "expert gate/up").bytes == 4096 * 8 * (2048 + 1536) * 2
    for name in ("expert dispatch", "expert combine"):
        assert comms(busy)[name].comm.bytes_per_device == 2 * comms(even)[name].comm.bytes_per_device
    # attention is untouched, and F = 1 is exactly today's answer
    assert op(busy, "attention").flops == op(even, "attention").flops
    assert prefill(QWEN, Plan(ep=8, dp=8, expert_imbalance=1.0), 8).slowest == even.slowest
    assert busy.bound_time_s > even.bound_time_s and busy.bound_time_s <= busy.time_s


@pytest.mark.parametrize(
    ("plan", "needle"),
    [
        (Plan(tp=2, dp=1, ep=4, etp=1), "must divide --tp × --dp = 2"),
        (Plan(tp=2, dp=2, ep=2, etp=3), "does not divide the model's expert width 14336"),
        (Plan(ep=2, dp=2, expert_imbalance=0.5), "must be ≥ 1"),
        (Plan(ep=2, dp=2, expert_imbalance=3), "exceeds --ep 2"),
        (Plan(dp=2, expert_imbalance=1.5), "give --ep 2 or more"),
        (Plan(ep=2, dp=2, expert_imbalance=float("nan")), "must be ≥ 1"),
    ],
)
def test_bad_expert_plans_are_refused(plan, needle):
    with pytest.raises(InputError, match=needle.replace("×", ".").replace("(", r"\(")):
        prefill(MIX, plan, 4)


def test_the_cli_prints_and_writes_the_expert_grid(tmp_path):
    argv = ["model", "--model", "mixtral-8x7b", "--device", "h100", "--phase", "prefill", "--batch", "4",
            "--context", "4096", "--tp", "2", "--etp", "1", "--ep", "4", "--expert-imbalance", "1.5"]  # fmt: skip
    text = run_cli(*argv)
    assert text.returncode == 0, text.stderr
    # --dp defaults to the fewest replicas the grid needs: lcm(2, 1 · 4) / 2 = 2
    assert "TP 2 × PP 1 × DP 2 × EP 4 = 4 devices" in text.stdout
    assert "experts ETP 1 × EP 4 × EDP 1, busiest expert device 1.5× the mean tokens" in text.stdout
    j = json.loads(run_cli(*argv, "--json").stdout)["parallel"]
    assert (j["etp"], j["edp"], j["expert_imbalance"], j["dp"]) == (1, 1, 1.5, 2)


def test_a_decoding_token_split_over_tp_ranks_is_a_share_of_a_token():
    """DeepSeek-V3 decoding one sequence at TP 16 with each expert whole on a device (ETP 1,
    EP 1): each TP rank dispatches its sixteenth of the one token, and the expert group pools
    etp · ep / tp = 1/16 of it — half a routed row a device, on average (8 experts a token). The
    expert GEMM costs that expectation (2 · ½ · k · m), as it costs the experts it touches; the
    step, and the plan search that meets such plans, stopped on "m must be a positive whole
    number, got 0.5" before."""
    from attnroof.ops.experts import expert_gemm

    share, one = (
        expert_gemm(1 / 16, 7168, 2048, experts=256, top_k=8),
        expert_gemm(1, 7168, 2048, experts=256, top_k=8),
    )
    assert share.flops == one.flops / 16 == 2 * 0.5 * 7168 * 2048
    r = run_cli("model", "--model", "deepseek-v3", "--device", "h200", "--phase", "decode", "--batch", "1",
                "--context", "4096", "--tp", "16", "--etp", "1", "--json")  # fmt: skip
    assert r.returncode == 0, r.stderr
