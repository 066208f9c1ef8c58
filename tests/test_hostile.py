"""Every hostile file and flag case of ``tests/hostile/`` (one table per area), run through the
CLI: a bad input gets exit 2 and one line naming it; an input attnroof can answer gets an answer
(the case's ``check``). Each case was a crash, a hang, a wrong number or a corrupted file once."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import pytest

import hostile
from conftest import assert_one_line_error, needs_torch, run_cli
from hostile import Case

CASES: list[Case] = [
    case
    for info in pkgutil.iter_modules(hostile.__path__)
    for case in importlib.import_module(f"hostile.{info.name}").CASES
]


def test_case_ids_are_unique() -> None:
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids)), sorted(i for i in ids if ids.count(i) > 1)


@pytest.mark.parametrize(
    "case", [pytest.param(c, id=c.id, marks=[needs_torch] if c.needs_torch else []) for c in CASES]
)
def test_hostile(case: Case, tmp_path: Path) -> None:
    for name, content in case.files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    if case.setup is not None:
        case.setup(tmp_path)
    argv = [a.replace("{dir}", str(tmp_path)) for a in case.argv]
    result = run_cli(*argv, env=dict(case.env) or None)
    if case.error is None:
        assert result.returncode == 0, result
    else:
        assert_one_line_error(result, *case.error)
    if case.check is not None:
        case.check(result, tmp_path)
