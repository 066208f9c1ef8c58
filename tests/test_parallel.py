"""Many devices, by hand: each parallelism's per-device counts and collectives, the link each
group rides, the pipeline's schedule, and TP = PP = EP = DP = 1 giving the single-device answer."""

from __future__ import annotations

import json

import pytest

from attnroof.devices.links import Links
from attnroof.errors import InputError
from attnroof.model.analysis import analyse
from attnroof.model.config import builtin
from attnroof.model.layers import layer_table
from attnroof.model.parallel import Plan, Shard, group_link, stages
from attnroof.model.spread import spread
from attnroof.roofline import Roof
from conftest import assert_one_line_error, run_cli

ROOF = Roof(989.4e12, 4.8e12)
NVLINK = Links(scaleup_bytes_per_s=450e9, scaleup_domain=8, scaleout_bytes_per_s=50e9)
CAP = 143155 * 2**20  # an H200 as CUDA reports it
L70 = builtin("llama-3.1-70b")


def run(model, plan, batch=8, context=8192, phase="decode", links=NVLINK):
    return spread(model, phase, batch, context, ROOF, links, plan, capacity_bytes=CAP)


def test_tp2_decode_of_llama_70b_matches_the_hand_count():
    s = run(L70, Plan(tp=2))
    comms = {c.comm.name: c for c in s.slowest.comms}
    # each block's all-reduce: batch 8 × hidden 8192 × 2 B = 131,072 B, of which a ring on two
    # devices sends 2 (n − 1)/n = 1× per device; two blocks in each of 80 layers
    layer = sum(c.count * c.comm.bytes_per_device for c in s.slowest.comms if c.layer_kind == "layer")
    assert layer == 80 * 2 * (2 * (2 - 1) / 2) * 8 * 8192 * 2 == 20_971_520
    # plus the vocab-parallel embedding's all-reduce (one more 131,072 B) and the last tokens'
    # logits gathered: 8 × 128,256 × 2 B = 2,052,096 B, half of it sent by each device
    assert comms["embedding all-reduce"].comm.bytes_per_device == 131_072
    assert comms["logits all-gather"].comm.bytes_per_device == 8 * 128_256 * 2 / 2 == 1_026_048
    assert s.totals()["comm_bytes_per_device"] == 20_971_520 + 131_072 + 1_026_048
    # per-device weights: half of every cut weight, the 161 norm vectors (80 × 2 + 1 of 8192) whole
    whole = analyse(L70, "decode", 8, 8192, ROOF, capacity_bytes=CAP).memory
    norms = (80 * 2 + 1) * 8192 * 2
    assert s.busiest_memory.weights_bytes == (whole.weights_bytes - norms) / 2 + norms
    assert s.busiest_memory.weights_bytes / whole.weights_bytes == pytest.approx(0.5, abs=1e-4)
    assert s.fits and not whole.fits


def test_trivial_plan_is_the_single_device_answer():
    single = analyse(L70, "decode", 8, 8192, ROOF, capacity_bytes=CAP)
    s = run(L70, Plan(tp=1, pp=1, ep=1, dp=1))
    assert s.slowest.comms == ()
    assert s.slowest.ops == single.ops
    assert s.time_s == single.totals.time_s
    assert s.busiest_memory == single.memory
    t = s.totals()
    assert (t["flops"], t["bytes"], t["comm_bytes_per_device"]) == (
        single.totals.flops,
        single.totals.bytes,
        0,
    )


def test_cli_trivial_plan_matches_the_single_device_json():
    base = [
        "model",
        "--model",
        "llama-3.1-8b",
        "--context",
        "4096",
        "--batch",
        "4",
        "--device",
        "h200",
        "--json",
    ]
    single = json.loads(run_cli(*base).stdout)
    multi = json.loads(run_cli(*base, "--tp", "1", "--pp", "1", "--ep", "1", "--dp", "1").stdout)
    assert multi["memory"]["per_device"] == single["memory"]
    assert multi["ops"] == single["ops"]
    for key, value in single["totals"].items():
        assert multi["totals"][key] == value, key
    assert multi["totals"]["comm_bytes_per_device"] == 0


def test_kv_heads_are_replicated_beyond_their_count():
    # 8 KV heads on 16 devices: each keeps one (1/8 of the cache), with 64/16 = 4 query heads on it
    shard = Shard(tp=16, ep=1, first=0, stop=80)
    attn = next(i for i in layer_table(L70, shard) if i.operator == "attention")
    assert (attn.shape["kv_heads"], attn.shape["group"]) == (1, 4)
    s = run(L70, Plan(tp=16), links=Links(scaleup_bytes_per_s=450e9))
    whole = analyse(L70, "decode", 8, 8192, ROOF).memory
    assert s.busiest_memory.kv_cache_bytes == whole.kv_cache_bytes / 8


def test_column_and_row_cuts():
    shard = Shard(tp=4, ep=1, first=0, stop=80)
    rows = {i.name: i for i in layer_table(L70, shard)}
    # QKV: 8192 → (64 + 2 · 8) · 128 = 10,240 columns, 2,560 on each of 4 devices
    assert rows["QKV projection"].shape["m"] == 10_240 // 4
    assert rows["output projection"].shape["k"] == 8192 // 4
    assert rows["gate/up projection"].shape["m"] == 2 * 28_672 // 4
    assert rows["down projection"].shape["k"] == 28_672 // 4
    assert rows["attention norm"].shape["width"] == 8192  # replicated
    assert rows["LM head"].shape["m"] == 128_256 // 4


def test_data_parallel_replica_is_a_smaller_batch():
    # DP 2 on batch 8: each replica decodes 4 sequences, exactly the single device at batch 4
    s = run(L70, Plan(dp=2), links=NVLINK)
    four = analyse(L70, "decode", 4, 8192, ROOF)
    assert s.slowest.ops == four.ops
    assert s.totals()["tokens_per_s"] == 8 / four.totals.time_s


def test_expert_parallel_dispatch_and_experts_per_device():
    mix = builtin("mixtral-8x7b")
    s = run(mix, Plan(ep=2, dp=2), context=4096)
    comms = [c for c in s.slowest.comms if c.comm.collective == "all-to-all"]
    # each replica's 4 tokens × top-2 × hidden 4096 × 2 B = 65,536 B, half of it to the other device
    assert [c.comm.name for c in comms] == ["expert dispatch", "expert combine"]
    assert all(c.comm.message_bytes == 4 * 2 * 4096 * 2 and c.comm.bytes_per_device == 32_768 for c in comms)
    assert all(c.count == 32 for c in comms)  # every layer is a MoE layer
    # the experts a device runs: the pooled 8 tokens of both replicas on 4 of 8 experts, i.e. half
    # of what one device running all 8 experts on 8 tokens would
    pooled = analyse(mix, "decode", 8, 4096, ROOF)
    for name in ("expert gate/up", "expert down"):
        here = next(o for o in s.slowest.ops if o.name == name)
        there = next(o for o in pooled.ops if o.name == name)
        assert here.flops == pytest.approx(there.flops / 2)
        assert here.bytes < there.bytes


def test_pipeline_stages_and_schedule():
    assert stages(80, 3) == [(0, 27), (27, 54), (54, 80)]  # 80 = 27 + 27 + 26
    s = run(L70, Plan(pp=4, microbatches=4), links=NVLINK)
    times = [st.time_s for st in s.stages]
    # step = Σ stages + (m − 1) · slowest
    assert s.time_s == pytest.approx(sum(times) + 3 * max(times))
    bounds = [st.bound_s for st in s.stages]  # each stage's kernels, its one send hidden behind them
    assert bounds == [st.compute_time_s for st in s.stages]
    assert s.bound_time_s == pytest.approx(sum(bounds) + 3 * max(bounds))
    assert s.bubble_share == pytest.approx(1 - 4 * max(bounds) / s.bound_time_s)
    # equal stages would idle (p − 1)/(m + p − 1) = 3/7 of the step; these are nearly equal
    assert s.bubble_share == pytest.approx(3 / 7, abs=0.02)
    # the last stage sends nothing on; the others send 2 sequences' hidden vectors (2 × 8192 × 2 B)
    sends = [[c.comm.message_bytes for c in st.comms] for st in s.stages]
    assert sends == [[2 * 8192 * 2]] * 3 + [[]]


def test_overlap_takes_the_larger_per_layer_kind():
    plain, over = run(L70, Plan(tp=8)), run(L70, Plan(tp=8, overlap=True))
    st = over.slowest
    kinds = st.kinds()
    assert over.time_s == pytest.approx(sum(max(k["compute_time_s"], k["comm_time_s"]) for k in kinds))
    assert plain.time_s == pytest.approx(st.compute_time_s + st.comm_time_s)


@pytest.mark.parametrize("name", ["deepseek-v3", "mixtral-8x7b", "jamba-mini-1.5", "nemotron-h-8b"])
def test_each_blocks_all_reduce_is_filed_with_that_blocks_kernels(name):
    """A TP group sums each block's output once a layer: the mixer's with the layer's own rows, the
    MLP's with the kind its rows are filed under (dense MLP or MoE where a model has both) — so
    that --overlap hides each behind the kernels it follows. DeepSeek-V3 (3 dense layers, 58 of
    experts) at TP 8: its MLP all-reduces were all filed under "layer" with attention's, which then
    read link-bound, and the decode estimate was 1.99 ms; every block's kernels and its own
    all-reduce side by side give Σ max(compute, link) = 1.36 ms."""
    model = builtin(name)
    mlp_rows = {}  # each MLP block ends in its row-parallel down projection
    for r in layer_table(model):
        if r.name in ("down projection", "expert down"):
            mlp_rows[r.layer_kind] = r.count
    mixers = sum(n for kind, n in model.layer_kinds().items() if kind.mixer != "none")
    expected = {("attention all-reduce", "layer"): mixers}
    expected |= {
        (("MoE" if kind == "MoE" else "MLP") + " all-reduce", kind): n for kind, n in mlp_rows.items()
    }
    over = run(model, Plan(tp=8, overlap=True), batch=1, context=4096)
    filed = {
        (c.comm.name, c.layer_kind): c.count
        for c in over.slowest.comms
        if c.comm.name.endswith("all-reduce") and c.comm.name != "embedding all-reduce"
    }
    assert filed == expected
    kinds = over.slowest.kinds()
    assert over.time_s == pytest.approx(sum(max(k["compute_time_s"], k["comm_time_s"]) for k in kinds))
    if name == "deepseek-v3":
        assert over.time_s == pytest.approx(1.36e-3, rel=0.01)


@pytest.mark.parametrize(
    ("model", "plan", "phase"),
    [
        (L70, Plan(tp=8), "decode"),
        (L70, Plan(tp=8, sp=True), "prefill"),
        (L70, Plan(tp=4, pp=2, dp=2, microbatches=2), "decode"),
        (builtin("mixtral-8x7b"), Plan(tp=2, ep=2, dp=2), "prefill"),
        # an EP group across two domains (its all-to-all on both links), experts whole, routing 2×
        (builtin("qwen3-30b-a3b"), Plan(tp=2, ep=16, dp=8, etp=1, expert_imbalance=2), "prefill"),
        (L70, Plan(tp=8, pp=4, microbatches=8, schedule="interleaved", virtual_stages=2), "prefill"),
    ],
)
def test_the_bound_is_below_every_estimate_and_no_flag_raises_it(model, plan, phase):
    """The "≤" figures come from the bound: every collective hidden behind its stage's kernels.
    Serial collectives ≥ each pass's hidden behind its kernels (--overlap) ≥ the bound, and
    the bound is the same with or without --overlap."""
    from dataclasses import replace

    serial = run(model, plan, phase=phase, batch=8, context=4096)
    over = run(model, replace(plan, overlap=True), phase=phase, batch=8, context=4096)
    assert serial.time_s >= over.time_s >= over.bound_time_s
    assert serial.bound_time_s == over.bound_time_s
    for st in serial.stages:  # a stage's bound: its kernels or its busiest link, the longer
        assert st.bound_s == max([st.compute_time_s, *st.link_times().values()])
    t = serial.totals()
    assert (t["time_s"], t["estimate_time_s"]) == (serial.bound_time_s, serial.time_s)
    if phase == "decode":
        assert t["tokens_per_s"] == 8 / serial.bound_time_s >= t["estimate_tokens_per_s"]


def test_groups_ride_scale_up_inside_a_domain():
    assert group_link(NVLINK, 8, 1, "tp").kind == "scale-up"
    assert group_link(NVLINK, 16, 1, "tp").kind == "scale-out"
    assert group_link(NVLINK, 2, 8, "pp").kind == "scale-out"  # stride 8 × 2 > domain 8
    with pytest.raises(InputError, match="scale-out"):
        group_link(Links(scaleup_bytes_per_s=450e9, scaleup_domain=8), 16, 1, "--tp 16")
    with pytest.raises(InputError, match="--link-bandwidth"):
        group_link(Links(), 2, 1, "--tp 2")


def test_sequence_parallel_swaps_each_all_reduce_for_rs_and_ag():
    plain, sp = run(L70, Plan(tp=4)), run(L70, Plan(tp=4, sp=True))
    bytes_of = lambda s: s.totals()["comm_bytes_per_device"]  # noqa: E731
    # RS + AG send (n − 1)/n · M each: the all-reduce's 2 (n − 1)/n · M
    assert bytes_of(sp) == pytest.approx(bytes_of(plain))
    norm = next(o for o in sp.slowest.ops if o.name == "attention norm")
    assert norm.flops == pytest.approx(
        next(o for o in plain.slowest.ops if o.name == "attention norm").flops / 4
    )


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (["--tp", "3"], "--tp 3"),
        (["--ep", "2"], "no experts"),
        (["--dp", "3"], "--batch 8"),
        (["--tp", "0"], "--tp"),
        (["--zero", "1"], "--zero applies to --phase train only"),
        (["--tp", "2", "--phase", "train", "--dp", "3"], "--batch 8"),
    ],
)
def test_bad_plans_are_one_line(flags, needle):
    r = run_cli(
        "model", "--model", "llama-3.1-70b", "--batch", "8", "--context", "8192", "--device", "h200", *flags
    )
    assert_one_line_error(r, needle)


def test_fit_finds_two_devices_for_llama_70b_at_batch_8():
    r = run_cli(
        "model", "--model", "llama-3.1-70b", "--batch", "8", "--context", "8192", "--device", "h200",
        "--fit", "--json",
    )  # fmt: skip
    doc = json.loads(r.stdout)
    assert doc["fit"]["devices"] == 2 and doc["memory"]["fits"]


@pytest.mark.parametrize(
    ("argv", "replicas"),
    [
        (("--model", "llama-3.1-8b", "--dp", "2", "--batch", "2"), 2),
        (("--model", "deepseek-v3", "--ep", "8", "--tp", "8", "--batch", "8"), 8),
    ],
)
def test_largest_batch_has_one_meaning_in_text_and_json(argv, replicas):
    """``--batch`` is the global batch; the largest batch the plan holds is given the same way in
    text and JSON: the tightest stage's largest per replica (``per_device.max_batch``) times the
    replicas. (Text printed the per-replica figure as "largest batch": 16 against JSON's 32.)"""
    base = ("model", *argv, "--device", "h200", "--context", "8192")
    mem = run_cli(*base, "--json").json()["memory"]
    assert mem["max_batch"] == mem["per_device"]["max_batch"] * replicas
    text = run_cli(*base).stdout
    per, glob = mem["per_device"]["max_batch"], mem["max_batch"]
    assert f"largest batch at this context {per:,}" in text
    assert f"as --batch counts it, {glob:,} ({per:,} × {replicas} replicas)" in text


def test_a_multi_node_a100_plan_is_costed_on_its_scale_out():
    """The A100 SXM 80GB record had no scale-out link, so no plan past one 8-GPU board could be costed;
    its catalog record now carries Azure NDm A100 v4's (one 200 Gb/s HDR NIC per GPU, 25e9 B/s)."""
    from attnroof.devices import get_device

    dev = get_device("A100 SXM 80GB")
    assert dev.links.scaleout.bandwidth_bytes_per_s == 25e9
    roof = Roof.of(dev, "bf16")
    s = spread(L70, "decode", 8, 8192, roof, dev.links, Plan(tp=16), capacity_bytes=dev.capacity_bytes)
    ar = next(c for c in s.slowest.comms if c.comm.name == "attention all-reduce")
    # TP 16 spans two boards, 8 a board, each GPU on its own NIC: each board sends its 131,072 B
    # out over 8 NICs, 16,384 B a NIC at 25e9 (0.655 µs; each device's 131,072 B in over NVLink and
    # its NIC, / 325e9, is 0.403), after 3.6 µs + 2 × 2.7 µs (a network hop each way) + 2 × 0.47
    # µs (one NVLink hop each way: peer access): 10.60 µs, where a ring of 16 on one NIC took
    # 3.6 + 30 × 2.7 + 2 · 15/16 · 131,072 / 25e9 = 94.43 µs
    assert (ar.link.kind, ar.comm.algorithm, ar.comm.per_node) == ("scale-out", "hierarchical", 8)
    assert ar.time_s == pytest.approx(3.6e-6 + 2 * 2.7e-6 + 2 * 0.47e-6 + 131_072 / 8 / 25e9)
    assert ar.time_s == pytest.approx(10.595e-6, rel=1e-4)
    # training, TP 8 × DP 2: the gradients' all-reduce (2 devices 8 apart, one a board) rides the
    # network, the ring's bytes and hops (g = 1: 2 · 1/2 · M from each NIC, 2 ⌊log₂ 2⌋ = 2 hops):
    # 1.004 G parameters a device × 2 B = 2,008,031,232 B;
    # 3.6 + 2 × 2.7 µs + 2,008,031,232 B / 25e9 B/s = 80.330 ms
    r = run_cli("model", "--model", "llama-3.1-8b", "--phase", "train", "--batch", "8", "--context", "4096",
                "--device", "A100 SXM 80GB", "--tp", "8", "--dp", "2", "--json")  # fmt: skip
    assert r.returncode == 0, r.stderr
    sync = next(o for o in json.loads(r.stdout)["ops"] if o["name"] == "gradient all-reduce")
    assert (sync["link"], sync["algorithm"], sync["message_bytes"]) == (
        "scale-out",
        "hierarchical",
        2_008_031_232,
    )
    assert sync["devices_per_node"] == 1
    assert sync["time_s"] == pytest.approx(9e-6 + 2_008_031_232 / 25e9) == pytest.approx(80.330e-3, rel=1e-4)
