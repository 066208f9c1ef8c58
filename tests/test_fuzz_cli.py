"""Property-based fuzzing of the command line: valid commands from a grammar, some made hostile.

For every subcommand, hypothesis builds a valid command (sizes, head dimensions, catalog devices
and the dtypes they have a peak for, groups that divide the heads, built-in models, charts into a
temporary folder, tiny measurements on the CPU), then turns a fraction of them hostile: a value
replaced by a negative, zero, huge, NaN, ``--``, newline, unicode or empty one, an unknown name,
an unknown flag or a mistyped command. Whatever it gets, attnroof must:

- exit with 0 or 2, never print a traceback or "internal error";
- on 2, print exactly one line on stderr;
- on 0 with ``--json``, print strict JSON (no NaN/Infinity) whose time, byte and FLOP fields are
  finite and ≥ 0, with fused bytes ≤ unfused bytes and time bound = max(F/P, (bytes − R)/B + R/B_c),
  R the bytes resident in the cache (0 on a single-level roof).

At least half of the generated commands must succeed. Commands run in-process through
:func:`attnroof.cli.main` (a subprocess each would take minutes); a few run as a user runs them.

``ATTNROOF_FUZZ_EXAMPLES=5000 pytest tests/test_fuzz_cli.py`` runs thousands (default 150 in all,
spread over the subcommands). File contents are not fuzzed here: reading files is checked by the
tests of each reader.
"""

from __future__ import annotations

import json
import math
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnroof.devices import catalog
from attnroof.model import builtin_names
from conftest import HAS_TORCH, needs_torch, run_cli, run_cli_process

TOTAL_EXAMPLES = int(os.environ.get("ATTNROOF_FUZZ_EXAMPLES", "150"))
HOSTILE_PERCENT = 30
"""The share of commands turned hostile: enough to hit every check, few enough that most succeed.
Drawn as an integer ≥ 70 of 0..99, so hypothesis's leaning towards small (simple) values leans
towards valid commands."""

COMMANDS = [
    "sheet",
    "attention",
    "sweep",
    "crossover",
    "decode",
    "linear",
    "footprint",
    "model",
    "plan",
    "serve-sim",
    "devices",
    "measure ceilings",
    "measure attention",
    "measure decode",
    "measure linear",
    "measure suite",
    "plot",
    "report",
]
RUNNABLE = [c for c in COMMANDS if HAS_TORCH or not c.startswith("measure ")]
"""The commands fuzzed here: ``measure`` needs torch, and without it (the light test extra) its
fuzz skips."""
REFUSED_ONLY = {"measure suite"}
"""A whole campaign takes a minute: the fuzz gives it only commands it must refuse before any work."""

PER_COMMAND = max(3, TOTAL_EXAMPLES // len(COMMANDS))
DEVICES = {d.name: sorted(d.peak_flops_per_s) for d in catalog()}
ALIASES = {d.name: [d.name, *d.aliases] for d in catalog()}
MODELS = builtin_names()
STATS: Counter[str] = Counter()

HOSTILE = [
    "-1",
    "0",
    "-0",
    "1e999",
    "9" * 40,
    "nan",
    "NaN",
    "inf",
    "-inf",
    "1.5",
    "--",
    "",
    " ",
    "a\nb",
    "8\n",
    "∞",
    "ñoño",
    "８",
    "1e3",
    "3.35TB/s",
    "nosuch",
    "h10",
    "bf61",
    "1,,2",
    "4096..512",
    "../nowhere/x",
]


# ---------------------------------------------------------------- the grammar


def _size(lo: int, hi: int) -> st.SearchStrategy[str]:
    """A size in [lo, hi], written as a plain integer or with the k suffix when it divides."""
    return st.integers(lo, hi).flatmap(
        lambda n: st.sampled_from([str(n), f"{n // 1024}k"] if n % 1024 == 0 else [str(n)])
    )


POW2 = st.sampled_from([1, 2, 4, 8, 16, 64, 128, 512, 1024, 4096, 8192, 32768, 131072])
SEQ = st.one_of(_size(1, 200_000), POW2.map(str), st.sampled_from(["8k", "32k", "128k", "1M"]))
HEAD_DIM = st.sampled_from(["8", "32", "64", "80", "96", "128", "256"])
SOFTMAX = st.sampled_from(["0", "5", "2.5", "10"])


@st.composite
def _device(draw: Any, *, multi_dtype: bool = False) -> list[str]:
    name = draw(st.sampled_from(sorted(DEVICES)))
    out = ["--device", draw(st.sampled_from(ALIASES[name]))]
    dtypes = DEVICES[name]
    if multi_dtype and len(dtypes) > 1 and draw(st.booleans()):
        chosen = draw(st.lists(st.sampled_from(dtypes), min_size=1, max_size=3, unique=True))
        out += ["--dtype", ",".join(chosen)]
    elif "bf16" not in dtypes or draw(st.booleans()):
        out += ["--dtype", draw(st.sampled_from(dtypes))]
    if draw(st.integers(0, 4)) == 0:
        out += ["--peak-flops", draw(st.sampled_from(["989T", "1.2e15", "50e12", "1e20"]))]
    if draw(st.integers(0, 4)) == 0:
        out += ["--bandwidth", draw(st.sampled_from(["3.35T", "4e12", "819e9", "1e16"]))]
    if draw(st.integers(0, 4)) == 0:
        out += ["--capacity", draw(st.sampled_from(["80G", "192e9", "16G"]))]
    if draw(st.integers(0, 4)) == 0:
        out += ["--memory-levels", draw(st.sampled_from(["1", "2"]))]
    return out


@st.composite
def _heads(draw: Any, *, group: bool = True) -> list[str]:
    out: list[str] = ["--batch", draw(st.sampled_from(["1", "2", "8", "64"]))] if draw(st.booleans()) else []
    g = draw(st.sampled_from([1, 2, 4, 8])) if group else 1
    kv = draw(st.sampled_from([1, 2, 4, 8]))
    if group and draw(st.booleans()):
        out += ["--group", str(g)]
    if draw(st.booleans()) or (group and g > 1 and "--group" not in out):
        out += ["--heads", str(g * kv)]  # a multiple of the group
    return out


def _schedule(draw: Any) -> list[str]:
    """A pipeline schedule, or none: --schedule with or without --virtual-stages."""
    name = draw(st.sampled_from(["", "1f1b", "interleaved", "zb-h1"]))
    v = ["--virtual-stages", "2"] if name == "interleaved" or not draw(st.integers(0, 7)) else []
    return (["--schedule", name] if name else []) + v


def _flag(draw: Any, name: str) -> list[str]:
    return [name] if draw(st.booleans()) else []


def _json(draw: Any) -> list[str]:
    return ["--json"] if draw(st.integers(0, 3)) else []  # mostly JSON: it is what gets checked


@st.composite
def valid_command(draw: Any, command: str, tmp: Path, ceilings: Path) -> list[str]:
    """A command that attnroof should run (it may still refuse a combination, e.g. a huge model
    that does not fit: that is a one-line exit 2, which the checks allow)."""
    if command == "sheet":
        shape = ["-s", draw(_size(1, 65536)), "-d", draw(HEAD_DIM)]
        if draw(st.booleans()):
            heads = draw(st.sampled_from([1, 3, 8, 12, 32, 64]))
            divisors = [g for g in range(1, heads + 1) if heads % g == 0]
            shape += ["--heads", str(heads), "--group", str(draw(st.sampled_from(divisors)))]
        return [
            "sheet",
            *shape,
            "--layers",
            draw(st.sampled_from(["1", "32", "80"])),
            *draw(_device()),
            *_json(draw),
        ]
    if command == "attention":
        return [
            "attention",
            "-s",
            draw(SEQ),
            "-d",
            draw(HEAD_DIM),
            *draw(_heads()),
            *_flag(draw, "--causal"),
            "--softmax-flops",
            draw(SOFTMAX),
            *draw(_device()),
            *_json(draw),
        ]
    if command == "decode" and draw(st.integers(0, 3)) == 0:  # latent attention's four widths
        widths = ["--kv-lora-rank", "512", "--qk-rope-head-dim", "64", "--qk-nope-head-dim", "128"]
        return [
            "decode",
            "-s",
            draw(SEQ),
            *widths,
            "--v-head-dim",
            draw(st.sampled_from(["64", "128"])),
            "--heads",
            draw(st.sampled_from(["1", "16", "128"])),
            *draw(_device()),
            *_json(draw),
        ]
    if command == "decode":
        return [
            "decode",
            "-s",
            draw(SEQ),
            "-d",
            draw(HEAD_DIM),
            *draw(_heads()),
            *(["--pass", draw(st.sampled_from(["fwd", "bwd", "fwd+bwd"]))] if draw(st.booleans()) else []),
            *draw(_device()),
            *_json(draw),
        ]
    if command == "sweep":
        seq = draw(
            st.one_of(
                st.lists(SEQ, min_size=1, max_size=5).map(",".join),
                st.sampled_from(["512..32k", "1..8", "1k..1M"]),
            )
        )
        return [
            "sweep",
            "-d",
            draw(HEAD_DIM),
            "-s",
            seq,
            *_flag(draw, "--causal"),
            *draw(_device()),
            *_json(draw),
        ]
    if command == "crossover":
        return [
            "crossover",
            "-d",
            draw(HEAD_DIM),
            *_flag(draw, "--causal"),
            "--softmax-flops",
            draw(SOFTMAX),
            *draw(_device()),
            *_json(draw),
        ]
    if command == "linear":
        dims = ["-n", draw(_size(1, 65536)), "-k", draw(_size(1, 32768)), "-m", draw(_size(1, 32768))]
        return ["linear", *dims, *draw(_device()), *_json(draw)]
    if command == "footprint":
        return [
            "footprint",
            "-s",
            draw(SEQ),
            *draw(_heads(group=False)),
            "--layers",
            draw(st.sampled_from(["1", "80"])),
            *draw(_device()),
            *_json(draw),
        ]
    if command == "model":
        if draw(st.integers(0, 5)) == 0:
            return ["model", "--list", *_json(draw)]
        out = ["model", "--model", draw(st.sampled_from(MODELS)), "--context", draw(_size(1, 32768))]
        phase = draw(st.sampled_from(["prefill", "decode", "train"]))
        out += ["--phase", phase, "--batch", draw(st.sampled_from(["1", "4", "16"]))]
        if phase == "train":
            if draw(st.booleans()):
                out += ["--recompute", draw(st.sampled_from(["none", "selective", "full"]))]
            if draw(st.booleans()):  # across devices, some plans refused (a batch D does not divide)
                out += [
                    "--tp",
                    draw(st.sampled_from(["1", "2", "8"])),
                    "--dp",
                    draw(st.sampled_from(["1", "2", "4"])),
                ]
                out += ["--zero", draw(st.sampled_from(["0", "1", "2", "3"]))]
                if draw(st.booleans()):  # the sharding policy (refused where the stage has no such choice)
                    out += ["--weight-gather", draw(st.sampled_from(["pass", "microbatch", "step"]))]
                    out += ["--grad-reduce", draw(st.sampled_from(["microbatch", "step"]))]
                    out += ["--dp-shard", draw(st.sampled_from(["1", "2", "3"]))]
                out += _flag(draw, "--overlap") + _flag(draw, "--sp")
                if draw(st.booleans()):  # a pipeline under each schedule (some refused)
                    out += ["--pp", "2", "--microbatches", draw(st.sampled_from(["1", "2"]))]
                    out += [*_schedule(draw)]
                out += ["--cp", draw(st.sampled_from(["1", "2"]))]  # context parallelism
                out += ["--cp-comm", draw(st.sampled_from(["ring", "allgather"]))]
        else:
            if draw(st.booleans()):
                out += ["--sweep-batch", draw(st.sampled_from(["1,8,64", "1..256", "2"]))]
            if draw(st.booleans()):
                out += ["--kv-dtype", draw(st.sampled_from(["bf16", "fp8"]))]
            if draw(st.booleans()):
                out += ["--routing", draw(st.sampled_from(["uniform", "all", "fewest", "skewed:1.2"]))]
            if draw(st.booleans()):
                out += ["--mla", draw(st.sampled_from(["absorbed", "naive"]))]
            plan = draw(st.sampled_from(["none", "none", "plan", "fit", "sweep"]))
            if plan == "plan":  # across devices: a bound and an estimate, some plans refused
                out += [
                    "--tp",
                    draw(st.sampled_from(["1", "2", "8"])),
                    "--pp",
                    draw(st.sampled_from(["1", "2"])),
                ]
                out += [
                    "--dp",
                    draw(st.sampled_from(["1", "2"])),
                    "--microbatches",
                    draw(st.sampled_from(["1", "2"])),
                ]
                out += _flag(draw, "--overlap") + _schedule(draw)
                out += ["--cp", draw(st.sampled_from(["1", "2"]))]  # context parallelism
                out += ["--cp-comm", draw(st.sampled_from(["ring", "allgather"]))]
            elif plan == "fit":
                out += ["--fit", *(["--sweep-tp", "1,2"] if draw(st.booleans()) else [])]
            elif plan == "sweep":
                out += ["--sweep-tp", "1,2,4"]
        return [
            *out,
            *_flag(draw, "--unfused"),
            "--device",
            draw(st.sampled_from(["h100", "h200", "mi300x", "b200"])),
            *_json(draw),
        ]
    if command == "plan":  # small searches: a few devices, a short context, now and then a filter
        out = [
            "plan",
            "--model",
            draw(st.sampled_from(MODELS)),
            "--devices",
            draw(st.sampled_from(["1", "2", "4"])),
        ]
        phase = draw(st.sampled_from(["prefill", "decode", "train"]))
        out += ["--phase", phase, "--context", draw(st.sampled_from(["512", "2k", "8k"]))]
        out += ["--batch", draw(st.sampled_from(["1", "2", "8"]))]
        if draw(st.booleans()):
            out += ["--where", draw(st.sampled_from(["tp<=2", "pp=1", "zero>=1", "recompute!=full", "dp>1"]))]
        if phase == "train" and draw(st.booleans()):
            out += ["--weight-gather", draw(st.sampled_from(["pass", "step", "pass,microbatch,step"]))]
            out += ["--dp-shard", draw(st.sampled_from(["1", "2", "2,4"]))]
        return [*out, "--top", draw(st.sampled_from(["1", "3"])),
                "--device", draw(st.sampled_from(["h100", "h200", "b200"])), *_json(draw)]  # fmt: skip
    if command == "serve-sim":  # short runs: a few requests, now and then a plan, an SLO search or a price
        out = ["serve-sim", "--model", draw(st.sampled_from(["llama-3.1-8b", "gpt-oss-20b", "qwen2.5-7b"]))]
        out += ["--num-requests", draw(st.sampled_from(["1", "7", "40"]))]
        out += [
            "--input-len",
            draw(st.sampled_from(["1", "100", "2k"])),
            "--output-len",
            draw(st.sampled_from(["1", "16", "64"])),
        ]
        load = draw(st.sampled_from(["rate", "inf", "closed", "search"]))
        if load == "rate":
            out += [
                "--rate",
                draw(st.sampled_from(["0.5", "5", "50"])),
                "--burstiness",
                draw(st.sampled_from(["0.5", "1", "3"])),
            ]
        elif load == "closed":
            out += ["--concurrency", draw(st.sampled_from(["1", "4"]))]
        elif load == "search":
            out += ["--max-rate", "--slo-ttft", draw(st.sampled_from(["100ms", "2s"])), "--slo-tpot", "50ms"]
        if draw(st.booleans()):
            out += ["--tp", draw(st.sampled_from(["2", "4"]))]
        if draw(st.booleans()):
            out += [
                "--max-num-seqs",
                draw(st.sampled_from(["1", "8"])),
                "--block-size",
                draw(st.sampled_from(["16", "32"])),
            ]
        if draw(st.booleans()):
            out += ["--price-per-device-hour", "2.5"]
        return [*out, "--device", draw(st.sampled_from(["h100", "h200", "b200"])), *_json(draw)]  # fmt: skip
    if command == "devices":
        name = (
            [draw(st.sampled_from(ALIASES[draw(st.sampled_from(sorted(DEVICES)))]))]
            if draw(st.booleans())
            else []
        )
        return ["devices", *name, *_json(draw)]
    if command.startswith("measure"):
        kind = command.split()[1]
        cpu = ["--cpu", "--dtype", draw(st.sampled_from(["bf16", "fp32"]))]
        if draw(st.booleans()):
            cpu += ["--device", draw(st.sampled_from(["h100", "mi300x", "R"]))]
        if kind == "ceilings":
            return ["measure", "ceilings", "--quick", *cpu, *_json(draw)]
        cpu += ["--ceilings", str(ceilings)]
        if kind == "linear":
            return [
                "measure",
                "linear",
                "-n",
                draw(_size(1, 16)),
                "-k",
                draw(_size(1, 32)),
                "-m",
                draw(_size(1, 32)),
                *cpu,
                *_json(draw),
            ]
        shape = ["-s", draw(_size(1, 64)), "-d", draw(st.sampled_from(["8", "16"]))]
        if kind == "attention":
            heads = ["--heads", draw(st.sampled_from(["1", "2"]))] if draw(st.booleans()) else []
            impl = ["--impl", draw(st.sampled_from(["eager", "sdpa-math", "eager,sdpa-math"]))]
            return [
                "measure",
                "attention",
                *shape,
                *heads,
                *_flag(draw, "--causal"),
                *impl,
                *cpu,
                *_json(draw),
            ]
        if kind == "decode":
            return ["measure", "decode", *shape, *draw(_heads()), *cpu, *_json(draw)]
        # suite: refused before any work (see REFUSED_ONLY), and never into the working folder
        bad = draw(
            st.sampled_from(
                [["--impl", "nosuch"], ["--dtype", "fp7"], ["--dtype", "int8"], ["--impl", "eager,bogus"]]
            )
        )
        return [
            "measure",
            "suite",
            "--quick",
            "-o",
            str(tmp / "suite.jsonl"),
            *cpu,
            *bad,
        ]  # bad last: it wins
    if command == "plot":
        out = ["plot", "-o", str(tmp / f"chart.{draw(st.sampled_from(['png', 'svg', 'pdf']))}")]
        out += ["-d", draw(HEAD_DIM)]
        if draw(st.booleans()):
            out += ["-s", draw(st.sampled_from(["512..32k", "1k,8k", "64"]))]
        out += _flag(draw, "--causal") + _flag(draw, "--decode")
        if draw(st.booleans()):
            out += ["--groups", draw(st.sampled_from(["1,8", "4"]))]
        if draw(st.booleans()):
            out += ["--linear", draw(st.sampled_from(["4096,4096", "8k,8k"]))]
            if draw(st.booleans()):
                out += ["--tokens", "1,16,256"]
        return [*out, *draw(_device(multi_dtype=True)), *_json(draw)]
    if command == "report":
        out = ["report", "-o", str(tmp / "report.html"), "-s", draw(_size(1, 32768))]
        return [*out, *draw(_device()), *_json(draw)]
    raise AssertionError(command)


@st.composite
def hostile(draw: Any, argv: list[str]) -> list[str]:
    """``argv`` with one thing made hostile."""
    how = draw(st.sampled_from(["value", "value", "value", "flag", "command", "drop", "dup"]))
    out = list(argv)
    values = [i for i in range(1, len(out)) if out[i - 1].startswith("-") and not out[i].startswith("-")]
    if how == "value" and values:
        out[draw(st.sampled_from(values))] = draw(st.sampled_from(HOSTILE))
    elif how == "flag":
        out.insert(
            draw(st.integers(1, len(out))),
            draw(st.sampled_from(["--bogus", "-x", "--heads=--", "--dtype=--", "--json=1"])),
        )
    elif how == "command":
        out[0] = draw(st.sampled_from(["atention", "sheat", "decod", "", "--", "ñ", "measure\n"]))
    elif how == "drop" and len(out) > 1:
        del out[draw(st.integers(1, len(out) - 1))]
    else:
        i = draw(st.sampled_from(values)) if values else 0
        out += [out[i - 1], draw(st.sampled_from(HOSTILE))] if values else ["--json", "--json"]
    return out


# ---------------------------------------------------------------- the checks


def run_in_process(argv: list[str]) -> tuple[int, str, str]:
    r = run_cli(*argv)  # in-process, as a new process would run it (see conftest)
    return r.returncode, r.stdout, r.stderr


def _no_constants(name: str) -> Any:
    raise ValueError(f"non-standard JSON constant {name}")


def _walk(node: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(node, dict):
        yield path, node
        for k, v in node.items():
            yield from _walk(v, f"{path}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _walk(v, f"{path}[{i}]")


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


MEASURED = ("measure",)


def check_json(argv: list[str], text: str) -> None:
    data = json.loads(text, parse_constant=_no_constants)  # NaN/Infinity are not JSON
    measured = argv[0] in MEASURED
    for path, obj in _walk(data):
        for key, value in obj.items():
            if any(w in key.lower() for w in ("time", "bytes", "flops")):
                leaves = value.values() if isinstance(value, dict) else [value]
                for leaf in leaves:
                    if _is_number(leaf):
                        assert math.isfinite(leaf) and leaf >= 0, (path, key, leaf)
        u, f = obj.get("unfused"), obj.get("fused")
        # the forward pass only: a fused backward also moves its fp32 row statistics (L, D), which
        # outweigh P, dP and dS when the sequence is a handful of tokens
        if (
            data.get("pass", "fwd") == "fwd"
            and isinstance(u, dict)
            and isinstance(f, dict)
            and _is_number(u.get("bytes"))
            and _is_number(f.get("bytes"))
        ):
            assert f["bytes"] <= u["bytes"] * (1 + 1e-12), (path, f["bytes"], u["bytes"])
        if measured:
            continue  # a measured time_s is a stopwatch, not a bound
        t, ct, mt = obj.get("time_s"), obj.get("compute_time_s"), obj.get("memory_time_s")
        if _is_number(t) and _is_number(ct) and _is_number(mt):
            assert t == pytest.approx(max(ct, mt), rel=1e-12), (path, t, ct, mt)
        if _is_number(t) and _is_number(obj.get("estimate_time_s")):  # a bound is never above an estimate
            assert t <= obj["estimate_time_s"] * (1 + 1e-12), (path, t, obj["estimate_time_s"])
            for rate in ("mfu", "tokens_per_s"):
                if _is_number(obj.get(rate)) and _is_number(obj.get(f"estimate_{rate}")):
                    assert obj[rate] >= obj[f"estimate_{rate}"] * (1 - 1e-12), (path, rate)
    if argv[0] in ("attention", "decode", "linear"):  # the device figures sit beside the placements
        peak, bw = data.get("peak_flops_per_s"), data.get("bandwidth_bytes_per_s")
        cache_bw = data.get("cache_bandwidth_bytes_per_s")
        for _, obj in _walk(data):
            if peak and bw and all(_is_number(obj.get(k)) for k in ("flops", "bytes", "time_s")):
                r = obj.get("resident_bytes") or 0.0  # R, at the cache's bandwidth (each kernel's ≤ its size)
                assert r == 0 or (cache_bw and r <= obj["bytes"] * (1 + 1e-12)), obj
                memory = (obj["bytes"] - r) / bw + (r / cache_bw if r else 0.0)
                bound = max(obj["flops"] / peak, memory)  # time ≥ max(F/P, (bytes − R)/B + R/B_c)
                assert obj["time_s"] == pytest.approx(bound, rel=1e-9), obj


def check(argv: list[str], code: int, out: str, err: str) -> None:
    shown = repr(argv)
    assert code in (0, 2), (shown, code, err)
    assert "Traceback" not in err and "internal error" not in err, (shown, err)
    if code == 2:
        assert len(err.strip().splitlines()) == 1, (shown, err)
        assert err.strip(), shown
    elif "--json" in argv:
        check_json(argv, out)


# ---------------------------------------------------------------- the tests


@pytest.fixture(scope="module")
def ceilings(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Ceilings measured once on this CPU, so that each measure command does not re-measure them."""
    path = tmp_path_factory.mktemp("fuzz") / "ceilings.json"
    if not HAS_TORCH:  # no command fuzzed without torch reads it
        return path
    code, _, err = run_in_process(["measure", "ceilings", "--quick", "--cpu", "-o", str(path)])
    assert code == 0, err
    return path


pytestmark = pytest.mark.xdist_group("fuzz_cli")  # with --dist loadgroup: one worker runs the fuzz once


def fuzz(command: str, ceilings: Path, tmp_path_factory: pytest.TempPathFactory) -> Counter[str]:
    """Fuzz ``command`` (once per process: its tallies are kept in STATS) and return its tallies."""
    if STATS[f"ran:{command}"]:
        return STATS
    tmp = tmp_path_factory.mktemp("out")
    examples = 3 if command.startswith("measure") and TOTAL_EXAMPLES <= 200 else PER_COMMAND
    if command == "measure ceilings":  # ~2 s of timing each, and its grammar has 32 commands in all
        examples = min(examples, 32)
    tally: Counter[str] = Counter()

    @settings(
        max_examples=examples,
        deadline=None,
        derandomize=TOTAL_EXAMPLES <= 200,  # CI: the same commands every run
        suppress_health_check=list(HealthCheck),
        database=None,
    )
    @given(data=st.data())
    def one(data: st.DataObject) -> None:
        argv = data.draw(valid_command(command, tmp, ceilings), label="valid")
        made_hostile = command in REFUSED_ONLY or data.draw(st.integers(0, 99)) >= 100 - HOSTILE_PERCENT
        if made_hostile and command not in REFUSED_ONLY:
            argv = data.draw(hostile(argv), label="hostile")
        code, out, err = run_in_process(argv)
        check(argv, code, out, err)
        if command in REFUSED_ONLY:
            assert code == 2, (argv, err)
        tally["total"] += 1
        tally[f"ran:{command}"] += 1
        tally["ok"] += code == 0
        tally["valid"] += not made_hostile
        tally["valid_ok"] += code == 0 and not made_hostile

    one()
    STATS.update(tally)  # only once every example passed: a failed fuzz is run (and fails) again
    return STATS


@pytest.mark.parametrize(
    "command", [pytest.param(c, marks=[] if c in RUNNABLE else [needs_torch]) for c in COMMANDS]
)
def test_fuzz_cli(command: str, ceilings: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    assert fuzz(command, ceilings, tmp_path_factory)[f"ran:{command}"] >= 1


def test_fuzz_mostly_succeeds(ceilings: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Over the fuzz of every subcommand (run here if it has not run in this process yet, so that
    this test depends on no order or selection): at least half of the commands succeeded."""
    for command in RUNNABLE:
        fuzz(command, ceilings, tmp_path_factory)
    ran = {c for c in COMMANDS if STATS[f"ran:{c}"]}
    assert ran == set(RUNNABLE)
    assert STATS["ok"] >= STATS["total"] / 2, dict(STATS)
    assert STATS["valid_ok"] >= 0.9 * STATS["valid"], dict(STATS)  # a valid command is rarely refused
    print(f"fuzz: {STATS['total']} commands, {STATS['ok']} succeeded ({STATS['ok'] / STATS['total']:.0%})")


@pytest.mark.parametrize(
    "argv",
    [
        ["attention", "-s", "8k", "-d", "128", "--dtype=--"],
        ["sheet", "--heads", "3", "--json"],
        ["decode", "-s", "8192", "-d", "128", "--group", "8", "--json"],
        ["attention", "-s", "8k", "-d", "128", "--device", "a\nb"],
    ],
)
def test_fuzz_checks_hold_as_a_user_runs_it(argv: list[str]) -> None:
    """A handful through a real process: the in-process checks are the ones a user sees."""
    r = run_cli_process(*argv)
    check(argv, r.returncode, r.stdout, r.stderr)
