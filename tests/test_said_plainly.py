"""The text and the JSON say the same thing, and neither misleads: the largest context is the one
limit both state (the model's own beside memory's), a hybrid's recurrent state is a JSON field, a
context past the model's limit is warned of at the top, an error names only the flags given, large
totals are scaled, mixed-precision rows are named, a sweep says its times are per head, and a run
without --device says which device it used. Expected values come from the config files and from
other commands, not from the code under test."""

from __future__ import annotations

import json
import re
from pathlib import Path

from conftest import assert_one_line_error, run_cli

CONFIGS = Path(__file__).resolve().parents[1] / "src" / "attnroof" / "model" / "configs"
H100 = ("--device", "h100")
LARGEST = re.compile(
    r"largest context at this (?:micro-)?batch ([\d,]+)(?: \(the model's limit; memory alone would allow ([\d,]+)\))?"
)


def _config(name: str) -> dict:
    return json.loads((CONFIGS / f"{name}.json").read_text(encoding="utf-8"))


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def _both(*args: str) -> tuple[str, dict]:
    text, js = run_cli(*args), run_cli(*args, "--json")
    assert text.returncode == 0 and js.returncode == 0, (text.stderr, js.stderr)
    return text.stdout, js.json()


# ---------------------------------------------------------------- the largest context


def test_largest_context_is_the_one_the_text_states_with_both_limits_apart():
    limit = _config("llama-3.1-8b")["max_position_embeddings"]  # 131072
    for extra in (
        ("--tp", "2"),
        (),
        ("--phase", "train", "--tp", "8", "--dp", "8", "--batch", "8", "--zero", "3"),
    ):
        text, j = _both("model", "--model", "llama-3.1-8b", "--context", "8192", *H100, *extra)
        m = LARGEST.search(text)
        assert m, text
        mem = j["memory"]
        assert j["config"]["max_position_embeddings"] == limit
        assert mem["max_context"] == _int(m.group(1)), extra
        assert mem["max_context_by_model"] == limit
        if m.group(2):  # the model's limit sets it: memory's own limit stated beside, in both
            assert (mem["max_context"], mem["max_context_limited_by"]) == (limit, "model")
            assert mem["max_context_by_memory"] == _int(m.group(2)) > limit
        else:
            assert mem["max_context_limited_by"] == "memory"
            assert mem["max_context"] == mem["max_context_by_memory"] <= limit
        if "per_device" in mem:
            assert mem["per_device"]["max_context"] == mem["max_context"]


def test_largest_context_set_by_memory_reads_the_same():
    text, j = _both("model", "--model", "llama-3.1-8b", "--context", "8192", "--batch", "64", *H100)
    m = LARGEST.search(text)
    assert m and m.group(2) is None, text
    mem = j["memory"]
    assert mem["max_context"] == mem["max_context_by_memory"] == _int(m.group(1)) < 131072
    assert mem["max_context_limited_by"] == "memory"


# ---------------------------------------------------------------- a hybrid's recurrent state


def test_recurrent_state_per_sequence_is_in_the_json_and_the_memory_line():
    cfg = _config("nemotron-h-8b")
    mamba_layers = cfg["hybrid_override_pattern"].count("M")  # 24
    inner = cfg["mamba_num_heads"] * cfg["mamba_head_dim"]
    conv_channels = inner + 2 * cfg["n_groups"] * cfg["ssm_state_size"]
    # per layer: the SSM state (heads × head_dim × d_state) and the conv window (k − 1 columns), in bf16
    per_layer = inner * cfg["ssm_state_size"] + (cfg["conv_kernel"] - 1) * conv_channels
    expected = mamba_layers * per_layer * 2  # 24 × 1,079,296 × 2 B = 51,806,208 B
    text, j = _both("model", "--model", "nemotron-h-8b", "--context", "8192", *H100)
    assert j["memory"]["recurrent_state_bytes_per_sequence"] == expected
    assert f"recurrent state {expected / 1e6:.1f} MB a sequence" in text
    dense_text, dense = _both("model", "--model", "llama-3.1-8b", "--context", "8192", *H100)
    assert dense["memory"]["recurrent_state_bytes_per_sequence"] == 0
    assert "recurrent state" not in dense_text


# ---------------------------------------------------------------- a context past the model's limit


def test_a_context_past_the_models_limit_is_warned_of_at_the_top_and_in_the_json():
    limit = _config("nemotron-h-8b")["max_position_embeddings"]  # 8192
    past = f"warning: context 131,072 is past the model's limit of {limit:,} positions"
    for extra in ((), ("--tp", "2"), ("--sweep-batch", "1,8"), ("--phase", "train")):
        text, j = _both("model", "--model", "nemotron-h-8b", "--context", "131072", *H100, *extra)
        head = text.splitlines()[:5]
        assert any(line.startswith(past) for line in head), (extra, head)
        assert j["context_beyond_model_limit"] is True and j["context"] == 131072
        assert j["config"]["max_position_embeddings"] == limit
    text, j = _both("model", "--model", "nemotron-h-8b", "--context", str(limit), *H100)
    assert "warning:" not in text and j["context_beyond_model_limit"] is False
    text, j = _both("model", "--model", "nemotron-h-8b", "--sweep-context", "4k..32k", *H100)
    assert j["contexts_beyond_model_limit"] == [c for c in j["context"] if c > limit] == [16384, 32768]
    assert "warning: contexts 16,384 and 32,768 are past the model's limit" in text


# ---------------------------------------------------------------- errors name the flags given


def test_a_batch_against_replicas_that_ep_implied_says_where_they_came_from():
    r = run_cli("model", "--model", "mixtral-8x7b", "--ep", "8", "--batch", "1", "--context", "4096", *H100)
    assert_one_line_error(r, "--batch 1", "--ep 8", "no --dp", "8 data-parallel replicas")
    assert "--dp ×" not in r.stderr and "--microbatches" not in r.stderr  # neither was given
    r = run_cli("model", "--model", "mixtral-8x7b", "--ep", "8", "--batch", "8", "--pp", "2",
                "--microbatches", "2", "--context", "4096", *H100)  # fmt: skip
    assert_one_line_error(r, "--microbatches 2 = 16")


def test_a_batch_against_given_degrees_names_only_those():
    r = run_cli("model", "--model", "llama-3.1-8b", "--dp", "2", "--batch", "3", "--context", "4096", *H100)
    assert_one_line_error(r, "--batch 3 is not a multiple of --dp 2")
    assert "--microbatches" not in r.stderr
    r = run_cli("model", "--model", "llama-3.1-8b", "--pp", "2", "--microbatches", "2", "--batch", "3",
                "--context", "4096", *H100)  # fmt: skip
    assert_one_line_error(r, "--batch 3 is not a multiple of --microbatches 2")
    assert "--dp" not in r.stderr


# ---------------------------------------------------------------- scaled figures, named rows


UNSCALED = re.compile(r"(?<![\d,.])\d{4,}(?:\.\d+)? [kMGTPEZY]?(?:FLOP|B)\b")
"""A figure of four or more digits before a prefixed unit: 1884 PFLOP, where 1.88 EFLOP is meant."""


def test_a_training_steps_exa_scale_totals_are_scaled():
    text, j = _both("model", "--model", "llama-3.1-70b", "--phase", "train", "--batch", "512",
                    "--context", "8192", *H100)  # fmt: skip
    assert not UNSCALED.findall(text), UNSCALED.findall(text)
    flops = j["totals"]["model_flops"]  # 6·N·T + attention ≈ 1.88e18
    assert 1e18 <= flops < 1e19
    m = re.search(r"model FLOPs ([\d.]+) EFLOP", text)
    assert m and float(m.group(1)) == float(f"{flops / 1e18:.3g}"), text


def test_mixed_precision_rows_are_named_each_not_as_a_range():
    text, j = _both("model", "--model", "deepseek-v3", "--context", "4096", "--device", "h200")
    step = text.splitlines()[2]
    fp8 = next(f for f in j["weights"]["formats"] if f["format"] == "fp8-block")
    assert f"fp8-block on {len(fp8['rows'])} rows (" in step, step
    for row in fp8["rows"]:
        assert row in step, row
    assert f"{fp8['rows'][0]} to {fp8['rows'][-1]}" not in text
    text, j = _both("model", "--model", "gpt-oss-120b", "--context", "4096", "--device", "h200")
    rows = next(f for f in j["weights"]["formats"] if f["format"] == "mxfp4")["rows"]
    assert f"mxfp4 on {rows[0]} and {rows[1]} + bf16 on the rest" in text.splitlines()[2]


# ---------------------------------------------------------------- the sweep's times, per head


def test_the_sweeps_times_are_said_to_be_per_head():
    text, j = _both("sweep", "-d", "128", "-s", "8192", *H100)
    assert "one head of one sequence" in text.splitlines()[0] and "per head" in text.splitlines()[0]
    assert "time fused/head" in text and "time unfused/head" in text
    assert (j["batch"], j["heads"]) == (1, 1)
    one = ("--memory-levels", "1")  # the single-level roof: 32 heads take 32 times one head's time
    flat = run_cli("sweep", "-d", "128", "-s", "8192", *H100, *one, "--json").json()
    heads = run_cli("attention", "-s", "8192", "-d", "128", "--heads", "32", *H100, *one, "--json").json()
    for variant in ("unfused", "fused"):
        assert abs(32 * flat["rows"][0][variant]["time_s"] / heads[variant]["time_s"] - 1) < 1e-12
    # with the L2 counted, the softmax and P·V kernels read up to 50 MB of what the kernel before
    # wrote (S, P: 8192² · 2 B = 134 MB a head) from it: a head alone has 50 MB of each in cache,
    # 32 heads together the same 50 MB, so 32 × one head's time is under the 32 heads'
    heads = run_cli("attention", "-s", "8192", "-d", "128", "--heads", "32", *H100, "--json").json()
    assert 32 * j["rows"][0]["unfused"]["time_s"] < heads["unfused"]["time_s"]
    assert "heads × these is a lower bound" in text.splitlines()[0]


# ---------------------------------------------------------------- the default device


def test_without_device_the_run_says_it_used_device_r_on_stderr():
    for args in (("sweep", "-d", "128", "-s", "1024"), ("sweep", "-d", "128", "-s", "1024", "--json")):
        r = run_cli(*args)
        assert r.returncode == 0, r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1, r.stderr
        assert "no --device given" in lines[0] and "device R" in lines[0] and "hypothetical" in lines[0]
        assert "attnroof devices" in lines[0]
    assert json.loads(run_cli("sweep", "-d", "128", "-s", "1024", "--json").stdout)["device"] == "R"
    named = run_cli("sweep", "-d", "128", "-s", "1024", "--device", "R")
    assert named.returncode == 0 and named.stderr == ""


def test_an_error_without_device_stays_one_line():
    r = run_cli("model", "--model", "llama-3.1-8b", "--context", "8192", "--tp", "2")  # R has no link
    assert_one_line_error(r, "--tp 2", "link")
