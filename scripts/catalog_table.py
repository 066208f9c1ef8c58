#!/usr/bin/env python3
"""What is generated from the built-in device catalog, ``catalog.toml``: the Markdown table of
``docs/devices.md``, and ``catalog.json`` (the catalog already parsed, which start-up reads instead of the TOML).

    python scripts/catalog_table.py            # print the table
    python scripts/catalog_table.py --write    # rewrite it into docs/devices.md, and catalog.json
    python scripts/catalog_table.py --check    # exit 1 if either is out of date

The table is the one ``attnroof devices`` prints, for the packaged catalog only (``$ATTNROOF_DEVICES``
is ignored), so the docs never carry a figure by hand.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "docs" / "devices.md"
"""The page that carries the table, between the markers."""
BEGIN = "<!-- catalog:begin -->"
END = "<!-- catalog:end -->"

sys.path.insert(0, str(ROOT / "src"))

from attnroof.devices import CATALOG_CACHE, CATALOG_FILE, builtin_devices, catalog_cache  # noqa: E402
from attnroof.text.devices import catalog_table  # noqa: E402


def markdown_table() -> str:
    """The table of the packaged catalog: peak bf16 TFLOP/s, TB/s, GB and ridge per device."""
    return catalog_table(builtin_devices())


def cache_text() -> str:
    """What ``catalog.json`` should hold for the catalog as it is now."""
    return catalog_cache(CATALOG_FILE.read_text(encoding="utf-8"))


def cache_is_current() -> bool:
    return CATALOG_CACHE.is_file() and CATALOG_CACHE.read_text(encoding="utf-8") == cache_text()


def splice(text: str, table: str) -> str:
    """``text`` with everything between the BEGIN and END markers replaced by ``table``."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"docs/devices.md lacks the markers {BEGIN} ... {END}")
    return text[: start + len(BEGIN)] + "\n" + table + "\n" + text[end:]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--write", action="store_true", help="rewrite docs/devices.md between the markers, and catalog.json"
    )
    mode.add_argument(
        "--check", action="store_true", help="exit 1 if docs/devices.md or catalog.json is out of date"
    )
    args = p.parse_args(argv)
    table = markdown_table()
    if not (args.write or args.check):
        print(table)
        return 0
    text = README.read_text(encoding="utf-8")
    try:
        new = splice(text, table)
    except ValueError as e:
        print(f"catalog_table: {e}", file=sys.stderr)
        return 2
    if args.check:
        stale = [
            name
            for name, current in (("docs/devices.md", new == text), ("catalog.json", cache_is_current()))
            if not current
        ]
        if stale:
            print(f"catalog_table: {' and '.join(stale)} out of date; run it with --write", file=sys.stderr)
            return 1
        return 0
    if new != text:
        README.write_text(new, encoding="utf-8")
    if not cache_is_current():
        CATALOG_CACHE.write_text(cache_text(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
