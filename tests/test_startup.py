"""Start-up: a run imports what its command needs and no more (``benchmarks/speed.py`` times it).

``attnroof --help`` lists the commands from the index in ``attnroof.commands`` and imports no
command module; ``attnroof model`` on one device loads none of the many-devices code, and no
command loads numpy, sympy, calibration, measurement or charts unless it uses them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

PARALLEL = (
    "attnroof.model.spread",
    "attnroof.model.train_spread",
    "attnroof.model.comms",
    "attnroof.model.parallel",
    "attnroof.model.training",
    "attnroof.model.training_memory",
)
"""The many-devices (and training) code: only ``model`` with a parallel flag (or --phase train) needs it."""
EXTRAS = (
    "attnroof.calibration",
    "attnroof.measure",
    "attnroof.plot",
    "numpy",
    "sympy",
    "torch",
    "matplotlib",
)
"""Loaded by the commands that use them, never at start-up."""

MODEL = ["model", "--model", "llama-3.1-8b", "--phase", "decode", "--context", "8192", "--device", "h100"]


def _loaded(*argv: str) -> tuple[int, str, str, list[str]]:
    """Run ``attnroof ARGV`` in a fresh interpreter: its exit status, its stdout and stderr, and
    the modules it imported."""
    code = (
        "import contextlib, io, json, sys\n"
        "from attnroof.cli import main\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out):\n"
        "    try:\n"
        "        rc = main(sys.argv[1:])\n"
        "    except SystemExit as e:\n"
        "        rc = e.code\n"
        "print(json.dumps([rc, out.getvalue(), sorted(sys.modules)]))\n"
    )
    env = dict(os.environ, PYTHONPATH=str(SRC))
    r = subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env, timeout=120
    )
    assert r.returncode == 0, r.stderr
    rc, out, modules = json.loads(r.stdout.splitlines()[-1])
    return rc, out, r.stderr, modules


def _under(modules: list[str], prefixes: tuple[str, ...]) -> list[str]:
    return [m for m in modules if any(m == p or m.startswith(p + ".") for p in prefixes)]


def test_help_imports_no_command_module() -> None:
    rc, out, _, modules = _loaded("--help")
    assert rc == 0 and "calibrate" in out
    assert [m for m in modules if m.startswith("attnroof")] == [
        "attnroof",
        "attnroof.cli",
        "attnroof.commands",
        "attnroof.commands._run",  # the parsers and the run of one command: no command's module
        "attnroof.escaping",  # every line printed goes through its filter
    ]


def test_model_on_one_device_loads_no_many_devices_code() -> None:
    rc, out, _, modules = _loaded(*MODEL, "--json")
    assert rc == 0 and json.loads(out)["model"]
    assert _under(modules, PARALLEL + EXTRAS) == []


def test_model_across_devices_still_loads_what_it_needs() -> None:
    rc, out, _, modules = _loaded(*MODEL, "--tp", "2", "--json")
    assert rc == 0 and json.loads(out)["parallel"]["tp"] == 2
    assert "attnroof.model.spread" in modules


@pytest.mark.parametrize("command", ["attention", "decode", "linear", "devices", "footprint"])
def test_light_commands_load_no_extras(command: str) -> None:
    argv = {
        "attention": ["attention", "-s", "8192", "-d", "128"],
        "decode": ["decode", "-s", "8192", "-d", "128"],
        "linear": ["linear", "-n", "8192", "-k", "4096", "-m", "4096"],
        "devices": ["devices"],
        "footprint": ["footprint", "-s", "8192"],
    }[command]
    rc, _, _, modules = _loaded(*argv)
    assert rc == 0
    assert _under(modules, PARALLEL + EXTRAS) == []


def test_the_package_loads_its_names_on_first_use() -> None:
    code = (
        "import sys, attnroof\n"
        "assert [m for m in sys.modules if m.startswith('attnroof.')] == [], sorted(sys.modules)\n"
        "from attnroof import Roof, attention\n"
        "assert attnroof.Roof is Roof and 'attnroof.roofline' in sys.modules\n"
        "assert {'Roof', 'get_device', 'ops'} <= set(dir(attnroof))\n"
        "try:\n"
        "    attnroof.no_such_name\n"
        "except AttributeError as e:\n"
        "    assert 'no_such_name' in str(e)\n"
        "else:\n"
        "    raise AssertionError('no AttributeError')\n"
    )
    env = dict(os.environ, PYTHONPATH=str(SRC))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr


def test_a_flag_before_the_command_is_refused_as_before() -> None:
    """The command's flags load when argparse reaches it, wherever it stands."""
    rc, _, err, _ = _loaded("--bogus", *MODEL)
    assert rc == 2
    assert err.strip().splitlines()[-1] == "attnroof: error: unrecognized arguments: --bogus"
