"""The progress line (issue 35): on a terminal only, after the first second, at most ten redraws
a second, erased at the end; and ``attnroof plan`` drawing it on a real pseudo-terminal, never
into a pipe or under ``--json``, and stopping cleanly on ^C."""

from __future__ import annotations

import io
import os
import select
import signal
import subprocess
import sys
import tempfile

import pytest

from attnroof.errors import InputError
from attnroof.escaping import EscapingStream
from attnroof.progress import AFTER_ENV, AFTER_S, Progress, after_s, line


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_nothing_in_the_first_second_then_a_bar_at_most_ten_times_a_second_then_erased():
    out, clock = Terminal(), Clock()
    with Progress(out, clock=clock) as p:
        p("judging plans", 10, 100)
        assert out.getvalue() == ""  # under a second: no bar
        clock.now = AFTER_S
        p("judging plans", 50, 100)
        drawn = out.getvalue()
        assert drawn == "\r" + line("judging plans", 50, 100, 79) and "50%" in drawn
        clock.now += 0.05
        p("judging plans", 60, 100)  # 50 ms later: not redrawn
        assert out.getvalue() == drawn
        clock.now += 0.1
        p("forecasting plans", 3)
        assert out.getvalue().endswith("forecasting plans  3" + " " * (len(drawn) - 1 - 20))
    assert out.getvalue().endswith("\r" + " " * (len(drawn) - 1) + "\r")  # erased: the widest line drawn


def test_no_bar_into_a_pipe_or_when_turned_off_and_its_return_is_not_escaped():
    pipe, clock = io.StringIO(), Clock()
    clock.now = 5
    with Progress(pipe, clock=Clock()) as p:
        p("judging plans", 1, 2)
    assert pipe.getvalue() == ""
    term = Terminal()
    with Progress(term, enabled=False) as p:
        p("judging plans", 1, 2)
    assert term.getvalue() == ""
    inner, clock = Terminal(), Clock()
    with Progress(EscapingStream(inner), clock=clock) as p:  # attnroof's escaped stderr: its own \r kept
        clock.now = 2
        p("judging plans", 1, 2)
    assert inner.getvalue().startswith("\rjudging plans")


PLAN = ("plan", "--model", "llama-3.1-70b", "--device", "h100", "--devices", "64", "--phase", "train",
        "--global-batch", "4M", "--context", "8192", "--top", "2")  # fmt: skip


def _on_terminal(*argv: str, interrupt: bool = False) -> tuple[int, str, str]:
    """``attnroof ARGV`` with its stderr on a pseudo-terminal, the bar drawn from the first report
    (``$ATTNROOF_PROGRESS_AFTER_S`` 0: no test waits on a clock): exit status, stdout, stderr.
    ``interrupt``: ^C as soon as the bar shows. Its stdout goes to a file, not a pipe: a JSON of
    thousands of plans would fill one."""
    pty = pytest.importorskip("pty")
    main, sub = pty.openpty()
    with tempfile.TemporaryFile() as stdout:
        p = subprocess.Popen(
            [sys.executable, "-m", "attnroof", *argv], stdout=stdout, stderr=sub, stdin=subprocess.DEVNULL,
            env={**os.environ, AFTER_ENV: "0"},
        )  # fmt: skip
        os.close(sub)
        err = b""
        while True:
            if interrupt and b"plans" in err:
                p.send_signal(signal.SIGINT)
                interrupt = False
            ready, _, _ = select.select([main], [], [], 0.1)
            if ready:
                try:
                    chunk = os.read(main, 65536)
                except OSError:  # the other end closed
                    break
                if not chunk:
                    break
                err += chunk
            elif p.poll() is not None:
                break
        p.wait(timeout=60)
        os.close(main)
        stdout.seek(0)
        return p.returncode, stdout.read().decode(), err.decode()


@pytest.mark.skipif(sys.platform == "win32", reason="a pseudo-terminal")
def test_a_plan_search_draws_its_bar_on_a_terminal_and_erases_it():
    """Llama-3.1-70B on 64 H100s: the bar is drawn on stderr while the plans are enumerated, judged
    and forecast, then erased; the table on stdout is the same as when stderr is a pipe, where
    nothing is drawn, and --json draws none."""
    status, out, err = _on_terminal(*PLAN)
    drawn = [part for part in err.split("\r") if part.strip()]
    assert (
        status == 0
        and drawn
        and all(
            part.startswith(("enumerating plans", "judging plans", "forecasting plans")) for part in drawn
        )
    )
    assert err.endswith("\r") and err.rstrip("\r").split("\r")[-1].strip() == ""  # erased
    piped = subprocess.run(
        [sys.executable, "-m", "attnroof", *PLAN], capture_output=True, text=True, check=True
    )
    assert piped.stderr == "" and piped.stdout == out
    status, out, err = _on_terminal(*PLAN, "--json")
    assert status == 0 and err == "" and out.startswith("{")


LARGEST = ("plan", "--model", "llama-3.1-405b", "--device", "h100", "--devices", "16384", "--phase", "train",
           "--global-batch", "16M", "--context", "8192")  # fmt: skip
"""Half a minute of search or more here: ^C, sent when the first bar shows, lands in the middle."""


@pytest.mark.skipif(sys.platform == "win32", reason="a pseudo-terminal")
def test_a_search_stopped_by_ctrl_c_says_so_in_one_line_and_writes_nothing():
    status, out, err = _on_terminal(*LARGEST, interrupt=True)
    assert status == 130 and out == ""
    text = err.replace("\r\n", "\n")  # the terminal's line ending
    assert text.split("\r")[-1] == "attnroof: interrupted\n" and "Traceback" not in err


@pytest.mark.parametrize("bad", ["-1", "nan", "soon", "1e400"])
def test_the_delay_s_variable_is_seconds(monkeypatch, bad):
    monkeypatch.setenv(AFTER_ENV, bad)
    with pytest.raises(InputError, match=AFTER_ENV):
        after_s()
    monkeypatch.setenv(AFTER_ENV, "0")
    assert after_s() == 0
