"""The worked examples of the README and of every page under ``docs/`` are real output: each
``$ attnroof ...`` line in a console block is run, and the lines the page shows under it must be
what it prints (blank lines aside); ``| head -N`` and ``| tail -N`` keep the first or last N
lines, as the shell would. Where a page leaves lines out it says so with a line ``[…]``: between
two shown runs of lines, before the first or after the last. Anything else left out is a failure.
(Measurements are timings of this machine, so ``attnroof measure`` examples are not rerun.)"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from conftest import run_cli

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
"""The README and every page under docs/, whose examples are checked."""

PIPE = re.compile(r"^(head|tail) -(?:n ?)?(\d+)$")
"""A filter an example may pipe its output through: ``head -N`` or ``tail -N``."""

Example = tuple[str, list[str], str | None, list[str]]
"""(the page, the command's arguments, its ``head -N``/``tail -N`` filter or None, the lines shown)."""


def _examples(page: Path) -> list[Example]:
    text = page.read_text(encoding="utf-8")
    out: list[Example] = []
    for block in re.findall(r"```console\n(.*?)```", text, flags=re.S):
        current: Example | None = None
        for line in block.splitlines():
            if line.startswith("$ "):
                current = None
                cmd, *pipes = (part.strip() for part in line[2:].split("#", 1)[0].split("|"))
                if cmd.startswith("attnroof ") and " measure " not in f" {cmd} ":
                    assert len(pipes) <= 1 and all(PIPE.match(p) for p in pipes), (
                        f"{page.name}: an example can pipe only through head -N or tail -N: {line!r}"
                    )
                    current = (
                        page.relative_to(ROOT).as_posix(),
                        shlex.split(cmd)[1:],
                        pipes[0] if pipes else None,
                        [],
                    )
                    out.append(current)
            elif current is not None and line.strip():
                current[3].append(line.rstrip())
    return out


EXAMPLES = [ex for page in PAGES for ex in _examples(page) if ex[3]]


def _filtered(lines: list[str], pipe: str | None) -> list[str]:
    if pipe is None:
        return lines
    m = PIPE.match(pipe)
    assert m
    n = int(m.group(2))
    return lines[:n] if m.group(1) == "head" else lines[-n:] if n else []


def test_the_readme_has_examples_to_check():
    assert len([ex for ex in EXAMPLES if ex[0] == "README.md"]) >= 5
    assert {ex[0] for ex in EXAMPLES} > {"README.md"}, "the docs pages' examples are checked too"


@pytest.mark.parametrize(
    ("page", "args", "pipe", "shown"),
    EXAMPLES,
    ids=[f"{page}: {' '.join(a)}{' | ' + p if p else ''}" for page, a, p, _ in EXAMPLES],
)
def test_example_is_real_output(page, args, pipe, shown):
    r = run_cli(*args)
    assert r.returncode == 0, r.stderr
    printed = _filtered([ln.rstrip() for ln in r.stdout.splitlines()], pipe)
    assert_shown(shown, [ln for ln in printed if ln.strip()])


def test_every_docs_page_says_what_it_answers_and_the_readme_links_to_it():
    readme = README.read_text(encoding="utf-8")
    for page in PAGES[1:]:
        text = page.read_text(encoding="utf-8")
        assert text.startswith("# "), f"{page.name} starts with its title"
        first = text.split("\n\n", 2)[1]
        assert first.strip() and not first.startswith(("#", "|", "```")), (
            f"{page.name}: the first paragraph says what the page answers"
        )
        assert f"(docs/{page.name})" in readme, f"the README links to docs/{page.name}"


def test_filters_are_the_shells():
    assert _filtered(["a", "b", "c"], "tail -1") == ["c"]
    assert _filtered(["a", "b", "c"], "head -2") == ["a", "b"]
    assert _filtered(["a", "b", "c"], None) == ["a", "b", "c"]


CUT = "[…]"
"""How a page marks lines of output it leaves out."""


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
        assert starts, f"the page shows lines attnroof does not print together: {run!r}"
        start = starts[0]
        assert cut_before or start == pos, f"the page leaves out lines before {run[0]!r} without a {CUT} line"
        pos = start + len(run)
        assert cut_after or pos == len(printed), (
            f"the page leaves out lines after {run[-1]!r} without a {CUT} line"
        )


def test_assert_shown_catches_silent_cuts():
    printed = ["a", "b", "c", "d"]
    assert_shown(["a", "b", "c", "d"], printed)
    assert_shown(["a", CUT, "d"], printed)
    assert_shown([CUT, "b", "c", CUT], printed)
    for silent in (["a", "d"], ["b", "c", "d"], ["a", "b", "c"], ["a", "c", CUT]):
        with pytest.raises(AssertionError):
            assert_shown(silent, printed)


# ---------------------------------------------------------------- what the pages state


def test_the_readme_is_short_and_keeps_the_two_setup_commands():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200, "keep the README short: topics go under docs/"
    assert "```sh\npip install . && attnroof sheet\n```" in text
    assert "```sh\npip install torch==2.13.0 -e '.[test-all]' && python -m pytest\n```" in text
    assert (
        "pip install -q torch==2.13.0 -e '.[test-all]' && python -m pytest"
        in (ROOT / ".ci" / "run").read_text()
    )
    assert "`pip install -e '.[test]' && python -m pytest`" in text  # the light one, torch's tests skipped


def test_the_test_extras_are_one_light_and_one_whole():
    """``test`` installs no torch, transformers or triton (its tests skip without them);
    ``test-all``, which the README's command and CI install, is ``test`` and those three."""
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    heavy = {"torch", "transformers", "triton"}
    names = {re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0] for r in extras["test"]}
    assert not names & heavy and {"pytest", "pytest-xdist", "hypothesis"} <= names
    whole = {re.split(r"[<>=!~;\[ ]", r, maxsplit=1)[0] for r in extras["test-all"]}
    assert "attnroof[test]" in extras["test-all"] and heavy <= whole


def test_the_quick_start_runs_on_real_devices_and_introduces_device_r():
    text = README.read_text(encoding="utf-8")
    devices = {
        ex[1][ex[1].index("--device") + 1] for ex in EXAMPLES if ex[0] == "README.md" and "--device" in ex[1]
    }
    assert devices >= {"h100", "h200"}
    assert "device R" in text


NUMBER_WORDS = dict(
    enumerate(
        [
            "zero",
            "one",
            "two",
            "three",
            "four",
            "five",
            "six",
            "seven",
            "eight",
            "nine",
            "ten",
            "eleven",
            "twelve",
        ]
    )
)
NUMBER_WORDS.update({13: "thirteen", 14: "fourteen", 15: "fifteen", 16: "sixteen"})


def test_the_models_page_counts_the_built_in_models():
    from attnroof.model import builtin_names

    n = len(builtin_names())
    assert (
        f"one of the {NUMBER_WORDS.get(n, str(n))} built-in models"
        in (ROOT / "docs" / "models.md").read_text()
    )


def test_every_catalog_gpu_has_the_link_the_measuring_page_says_it_has():
    from attnroof.devices import builtin_devices

    assert "every catalog GPU has one" in (ROOT / "docs" / "measuring.md").read_text()
    gpus = [d for d in builtin_devices() if d.kind == "GPU"]
    assert gpus and all(d.links is not None and d.links.scaleup is not None for d in gpus)


def test_the_speed_page_says_each_figure_is_a_median():
    text = (ROOT / "docs" / "speed.md").read_text(encoding="utf-8")
    assert "every figure below\nis a median" in text and "| median |" in text
