"""Context parallelism (``--cp C``), by hand: each device runs every row on context/C tokens and
attention on its s/C queries against all s keys (Megatron-LM's context parallelism, its
docs/source/api-guide/context_parallel.rst; TransformerEngine's ``AttnFuncWithCPAndKVP2P``), the
K/V ring's bytes, the causal load balance of 2C chunks, the gradient sync over dp · cp replicas,
activations 1/C, and the Llama 3 paper's 405B row with CP 16."""

from __future__ import annotations

import json

import pytest

from attnroof.devices.links import Links
from attnroof.model.config import builtin
from attnroof.model.layers import params
from attnroof.model.parallel import Plan
from attnroof.model.spread import spread
from attnroof.model.train_options import BACKWARD, FORWARD, RECOMPUTE_PASS
from attnroof.model.train_spread import train_spread
from attnroof.ops.attention import kept_scores
from attnroof.roofline import Roof
from conftest import run_cli
from test_train_parallel import LLAMA3_405B

ROOF = Roof(989.4e12, 4.8e12)
NVLINK = Links(scaleup_bytes_per_s=450e9, scaleup_domain=8, scaleout_bytes_per_s=50e9)
CAP = 141e9
L8, L70 = builtin("llama-3.1-8b"), builtin("llama-3.1-70b")


def by_name(s):
    return {o.name: o for o in s.slowest.ops}


def test_every_row_runs_on_a_cth_of_the_tokens_and_attention_on_a_cth_of_the_scores():
    """Llama-3.1-8B prefill, one sequence of 8192 tokens, CP 2: each device holds 4096 tokens.
    QKV projection: 2 · 4096 tokens · 4096 · (4096 + 2 · 1024) = 206,158,430,208 FLOPs a layer,
    half of 8192 tokens'. Attention: 32 query heads, each ½ · 4096 queries · 8192 keys =
    16,777,216 scores (half of the whole sequence's ½ · 8192² = 33,554,432), each
    2 · 128 + 5 + 2 · 128 = 517 FLOPs: 32 · 16,777,216 · 517 = 277,562,261,504 a layer. The LM head
    at prefill runs on the last token alone: not halved. K and V of all 8192 tokens pass
    through each device's attention: its traffic is Q and O of 4096 tokens, K and V of 8192."""
    one = by_name(spread(L8, "prefill", 1, 8192, ROOF, NVLINK, Plan()))
    two = by_name(spread(L8, "prefill", 1, 8192, ROOF, NVLINK, Plan(cp=2)))
    assert two["QKV projection"].flops == 2 * 4096 * 4096 * 6144 == 206_158_430_208
    assert two["attention"].flops == 32 * 16_777_216 * 517 == 277_562_261_504
    for name, op in one.items():
        if name == "LM head":
            assert two[name].flops == op.flops
        else:
            assert two[name].flops * 2 == op.flops, name
    # fused attention's traffic: Q and O of the device's 4096 tokens, K and V of all 8192
    q_o = 2 * 4096 * 32 * 128 * 2
    k_v = 2 * 8192 * 8 * 128 * 2
    assert two["attention"].bytes == q_o + k_v


def test_the_causal_load_balance_of_two_chunks_a_device():
    """Causal work of query position p is its p + 1 keys. s = 16 tokens on C = 2 devices.

    Megatron's split, 2C = 4 chunks of 4, device i taking chunks i and 2C − 1 − i:
        device 0: chunks 0 and 3, positions 0–3 and 12–15: (1+2+3+4) + (13+14+15+16) = 10 + 58 = 68
        device 1: chunks 1 and 2, positions 4–11: (5+6+7+8) + (9+10+11+12) = 26 + 42 = 68
    C contiguous chunks of 8:
        device 0: positions 0–7: 1 + … + 8 = 36;  device 1: positions 8–15: 9 + … + 16 = 100

    In general chunk j (c = s/2C tokens) costs j·c² + ½c² at the half convention, so device i's
    pair costs (i + 2C − 1 − i)·c² + c² = 2C·c² = s²/2C: the same for every i, 1/C of the
    causal ½s², which is what attnroof charges each device (½ · s/C queries · s keys)."""

    def work(positions):
        return sum(p + 1 for p in positions)

    s, c = 16, 2
    chunk = s // (2 * c)
    chunks = [range(j * chunk, (j + 1) * chunk) for j in range(2 * c)]
    balanced = [work(chunks[i]) + work(chunks[2 * c - 1 - i]) for i in range(c)]
    contiguous = [work(range(i * s // c, (i + 1) * s // c)) for i in range(c)]
    assert balanced == [68, 68]
    assert contiguous == [36, 100]
    for big_c in (2, 4, 8, 16):  # the half convention: 2C · c² for every device, 1/C of ½s²
        size = 131072 // (2 * big_c)
        pairs = [(i + 2 * big_c - 1 - i) * size**2 + size**2 for i in range(big_c)]
        assert set(pairs) == {131072**2 // (2 * big_c)} == {kept_scores(131072 // big_c, 131072, True)}
        contiguous_share = [(i * 2 + 1) * (131072 // big_c) ** 2 // 2 for i in range(big_c)]
        assert max(contiguous_share) / (sum(contiguous_share) / big_c) == (2 * big_c - 1) / big_c


def ring_bytes(s, pass_name=""):
    return sum(
        c.count * c.comm.bytes_per_device
        for c in s.slowest.comms
        if c.comm.name.startswith("K/V") and c.pass_name == pass_name
    )


def test_the_ring_sends_cp_minus_one_local_kv_blocks_a_layer():
    """Llama-3.1-70B prefill, batch 2 × 16,384 tokens, TP 8, CP 4: a device holds 2 × 4096 = 8192
    tokens; at TP 8 it keeps one of the 8 KV heads: K and V are 2 · 1 · 128 = 256 elements a token,
    512 B in bf16, 8192 · 512 = 4,194,304 B a ring step. C − 1 = 3 steps a layer, 80 layers:
    3 · 80 · 4,194,304 = 1,006,632,960 B per device. The CP group (stride 8) spans four boards:
    the scale-out link."""
    s = spread(L70, "prefill", 2, 16384, ROOF, NVLINK, Plan(tp=8, cp=4))
    ring = [c for c in s.slowest.comms if c.comm.name.startswith("K/V")]
    assert len(ring) == 1 and ring[0].count == 3 * 80 and ring[0].comm.devices == 4
    assert ring[0].comm.bytes_per_device == 8192 * 512 == 4_194_304
    assert ring_bytes(s) == 1_006_632_960
    assert ring[0].link.kind == "scale-out"
    assert "TP 8 × CP 4 × PP 1 × DP 1 = 32 devices" in run_cli(
        "model", "--model", "llama-3.1-70b", "--device", "h200", "--batch", "2", "--context", "16384",
        "--tp", "8", "--cp", "4", "--phase", "prefill",
    ).stdout  # fmt: skip


def test_the_backward_ring_sends_twice_the_forwards_and_recomputation_repeats_the_forward():
    """Llama-3.1-8B, micro-batch 1 × 8192, CP 2: 4096 tokens a device, K and V 2 · 8 · 128 ·
    2 B = 4096 B a token: 16,777,216 B a step, one step a layer (C − 1 = 1), 32 layers:
    536,870,912 B forward. TransformerEngine's backward sends K, V and the partial dK, dV
    (kv first, kv+dkv in the middle steps, dkv last: 2(C − 1) blocks): 1,073,741,824 B. Full
    recomputation runs the forward's ring again."""
    s = train_spread(L8, 1, 8192, ROOF, NVLINK, Plan(cp=2), recompute="full")
    assert ring_bytes(s, FORWARD) == 32 * 4096 * 4096 == 536_870_912
    assert ring_bytes(s, RECOMPUTE_PASS) == 536_870_912
    assert ring_bytes(s, BACKWARD) == 2 * 536_870_912


def test_gradients_sync_over_dp_times_cp_replicas():
    """The CP ranks hold the same weights: Megatron reduces their gradients with the data-parallel
    replicas', over dp · cp devices (``get_data_parallel_group(with_context_parallel=True)``).
    Llama-3.1-8B (N = 8,030,261,248), DP 2 × CP 2: an all-reduce over 4 devices of 2N bytes of bf16
    gradients, a ring sending 2 · 3/4 · 2N = 24,090,783,744 B per device; ZeRO 1 shards the 12 B a
    parameter of AdamW state four ways: 3 · N = 24,090,783,744 B a device."""
    n = params(L8)
    s = train_spread(L8, 4, 8192, ROOF, NVLINK, Plan(dp=2, cp=2), capacity_bytes=CAP)
    (sync,) = s.slowest.step_comms
    assert sync.comm.devices == 4 and sync.comm.collective == "all-reduce"
    assert sync.comm.bytes_per_device == 2 * 3 / 4 * 2 * n == 24_090_783_744
    z = train_spread(L8, 4, 8192, ROOF, NVLINK, Plan(dp=2, cp=2, zero=1), capacity_bytes=CAP)
    assert z.busiest_memory.optimizer_bytes == 12 * n / 4 == 3 * n
    # the same weights on 2 × 2 devices: 4 · 4096 of each sequence's tokens, batch 4 over 2 replicas
    assert s.plan.devices == 4 and s.max_batch == 2 * s.stage_max_batch


def test_expert_parallelism_is_carved_from_dp_times_cp():
    """Megatron's expert grid: tp · cp · dp = etp · ep · edp (etp = tp here), so EP divides dp · cp
    and the experts' gradients sync over the dp · cp / ep replicas that hold the same experts.
    Qwen3-30B-A3B with DP 2 × CP 2 and EP 4: 4 devices, no expert sync group (4/4 = 1)."""
    q = builtin("qwen3-30b-a3b")
    s = train_spread(q, 2, 4096, ROOF, NVLINK, Plan(dp=2, cp=2, ep=4))
    assert s.plan.devices == 4
    assert not [c for c in s.slowest.step_comms if c.comm.name.startswith("expert")]
    s = train_spread(q, 2, 4096, ROOF, NVLINK, Plan(dp=2, cp=2, ep=2))
    (experts,) = [c for c in s.slowest.step_comms if c.comm.name.startswith("expert")]
    assert experts.comm.devices == 2


def test_activations_and_the_kv_cache_are_a_cth():
    """Every tensor a layer keeps is per token, and a device holds context/C tokens of each
    sequence: activations C times smaller (training and prefill), the prefill's KV cache too
    (each device keeps its own chunks' K and V; Llama-3.1-8B: 131,072 B a token, 2 × 4096 tokens
    a device = 1,073,741,824 B at CP 2)."""
    train = [train_spread(L8, 2, 8192, ROOF, NVLINK, Plan(cp=c), capacity_bytes=CAP) for c in (1, 2)]
    assert train[0].busiest_memory.activation_bytes == 2 * train[1].busiest_memory.activation_bytes
    pre = [spread(L8, "prefill", 2, 8192, ROOF, NVLINK, Plan(cp=c), capacity_bytes=CAP) for c in (1, 2)]
    assert pre[0].busiest_memory.activation_bytes == 2 * pre[1].busiest_memory.activation_bytes
    assert pre[1].busiest_memory.kv_cache_bytes == 2 * 4096 * 131072 == 1_073_741_824


def test_the_ring_hides_only_behind_attention_in_the_estimate():
    """With --overlap the estimate hides the ring behind the attention kernels of its pass, not
    the GEMMs: on a 1 GB/s scale-out link the ring outlasts attention, and the excess adds to the
    layer's time. The bound hides it behind all the kernels; it never exceeds the estimate."""
    slow = Links(scaleup_bytes_per_s=450e9, scaleup_domain=8, scaleout_bytes_per_s=1e9)
    plan = Plan(tp=8, cp=2, overlap=True)
    s = spread(L70, "prefill", 1, 16384, ROOF, slow, plan).slowest
    attention = sum(o.count * o.time_s for o in s.ops if o.attention)
    ring = sum(c.count * c.time_s for c in s.comms if c.behind)
    assert ring > attention
    layer_compute = sum(o.count * o.time_s for o in s.ops if o.layer_kind == "layer")
    assert s.time_s >= layer_compute + ring - attention
    for overlap in (False, True):
        for phase in ("prefill", "train"):
            p = Plan(tp=8, cp=2, overlap=overlap)
            if phase == "train":
                run = train_spread(L70, 1, 16384, ROOF, slow, p)
            else:
                run = spread(L70, phase, 1, 16384, ROOF, slow, p)
            assert run.bound_time_s <= run.time_s * (1 + 1e-12)


@pytest.mark.parametrize("zero", [1, 2])
@pytest.mark.parametrize("overlap", [[], ["--overlap"]])
@pytest.mark.parametrize("recompute", ["none", "selective"])
def test_llama3_405b_with_cp_16_at_131k_tokens_is_above_metas_measured_38_percent(
    tmp_path, zero, overlap, recompute
):
    """The Llama 3 paper (Dubey et al. 2024, arXiv 2407.21783), Table 4's long-context row:
    16,384 H100s, TP 8, CP 16, PP 16, DP 8, sequences of 131,072 tokens, batch size 16 per DP
    group (16M tokens a step: 8 · 16 · 131,072 = 16,777,216), measured 380 TFLOP/s a GPU, 38%
    BF16 MFU. attnroof's bound: MFU ≤ 47.4% without recomputation (42.1% selective), with
    each device's 8,192 tokens a sequence through 126/16 ≈ 8 layers at the roofline, the ring
    hidden behind the kernels, and 1F1B's bubble (16 micro-batches over 16 stages). Activations
    keep 68 GB of the 80 GB H100's: it fits without full recomputation."""
    config = tmp_path / "llama3-405b.json"
    config.write_text(json.dumps(LLAMA3_405B))
    argv = [
        "model", "--model", str(config), "--device", "h100", "--phase", "train", "--context", "131072",
        "--batch", "128", "--tp", "8", "--cp", "16", "--pp", "16", "--dp", "8", "--microbatches", "16",
        "--zero", str(zero), "--sp", "--recompute", recompute, *overlap, "--json",
    ]  # fmt: skip
    out = run_cli(*argv).json()
    t = out["totals"]
    assert out["parallel"]["cp"] == 16 and out["parallel"]["devices"] == 16_384
    assert 0.38 <= t["mfu"] <= 0.50
    assert t["estimate_time_s"] >= t["time_s"]
    assert out["memory"]["per_device"]["fits"]


def test_a_calibration_is_refused_under_context_parallelism(tmp_path):
    """A calibration measures attention over whole sequences; a CP device runs s/C queries against
    s keys, a shape it never measured: refused in one line rather than forecast wrongly."""
    from pathlib import Path

    from conftest import assert_one_line_error

    cal = tmp_path / "cal.json"
    data = Path(__file__).parent / "data" / "h200-reference.jsonl"
    assert run_cli("calibrate", str(data), "-o", str(cal)).returncode == 0
    argv = ("model", "--model", "llama-3.1-8b", "--device", "h200", "--phase", "prefill", "--context", "8192")
    assert run_cli(*argv, "--tp", "2", "--calibration", str(cal)).returncode == 0
    assert_one_line_error(run_cli(*argv, "--cp", "2", "--calibration", str(cal)), "--calibration", "--cp 2")


def test_the_all_gather_form_sends_what_the_ring_sends_in_one_collective():
    """Llama 3's all-gather of K/V (the paper's §3.3.2) against TransformerEngine's ring, 8B
    training at 1 × 8192, CP 4 (8 KV heads of 128, bf16; each device's K and V of 2048 tokens:
    2048 · 2 · 8 · 128 · 2 B = 8,388,608 B). The ring: 3 steps of it per layer forward, 3 of twice
    it backward. The all-gather: one gather of the whole 4 × 8,388,608 B per layer forward (each
    device sends 3/4 of it: the same 25,165,824 B), and backward a second gather and a
    reduce-scatter of the gradients (the same 2 × 25,165,824 B). Same bytes; the ring hides behind
    attention, the gather before it cannot."""
    ring, gather = (
        train_spread(L8, 1, 8192, ROOF, NVLINK, Plan(cp=4, cp_comm=form)) for form in ("ring", "allgather")
    )

    def sent(s, pass_name, what):
        return sum(
            c.count * c.comm.bytes_per_device
            for c in s.slowest.comms
            if c.pass_name == pass_name and what in c.comm.name
        )

    local = 2048 * 2 * 8 * 128 * 2
    assert local == 8_388_608
    for s, what in ((ring, "ring"), (gather, "K/V")):
        assert sent(s, FORWARD, what) == pytest.approx(32 * 3 * local)
    assert sent(ring, BACKWARD, "ring") == pytest.approx(32 * 3 * 2 * local)
    assert sent(gather, BACKWARD, "K/V") + sent(gather, BACKWARD, "dK/dV") == pytest.approx(
        32 * 3 * 2 * local
    )
    assert {c.comm.collective for c in gather.slowest.comms if "K/V" in c.comm.name} == {"all-gather"}
    assert gather.bound_time_s == pytest.approx(ring.bound_time_s, rel=1e-3)


def test_cp_comm_needs_context_parallelism():
    r = run_cli("model", "--model", "llama-3.1-8b", "--device", "h100", "--phase", "prefill", "--context", "8192",
                "--tp", "2", "--cp-comm", "allgather")  # fmt: skip
    assert r.returncode == 2 and "--cp-comm allgather applies to --cp 2 or more" in r.stderr
