"""Routing as an input (issue 33): how many experts a batch touches under each ``--routing``, the
bound no router goes below, a trace's busiest device, and DeepSeek-V3's node-limited dispatch.

Each figure is worked by hand or by a method of its own: the touched experts by enumerating every
routing of a tiny layer and by sampling tokens with exactly the inclusion probabilities (Madow's
systematic sampling), the all-to-all bytes from the hidden width and the DeepSeek-V3 report's "at
most 4 nodes" (§2.1.2, §3.2.2).
"""

from __future__ import annotations

import itertools
import math

import pytest

from attnroof.devices.links import Links
from attnroof.errors import InputError
from attnroof.model.comms import nodes_per_token
from attnroof.model.config import builtin
from attnroof.model.hf_config import from_hf
from attnroof.model.parallel import Plan
from attnroof.model.spread import spread
from attnroof.ops.routing import FEWEST, UNIFORM, Routing, parse_routing, trace_counts, zipf_inclusion
from attnroof.roofline import Roof
from attnroof.units import duration
from conftest import run_cli

MIXTRAL = ["model", "--model", "mixtral-8x7b", "--context", "4096", "--batch", "16", "--device", "h200"]


def _touched(routing: Routing, n: int, experts: int, k: int) -> float:
    return float(routing.touched(n, experts, k))


# ---------------------------------------------------------------- touched experts


def test_uniform_is_the_closed_form_and_alpha_zero_is_uniform():
    """E(1 − (1 − k/E)ⁿ): DeepSeek-V3 at batch 8, 256 · (1 − (31/32)⁸) = 57.43."""
    assert (
        _touched(UNIFORM, 8, 256, 8)
        == pytest.approx(256 * (1 - (31 / 32) ** 8))
        == pytest.approx(57.43, abs=0.01)
    )
    assert _touched(Routing("skewed", 0.0), 8, 256, 8) == pytest.approx(_touched(UNIFORM, 8, 256, 8))
    assert _touched(UNIFORM, 1, 256, 8) == pytest.approx(8)  # one token touches exactly its k


def test_a_skew_by_hand():
    """E = 4, top-2, Zipf α = 1: weights 1, 1/2, 1/3, 1/4 (sum 25/12) scaled to sum 2: π = 0.96,
    0.48, 0.32, 0.24. Two tokens: Σ 1 − (1 − π)² = 0.9984 + 0.7296 + 0.5376 + 0.4224 = 2.688."""
    pi = zipf_inclusion(4, 2, 1.0)
    assert pi == pytest.approx([0.96, 0.48, 0.32, 0.24])
    assert _touched(Routing("skewed", 1.0), 2, 4, 2) == pytest.approx(2.688)
    # α = 3: the first expert's 2 · 1/(1 + 1/8 + 1/27 + 1/64) = 1.69 passes 1: capped, the other
    # three carry the remaining 1 in proportion, 1/8 : 1/27 : 1/64
    rest = [1 / 8, 1 / 27, 1 / 64]
    assert zipf_inclusion(4, 2, 3.0) == pytest.approx([1.0, *(w / sum(rest) for w in rest)])


def _systematic(pi, rng):
    """Madow's systematic sampling: k distinct experts, expert e with probability exactly π_e."""
    edges, u, picked, total = list(itertools.accumulate(pi)), rng.random(), [], 0.0
    for e, edge in enumerate(edges):
        while u + len(picked) < edge - 1e-12:
            picked.append(e)
        total = edge
    assert len(picked) == round(total) and len(set(picked)) == len(picked)
    return picked


def test_the_skewed_expectation_against_sampled_tokens():
    """A router that draws each token's 4 of 16 experts with the Zipf-1.2 inclusion probabilities
    (systematic sampling: distinct experts, those marginals exactly), 8 tokens a batch: the mean
    distinct experts of 4,000 batches is the formula's, within 2 %."""
    np = pytest.importorskip("numpy")
    rng = np.random.default_rng(33)
    pi = zipf_inclusion(16, 4, 1.2)
    mean = np.mean([len({e for _ in range(8) for e in _systematic(pi, rng)}) for _ in range(4000)])
    assert mean == pytest.approx(_touched(Routing("skewed", 1.2), 8, 16, 4), rel=0.02)
    assert mean < _touched(UNIFORM, 8, 16, 4)  # a skewed router reads fewer experts


def test_the_fewest_a_batch_can_touch_is_its_top_k():
    """Every routing of 3 tokens, each to 2 of 4 experts (6³ = 216 of them): the fewest experts
    touched is 2 (all three to the same pair), the most 4; ``fewest`` is that floor at any batch."""
    pairs = list(itertools.combinations(range(4), 2))
    counts = [len(set(itertools.chain(*r))) for r in itertools.product(pairs, repeat=3)]
    assert (min(counts), max(counts), len(counts)) == (2, 4, 216)
    assert FEWEST.touched(3, 4, 2) == 2 and FEWEST.touched(10**6, 256, 8) == 8


def test_a_trace_by_hand():
    """Counts 3, 2, 2, 1 of 4 tokens at top-2 (Σ = 8 = 2 · 4): π = 0.75, 0.5, 0.5, 0.25. One
    token touches its 2; two touch 0.9375 + 0.75 + 0.75 + 0.4375 = 2.875. On EP 2 the devices
    receive 5 and 3 of 8: the busiest 5/4 = 1.25× the mean; expert 0 takes 3/2 = 1.5× the mean."""
    r = Routing("trace", counts=(3, 2, 2, 1), source="t.txt")
    r.check(4, 2)
    assert _touched(r, 1, 4, 2) == pytest.approx(2)
    assert _touched(r, 2, 4, 2) == pytest.approx(2.875)
    assert r.busiest_device(2) == 1.25 and r.busiest_device(1) == 1.0
    assert r.busiest_expert() == (0, 1.5)


def test_the_forms_and_the_file_format():
    assert parse_routing("uniform") == UNIFORM and parse_routing("fewest") == FEWEST
    assert str(parse_routing("skewed:1.5")) == "skewed:1.5"
    text = "# Mixtral layer 0\n40\n30 # expert 1\n\n20\n10\n8\n8\n6\n6\n"
    assert trace_counts(text, "f") == (40, 30, 20, 10, 8, 8, 6, 6)
    r = parse_routing("trace:a:b.txt", read=lambda path: text)  # the path is all after the first colon
    assert r.source == "a:b.txt" and str(r) == "trace:a:b.txt"


@pytest.mark.parametrize(
    "text, needle",
    [
        ("3\nx\n", "line 2: 'x' is not a count of tokens"),
        ("3\n-4\n", "line 2: '-4' is not a count of tokens"),
        ("3\n2.5\n", "line 2: '2.5' is not a count"),
        ("# nothing\n\n", "no counts"),
        ("0\n0\n", "every count is 0"),
        (f"{2**60}\n", "is not a count of tokens"),
    ],
)
def test_a_bad_trace_file_is_refused_naming_its_line(text, needle):
    with pytest.raises(InputError, match=needle.replace("(", r"\(").replace(".", r"\.")):
        trace_counts(text, "t.txt")


@pytest.mark.parametrize(
    "counts, needle",
    [
        ((1, 1, 1), "3 counts for the model's 4 experts"),
        ((3, 2, 2, 0), "the counts sum to 7, not a multiple of top-k 2"),
        ((5, 1, 1, 1), "expert 0 has 5 tokens of the trace's 4"),
    ],
)
def test_a_trace_that_cannot_be_the_models_is_refused(counts, needle):
    with pytest.raises(InputError, match=needle):
        Routing("trace", counts=counts, source="t.txt").check(4, 2)


# ---------------------------------------------------------------- the command


def test_the_step_under_each_routing_and_the_bound_under_any(tmp_path):
    """Mixtral decode of 16: 7.9 experts of 8 a layer uniformly, 7.1 at Zipf 1.2, 2 at the
    fewest. The bound whatever the router does (``any_routing_time_s``) is the step at the fewest,
    and every routing's step lies between it and ``all``'s."""
    trace = tmp_path / "mixtral.txt"
    trace.write_text("40\n30\n20\n10\n8\n8\n6\n6\n")  # 64 tokens × top-2 = 128
    times = {}
    for form in ("fewest", "skewed:1.2", f"trace:{trace}", "uniform", "all"):
        doc = run_cli(*MIXTRAL, "--routing", form, "--json").json()
        assert doc["routing"] == form
        times[form] = doc["totals"]["time_s"]
        floor = doc["totals"]["any_routing_time_s"]
        assert floor == pytest.approx(times.get("fewest", floor))
        assert doc["totals"]["bound_s"] == pytest.approx(min(floor, times[form]))  # the forecast's "bound ≥"
        if "forecast" in doc:
            assert doc["forecast"]["bound_time_s"] == doc["totals"]["bound_s"]
    assert list(times.values()) == sorted(times.values())
    doc = run_cli(*MIXTRAL, "--routing", f"trace:{trace}", "--json").json()
    assert doc["routing_trace"]["busiest_expert"] == 0
    assert doc["routing_trace"]["busiest_expert_over_mean"] == pytest.approx(40 / 16)
    text = run_cli(*MIXTRAL).stdout
    at_uniform = run_cli(*MIXTRAL, "--json").json()["totals"]
    assert f"time ≥ {duration(at_uniform['time_s'])} (uniform routing)" in text  # the table's sum
    line = f"bound whatever the routing: step ≥ {duration(at_uniform['any_routing_time_s'])}"
    assert line in text and "the fewest experts a batch can touch, 2 of 8 a layer" in text
    assert text.rstrip().endswith(f"bound ≥ {duration(at_uniform['bound_s'])}")  # the forecast line's
    assert "any_routing_time_s" not in run_cli(*MIXTRAL[:2], "llama-3.1-8b", *MIXTRAL[3:], "--json").stdout


def test_a_trace_sets_the_busiest_expert_parallel_device(tmp_path):
    """Mixtral on EP 4 (two experts a device): the trace's devices receive 70, 30, 16 and 12 of
    128, the busiest 70 · 4/128 = 2.1875× the mean, as --expert-imbalance 2.1875 would say."""
    trace = tmp_path / "mixtral.txt"
    trace.write_text("40\n30\n20\n10\n8\n8\n6\n6\n")
    base = ["model", "--model", "mixtral-8x7b", "--phase", "prefill", "--context", "1024", "--batch", "4",
            "--device", "h200", "--ep", "4", "--json"]  # fmt: skip
    doc = run_cli(*base, "--routing", f"trace:{trace}").json()
    assert doc["parallel"]["expert_imbalance"] == pytest.approx(2.1875)
    by_flag = run_cli(*base, "--routing", f"trace:{trace}", "--expert-imbalance", "2")
    assert by_flag.returncode == 2 and "the trace already says how busy" in by_flag.stderr


@pytest.mark.parametrize(
    "form, extra, needle",
    [
        ("skewed:x", [], "--routing skewed:x: the Zipf exponent 'x' is not a number from 0 to 16"),
        ("skewed:-1", [], "is not a number from 0 to 16"),
        ("skewed:nan", [], "is not a number from 0 to 16"),
        ("zipf", [], "--routing 'zipf': expected uniform, all, fewest, skewed:ALPHA"),
        ("trace:", [], "expected uniform, all, fewest"),
        ("trace:/no/such/trace.txt", [], "cannot read routing trace '/no/such/trace.txt'"),
        ("skewed:1", ["--phase", "train"], "a training step is costed at uniform routing"),
    ],
)
def test_bad_routing_is_one_line_and_exit_2(form, extra, needle):
    r = run_cli(*MIXTRAL, "--routing", form, *extra)
    assert r.returncode == 2 and r.stdout == "", r
    assert len(r.stderr.strip().splitlines()) == 1 and needle in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_a_trace_for_the_wrong_model_is_one_line(tmp_path):
    trace = tmp_path / "t.txt"
    trace.write_text("1\n1\n")
    for model, needle in (
        ("mixtral-8x7b", "2 counts for the model's 8 experts"),
        ("llama-3.1-8b", "has no experts"),
    ):
        r = run_cli("model", "--model", model, "--context", "1024", "--routing", f"trace:{trace}")
        assert r.returncode == 2 and needle in r.stderr and len(r.stderr.strip().splitlines()) == 1, r


# ---------------------------------------------------------------- node-limited routing

LINKS = Links(scaleup_bytes_per_s=450e9, scaleup_domain=8, scaleout_bytes_per_s=50e9)
DSV3 = builtin("deepseek-v3")


def test_deepseek_v3_reads_its_groups():
    """config.json: n_group 8, topk_group 4, top-8 of 256 experts, topk_method noaux_tc."""
    ex = DSV3.experts
    assert (ex.groups, ex.groups_per_token, ex.experts // ex.groups) == (8, 4, 32)
    assert builtin("qwen3-30b-a3b").experts.groups_per_token == 0  # no groups: no limit
    base = {"model_type": "deepseek_v3", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
            "intermediate_size": 128, "moe_intermediate_size": 32, "vocab_size": 100, "n_routed_experts": 16,
            "num_experts_per_tok": 4, "kv_lora_rank": 16, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8,
            "v_head_dim": 8}  # fmt: skip
    assert from_hf({**base, "n_group": 4, "topk_group": 2}).experts.groups_per_token == 2
    assert (
        from_hf({**base, "n_group": 4, "topk_group": 2, "topk_method": "greedy"}).experts.groups_per_token
        == 0
    )
    for bad, needle in (({"n_group": 3}, "n_group = 3 does not divide the 16 experts"),
                        ({"n_group": 4, "topk_group": 5}, "topk_group = 5 exceeds n_group = 4"),
                        ({"n_group": 8, "topk_group": 1}, "hold fewer than the 4 experts")):  # fmt: skip
        with pytest.raises(InputError, match=needle):
            from_hf({**base, **bad})


def test_nodes_a_token_reaches():
    """EP 64 over 8 nodes: a group of 32 experts is one node's, 4 groups a token: 4 nodes (the
    report's M = 4). EP 16 over 2 nodes: at most 2. EP 256 over 32 nodes: a group spans 4 nodes,
    4 groups reach 16 of them, so top-8 limits first: 8. Inside one node: nothing to limit."""
    ex = DSV3.experts
    assert [nodes_per_token(ex, ep, 8) for ep in (64, 16, 256, 8)] == [4, 2, 8, None]
    assert nodes_per_token(builtin("qwen3-30b-a3b").experts, 64, 8) is None


def test_node_limited_dispatch_crosses_each_node_once():
    """DeepSeek-V3 prefill, EP 64 on 8-GPU nodes, 4,096 tokens a device: the buffer is
    4,096 · top-8 · hidden 7,168 · 2 B = 469,762,048 B. Sent per token-expert pair it would put
    56/64 of it, 411 MB, on InfiniBand; sent once to each of at most 4 nodes, 4/8 of that,
    205,520,896 B; NVLink then forwards every pair not landed on its GPU: 7/8, 411,041,792 B."""
    s = spread(DSV3, "prefill", 64, 4096, Roof(989.4e12, 4.8e12), LINKS, Plan(ep=64, dp=64))
    c = {x.comm.name: x.comm for x in s.slowest.comms}
    buffer = 4096 * 8 * 7168 * 2
    assert buffer == 469_762_048
    assert (
        c["expert dispatch (across)"].bytes_per_device
        == pytest.approx(buffer * 4 / 8 * 56 / 64)
        == 205_520_896
    )
    assert c["expert dispatch (in domain)"].bytes_per_device == pytest.approx(buffer * 7 / 8) == 411_041_792
    assert c["expert combine (across)"].bytes_per_device == c["expert dispatch (across)"].bytes_per_device
    # a router without groups (Qwen3-30B-A3B) keeps Megatron's per-pair sends: (E − local)/E across
    q = spread(
        builtin("qwen3-30b-a3b"), "prefill", 16, 4096, Roof(989.4e12, 4.8e12), LINKS, Plan(ep=16, dp=16)
    )
    across = next(x.comm for x in q.slowest.comms if x.comm.name == "expert dispatch (across)")
    assert across.bytes_per_device == 8 / 16 * 4096 * 8 * 2048 * 2
    assert math.isclose(c["expert dispatch (across)"].message_bytes, buffer / 2)
