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
import time

import pytest

from attnroof.escaping import EscapingStream
from attnroof.progress import AFTER_S, Progress, line


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
    assert out.getvalue().endswith(
        "\r" + " " * 20 + "\r"
    )  # erased: the last text (its padding is blank already)


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


def _on_terminal(*argv: str, interrupt_after: float | None = None) -> tuple[int, str, str]:
    """``attnroof ARGV`` with its stderr on a pseudo-terminal: exit status, stdout, stderr. Its
    stdout goes to a file, not a pipe: a JSON of thousands of plans would fill one."""
    pty = pytest.importorskip("pty")
    main, sub = pty.openpty()
    with tempfile.TemporaryFile() as stdout:
        p = subprocess.Popen(
            [sys.executable, "-m", "attnroof", *argv], stdout=stdout, stderr=sub, stdin=subprocess.DEVNULL
        )
        os.close(sub)
        err, start = b"", time.monotonic()
        while True:
            if interrupt_after is not None and time.monotonic() - start > interrupt_after:
                p.send_signal(signal.SIGINT)
                interrupt_after = None
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
    """Llama-3.1-70B on 64 H100s (some 26,000 plans judged and 100 forecast, 2–5 s here): the bar
    is drawn on stderr while the plans are enumerated, judged or forecast (whichever runs past the
    first second), then erased; the table on stdout is the same as when stderr is a pipe, where
    nothing is drawn."""
    status, out, err = _on_terminal(*PLAN)
    drawn = [part for part in err.split("\r") if part.strip()]
    assert (
        status == 0
        and drawn
        and all(part.startswith(("judging plans", "forecasting plans")) for part in drawn)
    )
    assert err.endswith("\r") and err.rstrip("\r").split("\r")[-1].strip() == ""  # erased
    piped = subprocess.run(
        [sys.executable, "-m", "attnroof", *PLAN], capture_output=True, text=True, check=True
    )
    assert piped.stderr == "" and piped.stdout == out
    status, out, err = _on_terminal(*PLAN, "--json")
    assert status == 0 and err == "" and out.startswith("{")


@pytest.mark.skipif(sys.platform == "win32", reason="a pseudo-terminal")
def test_a_search_stopped_by_ctrl_c_says_so_in_one_line_and_writes_nothing():
    status, out, err = _on_terminal(*PLAN[:-2], "--devices", "256", interrupt_after=2.5)
    assert status == 130 and out == ""
    text = err.replace("\r\n", "\n")  # the terminal's line ending
    assert text.split("\r")[-1] == "attnroof: interrupted\n" and "Traceback" not in err
