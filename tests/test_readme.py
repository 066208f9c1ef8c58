"""The README's worked examples are real output: each ``$ attnroof ...`` line in a console block
is run, and every line the README shows under it must appear, in order, in what it prints.
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
    printed = [ln.rstrip() for ln in r.stdout.splitlines()]
    i = 0
    for line in shown:  # in order, each shown line somewhere after the previous one
        while i < len(printed) and printed[i] != line:
            i += 1
        assert i < len(printed), f"README shows a line attnroof does not print: {line!r}"
        i += 1
