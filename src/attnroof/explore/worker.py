"""One job process of ``attnroof explore`` (started by :mod:`.jobs`, never by hand): it runs the
server's commands one at a time, each as ``attnroof WORDS`` runs them, so that no command holds
the server, and a command past its time or memory ends with its process.

The protocol, over the process's standard input and output (both pipes): the worker says
:data:`READY` once warmed up; the server writes one line of JSON, the command's words; the worker
answers one header line ``STATUS OUT ERR`` (the
exit status, then the byte counts of the command's standard output and standard error) and
those bytes. :data:`MEMORY_STATUS` says that the job met the memory budget; the worker then
exits, and the server starts a fresh one.

``python -m attnroof.explore.worker MODULE:FUNCTION BUDGET_BYTES WARM_JSON``: the command runner
(``attnroof.commands._run:run``), the bytes of address space a job may add to what the worker
holds once warmed up, and the commands run once before the first job (their modules imported,
their first-call caches filled: the page's first answers are then as fast as the rest).
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import BinaryIO

READY = b"ready\n"
"""What the worker says once warmed up and limited, before its first job."""
MEMORY_STATUS = 200
"""The status a job that met the memory budget is answered with (no command exits with it)."""
OUT_OF_MEMORY = ("MemoryError", "failed to map segment", "Cannot allocate memory")
"""What the runner's one-line internal error says when the address-space limit was met (an
allocation, a library's mapping, a thread's stack)."""
PARENT_CHECK_S = 1.0
"""How often the worker looks whether the server that started it is still there."""


def _address_space() -> int | None:
    """Bytes of address space this process maps (Linux's ``VmSize``), or None elsewhere."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def limit_memory(budget: int) -> None:
    """No job maps more than ``budget`` bytes beyond what the warmed-up worker maps: past it an
    allocation fails with MemoryError inside the job (Linux's ``RLIMIT_AS``; elsewhere the
    server's watch of the job's memory is the only limit)."""
    now = _address_space()
    if now is None or budget <= 0:
        return
    try:
        import resource

        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        soft = now + budget
        resource.setrlimit(
            resource.RLIMIT_AS, (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard)
        )
    except (ImportError, ValueError, OSError):
        pass


def _watch_parent() -> None:
    """End this process when the server that started it is gone (killed without a word)."""
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(PARENT_CHECK_S)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, daemon=True, name="parent-watch").start()


def one_job(run: Callable[[Sequence[str]], int], words: Sequence[str]) -> tuple[int, str, str]:
    """``attnroof WORDS`` in this process: (status, standard output, standard error)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = run(words)
        except SystemExit as e:  # argparse's usage errors: one line on stderr, status 2
            status = e.code if isinstance(e.code, int) else 2
        except MemoryError:
            status = MEMORY_STATUS
    text = err.getvalue()
    if status == 1 and any(sign in text for sign in OUT_OF_MEMORY):
        status = MEMORY_STATUS
    return status, out.getvalue(), text


def _answer(proto: BinaryIO, status: int, out: str, err: str) -> None:
    o, e = out.encode("utf-8", "surrogateescape"), err.encode("utf-8", "surrogateescape")
    proto.write(f"{status} {len(o)} {len(e)}\n".encode("ascii") + o + e)
    proto.flush()


def main(argv: Sequence[str]) -> int:
    target, budget, warm = argv[0], int(argv[1]), json.loads(argv[2])
    proto = os.fdopen(os.dup(1), "wb")  # the answers' channel; fd 1 and 2 go nowhere
    quiet = os.open(os.devnull, os.O_WRONLY)
    os.dup2(quiet, 1)
    os.dup2(quiet, 2)
    _watch_parent()
    module, name = target.split(":")
    run = getattr(importlib.import_module(module), name)
    for words in warm:
        one_job(run, words)
    limit_memory(budget)
    proto.write(READY)
    proto.flush()
    for line in sys.stdin.buffer:
        status, out, err = one_job(run, json.loads(line))
        _answer(proto, status, out, err)
        if status == MEMORY_STATUS:
            return 0  # a fresh worker is started for the next job
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
