"""Board power: a figure in a device file or on ``--board-power`` typed in kW, a rack's total,
text, zero or nothing finite is one line naming it; a good one is taken (and shown)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hostile import Case
from hostile.files import device

ATTENTION = ("attention", "-s", "1k", "-d", "64")


def _overridden(result: Any, _: Path) -> None:
    assert "board_power_w" in result.stdout, result.stdout


def _shown(result: Any, _: Path) -> None:
    assert "board power: 450 W" in result.stdout, result.stdout


CASES = [
    Case("board_power_w in kW", (*ATTENTION, "--device", "{dir}/d.toml"),
         files={"d.toml": device("board_power_w = 0.7")}, error=("d.toml", "board_power_w = 0.7", "not kW")),
    Case("board_power_w a rack", (*ATTENTION, "--device", "{dir}/d.toml"),
         files={"d.toml": device("board_power_w = 1.2e5")}, error=("d.toml", "board_power_w", "implausibly large")),
    Case("board_power_w text", (*ATTENTION, "--device", "{dir}/d.toml"),
         files={"d.toml": device('board_power_w = "700 W"')}, error=("d.toml", "'700 W'", "not a number")),
    Case("board_power_w nan", (*ATTENTION, "--device", "{dir}/d.toml"),
         files={"d.toml": device("board_power_w = nan")}, error=("d.toml", "board_power_w = nan", "finite")),
    Case("board_power_w a table", (*ATTENTION, "--device", "{dir}/d.toml"),
         files={"d.toml": device("board_power_w = { max = 700 }")}, error=("d.toml", "board_power_w", "not a number")),
    Case("board_power_w huge integer", (*ATTENTION, "--device", "{dir}/d.toml"),
         files={"d.toml": device("board_power_w = " + "9" * 400)}, error=("d.toml", "board_power_w", "400-digit")),
    Case("board_power_w shown", ("devices", "{dir}/d.toml"),
         files={"d.toml": device("board_power_w = 450")}, error=None, check=_shown),
    Case("--board-power 0", (*ATTENTION, "--board-power", "0"), error=("--board-power", "'0'", "positive")),
    Case("--board-power in kW", (*ATTENTION, "--board-power", "0.7"), error=("--board-power = 0.7", "not kW")),
    Case("--board-power a rack", (*ATTENTION, "--board-power", "120k"), error=("--board-power", "implausibly large")),
    Case("--board-power inf", (*ATTENTION, "--board-power", "inf"), error=("--board-power", "'inf'")),
    Case("--board-power text", (*ATTENTION, "--board-power", "lots"), error=("--board-power", "'lots'")),
    Case("--board-power taken", ("sheet", "--device", "h100", "--board-power", "500", "--json"),
         error=None, check=_overridden),
]  # fmt: skip
