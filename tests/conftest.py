"""Shared test helpers.

The CLI runs in-process by default (:func:`run_cli`): ``attnroof.cli.main(argv)`` with stdout and
stderr captured, the exit status (argparse's ``SystemExit`` included), ``env=`` laid over
``os.environ`` for the call only, an empty stdin, warnings shown on stderr as a fresh interpreter
shows them, and the library's caches emptied first, so that each call starts as a new process
would. A new Python process per call costs a few tenths of a second, for ~200 calls; what a
process proves (``python -m attnroof``, signals, the import cost) is checked by the few tests that
use :func:`run_cli_process`, and ``test_cli.py`` checks that both ways print the same.
"""

from __future__ import annotations

import _warnings
import contextlib
import functools
import importlib.util
import io
import json
import os
import subprocess
import sys
import traceback
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

SRC = Path(__file__).resolve().parents[1] / "src"
_PYTHONPATH = str(SRC) + os.pathsep + os.environ.get("PYTHONPATH", "")
"""What the CLI's processes (and the processes a command starts) import attnroof from."""

# Hypothesis draws the same examples every run (no flaky CI, no order dependence through its
# example database); HYPOTHESIS_PROFILE=explore draws new ones (and more) when hunting for bugs.
# No profile times a test: hypothesis's deadline (200 ms an example) and its too-slow health check
# are wall-clock assertions, which a loaded machine fails (benchmarks/speed.py times the code).
settings.register_profile(
    "ci",
    derandomize=True,
    database=None,
    print_blob=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "explore", max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

HAS_TORCH = importlib.util.find_spec("torch") is not None
needs_torch = pytest.mark.skipif(not HAS_TORCH, reason="needs torch: pip install -e '.[test-all]'")
"""For a test that measures (``attnroof measure`` runs kernels with torch): the light test extra
(``pip install -e '.[test]'``) has no torch, and such a test skips there; a test that imports
torch itself uses ``pytest.importorskip("torch")``."""

# A plan search spreads over forked processes when it is large; a test process may hold threads
# (torch's, pytest-xdist's) that a fork must not copy in the middle of their work, so the
# in-process CLI searches in one process. test_plan_search.py runs the forked path in a process
# of its own and checks it gives the same answer.
os.environ.setdefault("ATTNROOF_WORKERS", "1")

_STARTUP_WARNING_FILTERS = list(_warnings.filters)
"""The interpreter's own warning filters (pytest works on a copy of them): what a fresh
``python -m attnroof`` runs with."""


def _show_warning(msg: warnings.WarningMessage) -> None:
    """Print a warning on stderr, as the interpreter does."""
    sys.stderr.write(warnings._formatwarnmsg_impl(msg))  # type: ignore[attr-defined]


class CLIResult:
    def __init__(self, returncode: int, stdout: str, stderr: str) -> None:
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr

    def json(self) -> Any:
        return json.loads(self.stdout)

    def __repr__(self) -> str:
        return f"CLIResult(returncode={self.returncode!r}, stdout={self.stdout[-500:]!r}, stderr={self.stderr[-500:]!r})"


class _Stream(io.StringIO):
    """A captured stdout or stderr that a command may close (``main`` closes stderr on a broken
    pipe) and that still gives its text afterwards."""

    def close(self) -> None:
        pass


@contextlib.contextmanager
def _environ(env: Mapping[str, str] | None) -> Iterator[None]:
    """``env`` laid over ``os.environ`` for the duration, then exactly the old values back."""
    if not env:
        yield
        return
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _clear_caches() -> None:
    """Empty every ``functools`` cache of the loaded attnroof modules, as a new process starts."""
    for name, mod in list(sys.modules.items()):
        if mod is None or not (name == "attnroof" or name.startswith("attnroof.")):
            continue
        for obj in list(vars(mod).values()):
            if isinstance(obj, functools._lru_cache_wrapper):
                obj.cache_clear()


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> CLIResult:
    """``attnroof ARGS`` in this process, as :func:`run_cli_process` runs it in a new one.
    (``timeout`` is accepted for the same signature; an in-process call is not cut short.)"""
    from attnroof.cli import main

    _clear_caches()
    torch = sys.modules.get("torch")
    threads = torch.get_num_threads() if torch is not None else None  # a CPU measurement sets it
    out, err = _Stream(), _Stream()
    with (
        _environ({"PYTHONPATH": _PYTHONPATH, **(env or {})}),  # for the processes a command starts
        warnings.catch_warnings(),  # (which also forgets the warnings already shown once)
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        warnings.filters[:] = _STARTUP_WARNING_FILTERS
        warnings.showwarning = warnings._showwarning_orig  # type: ignore[attr-defined]
        warnings._showwarnmsg_impl = _show_warning  # type: ignore[attr-defined]  # not pytest's record
        stdin, sys.stdin = sys.stdin, io.StringIO("")  # as stdin=DEVNULL
        try:
            code: Any = main(list(args))
        except SystemExit as e:  # argparse: usage errors, --help, --version
            code = e.code
            if code is not None and not isinstance(code, int):
                print(code, file=sys.stderr)
                code = 1
        except Exception:  # what the interpreter does with an uncaught exception (ATTNROOF_DEBUG=1)
            traceback.print_exc()
            code = 1
        finally:
            sys.stdin = stdin
            if threads is not None:
                torch.set_num_threads(threads)
    return CLIResult(code or 0, out.getvalue(), err.getvalue())


def run_cli_process(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> CLIResult:
    """``python -m attnroof ARGS`` in a subprocess, against this checkout's ``src``."""
    full_env = {**os.environ, "PYTHONPATH": _PYTHONPATH, **(env or {})}
    proc = subprocess.run(
        [sys.executable, "-m", "attnroof", *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    return CLIResult(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def cli():
    return run_cli


def assert_one_line_error(result: CLIResult, *needles: str) -> None:
    """Bad input: exit 2, nothing on stdout, exactly one line on stderr, no traceback."""
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert result.stdout == "", result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
