"""Restructuring changes no answer: each command's ``--json`` output on a few shapes equals the
snapshot taken before the change (tests/data/snapshots, written by scripts/snapshot_json.py).

Numbers agree to a relative 1e-12 (summing the same terms in another order may move the last
bit of a float); strings, keys and list lengths agree exactly."""

from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path
from typing import Any

import pytest

from attnroof.cli import main

SNAPSHOTS = sorted((Path(__file__).parent / "data" / "snapshots").glob("*.json"))
REL = 1e-12


def _run(argv: list[str]) -> Any:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([*argv, "--json"])
    assert code == 0, err.getvalue()
    return json.loads(out.getvalue())


def _same(expected: Any, got: Any, where: str) -> None:
    if isinstance(expected, dict):
        assert isinstance(got, dict), where
        assert sorted(got) == sorted(expected), (where, sorted(set(got) ^ set(expected)))
        for k in expected:
            _same(expected[k], got[k], f"{where}.{k}")
    elif isinstance(expected, list):
        assert isinstance(got, list) and len(got) == len(expected), where
        for i, (e, g) in enumerate(zip(expected, got, strict=True)):
            _same(e, g, f"{where}[{i}]")
    elif isinstance(expected, bool) or expected is None or isinstance(expected, str):
        assert got == expected, (where, expected, got)
    else:
        assert isinstance(got, int | float) and not isinstance(got, bool), (where, got)
        assert math.isclose(got, expected, rel_tol=REL, abs_tol=0), (where, expected, got)


def test_there_are_snapshots():
    assert len(SNAPSHOTS) >= 15


@pytest.mark.parametrize("path", SNAPSHOTS, ids=[p.stem for p in SNAPSHOTS])
def test_json_output_matches_snapshot(path: Path):
    snap = json.loads(path.read_text(encoding="utf-8"))
    _same(snap["json"], _run(snap["argv"]), path.stem)
