"""No message prints a placeholder: a string literal in src/ that holds ``{name}`` or
``{name:spec}`` but has no f prefix is a missing f (issue 20: a note printed
``{prec.weight_itemsize:g}`` verbatim, the second half of an implicitly concatenated message).

Read token by token, not with ``ast``: the parser merges ``f"…" "…{x}"`` into one f-string whose
plain half no longer says it had no prefix.
"""

from __future__ import annotations

import re
import tokenize
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "attnroof"

PLACEHOLDER = re.compile(r"\{[A-Za-z_][A-Za-z0-9_.]*(\[[^\]{}]*\])?(![rsa])?(:[^{}]*)?\}")
"""``{name}``, ``{a.b}``, ``{a[0]}``, ``{x!r}``, ``{x:.2f}``: what an f-string would fill in."""

TEMPLATES = {("text/devices.py", '"{dt} {unit}"')}
"""Literals that are templates on purpose, filled by ``str.format`` (file, literal)."""


def placeholders_without_f(path: Path) -> list[tuple[int, str]]:
    out = []
    with path.open("rb") as f:
        for tok in tokenize.tokenize(f.readline):
            if tok.type != tokenize.STRING:
                continue
            prefix = re.match(r"[A-Za-z]*", tok.string).group().lower()  # type: ignore[union-attr]
            if "f" not in prefix and PLACEHOLDER.search(tok.string):
                out.append((tok.start[0], tok.string))
    return out


def test_the_scan_finds_a_missing_f(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(
        'x = (f"at {a} " "and {b.c:g} B")\ny = f"{{literal}} {a}" "{{not a placeholder"\n', encoding="utf-8"
    )
    assert placeholders_without_f(bad) == [(1, '"and {b.c:g} B"')]


def test_no_string_in_src_has_a_placeholder_without_f() -> None:
    found = [
        f"{p.relative_to(SRC)}:{line}: {text[:80]}"
        for p in sorted(SRC.rglob("*.py"))
        for line, text in placeholders_without_f(p)
        if (str(p.relative_to(SRC)), text) not in TEMPLATES
    ]
    assert found == []
