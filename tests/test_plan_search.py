"""``attnroof plan``: every plan on up to N devices, costed as ``model`` costs one, rejected with
its reason counted, and reduced to the Pareto front of step time, memory and devices."""

from __future__ import annotations

import json

import pytest

from attnroof.errors import InputError
from attnroof.model.config import builtin
from attnroof.model.parallel import Plan
from attnroof.model.search import (
    NOT_FIT,
    NOT_SCHEDULE,
    NOT_SEQUENCE,
    NOT_STATES,
    Option,
    options,
    parse_where,
)
from conftest import assert_one_line_error, run_cli, run_cli_process
from test_train_parallel import LLAMA3_405B

L70 = ("--model", "llama-3.1-70b", "--device", "h100")


def test_the_candidates_of_two_devices_by_hand():
    """Llama-3.1-8B (32 heads on 8 KV heads, 32 layers), training 8 sequences of 8192 on up to 2
    devices; micro-batch counts are the divisors of a replica's sequences, × 3 recomputations:
    n = 1: 4 counts (1, 2, 4, 8) × 3 = 12;
    n = 2: TP 2: 12; DP 2 (4 sequences a replica: 3 counts) × ZeRO 0–3 × 3 = 36; CP 2 (8192 cuts
    into 4 chunks; its 2 devices hold the same weights, so ZeRO applies): 4 × 4 × 3 = 48;
    PP 2: 1F1B at 4 counts, ZB-H1 at 4, interleaved with 2 and with 4 chunks a device at the 3
    counts that are multiples of 2 (32 layers split into 4 and 8 chunks) = 14 schedules × 3 = 42
    — the 2 interleaved plans at one micro-batch rejected. 150 in all."""
    from collections import Counter

    rejected: Counter[str] = Counter()
    found = list(options(builtin("llama-3.1-8b"), "train", 8, 2, rejected, context=8192))
    assert len(found) == 12 + 12 + 36 + 48 + 42 == 150
    assert rejected == {NOT_SCHEDULE: 2}
    assert Option(Plan(tp=1, pp=1, dp=2, microbatches=4, overlap=True, zero=3), "full") in found
    assert Option(Plan(cp=2, microbatches=8, overlap=True, zero=1), "none") in found
    plan = Plan(pp=2, microbatches=4, overlap=True, schedule="interleaved", virtual_stages=4)
    assert Option(plan, "selective") in found


def test_where_conditions():
    o = Option(Plan(tp=8, pp=2, dp=4, zero=1), "selective")
    assert parse_where("tp<=8")(o) and parse_where("pp=2")(o) and not parse_where("zero>=2")(o)
    assert parse_where("recompute!=full")(o) and not parse_where("recompute=none")(o)
    assert parse_where("schedule=interleaved")(Option(Plan(pp=2, schedule="interleaved", virtual_stages=2)))
    for bad, needle in (("tp<=eight", "whole number"), ("xp=2", "no field 'xp'"), ("tp", "FIELD OP VALUE")):
        with pytest.raises(InputError, match=needle):
            parse_where(bad)


def test_llama_70b_on_64_h100s_a_megatron_plan_first():
    """The issue's example: Llama-3.1-70B, 64 H100s (eight HGX boards), 4M tokens of 8192 a step.
    Every costed plan is counted as fitting or rejected; the fastest that fits keeps TP within a
    board (the scale-up domain of 8); and the front's first plan costs exactly what ``model``
    costs for the same flags."""
    out = run_cli(
        "plan", *L70, "--devices", "64", "--phase", "train", "--global-batch", "4M", "--context", "8192",
        "--json",
    ).json()  # fmt: skip
    assert out["batch"] == 512  # 4·2^20 tokens / 8192
    # a plan tried either fits or is rejected for its memory or its sequence split (the rest never
    # reached "tried": they do not divide)
    assert out["tried"] == out["fit"] + out["rejected"][NOT_FIT] + out["rejected"].get(NOT_SEQUENCE, 0)
    assert out["costed"] == out["fit"]  # what cannot fit is rejected on its memory, not costed
    best = out["front"][0]
    p = best["parallel"]
    assert p["tp"] <= 8 and p["devices"] <= 64
    times = [r["time_s"] for r in out["front"]]
    assert times == sorted(times)
    same = run_cli(
        "model", *L70, "--phase", "train", "--batch", "512", "--context", "8192",
        "--tp", str(p["tp"]), "--pp", str(p["pp"]), "--dp", str(p["dp"]), "--cp", str(p["cp"]),
        "--cp-comm", p["cp_comm"], "--microbatches", str(p["microbatches"]),
        "--zero", str(p["zero"]), "--recompute", best["recompute"], "--overlap",
        *(["--sp"] if p["sequence_parallel"] else []), "--json",
    ).json()["totals"]  # fmt: skip
    assert same["time_s"] == pytest.approx(best["time_s"], rel=1e-12)
    assert same["estimate_time_s"] == pytest.approx(best["estimate_time_s"], rel=1e-12)


def test_every_plan_considered_is_counted_and_the_front_told_apart():
    """Llama-3.1-70B on 64 H100s: the plans considered are those tried and those refused before
    (785 break the pipeline schedule's rules; "47,226 tried" alone left them out), and plans
    whose bounds differ print differently (at 3 digits the first four all read 31.5 s; they
    differ by 4 in 10^5)."""
    argv = ("plan", *L70, "--devices", "64", "--phase", "train", "--global-batch", "4M", "--context", "8192")
    out = run_cli(*argv, "--json").json()
    assert out["considered"] == out["tried"] + sum(out["refused"].values())
    assert out["considered"] == out["fit"] + sum(out["rejected"].values())
    assert out["refused"][NOT_SCHEDULE] == 785
    text = run_cli(*argv, "--top", "12", "--profile", "none").stdout  # the bound's table alone
    assert f"{out['considered']:,} plans considered, {out['tried']:,} tried, {out['fit']:,} fit" in text
    refused = next(ln for ln in text.splitlines() if ln.startswith("refused before they were tried: "))
    assert f"785 {NOT_SCHEDULE}" in refused and f"{out['refused'][NOT_STATES]:,} {NOT_STATES}" in refused
    rows = [ln.split("|") for ln in text.splitlines() if ln.startswith("|") and "devices" in ln]
    shown = [r[3].strip() for r in rows]
    times = [r["time_s"] for r in out["front"][:12]]
    assert len(rows) == 12
    for i in range(12):
        for j in range(i):
            assert (shown[i] == shown[j]) == (times[i] == times[j]), (shown[i], shown[j])


def test_the_front_is_not_dominated():
    """No plan on the front is beaten on all three of time, memory and devices by another plan
    that fits."""
    out = run_cli(
        "plan", "--model", "llama-3.1-8b", "--device", "h100", "--devices", "8", "--phase", "train",
        "--global-batch", "1M", "--context", "8192", "--json",
    ).json()  # fmt: skip

    def key(r):
        return (r["time_s"], r["memory_per_device_bytes"], r["parallel"]["devices"])

    for f in out["front"]:
        for r in out["plans"]:
            a, b = key(r), key(f)
            assert not (all(x <= y for x, y in zip(a, b, strict=True)) and a != b), (r, f)


def test_llama3_405b_on_16384_h100s_finds_metas_plan_or_better(tmp_path):
    """Among TP 8 × PP 16 plans on up to 16,384 H100s with 16M tokens of 8192 a step (the Llama 3
    paper's Table 4 row, 41% MFU measured), the search's fastest plan is at least as fast as Meta's
    (TP 8, PP 16, DP 128, 16 micro-batches), costed by ``model``, and its bound MFU ≥ 41%."""
    config = tmp_path / "llama3-405b.json"
    config.write_text(json.dumps(LLAMA3_405B))
    common = ("--model", str(config), "--device", "h100", "--phase", "train", "--context", "8192")
    out = run_cli(
        "plan", *common, "--devices", "16384", "--global-batch", "16M", "--where", "tp=8", "--where", "pp=16",
        "--where", "recompute=none", "--json",
    ).json()  # fmt: skip
    best = out["front"][0]
    meta = run_cli(
        "model", *common, "--batch", "2048", "--tp", "8", "--pp", "16", "--dp", "128", "--microbatches", "16",
        "--zero", "1", "--sp", "--overlap", "--json",
    ).json()["totals"]  # fmt: skip
    assert best["time_s"] <= meta["time_s"] * (1 + 1e-12)
    assert best["parallel"]["devices"] == 16384 and best["mfu"] >= 0.41


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (("--global-batch", "1000", "--context", "8192"), "--global-batch"),
        (("--batch", "8", "--global-batch", "1M", "--context", "8192"), "--global-batch"),
        (("--context", "8192", "--where", "tp<<8"), "--where"),
    ],
)
def test_bad_input_is_one_line(argv, needle):
    r = run_cli("plan", *L70, "--devices", "8", *argv)
    assert_one_line_error(r, needle)


def test_a_search_over_several_processes_gives_the_same_answer():
    """A large search is judged in forked processes (one per core): its plans, rejections and
    front are the ones one process finds. Run as a user runs it, in processes of its own."""
    argv = ("plan", "--model", "llama-3.1-8b", "--device", "h100", "--devices", "8", "--phase", "train",
            "--global-batch", "1M", "--context", "8192", "--json")  # fmt: skip
    one = run_cli_process(*argv, env={"ATTNROOF_WORKERS": "1"})
    two = run_cli_process(*argv, env={"ATTNROOF_WORKERS": "2"})
    assert one.returncode == two.returncode == 0, (one.stderr, two.stderr)
    a, b = json.loads(one.stdout), json.loads(two.stdout)
    assert a["tried"] >= 2_000  # enough to be spread (PARALLEL_FROM)
    assert a == b


def test_workers_must_be_a_whole_number():
    r = run_cli("plan", *L70, "--devices", "64", "--phase", "train", "--global-batch", "4M", "--context", "8192",
                env={"ATTNROOF_WORKERS": "two"})  # fmt: skip
    assert_one_line_error(r, "ATTNROOF_WORKERS")


def test_plan_searches_expert_tensor_parallelism_and_carries_the_imbalance():
    """Mixtral on 8 H100s: the search tries each expert cut as its TP (ETP = TP: EP divides the
    replicas) and each expert whole (ETP 1: EP divides TP × the replicas, so EP 8 at DP 1); a plan
    with EP > 1 carries --expert-imbalance (at most its EP), and carrying it costs time."""
    argv = ["plan", "--model", "mixtral-8x7b", "--device", "h100", "--devices", "8", "--phase", "prefill",
            "--context", "4096", "--batch", "8", "--json"]  # fmt: skip
    plain = run_cli(*argv).json()
    plans = [p["parallel"] for p in plain["plans"]]
    assert any(p["etp"] == 1 and p["ep"] == 8 and p["dp"] == 1 and p["tp"] == 8 for p in plans)
    assert any(p["etp"] == p["tp"] > 1 and p["ep"] > 1 for p in plans)
    assert all(p["ep"] <= p["tp"] * p["dp"] * p["cp"] for p in plans)
    skewed = run_cli(*argv, "--expert-imbalance", "1.5").json()
    by_plan = {json.dumps(p["parallel"] | {"expert_imbalance": 0}, sort_keys=True): p for p in plain["plans"]}
    moved = 0
    for p in skewed["plans"]:
        f = p["parallel"]["expert_imbalance"]
        assert f == (min(1.5, p["parallel"]["ep"]) if p["parallel"]["ep"] > 1 else 1.0)
        twin = by_plan.get(json.dumps(p["parallel"] | {"expert_imbalance": 0}, sort_keys=True))
        if twin is not None and f > 1:
            assert p["time_s"] >= twin["time_s"]
            moved += p["time_s"] > twin["time_s"]
    assert moved > 0


def test_plan_expert_imbalance_refused_in_one_line():
    for bad, words in ((["--model", "mixtral-8x7b", "--expert-imbalance", "0.5"], "≥ 1"),
                       (["--model", "llama-3.1-8b", "--expert-imbalance", "2"], "no experts")):  # fmt: skip
        r = run_cli(
            "plan", *bad, "--device", "h100", "--devices", "8", "--phase", "prefill", "--context", "4096"
        )
        assert_one_line_error(r, words)


def test_an_error_is_the_one_a_single_process_meets():
    """A device without a scale-out link: many plans fail, each process meets its own first
    failure, and the search reports the one a single process meets first, whatever the split."""
    argv = (
        "plan",
        "--model",
        "llama-3.1-8b",
        "--devices",
        "16",
        "--context",
        "4096",
        "--batch",
        "32",
        "--device",
        "l40",
    )  # fmt: skip (the L40's record has no scale-out figure: none was found)
    one, two = run_cli(*argv, env={"ATTNROOF_WORKERS": "1"}), run_cli(*argv, env={"ATTNROOF_WORKERS": "2"})
    assert one.returncode == two.returncode == 2 and one.stderr == two.stderr
    assert "--dp 16" in one.stderr and len(one.stderr.strip().splitlines()) == 1


def test_a_context_past_the_models_limit_is_said_in_the_header():
    """Nemotron-H-8B's config allows 8,192 positions: a search at 16,384 says so under the header
    and in JSON, as ``model`` does."""
    argv = ("plan", "--model", "nemotron-h-8b", "--device", "h100", "--devices", "8", "--phase", "train",
            "--global-batch", "1M")  # fmt: skip
    past = run_cli(*argv, "--context", "16384")
    assert past.stdout.splitlines()[2].startswith(
        "warning: context 16,384 is past the model's limit of 8,192"
    )
    assert run_cli(*argv, "--context", "16384", "--json").json()["context_beyond_model_limit"] is True
    within = run_cli(*argv, "--context", "8192")
    assert "warning" not in within.stdout


def test_a_plan_leaves_a_tenth_of_memory_free_unless_told():
    """By default a plan fits in 90% of the H100's 85,899,345,920 B (77,309,411,328 B): a plan that
    fits in all of it (--memory-headroom 0) but needs more than 90% is not among the default
    search's plans, and every plan the default keeps holds at most 77.3 GB."""
    argv = ("plan", "--model", "llama-3.1-8b", "--device", "h100", "--devices", "8", "--phase", "train",
            "--global-batch", "1M", "--context", "8192", "--profile", "none", "--json")  # fmt: skip
    default = run_cli(*argv).json()
    whole = run_cli(*argv, "--memory-headroom", "0").json()
    assert default["memory_headroom"] == 0.1 and default["usable_memory_bytes"] == 0.9 * 85_899_345_920
    assert whole["usable_memory_bytes"] == 85_899_345_920
    assert max(p["memory_per_device_bytes"] for p in default["plans"]) <= 77_309_411_328
    tight = [p for p in whole["plans"] if p["memory_per_device_bytes"] > 77_309_411_328]
    assert tight and len(default["plans"]) == len(whole["plans"]) - len(tight)
    text = run_cli(*argv[:-1], "--memory-headroom", "5%").stdout
    assert "a plan fits in 81.6 GB a device: 95% of its 85.9 GB, 5% left" in text


@pytest.mark.parametrize("bad", ["1", "-0.1", "100%", "ten", "nan"])
def test_a_headroom_outside_zero_to_one_is_one_line(bad):
    argv = ("plan", "--model", "llama-3.1-8b", "--device", "h100", "--devices", "8", "--context", "8192")
    assert_one_line_error(run_cli(*argv, "--memory-headroom", bad), "--memory-headroom")


def test_nemo_s_five_chunks_a_device_are_inside_the_search_when_asked():
    """NeMo 2's Llama 3 70B pretraining recipe (nemo/collections/llm/recipes/llama3_70b.py): TP 4,
    PP 4, five virtual stages, CP 2, sequence parallel, 512 sequences of 8192 in micro-batches of
    one. On 64 H100s that is DP 2 and 256 micro-batches a replica. Five chunks of 80 layers over 4
    stages (4 layers a chunk) is not among the default 2 and 4; `--virtual-stages all` tries every
    count the layers allow (2, 4, 5, 10, 20 at PP 4), the recipe's plan among them, and the
    search's best bound is at least as good as the recipe's."""
    argv = (
        "plan", *L70, "--devices", "64", "--phase", "train", "--global-batch", "4M", "--context", "8192",
        "--where", "tp=4", "--where", "pp=4", "--where", "cp=2", "--profile", "none", "--json",
    )  # fmt: skip

    def nemo(plans):
        return [
            p for p in plans
            if p["parallel"]["virtual_stages"] == 5 and p["parallel"]["microbatches"] == 256
            and p["parallel"]["dp"] == 2 and p["parallel"]["schedule"] == "interleaved"
        ]  # fmt: skip

    default = run_cli(*argv).json()
    every = run_cli(*argv, "--virtual-stages", "all").json()
    assert not nemo(default["plans"]) and nemo(every["plans"])
    assert {p["parallel"]["virtual_stages"] for p in every["plans"]} == {1, 2, 4, 5, 10, 20}
    assert every["front"][0]["time_s"] <= min(p["time_s"] for p in nemo(every["plans"]))
    five = run_cli(*argv, "--virtual-stages", "5").json()
    assert {p["parallel"]["virtual_stages"] for p in five["plans"]} == {1, 5}


@pytest.mark.parametrize("bad", ["1", "0", "2,x", "", "every"])
def test_chunk_counts_are_two_or_more_or_all(bad):
    argv = ("plan", *L70, "--devices", "8", "--context", "8192", "--virtual-stages", bad)
    assert_one_line_error(run_cli(*argv), "--virtual-stages")


def test_sequence_parallelism_on_off_or_both():
    """Llama 3.1 8B on 8 H100s: --sp off searches TP plans without it (as BLOOM and MT-NLG ran),
    --sp both each TP plan with and without it (1,632 plans more than on alone: every TP > 1 plan
    once more). Sequence parallelism sends what the all-reduce sends, as a reduce-scatter and an
    all-gather, and keeps a TP-th of the activations, so no plan without it is on the front."""
    argv = ("plan", "--model", "llama-3.1-8b", "--device", "h100", "--devices", "8", "--phase", "train",
            "--global-batch", "1M", "--context", "8192", "--profile", "none", "--json")  # fmt: skip
    on, off, both = (run_cli(*argv, "--sp", v).json() for v in ("on", "off", "both"))

    def sp(plans):
        return {p["parallel"]["sequence_parallel"] for p in plans if p["parallel"]["tp"] > 1}

    assert sp(on["plans"]) == {True} and sp(off["plans"]) == {False} and sp(both["plans"]) == {True, False}
    assert both["considered"] - on["considered"] == 1_632 and both["fit"] == on["fit"] + off["fit"] - sum(
        p["parallel"]["tp"] == 1 for p in on["plans"]
    )
    assert sp(both["front"]) == {True}


def test_the_search_is_a_library_the_command_calls():
    """attnroof.model.planner.search_plans over plain values (no flags) gives what ``attnroof plan``
    prints: the same front, bound for bound, and with a profile the same ranking by forecast."""
    from attnroof.devices import get_device
    from attnroof.model.planner import PlanQuery, search_plans
    from attnroof.profiles import files
    from attnroof.profiles.kernels import ForecastRoof
    from attnroof.roofline import Roof

    h100 = get_device("h100")
    roof = Roof.of(h100, "bf16")
    query = PlanQuery(
        builtin("llama-3.1-8b"), "train", 128, 8192, 8, roof, h100.links, h100.capacity_bytes,
        forecast=ForecastRoof.over(roof, files.choose(h100.name, h100.vendor, "bf16"), step=True),
    )  # fmt: skip
    answer = search_plans(query)
    cli = run_cli(
        "plan", "--model", "llama-3.1-8b", "--device", "h100", "--devices", "8", "--phase", "train",
        "--global-batch", "1M", "--context", "8192", "--json",
    ).json()  # fmt: skip
    assert [r.time_s for r in answer.found.front] == [r["time_s"] for r in cli["front"]]
    assert [f for _, f in answer.front_by_forecast] == [
        r["forecast_time_s"] for r in cli["front_by_forecast"]
    ]
    assert (
        answer.ranking.best[1] == cli["forecast"]["time_s"]
        and answer.ranking.looked_at == cli["forecast"]["ranked"]
    )
    with pytest.raises(ValueError, match="headroom"):
        PlanQuery(builtin("gpt2"), "train", 1, 64, 1, roof, h100.links, None, memory_headroom=1.0)
