"""Processes that must not outlive their caller: a process and every process under it, found
from /proc (else ``ps``), killed children first and waited for; and a stop signal that kills them
before it takes its usual course. Used for ncu and the profiled child it starts
(:mod:`attnroof.measure.ncu`)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _parents() -> dict[int, int]:
    """Every process's parent: from /proc, else from ``ps``."""
    parents: dict[int, int] = {}
    try:
        names = [n for n in os.listdir("/proc") if n.isdigit()]
    except OSError:
        names = []
    for name in names:
        try:
            with open(f"/proc/{name}/stat", encoding="utf-8", errors="replace") as f:
                stat = f.read()
            parents[int(name)] = int(stat.rsplit(")", 1)[1].split()[1])  # the name may hold ')'
        except (OSError, ValueError, IndexError):
            continue  # ended meanwhile
    if parents:
        return parents
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        ps = subprocess.run(
            ["ps", "-A", "-o", "pid=", "-o", "ppid="], capture_output=True, text=True, timeout=10
        )
        for line in ps.stdout.splitlines():
            with contextlib.suppress(ValueError):
                pid, ppid = map(int, line.split())
                parents[pid] = ppid
    return parents


def tree(root: int) -> list[int]:
    """``root`` and every process under it, parents before children."""
    children: dict[int, list[int]] = {}
    for pid, ppid in _parents().items():
        children.setdefault(ppid, []).append(pid)
    found, seen, i = [root], {root}, 0
    while i < len(found):
        for c in children.get(found[i], []):
            if c not in seen:
                found.append(c)
                seen.add(c)
        i += 1
    return found


def _state(pid: int) -> str:
    """The process's state letter (``R``, ``S``, ``T`` stopped, ``Z`` zombie...); ``X`` when it is
    gone; ``?`` when it cannot be read (no /proc)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return "X"
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return "X"
        except PermissionError:
            pass
        return "?"


def _wait_until(pids: list[int], states: str, within_s: float) -> None:
    end = time.monotonic() + within_s
    while not all(_state(p) in states for p in pids) and time.monotonic() < end:
        time.sleep(0.01)


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def kill_tree(root: int, *, confirm_s: float = 5.0) -> None:
    """SIGKILL to ``root`` and every process under it, then wait until each has ended (gone, or
    a zombie), ``confirm_s`` at most. Each is stopped first (SIGSTOP), and the tree read again
    until no new process shows: a stopped process cannot start another, so none is started
    between the reading and the kill, and none is re-parented away unseen."""
    stopped: list[int] = []
    while True:
        new = [p for p in tree(root) if p not in stopped]
        if not new:
            break
        for pid in new:
            _signal(pid, signal.SIGSTOP)
        stopped += new
        _wait_until(new, "TtZX?", confirm_s)  # stopped (or ended): it starts nothing more
    for pid in reversed(stopped):  # children first
        _signal(pid, signal.SIGKILL)
    _wait_until(stopped, "ZX?", confirm_s)  # (?: no /proc to tell)


@contextlib.contextmanager
def tree_dies_with_us() -> Iterator[Callable[[int], None]]:
    """While inside: a stop signal kills the process handed to the ``started`` callable it yields
    and every process under it, then does what it did before (the default handler: this process
    ends by that signal; Python's SIGINT handler: KeyboardInterrupt). A signal that comes before
    the process is known (still starting) waits for it, then kills it. Signal handlers can be set
    only in the main thread: elsewhere, nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield lambda pid: None
        return
    before = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    root: list[int] = []
    pending: list[int] = []

    def stop(signum: int, frame: Any) -> None:
        kill_tree(root[0])
        for sig, old in before.items():
            if old is not None:
                signal.signal(sig, old)
        old = before[signal.Signals(signum)]
        if callable(old):
            old(signum, frame)
        else:
            os.kill(os.getpid(), signum)  # the default again: this process ends by the signal

    def handler(signum: int, frame: Any) -> None:
        if root:
            stop(signum, frame)
        else:  # the process is not started yet: it is stopped as soon as it is
            pending.append(signum)

    def started(pid: int) -> None:
        root.append(pid)
        if pending:
            stop(pending[0], None)

    for sig, old in before.items():
        if old not in (signal.SIG_IGN, None):  # None: a handler not set from Python, left alone
            signal.signal(sig, handler)
    try:
        yield started
    finally:
        for sig, old in before.items():
            if old is not None:
                signal.signal(sig, old)
