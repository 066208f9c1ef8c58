"""The explorer's jobs: each command a request asks for runs in a worker process of its own
(:mod:`.worker`), from a small pool, with a time limit, a memory budget and cancellation when
the request's client goes away. No job holds the server: the page's quick answers (``model``,
``devices``, ``sweep``, ``crossover``) have their pool, the searches and simulations theirs, so a
minute of ``plan`` never stands in front of a redraw.

A job past its time, past its memory or no longer wanted ends with its process (and the
processes it forked: the worker leads a process group of its own); the pool starts a fresh one.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from attnroof.explore.worker import MEMORY_STATUS, READY

TICK_S = 0.1
"""How often a waiting job looks at its clock, its memory and its client."""
MEMORY_CHECK_S = 0.2
"""How often the memory a job's processes hold is read (``/proc``, Linux)."""
READ_CHUNK = 1 << 20
WARM_S = 120.0
"""How long a fresh worker may take to import and warm up before its first job (about 1 s)."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """What became of one job: its exit status and output, or why it has none (``ended``:
    ``"time"``, ``"memory"``, ``"gone"`` (the client left), ``"busy"`` (no worker came free in
    time), ``"crash"`` (the worker died), ``"closed"`` (the server is stopping))."""

    status: int | None
    out: str = ""
    err: str = ""
    ended: str | None = None


def _tree_memory(pid: int) -> int | None:
    """Bytes the process ``pid`` and its descendants hold: their proportional set sizes (a page
    shared by n processes counts 1/n in each: forked children are not counted n times), or None
    where ``/proc`` cannot say."""
    total, todo, seen = 0, [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            with open(f"/proc/{p}/smaps_rollup", encoding="ascii") as f:
                total += next(int(x.split()[1]) for x in f if x.startswith("Pss:")) * 1024
            with open(f"/proc/{p}/task/{p}/children", encoding="ascii") as f:
                todo.extend(int(c) for c in f.read().split())
        except (OSError, StopIteration, ValueError):
            if p == pid:
                return None
    return total


def _header(buf: bytearray) -> tuple[int, int, int, int] | None:
    """(status, output bytes, error bytes, where the output starts) of an answer in ``buf``, or
    None while its header line is incomplete or malformed."""
    end = buf.find(b"\n")
    if end < 0:
        return None
    try:
        status, n_out, n_err = (int(x) for x in bytes(buf[:end]).split())
    except ValueError:
        return None
    return status, n_out, n_err, end + 1


def _answered(buf: bytearray) -> bool:
    """Whether ``buf`` holds a whole answer (or a header line that makes no sense: no use waiting)."""
    if buf.find(b"\n") < 0:
        return False
    header = _header(buf)
    return header is None or len(buf) >= header[3] + header[1] + header[2]


class Worker:
    """One worker process and its pipes."""

    def __init__(self, target: str, memory_bytes: int, warm: Sequence[Sequence[str]]) -> None:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(p for p in sys.path if p),
        }  # what the server imports
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "attnroof.explore.worker", target, str(memory_bytes), json.dumps(warm)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # its own group: Ctrl-C is the server's to handle, and a kill takes
            # the processes a plan search forked with it
        )
        self.ready = False  # it has said READY (warmed up, its memory limited)
        self.buf = bytearray()

    def send(self, words: Sequence[str]) -> bool:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps(list(words)) + "\n").encode())
            self.proc.stdin.flush()
        except OSError:
            return False
        return True

    def kill(self) -> None:
        with contextlib.suppress(OSError, AttributeError):  # (no process groups on Windows)
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            self.proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)
        for pipe in (self.proc.stdin, self.proc.stdout):
            with contextlib.suppress(OSError):
                pipe.close()  # type: ignore[union-attr]


class Pool:
    """At most ``size`` jobs at once, each in a worker process: ``time_limit_s`` a job,
    ``memory_bytes`` added by its processes to what the idle worker holds (about 80 MB),
    ``queue_wait_s`` waiting for a worker. Workers are started ahead (``eager``) or when first needed, and reused."""

    def __init__(
        self,
        target: str,
        *,
        size: int,
        time_limit_s: float,
        memory_bytes: int,
        queue_wait_s: float,
        warm: Sequence[Sequence[str]] = (),
        eager: bool = False,
    ) -> None:
        self.target, self.size = target, size
        self.time_limit_s, self.memory_bytes, self.queue_wait_s = time_limit_s, memory_bytes, queue_wait_s
        self.warm, self.eager = [list(w) for w in warm], eager
        self._slots = threading.BoundedSemaphore(size)
        self._idle: list[Worker] = []
        self._all: set[Worker] = set()
        self._guard = threading.Lock()  # guards the two lists above, never held over a job
        self._closed = False
        if eager:
            for _ in range(size):
                self._idle.append(self._start())

    def _start(self) -> Worker:
        worker = Worker(self.target, self.memory_bytes, self.warm)
        with self._guard:
            self._all.add(worker)
        return worker

    def _take(self) -> Worker:
        with self._guard:
            while self._idle:
                worker = self._idle.pop()
                if worker.proc.poll() is None:
                    return worker
                self._all.discard(worker)
        return self._start()

    def _drop(self, worker: Worker, *, replace: bool) -> None:
        worker.kill()
        with self._guard:
            self._all.discard(worker)
            closed = self._closed
        if replace and not closed:
            fresh = self._start()
            with self._guard:
                self._idle.append(fresh)

    def run(self, words: Sequence[str], gone: Callable[[], bool] = lambda: False) -> Outcome:
        """Run ``attnroof WORDS`` in a worker: its outcome. ``gone`` says whether the client has
        left (the job then ends unfinished)."""
        deadline = time.monotonic() + self.queue_wait_s
        while not self._slots.acquire(timeout=TICK_S):
            if self._closed:
                return Outcome(None, ended="closed")
            if gone():
                return Outcome(None, ended="gone")
            if time.monotonic() > deadline:
                return Outcome(None, ended="busy")
        try:
            if self._closed:
                return Outcome(None, ended="closed")
            return self._run(self._take(), words, gone)
        finally:
            self._slots.release()

    def _run(self, worker: Worker, words: Sequence[str], gone: Callable[[], bool]) -> Outcome:
        if not worker.ready:  # a fresh worker first warms up (imports: a second), on its own clock
            ended = self._read(worker, lambda buf: READY in buf, time.monotonic(), None, gone, WARM_S)
            if ended is not None:
                self._drop(worker, replace=self.eager)
                return Outcome(None, ended=ended)
            worker.buf.clear()
            worker.ready = True
        start = time.monotonic()
        baseline = _tree_memory(worker.proc.pid) or 0  # the idle worker: what the job adds is its own
        if not worker.send(words):
            self._drop(worker, replace=self.eager)
            return Outcome(None, ended="crash")
        ended = self._read(worker, _answered, start, baseline, gone, self.time_limit_s)
        header = _header(worker.buf)
        if ended is not None or header is None:
            self._drop(worker, replace=self.eager)
            return Outcome(None, ended=ended or "crash")
        status, n_out, n_err, at = header
        out = bytes(worker.buf[at : at + n_out]).decode("utf-8", "replace")
        err = bytes(worker.buf[at + n_out : at + n_out + n_err]).decode("utf-8", "replace")
        worker.buf.clear()
        if status == MEMORY_STATUS:
            self._drop(worker, replace=self.eager)
            return Outcome(None, out, err, ended="memory")
        with self._guard:
            self._idle.append(worker)
        return Outcome(status, out, err)

    def _read(
        self,
        worker: Worker,
        done: Callable[[bytearray], bool],
        start: float,
        baseline: int | None,
        gone: Callable[[], bool],
        limit_s: float,
    ) -> str | None:
        """Read the worker's output into ``worker.buf`` until ``done(buf)``: None, or why it stopped
        first (``limit_s`` from ``start``, its memory beyond ``baseline``, its client, the worker's
        end)."""
        assert worker.proc.stdout is not None
        fd = worker.proc.stdout.fileno()
        next_memory = start + MEMORY_CHECK_S
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while not done(worker.buf):
                if sel.select(TICK_S):
                    chunk = os.read(fd, READ_CHUNK)
                    if not chunk:
                        return "closed" if self._closed else "crash"
                    worker.buf += chunk
                    continue
                now = time.monotonic()
                if self._closed:
                    return "closed"
                if now - start > limit_s:
                    return "time"
                if gone():
                    return "gone"
                if baseline is not None and now >= next_memory:
                    next_memory = now + MEMORY_CHECK_S
                    held = _tree_memory(worker.proc.pid)
                    if held is not None and held - baseline > self.memory_bytes:
                        return "memory"
        return None

    def pids(self) -> list[int]:
        """The worker processes' ids (busy and idle)."""
        with self._guard:
            return sorted(w.proc.pid for w in self._all)

    def close(self) -> None:
        """End every worker, the busy ones included (their jobs end ``closed``)."""
        with self._guard:
            self._closed = True
            workers = list(self._all)
            self._all.clear()
            self._idle.clear()
        for worker in workers:
            worker.kill()
