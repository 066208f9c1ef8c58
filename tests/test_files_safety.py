"""Writing never harms a path: a device node stays a node, a symlink stays a symlink (its target
gets the content), a FIFO is streamed to, a file of measurements is not overwritten without
--force, and a missing folder is refused (never created) by every command that takes -o.

A character device made with ``os.mknod`` (major 1, minor 3: what /dev/null is) stands in for
/dev/null, so that a test never writes to the real one; where mknod is not permitted (not root,
or a filesystem mounted nodev) those tests skip and say so.
"""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path

import pytest

from attnroof import outfile
from attnroof.errors import InputError
from conftest import assert_one_line_error, needs_torch, run_cli

CPU = {"ATTNROOF_CPU_THREADS": "1"}


# ---------------------------------------------------------------- stand-ins for the paths


def make_node(path: Path) -> Path:
    """A character device like /dev/null (1, 3) at ``path``, or skip with the reason."""
    try:
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except (PermissionError, OSError) as e:
        pytest.skip(f"os.mknod of a character device is not permitted here: {e}")
    # a nodev mount creates the node but refuses to open it: that would test nothing
    try:
        os.close(os.open(path, os.O_WRONLY))
    except OSError as e:
        pytest.skip(f"a device node made here cannot be opened (nodev mount?): {e}")
    return path


def is_node(path: Path) -> bool:
    st = os.lstat(path)
    return stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 3)


class FifoReader:
    """A named pipe at ``path`` and a thread that reads everything written to it until the
    last writer closes (as ``cat fifo`` would)."""

    def __init__(self, path: Path) -> None:
        os.mkfifo(path)
        self.path = path
        self.chunks: list[bytes] = []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        with open(self.path, "rb") as f:  # blocks until a writer opens it
            while chunk := f.read(65536):
                self.chunks.append(chunk)

    def data(self) -> bytes:
        self.thread.join(timeout=60)
        assert not self.thread.is_alive(), "the writer never closed the FIFO"
        return b"".join(self.chunks)


def _records(data: bytes) -> list[dict]:
    return [json.loads(line) for line in data.decode().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def ceilings_file(tmp_path_factory):
    """Made-up ceilings well above two CPU cores (5 TFLOP/s, 200 GB/s): nothing is measured
    before the kernels, so each command runs in a few seconds."""
    path = tmp_path_factory.mktemp("c") / "ceilings.json"
    device = {
        "name": "measured cpu (test)",
        "kind": "measured",
        "peak_flops_per_s": {"bf16": 5e12, "fp32": 5e12},
        "bandwidth_bytes_per_s": 2e11,
        "source": "measured by attnroof on 2026-01-01 (test fixture)",
    }
    path.write_text(json.dumps({"format": "attnroof-ceilings/1", "device": device, "ceilings": []}))
    return path


def _suite(out: Path, ceilings: Path, *more: str):
    """The quick suite, linear cases only (three records: n = 1, 32, 256)."""
    args = ["measure", "suite", "--quick", "--cpu", "--impl", "linear", "--ceilings", str(ceilings)]
    return run_cli(*args, "-o", str(out), *more, env=CPU)


def _linear(out: Path, ceilings: Path):
    args = ["measure", "linear", "-n", "2", "-k", "64", "-m", "64", "--cpu", "--ceilings", str(ceilings)]
    return run_cli(*args, "-o", str(out), env=CPU)


LINEAR_KEYS = [f"linear/linear/bf16/n={n},k=1024,m=1024" for n in (1, 32, 256)]


# ---------------------------------------------------------------- a device node


@needs_torch
def test_suite_into_a_device_node_leaves_the_node(tmp_path, ceilings_file):
    node = make_node(tmp_path / "null")
    res = _suite(node, ceilings_file)
    assert res.returncode == 0, res.stderr
    assert is_node(node)  # the old code renamed a regular file over it
    assert os.listdir(tmp_path) == ["null"]  # and left no temporary file beside it


@needs_torch
def test_linear_into_a_device_node_leaves_the_node(tmp_path, ceilings_file):
    node = make_node(tmp_path / "null")
    res = _linear(node, ceilings_file)
    assert res.returncode == 0, res.stderr
    assert is_node(node)
    assert os.listdir(tmp_path) == ["null"]


@needs_torch
def test_ceilings_into_a_device_node_leaves_the_node(tmp_path):
    node = make_node(tmp_path / "null")
    res = run_cli("measure", "ceilings", "--quick", "--cpu", "-o", str(node), env=CPU)
    assert res.returncode == 0, res.stderr
    assert is_node(node)
    assert os.listdir(tmp_path) == ["null"]


def test_plot_into_a_device_node_leaves_the_node(tmp_path):
    node = make_node(tmp_path / "null.png")
    res = run_cli("plot", "-o", str(node))
    assert res.returncode == 0, res.stderr
    assert is_node(node)
    assert os.listdir(tmp_path) == ["null.png"]


# ---------------------------------------------------------------- a symlink


def _link(tmp_path: Path, name: str) -> tuple[Path, Path]:
    """``link/<name>`` → ``data/<name>`` (another folder: the rename must land beside the target)."""
    (tmp_path / "data").mkdir()
    (tmp_path / "link").mkdir()
    target = tmp_path / "data" / name
    link = tmp_path / "link" / name
    link.symlink_to(target)
    return link, target


@needs_torch
def test_suite_through_a_symlink_writes_its_target(tmp_path, ceilings_file):
    link, target = _link(tmp_path, "r.jsonl")  # dangling: the target is created
    res = _suite(link, ceilings_file)
    assert res.returncode == 0, res.stderr
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert [r["key"] for r in _records(target.read_bytes())] == LINEAR_KEYS
    # resuming through the link reads the target: nothing is measured again
    res = _suite(link, ceilings_file, "--resume")
    assert res.returncode == 0, res.stderr
    assert "resuming: 3 cases" in res.stderr
    assert link.is_symlink() and [r["key"] for r in _records(target.read_bytes())] == LINEAR_KEYS


@needs_torch
def test_linear_through_a_symlink_appends_to_its_target(tmp_path, ceilings_file):
    link, target = _link(tmp_path, "m.jsonl")
    target.write_text("")  # an empty file: the old code replaced the link and left this empty
    res = _linear(link, ceilings_file)
    assert res.returncode == 0, res.stderr
    assert link.is_symlink()
    assert [r["key"] for r in _records(target.read_bytes())] == ["linear/linear/bf16/n=2,k=64,m=64"]


@needs_torch
def test_ceilings_through_a_symlink_writes_its_target(tmp_path):
    link, target = _link(tmp_path, "c.json")
    res = run_cli("measure", "ceilings", "--quick", "--cpu", "-o", str(link), "--json", env=CPU)
    assert res.returncode == 0, res.stderr
    assert link.is_symlink()
    doc = json.loads(target.read_text())
    assert doc["format"] == "attnroof-ceilings/1"
    assert [r["key"] for r in doc["ceilings"]] == [r["key"] for r in res.json()["records"]]


def test_plot_and_report_through_a_symlink_write_the_target(tmp_path):
    link, target = _link(tmp_path, "chart.svg")
    res = run_cli("plot", "-o", str(link))
    assert res.returncode == 0, res.stderr
    assert link.is_symlink() and target.read_text().lstrip().startswith("<?xml")
    page = tmp_path / "data" / "r.html"
    (tmp_path / "link" / "r.html").symlink_to(page)
    res = run_cli("report", "-o", str(tmp_path / "link" / "r.html"))
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "link" / "r.html").is_symlink() and page.read_text().startswith("<!DOCTYPE html>")


# ---------------------------------------------------------------- a FIFO


@needs_torch
def test_suite_streams_records_into_a_fifo(tmp_path, ceilings_file):
    reader = FifoReader(tmp_path / "pipe")
    res = _suite(reader.path, ceilings_file)
    assert res.returncode == 0, res.stderr
    assert [r["key"] for r in _records(reader.data())] == LINEAR_KEYS  # one stream, every record
    assert stat.S_ISFIFO(os.lstat(reader.path).st_mode)


@needs_torch
def test_linear_streams_into_a_fifo(tmp_path, ceilings_file):
    reader = FifoReader(tmp_path / "pipe")
    res = _linear(reader.path, ceilings_file)
    assert res.returncode == 0, res.stderr
    assert [r["impl"] for r in _records(reader.data())] == ["linear"]
    assert stat.S_ISFIFO(os.lstat(reader.path).st_mode)


@needs_torch
def test_ceilings_stream_into_a_fifo(tmp_path):
    reader = FifoReader(tmp_path / "pipe")
    res = run_cli("measure", "ceilings", "--quick", "--cpu", "-o", str(reader.path), env=CPU)
    assert res.returncode == 0, res.stderr
    assert json.loads(reader.data())["format"] == "attnroof-ceilings/1"
    assert stat.S_ISFIFO(os.lstat(reader.path).st_mode)


def test_plot_streams_into_a_fifo(tmp_path):
    reader = FifoReader(tmp_path / "pipe.png")
    res = run_cli("plot", "-o", str(reader.path))
    assert res.returncode == 0, res.stderr
    assert reader.data().startswith(b"\x89PNG\r\n\x1a\n")
    assert stat.S_ISFIFO(os.lstat(reader.path).st_mode)


# ---------------------------------------------------------------- measurements are not overwritten

RESULTS = [
    {"key": f"linear/linear/bf16/n={n},k=64,m=64", "kind": "linear", "status": "ok", "time_s": 1e-5}
    for n in (1, 2, 4)
]


def _results_file(path: Path) -> bytes:
    data = "".join(json.dumps(r) + "\n" for r in RESULTS).encode()
    path.write_bytes(data)
    return data


def test_ceilings_refuse_a_results_file_with_measurements(tmp_path):
    path = tmp_path / "campaign.jsonl"
    before = _results_file(path)
    res = run_cli("measure", "ceilings", "--quick", "--cpu", "-o", str(path), env=CPU)
    # refused before anything is measured: the old code measured, then overwrote, exit 0
    assert_one_line_error(res, "campaign.jsonl", "holds 3 measurements", "--force")
    assert path.read_bytes() == before


def test_ceilings_refuse_a_ceilings_file_and_a_stranger(tmp_path):
    saved = tmp_path / "c.json"
    saved.write_text(json.dumps({"format": "attnroof-ceilings/1", "device": {}, "ceilings": []}, indent=2))
    before = saved.read_bytes()
    assert_one_line_error(
        run_cli("measure", "ceilings", "--cpu", "-o", str(saved), env=CPU), "measured ceilings", "--force"
    )
    assert saved.read_bytes() == before
    notes = tmp_path / "notes.json"
    notes.write_text('{"mine": true}\n')
    assert_one_line_error(
        run_cli("measure", "ceilings", "--cpu", "-o", str(notes), env=CPU), "not an attnroof file"
    )
    assert notes.read_text() == '{"mine": true}\n'


@needs_torch
def test_suite_force_starts_a_file_over(tmp_path, ceilings_file):
    path = tmp_path / "r.jsonl"
    before = _results_file(path)
    assert_one_line_error(_suite(path, ceilings_file), "already holds 3 measurements", "--resume", "--force")
    assert path.read_bytes() == before
    assert_one_line_error(_suite(path, ceilings_file, "--resume", "--force"), "choose one")
    res = _suite(path, ceilings_file, "--force")
    assert res.returncode == 0, res.stderr
    assert [r["key"] for r in _records(path.read_bytes())] == LINEAR_KEYS  # the 3 old ones are gone


def test_plot_and_report_overwrite_their_own_output_but_not_measurements(tmp_path):
    chart = tmp_path / "chart.svg"
    chart.write_text("<svg>someone else's drawing</svg>")
    # not attnroof's chart: it used to be replaced (only measurements were protected)
    assert_one_line_error(run_cli("plot", "-o", str(chart)), "chart.svg", "not an attnroof file", "--force")
    assert chart.read_text() == "<svg>someone else's drawing</svg>"
    assert run_cli("plot", "-o", str(chart), "--force").returncode == 0
    assert chart.read_text().lstrip().startswith("<?xml")
    assert run_cli("plot", "-o", str(chart)).returncode == 0  # now its own: replaced without --force
    for command, name in (("plot", "m.png"), ("report", "m.html")):
        path = tmp_path / name
        before = _results_file(path)
        assert_one_line_error(run_cli(command, "-o", str(path)), name, "holds 3 measurements", "--force")
        assert path.read_bytes() == before
        res = run_cli(command, "-o", str(path), "--force")
        assert res.returncode == 0, res.stderr
        assert path.read_bytes() != before


# ---------------------------------------------------------------- one rule for a missing folder


@pytest.mark.parametrize(
    "args",
    [
        ["measure", "suite", "--quick", "--cpu", "-o", "{}/r.jsonl"],
        ["measure", "linear", "-n", "1", "-k", "8", "-m", "8", "--cpu", "-o", "{}/r.jsonl"],
        ["measure", "ceilings", "--quick", "--cpu", "-o", "{}/c.json"],
        ["plot", "-o", "{}/c.png"],
        ["report", "-o", "{}/r.html"],
    ],
    ids=lambda a: " ".join(a[:2]),
)
def test_a_missing_folder_is_refused_and_not_created(tmp_path, args):
    missing = tmp_path / "no" / "such"
    res = run_cli(*[a.format(missing) for a in args], env=CPU)
    assert_one_line_error(res, f"no such folder {str(missing)!r}")
    assert not (tmp_path / "no").exists()  # measure -o used to create it


# ---------------------------------------------------------------- the helper itself


def test_a_replaced_file_keeps_its_permissions_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "out.txt"
    path.write_text("old")
    path.chmod(0o640)
    inode = path.stat().st_ino
    outfile.write_text(path, "new")
    assert path.read_text() == "new"
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    assert path.stat().st_ino != inode  # renamed over, not written in place
    assert os.listdir(tmp_path) == ["out.txt"]


def test_a_new_file_gets_the_umask_mode_not_a_private_temporary_one(tmp_path):
    mask = os.umask(0o022)
    try:
        outfile.write_text(tmp_path / "new.txt", "x")
    finally:
        os.umask(mask)
    assert stat.S_IMODE((tmp_path / "new.txt").stat().st_mode) == 0o644


def test_a_folder_is_refused(tmp_path):
    with pytest.raises(InputError, match="it is a folder"):
        outfile.write_text(tmp_path, "x")


def test_measurements_in_tells_results_and_ceilings_from_other_files(tmp_path):
    results, ceilings, other, empty = (tmp_path / n for n in ("r.jsonl", "c.json", "o.json", "e.jsonl"))
    _results_file(results)
    ceilings.write_text(json.dumps({"format": "attnroof-ceilings/1", "device": {}}))
    other.write_text(json.dumps({"mine": True}) + "\n")
    empty.write_text("")
    assert outfile.measurements_in(results) == "3 measurements"
    assert outfile.measurements_in(ceilings) == "measured ceilings"
    assert outfile.measurements_in(empty) is None
    assert outfile.measurements_in(other) is None
    assert outfile.measurements_in(tmp_path / "missing") is None


def test_hidden_siblings_fit_any_legal_name_and_tell_long_names_apart(tmp_path):
    short = outfile.hidden_sibling(tmp_path / "r.jsonl", ".lock")
    assert short == ".r.jsonl.lock"
    a, b = ("x" * 250 + end for end in (".a.jsonl", ".b.jsonl"))  # 258 bytes each: one prefix, cut
    a, b = a[-255:], b[-255:]
    locks = [outfile.hidden_sibling(tmp_path / n, ".lock") for n in (a, b)]
    assert all(len(n.encode()) <= 255 and n.startswith(".x") and n.endswith(".lock") for n in locks)
    assert locks[0] != locks[1]  # the hash of the whole name, not only its cut start
    assert locks[0] == outfile.hidden_sibling(tmp_path / a, ".lock")  # the next writer finds it
    wide = "é" * 125 + ".svg"  # 254 bytes: the cut never splits a character
    name = outfile.hidden_sibling(tmp_path / wide, ".", room=12)
    assert len(name.encode()) <= 255 - 12 and name.encode().decode("utf-8") == name
    outfile.write_text(tmp_path / wide, "x")
    assert os.listdir(tmp_path) == [wide]
