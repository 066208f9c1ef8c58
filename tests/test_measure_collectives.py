"""attnroof measure collectives: torch.distributed over gloo, two CPU processes, as a user runs it;
the records, nccl-tests' algbw and busbw, the link roof, --resume, and bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from attnroof.devices import get_device
from attnroof.errors import InputError
from attnroof.measure.collectives import Item, bus_factor, collective_record, plan
from attnroof.measure.records import read_records
from attnroof.measure.schema import COLLECTIVE_OPS, validate_record
from attnroof.ops.collectives import COLLECTIVE_FN, COLLECTIVES
from conftest import SRC, assert_one_line_error, needs_torch, run_cli

pytestmark = pytest.mark.xdist_group("measure_collectives")  # one worker: its module fixtures run once

TINY = ["--backend", "gloo", "--world", "2", "--sizes", "1K,64K", "--iters", "3", "--warmup", "1"]
FACTOR_ON_2 = {
    "all-reduce": 1.0,
    "reduce-scatter": 0.5,
    "all-gather": 0.5,
    "all-to-all": 0.5,
    "send/recv": 1.0,
}
"""busbw / algbw on two ranks: 2(n−1)/n, (n−1)/n three times, and 1 (nccl-tests' PERFORMANCE.md)."""


# ---------------------------------------------------------------- the real engine, end to end


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """One real run: every operation at two sizes, two gloo processes, on H100's NVLink roof."""
    pytest.importorskip("torch")
    out = tmp_path_factory.mktemp("coll") / "r.jsonl"
    r = run_cli("measure", "collectives", *TINY, "--device", "h100", "-o", str(out), "--json")
    assert r.returncode == 0, r.stderr
    return out, r.json()


def test_every_operation_is_measured_or_skipped_with_its_reason(measured):
    out, doc = measured
    records = read_records(out)  # the results file validates, every line
    assert [r["key"] for r in records] == [r["key"] for r in doc["records"]]
    assert [(r["shape"]["op"], r["shape"]["bytes"]) for r in records] == [
        (op, size) for op in COLLECTIVES for size in (1024, 65536)
    ]
    by_op = {r["shape"]["op"]: r["status"] for r in records}
    assert by_op["all-reduce"] == by_op["all-gather"] == "ok"  # gloo has these in every torch
    for r in records:
        assert r["kind"] == "collective" and r["impl"] == "gloo" and r["shape"]["world"] == 2
        assert r["status"] in ("ok", "skip"), r
        if r["status"] == "skip":  # a backend without the operation: said, not crashed
            assert r["reason"] and r["time_s"] is None


def test_algbw_and_busbw_are_nccl_tests_figures(measured):
    _, doc = measured
    ok = [r for r in doc["records"] if r["status"] == "ok"]
    assert {r["shape"]["op"] for r in ok} >= {"all-reduce", "all-gather"}
    for r in ok:
        op, size, t = r["shape"]["op"], r["shape"]["bytes"], r["time_s"]
        assert t > 0
        assert r["algbw_bytes_per_s"] == size / t
        assert r["busbw_bytes_per_s"] == r["algbw_bytes_per_s"] * FACTOR_ON_2[op]  # exactly
        assert r["achieved_bytes_per_s"] == r["busbw_bytes_per_s"]
        assert r["bytes"] == COLLECTIVE_FN[op](size, 2).bytes_per_device and r["flops"] == 0
        assert "median of 3" in r["timing"] and "slowest of 2 ranks" in r["timing"]


def test_the_link_roof_is_the_catalog_link(measured):
    _, doc = measured
    link = get_device("h100").links.scaleup
    assert doc["link"]["bandwidth_bytes_per_s"] == link.bandwidth_bytes_per_s == 450e9
    for r in doc["records"]:
        if r["status"] != "ok":
            continue
        m = r["shape"]["bytes"]
        comm = COLLECTIVE_FN[r["shape"]["op"]](m, 2)
        # α₀ + steps · α + bytes sent / β: 3.6 µs a call, 0.47 µs a step (NCCL's ring, LL)
        bound = (
            link.base_latency_s
            + comm.steps * link.latency_s
            + comm.bytes_per_device / link.bandwidth_bytes_per_s
        )
        if r["shape"]["op"] == "all-reduce":  # NVSwitch: one-shot, 1 step, (2 − 1) · M read, no α₀
            bound, algorithm = link.latency_s + m / link.bandwidth_bytes_per_s, "one-shot"
        else:
            algorithm = "p2p" if r["shape"]["op"] == "send/recv" else comm.algorithm
        assert r["bound_time_s"] == pytest.approx(bound, rel=1e-12)
        assert r["bound_algorithm"] == algorithm
        assert r["efficiency"] == r["bound_time_s"] / r["time_s"]
        assert r["link"].startswith("H100 SXM scale-up") and r["link_bytes_per_s"] == 450e9


def test_resume_measures_only_what_the_file_lacks(measured, tmp_path):
    full, _ = measured
    lines = full.read_text().splitlines(keepends=True)
    out = tmp_path / "part.jsonl"
    kept = lines[:7]
    out.write_text("".join(kept) + lines[7][:40])  # and a last line cut short, as a kill leaves it
    r = run_cli("measure", "collectives", *TINY, "-o", str(out))
    assert r.returncode == 2 and "--resume" in r.stderr  # what it holds is not overwritten
    r = run_cli("measure", "collectives", *TINY, "-o", str(out), "--resume")
    assert r.returncode == 0, r.stderr
    assert "resuming: 7 of 10 already in" in r.stderr
    progress = [ln for ln in r.stderr.splitlines() if ln.startswith("  ")]
    assert len(progress) == 3 and all("send/recv" in ln or "all-to-all" in ln for ln in progress)
    now = out.read_text().splitlines(keepends=True)
    assert now[:7] == kept  # the measurements it had, untouched
    assert [r["key"] for r in read_records(out)] == [r["key"] for r in read_records(full)]
    assert "# all-reduce, 2 ranks, gloo: busbw = algbw × 2(n−1)/n" in r.stdout
    assert "results: " in r.stdout and "(10 records)" in r.stdout


# ---------------------------------------------------------------- under torchrun, across nodes


def _torchrun(*args: str, nproc: int = 2) -> subprocess.CompletedProcess[str]:
    """``torchrun --standalone --nproc-per-node N -m attnroof ARGS`` (torchrun is this module:
    ``python -m torch.distributed.run``; --standalone: a rendezvous on a free local port)."""
    env = dict(os.environ, PYTHONPATH=str(SRC))
    for v in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(v, None)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}"]
    return subprocess.run(
        [*cmd, "-m", "attnroof", *args], capture_output=True, text=True, env=env, timeout=180
    )


def test_under_torchrun_each_process_is_a_rank_and_rank_0_writes(measured, tmp_path):
    """Two processes torchrun started meet by env:// and measure what the spawned ranks measure
    (the same keys); rank 0 alone writes the file and prints; --resume measures only what the
    file lacks."""
    full, _ = measured
    out = tmp_path / "tr.jsonl"
    first = ["--backend", "gloo", "--sizes", "1K", "--iters", "3", "--warmup", "1", "-o", str(out)]
    r = _torchrun("measure", "collectives", *first)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.count("results: ") == 1 and "(5 records)" in r.stdout  # rank 0 printed, once
    assert r.stderr.count("measuring on cpu (") == 1 and "× 2 processes, gloo" in r.stderr
    recs = read_records(out)
    assert [x["key"] for x in recs] == [x["key"] for x in read_records(full) if x["shape"]["bytes"] == 1024]
    assert all(x["shape"]["world"] == 2 and x["impl"] == "gloo" for x in recs)
    assert [x["status"] for x in recs if x["shape"]["op"] == "all-reduce"] == ["ok"]
    kept = out.read_text().splitlines()

    r = _torchrun("measure", "collectives", *TINY, "-o", str(out), "--resume")
    assert r.returncode == 0, r.stderr[-2000:]
    assert "resuming: 5 of 10 already in" in r.stderr
    progress = [ln for ln in r.stderr.splitlines() if ln.startswith("  ") and " B" in ln]
    assert len(progress) == 5 and all(ln.endswith(" 65536 B") for ln in progress)  # only 64K
    assert out.read_text().splitlines()[:5] == kept  # rank 0 appended; what was there is untouched
    assert sorted(x["key"] for x in read_records(out)) == sorted(x["key"] for x in read_records(full))


def _launched_env(world: int = 2, local_world: int | None = None) -> dict[str, str]:
    return {
        "RANK": "0",
        "WORLD_SIZE": str(world),
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": str(local_world or world),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "29999",
    }


@pytest.mark.parametrize(
    ("env", "args", "needle"),
    [
        pytest.param(
            _launched_env(),
            ["--world", "3"],
            "--world 3: torchrun started 2 ranks (WORLD_SIZE)",
            marks=needs_torch,
        ),
        pytest.param(_launched_env(64, 64), [], "--nproc-per-node 64: at most", marks=needs_torch),
        ({"RANK": "0", "WORLD_SIZE": "2"}, [], "not LOCAL_RANK, MASTER_ADDR, MASTER_PORT"),
        ({**_launched_env(), "RANK": "x"}, [], "RANK='x'"),
        (_launched_env(1), [], "WORLD_SIZE=1: a collective needs 2 ranks"),
    ],
)
def test_bad_launch_is_one_line_before_any_rank_meets(env, args, needle):
    """Checked before the group meets (no rendezvous is tried: MASTER_PORT is nobody's)."""
    r = run_cli("measure", "collectives", "--backend", "gloo", "--sizes", "1K", *args, env=env)
    assert_one_line_error(r, needle)


@needs_torch
def test_a_world_this_machine_cannot_hold_is_refused_naming_world(monkeypatch):
    """Each gloo rank is a Python with torch (~300 MB): a world whose processes alone exceed the
    memory a run may use is refused before any starts, naming --world."""
    from attnroof.measure import env

    monkeypatch.setattr(env, "ram_bytes", lambda: (8 * 2**30, 0.5 * 2**30))  # 0.5 GiB available
    r = run_cli("measure", "collectives", "--backend", "gloo", "--world", "3", "--sizes", "1K")
    # 3 × 300 MiB = 0.879 GiB > 0.8 × 0.5 GiB = 0.4 GiB
    assert_one_line_error(r, "--world 3: 3 processes with torch need about 0.879 GiB", "over the 0.4 GiB")


# ---------------------------------------------------------------- bad input: one line, exit 2


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--world", "1"], "'1'"),
        (["--ops", "all-reduce,broadcast"], "'broadcast'"),
        (["--sizes", "0"], "'0'"),
        (["--sizes", "3X"], "'3X'"),
        (["--sizes", "1M..1K"], "'1M..1K'"),
        pytest.param(
            ["--backend", "gloo", "--sizes", "4", "--ops", "all-gather"], "--sizes 4", marks=needs_torch
        ),
        pytest.param(["--backend", "gloo", "--world", "65"], "--world 65", marks=needs_torch),
        (["--backend", "mpi"], "'mpi'"),
        (["--iters", "0"], "'0'"),
        (["--backend", "gloo", "--device", "R"], "scale-up"),  # the spec's device has no links
        (["--backend", "gloo", "--device", "R", "--link", "scale-out"], "scale-out"),
        pytest.param(["--backend", "gloo", "--resume"], "--resume", marks=needs_torch),
        (["--backend", "gloo", "--dtype", "fp8"], "--dtype fp8"),
    ],
)
def test_bad_input_is_one_line(args, needle):
    assert_one_line_error(run_cli("measure", "collectives", *args), needle)


@needs_torch
def test_nccl_without_gpus_is_one_line():
    r = run_cli(
        "measure", "collectives", "--backend", "nccl", "--ops", "all-reduce", "--sizes", "1K", "--iters", "1"
    )
    if r.returncode == 0:
        pytest.skip("GPUs here: nccl is not bad input")
    assert_one_line_error(r, "--backend nccl")


def test_missing_torch_is_one_line_naming_the_extra():
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from attnroof.cli import main\n"
        "sys.exit(main(['measure', 'collectives', '--backend', 'gloo']))"
    )
    env = dict(os.environ, PYTHONPATH=str(SRC))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "pip install 'attnroof[measure]'" in proc.stderr


# ---------------------------------------------------------------- the parts, without torch


def test_the_schema_knows_every_collective():
    assert COLLECTIVE_OPS == COLLECTIVES


@pytest.mark.parametrize("n", [2, 3, 4, 8, 72])
def test_bus_factor_is_the_operators(n):
    for op in COLLECTIVES:
        assert bus_factor(op, n) == pytest.approx(float(COLLECTIVE_FN[op](1 << 20, n).bus_factor), rel=1e-15)


def test_sizes_are_cut_to_whole_pieces_as_nccl_tests_does():
    items = plan(["all-reduce", "all-gather"], [1000, 1024, 1 << 10], world=3, backend="gloo", dt="fp32")
    assert [(i.op, i.count, i.bytes) for i in items] == [
        ("all-reduce", 250, 1000),
        ("all-reduce", 256, 1024),  # 1K and 1024 are one measurement
        ("all-gather", 249, 996),  # a multiple of 3 elements
        ("all-gather", 255, 1020),
    ]
    with pytest.raises(InputError, match="--sizes 8: all-gather of fp32 over 3 ranks needs at least 12"):
        plan(["all-gather"], [8], world=3, backend="gloo", dt="fp32")


def test_a_skip_record_validates_and_says_why():
    item = Item("reduce-scatter", 256, 2, "gloo", "fp32")
    rec = collective_record(item, "cpu", status="skip", reason="ProcessGroupGloo does not support it")
    validate_record(json.loads(json.dumps(rec)), "here", keyed=True)
    assert rec["time_s"] is None and rec["busbw_bytes_per_s"] is None and rec["bound_time_s"] is None
    from attnroof.text.collectives import collectives_table

    text = collectives_table([rec])
    assert "skip" in text and "#   skip: ProcessGroupGloo does not support it" in text


@pytest.mark.parametrize(
    ("shape", "needle"),
    [
        ({"op": "broadcast", "bytes": 1024, "world": 2}, "shape.op = 'broadcast'"),
        ({"op": "all-reduce", "bytes": 1024, "world": 1}, "shape.world = 1"),
        ({"op": "all-reduce", "bytes": 0, "world": 2}, "shape.bytes = 0"),
        ({"op": "all-reduce", "bytes": 1024}, "no 'world'"),
    ],
)
def test_the_schema_refuses_a_bad_collective(shape, needle):
    rec = collective_record(Item("all-reduce", 256, 2, "gloo", "fp32"), "cpu", time_s=1e-4)
    rec["shape"] = shape
    with pytest.raises(InputError, match=needle.replace("(", r"\(")):
        validate_record(rec, "r.jsonl:1")


def test_charts_leave_collectives_out(tmp_path):
    from attnroof.plot.inputs import read_measured

    rec = collective_record(Item("all-reduce", 256, 2, "gloo", "fp32"), "cpu", time_s=1e-4)
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(rec) + "\n")
    with pytest.raises(InputError, match="collectives are not drawn"):
        read_measured(path)


# ---------------------------------------------------------------- one rank's decisions, in process


class _Dist:
    """torch.distributed with some entry points replaced."""

    def __init__(self, dist, **replaced):
        self._dist, self._replaced = dist, replaced

    def __getattr__(self, name):
        return self._replaced.get(name) or getattr(self._dist, name)


@pytest.fixture(scope="module")
def group():
    torch = pytest.importorskip("torch")
    import torch.distributed as dist

    store = dist.TCPStore("127.0.0.1", 0, 1, is_master=True, wait_for_workers=False)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield torch, dist
    dist.destroy_process_group()


def test_an_operation_the_backend_lacks_is_a_skip_and_a_wrong_result_is_wrong(group):
    from attnroof.measure.collective_worker import Rank

    torch, dist = group

    def lacking(*args, **kw):
        raise RuntimeError("ProcessGroupGloo does not support reduce_scatter")

    fake = _Dist(dist, reduce_scatter_single=lacking, reduce_scatter_tensor=lacking)
    me = Rank(torch, fake, 0, 1, torch.device("cpu"))
    got = me.measure("reduce-scatter", 64, torch.float32, 0, 1)
    assert got == {
        "status": "skip",
        "reason": "RuntimeError: ProcessGroupGloo does not support reduce_scatter",
    }
    me = Rank(torch, _Dist(dist, all_gather_single=lambda out, x: None), 0, 1, torch.device("cpu"))
    got = me.measure("all-gather", 64, torch.float32, 0, 1)
    assert got == {"status": "wrong", "reason": "64 of 64 elements differ from what the ranks sent"}
    got = Rank(torch, dist, 0, 1, torch.device("cpu")).measure("all-gather", 64, torch.float32, 1, 2)
    assert got["status"] == "ok" and got["time_s"] > 0
