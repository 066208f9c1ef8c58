"""The command index's summaries (what ``attnroof --help`` lists) and each command's own
description say what the command does today: every step ``model`` costs, the backward pass where
``--pass`` offers it, latent attention where ``decode`` takes its widths."""

from __future__ import annotations

import pytest

from attnroof.cli import build_parser
from attnroof.commands import COMMAND_INDEX
from conftest import run_cli

SUMMARY = {name: summary for name, _, summary in COMMAND_INDEX}


def _subparser(name: str):
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")  # the COMMAND subparsers
    return sub.choices[name]


def _choices(name: str, flag: str) -> list[str]:
    action = next(a for a in _subparser(name)._actions if flag in a.option_strings)
    return list(action.choices)


@pytest.mark.parametrize("phase", _choices("model", "--phase"))
def test_model_help_names_every_phase(phase):
    r = run_cli("model", "--help")
    description = " ".join(r.stdout.split("\n\n", 1)[1].split("\n\n", 1)[0].split())
    assert phase in SUMMARY["model"], SUMMARY["model"]
    assert phase in description, description


def test_model_help_names_the_spread_over_devices():
    r = run_cli("model", "--help")
    assert "--tp" in r.stdout.split("options:", 1)[0].split("\n\n", 1)[1]


@pytest.mark.parametrize("name", ["sheet", "attention"])
def test_a_command_with_a_backward_pass_says_so(name):
    assert "--pass" in {s for a in _subparser(name)._actions for s in a.option_strings}
    assert "backward" in SUMMARY[name] and "--pass" in SUMMARY[name]


def test_decode_summary_names_latent_attention():
    assert "--kv-lora-rank" in {s for a in _subparser("decode")._actions for s in a.option_strings}
    assert "latent" in SUMMARY["decode"]


def test_measure_summary_names_collectives():
    r = run_cli("measure", "--help")
    assert "collectives" in r.stdout
    assert "collectives" in SUMMARY["measure"]


def test_summaries_fit_one_help_line():
    for name, summary in SUMMARY.items():
        assert len(summary) <= 90, name
        assert not summary.endswith("."), name
