"""docs/architecture.md stays true: its recipes name files that exist and scripts that regenerate
what they say, the operator table's rules it lists are the entry's fields, every split is named,
and the places a recipe says an operator or a row is added are the only places they are."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from attnroof.operators import Operator
from attnroof.row import SPLITS

ROOT = Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
SRC = ROOT / "src" / "attnroof"


def _recipes() -> dict[str, list[str]]:
    """Each recipe's title and the lines of its "Files touched:" list."""
    recipes = DOC.split("## Recipes", 1)[1].split("\n## ", 1)[0]
    out = {}
    for part in recipes.split("\n### ")[1:]:
        title, body = part.split("\n", 1)
        assert "Files touched:" in body, f"recipe {title!r} lists no files"
        listed = body.split("Files touched:", 1)[1]
        out[title.strip()] = [line[2:] for line in listed.splitlines() if line.startswith("- ")]
    return out


RECIPES = _recipes()


def test_there_is_a_recipe_for_each_kind_of_change():
    assert set(RECIPES) == {
        "Add an operator",
        "Add a model (a new architecture)",
        "Add a device",
        "Add a pass",
        "Add a split",
        "Add a sharding policy",
    }


@pytest.mark.parametrize("title", sorted(RECIPES))
def test_each_file_a_recipe_touches_exists(title):
    for line in RECIPES[title]:
        path = re.match(r"`([^`]+)`", line)
        assert path, f"{title}: {line!r} does not start with a path"
        assert (ROOT / path.group(1)).exists(), f"{title}: {path.group(1)} does not exist"


@pytest.mark.parametrize("title", sorted(RECIPES))
def test_each_script_a_recipe_names_exists_and_writes_what_it_says(title):
    for line in RECIPES[title]:
        target = re.match(r"`([^`]+)`", line).group(1)  # type: ignore[union-attr]
        for script in re.findall(r"`(scripts/[\w.]+\.py)", line):
            text = (ROOT / script).read_text(encoding="utf-8")
            name, stem = Path(target).name, f'"{Path(target).stem}"'
            assert name in text or stem in text or target.rstrip("/") in text, (script, target)


def test_the_operator_table_lists_every_rule_of_an_entry():
    table = DOC.split("### The operator table", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`(\w+)`", table))
    fields = {f.name for f in dataclasses.fields(Operator)} - {"name"}
    assert fields <= named, sorted(fields - named)


def test_every_split_is_named():
    split_recipe = DOC.split("### Add a split", 1)[1]
    assert all(s in split_recipe for s in SPLITS)


def test_operators_are_registered_and_rows_built_only_where_the_recipes_say():
    """The recipes say an operator is one entry in operators.py and a row is built in
    model/rows.py (a hybrid's mixer rows in model/hybrid_rows.py): no other source file registers
    an operator or builds a row."""
    registers, rows = set(), set()
    for p in SRC.rglob("*.py"):
        text = p.read_text(encoding="utf-8")
        rel = p.relative_to(ROOT).as_posix()
        if re.search(r"^register\(|^    register\(", text, re.M):
            registers.add(rel)
        code = "\n".join(line for line in text.splitlines() if ">>>" not in line)
        if re.search(r"\bOpInstance\(", code) and "class OpInstance" not in code:
            rows.add(rel)
    assert registers == {"src/attnroof/operators.py"}
    assert rows == {"src/attnroof/model/rows.py", "src/attnroof/model/hybrid_rows.py"}
    operator_files = " ".join(RECIPES["Add an operator"])
    assert all(f in operator_files for f in registers | rows)
