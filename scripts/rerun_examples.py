"""Rerun the console examples of the README and docs/*.md whose output moved, and write what they
print now (tests/test_readme.py checks the same examples).

    python scripts/rerun_examples.py            # list the examples whose output differs
    python scripts/rerun_examples.py --write    # and rewrite their output in place

An example that leaves lines out (a ``[…]`` line) is listed but not rewritten: which lines it
shows is a choice its page made, to be made again by hand.
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PIPE = re.compile(r"^(head|tail) -(?:n ?)?(\d+)$")
CUT = "[…]"


def printed(cmd: str, pipe: str | None) -> list[str]:
    r = subprocess.run(
        [sys.executable, "-m", "attnroof", *shlex.split(cmd)[1:]],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    if r.returncode != 0:
        raise SystemExit(f"{cmd}: exit {r.returncode}: {r.stderr.strip()}")
    lines = [ln.rstrip() for ln in r.stdout.splitlines()]
    if pipe:
        m = PIPE.match(pipe)
        assert m, pipe
        n = int(m.group(2))
        lines = lines[:n] if m.group(1) == "head" else lines[-n:]
    return lines


def holds(shown: list[str], now: list[str]) -> bool:
    """Whether the page's lines are what the command prints (tests/test_readme.py's rule)."""
    sys.path.insert(0, str(ROOT / "tests"))
    from test_readme import assert_shown

    try:
        assert_shown(shown, now)
    except AssertionError:
        return False
    return True


def rerun_block(block: str, where: str, write: bool) -> str:
    out: list[str] = []
    lines = block.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        i += 1
        if not line.startswith("$ "):
            continue
        cmd, *pipes = (p.strip() for p in line[2:].split("#", 1)[0].split("|"))
        shown = []
        while i < len(lines) and not lines[i].startswith("$ "):
            shown.append(lines[i])
            i += 1
        if not cmd.startswith("attnroof ") or " measure " in f" {cmd} " or not any(s.strip() for s in shown):
            out += shown
            continue
        now = printed(cmd, pipes[0] if pipes else None)
        if holds([s.rstrip() for s in shown if s.strip()], [s for s in now if s.strip()]):
            out += shown
            continue
        if CUT in shown:
            print(f"{where}: {cmd} moved, and shows a cut: rewrite it by hand")
            out += shown
            continue
        print(f"{where}: {cmd}{' | ' + pipes[0] if pipes else ''} moved" + (": rewritten" if write else ""))
        out += now if write else shown
    return "\n".join(out) + ("\n" if block.endswith("\n") else "")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="rewrite the moved examples in place")
    args = ap.parse_args()
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        where = page.relative_to(ROOT).as_posix()
        new = re.sub(
            r"(```console\n)(.*?)(```)",
            lambda m, where=where: m[1] + rerun_block(m[2], where, args.write) + m[3],
            text,
            flags=re.S,
        )
        if args.write and new != text:
            page.write_text(new, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
