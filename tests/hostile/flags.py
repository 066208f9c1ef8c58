"""Flags that were silently ignored or answered wrongly."""

from __future__ import annotations

from hostile import Case

CASES: list[Case] = []
