"""The README's worked examples are real output: each ``$ attnroof ...`` line in a console block
is run, and the lines the README shows under it must be what it prints (blank lines aside). Where
the README leaves lines out it says so with a line ``[…]``: between two shown runs of lines, before
the first or after the last. Anything else left out is a failure.
(Measurements are timings of this machine, so ``attnroof measure`` examples are not rerun.)"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from conftest import run_cli

README = Path(__file__).resolve().parents[1] / "README.md"


def _examples() -> list[tuple[list[str], list[str]]]:
    text = README.read_text(encoding="utf-8")
    out: list[tuple[list[str], list[str]]] = []
    for block in re.findall(r"```console\n(.*?)```", text, flags=re.S):
        current: tuple[list[str], list[str]] | None = None
        for line in block.splitlines():
            if line.startswith("$ "):
                current = None
                cmd = line[2:].split("#", 1)[0].strip()
                if cmd.startswith("attnroof ") and "|" not in cmd and " measure " not in f" {cmd} ":
                    current = (shlex.split(cmd)[1:], [])
                    out.append(current)
            elif current is not None and line.strip():
                current[1].append(line.rstrip())
    return out


EXAMPLES = [ex for ex in _examples() if ex[1]]


def test_the_readme_has_examples_to_check():
    assert len(EXAMPLES) >= 3


@pytest.mark.parametrize(("args", "shown"), EXAMPLES, ids=[" ".join(a) for a, _ in EXAMPLES])
def test_readme_example_is_real_output(args, shown):
    r = run_cli(*args)
    assert r.returncode == 0, r.stderr
    printed = [ln.rstrip() for ln in r.stdout.splitlines() if ln.strip()]
    assert_shown(shown, printed)


CUT = "[…]"
"""How the README marks lines of output it leaves out."""


def assert_shown(shown: list[str], printed: list[str]) -> None:
    """``shown`` is ``printed`` with runs of lines replaced by :data:`CUT` (no silent cuts)."""
    runs: list[list[str]] = [[]]
    for line in shown:
        if line == CUT:
            runs.append([])
        else:
            runs[-1].append(line)
    pos = 0
    for k, run in enumerate(runs):
        cut_before, cut_after = k > 0, k < len(runs) - 1
        if not run:
            continue
        starts = [i for i in range(pos, len(printed) - len(run) + 1) if printed[i : i + len(run)] == run]
        assert starts, f"README shows lines attnroof does not print together: {run!r}"
        start = starts[0]
        assert cut_before or start == pos, f"README leaves out lines before {run[0]!r} without a {CUT} line"
        pos = start + len(run)
        assert cut_after or pos == len(printed), (
            f"README leaves out lines after {run[-1]!r} without a {CUT} line"
        )


def test_assert_shown_catches_silent_cuts():
    printed = ["a", "b", "c", "d"]
    assert_shown(["a", "b", "c", "d"], printed)
    assert_shown(["a", CUT, "d"], printed)
    assert_shown([CUT, "b", "c", CUT], printed)
    for silent in (["a", "d"], ["b", "c", "d"], ["a", "b", "c"], ["a", "c", CUT]):
        with pytest.raises(AssertionError):
            assert_shown(silent, printed)
