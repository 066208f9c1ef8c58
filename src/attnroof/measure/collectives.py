"""Collectives measured with the real engine, ``torch.distributed``: the plan, the ranks and the
records. No torch here: the ranks are child processes (:mod:`attnroof.measure.collective_worker`).

Under ``torchrun`` (:mod:`attnroof.measure.launch`) each process it started is one rank, on
any node; the group meets by ``env://`` and rank 0 writes the results
(:func:`attnroof.measure.collective_worker.run_launched`). Otherwise ``run_ranks`` starts
``world`` processes of ``python -m attnroof.measure.collective_worker RANK`` on this machine
(one per GPU for NCCL, plain CPU processes for gloo). Each reads the plan as
one JSON line on its standard input; rank 0 hosts the rendezvous (a ``TCPStore`` on 127.0.0.1,
port 0: the system picks a free one, so two runs never collide) and says its port, which this
process passes to the other ranks. Rank 0 then reports one line per (operation, size) as it is
measured, and this process — the only writer of the results file — turns each into a record at
once: a run stopped anywhere keeps every measurement reported before.

Timing, as nccl-tests defines its figures (doc/PERFORMANCE.md in NVIDIA/nccl-tests): ``size`` is
the message M in bytes (all-gather: the gathered output; reduce-scatter: the input; all-to-all:
one rank's send buffer), ``algbw = M / time``, ``busbw = algbw × factor`` with the factor
2(n − 1)/n for all-reduce, (n − 1)/n for all-gather, reduce-scatter and all-to-all, 1 for
send/recv. The time of one iteration is the slowest rank's (a barrier, and on CUDA a
synchronize, before each; ``perf_counter`` around the call and a synchronize); the record's time
is the median over iterations after the warm-up. (nccl-tests times ``iters`` calls back to back
and by default averages the ranks' means, ``-a 1``; ``-a 3`` takes their maximum.)

The link roof: with a catalog device, ``bound_time_s`` is :meth:`Comm.on` its link (the fastest
algorithm it allows, ``bound_algorithm``), ``efficiency`` bound / measured time. No link ceiling
is measured here: the catalog link is the only roof (``catalog_bound_time_s``, ``catalog_efficiency``).
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from attnroof.devices.links import Link
from attnroof.dtypes import dtype
from attnroof.errors import AttnroofError, InputError
from attnroof.measure.records import OK, new_record
from attnroof.ops.collectives import (
    ALL_GATHER,
    ALL_REDUCE,
    ALL_TO_ALL,
    COLLECTIVE_FN,
    REDUCE_SCATTER,
    SEND_RECV,
    fastest,
)
from attnroof.units import GiB, MiB

KIND = "collective"
TAG = "attnroof-collective "
"""How rank 0 marks the lines it reports on its standard output (anything else there is ignored)."""
SPLIT = frozenset({ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL})
"""Operations whose message is cut into one equal piece per rank: its count is a multiple of n."""
TIMEOUT_S = 300.0
"""How long a rank waits for the others (rendezvous, one collective) before it gives up."""

RANK_OVERHEAD_BYTES = 300 * MiB
"""Memory one rank holds before any buffer: a Python process with torch imported (some 300 MB
resident on the CPU)."""


class CollectiveError(AttnroofError):
    """A rank failed outside any one measurement (start-up, a crash): one line, with its reason."""


def bus_factor(op: str, n: int) -> float:
    """busbw / algbw, computed as nccl-tests computes it (``*_GetBw`` in its src/*.cu)."""
    if op == ALL_REDUCE:
        return (2 * (n - 1)) / n
    if op in SPLIT:
        return (n - 1) / n
    if op == SEND_RECV:
        return 1.0
    raise ValueError(f"unknown collective {op!r}")


@dataclass(frozen=True, slots=True)
class Item:
    """One measurement: an operation on a message of ``count`` elements of ``dtype`` over
    ``world`` ranks of ``backend``."""

    op: str
    count: int
    world: int
    backend: str
    dtype: str

    @property
    def bytes(self) -> int:
        return int(self.count * dtype(self.dtype).itemsize)

    @property
    def shape(self) -> dict[str, Any]:
        return {"op": self.op, "bytes": self.bytes, "world": self.world}

    @property
    def key(self) -> str:
        """The same form as a kernel case's key: ``kind/impl/dtype/shape``."""
        shape = ",".join(f"{k}={v}" for k, v in self.shape.items())
        return f"{KIND}/{self.backend}/{self.dtype}/{shape}"


def plan(ops: Sequence[str], sizes: Sequence[int], *, world: int, backend: str, dt: str) -> list[Item]:
    """Every (operation, size), operation by operation, sizes in the order given. A size is cut
    down to whole elements (and, where the message is split among the ranks, to a multiple of
    ``world`` elements), as nccl-tests does; one too small for that is an :class:`InputError`."""
    item = int(dtype(dt).itemsize)
    items: list[Item] = []
    for op in ops:
        for size in sizes:
            count = size // item
            if op in SPLIT:
                count -= count % world
            if count <= 0:
                least = item * (world if op in SPLIT else 1)
                raise InputError(
                    f"--sizes {size}: {op} of {dt} over {world} ranks needs at least {least} bytes"
                )
            items.append(Item(op, count, world, backend, dt))
    return list({i.key: i for i in items}.values())  # 1K and 1024: measured once


def buffer_counts(op: str, count: int, n: int) -> tuple[int, int]:
    """Elements of the (send, receive) buffers one of ``n`` ranks allocates for ``op`` on a
    message of ``count`` elements: all-gather sends its ``1/n`` piece and receives the whole,
    reduce-scatter sends the whole and receives its piece, all-reduce works in place (no
    receive buffer), all-to-all and send/recv send and receive the whole."""
    send = count // n if op == ALL_GATHER else count
    recv = {ALL_REDUCE: 0, REDUCE_SCATTER: count // n}.get(op, count)
    return send, recv


def rank_bytes(item: Item) -> int:
    """The most memory one rank allocates for ``item`` (bytes): its buffers, and for the check
    of the first call's result (:mod:`attnroof.measure.collective_worker`) the expected values,
    as large as the result, and the comparison's mask, one byte an element."""
    send, recv = buffer_counts(item.op, item.count, item.world)
    checked = send if item.op == ALL_REDUCE else recv
    return (send + recv + checked) * int(dtype(item.dtype).itemsize) + checked


def check_memory(
    items: Sequence[Item], available_bytes: float, *, shared: bool, ranks_here: int | None = None
) -> None:
    """:class:`InputError` naming the largest measurement unless it fits before any rank
    starts: with ``shared`` (gloo: every rank a process on this machine) the processes and
    buffers of the ranks here (``ranks_here``, else the whole world),
    ``ranks × (RANK_OVERHEAD_BYTES + rank_bytes)``, in this machine's ``available_bytes`` (a
    world whose processes alone do not fit: ``--world``); else (NCCL: one GPU a rank) one rank's
    buffers in ``available_bytes`` of its GPU."""
    if not items:
        return
    big = max(items, key=rank_bytes)
    ranks = big.world if ranks_here is None else ranks_here
    if shared and ranks * RANK_OVERHEAD_BYTES > available_bytes:
        raise InputError(
            f"--world {big.world}: {ranks} processes with torch need about "
            f"{ranks * RANK_OVERHEAD_BYTES / GiB:.3g} GiB on this machine before any buffer, over the "
            f"{available_bytes / GiB:.3g} GiB this run may use"
        )
    need = ranks * (RANK_OVERHEAD_BYTES + rank_bytes(big)) if shared else rank_bytes(big)
    if need > available_bytes:
        where = f"{ranks} processes on this machine" if shared else "each GPU"
        raise InputError(
            f"--sizes {big.bytes}: {big.op} over {big.world} ranks needs about {need / GiB:.3g} GiB on "
            f"{where}, over the {available_bytes / GiB:.3g} GiB this run may use: choose smaller "
            "--sizes or a smaller --world"
        )


def collective_record(
    item: Item,
    device: str,
    *,
    time_s: float | None = None,
    status: str = OK,
    reason: str = "",
    link: Link | None = None,
    link_name: str = "",
    timing: str | None = None,
) -> dict[str, Any]:
    """The results record of one measurement: time, algbw, busbw and the link roof."""
    comm = COLLECTIVE_FN[item.op](item.bytes, item.world)
    rec = new_record(item.key, KIND, item.backend, item.shape, item.dtype, device, status, reason)
    rec.update(
        flops=0.0,
        bytes=float(comm.bytes_per_device),
        intensity=0.0,
        algbw_bytes_per_s=None,
        busbw_bytes_per_s=None,
        link=link_name or None,
        link_bytes_per_s=link.bandwidth_bytes_per_s if link else None,
        timing=timing,
    )
    if status != OK or time_s is None:
        return rec
    algbw = item.bytes / time_s
    busbw = algbw * bus_factor(item.op, item.world)
    rec.update(
        time_s=float(time_s),
        algbw_bytes_per_s=algbw,
        busbw_bytes_per_s=busbw,
        achieved_flops_per_s=0.0,
        achieved_bytes_per_s=busbw,  # bytes each rank sends / time: the bus bandwidth
    )
    if link is not None:
        best, bound = fastest(comm, link)
        rec.update(bound_time_s=float(bound), efficiency=bound / time_s, bound_algorithm=best.algorithm)
        rec.update(catalog_bound_time_s=bound, catalog_efficiency=bound / time_s)
    return rec


# ---------------------------------------------------------------- the ranks


@dataclass(frozen=True, slots=True)
class Result:
    """What rank 0 reported for one item."""

    item: Item
    status: str
    reason: str
    time_s: float | None
    timing: str | None


def _worker_env() -> dict[str, str]:
    """This environment, with attnroof's own folder first on the path (the ranks import it)."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.setdefault("OMP_NUM_THREADS", "1")  # a rank copies and adds; threads would only contend
    return env


def _reader(stream: IO[str], lines: queue.Queue[dict[str, Any] | None]) -> None:
    for line in stream:
        if line.startswith(TAG):
            lines.put(json.loads(line[len(TAG) :]))
    lines.put(None)  # rank 0 closed its output


def _last_words(err: IO[str]) -> str:
    """The last meaningful line a failed rank wrote (its exception, usually)."""
    err.flush()
    err.seek(0)
    lines = [ln.strip() for ln in err.read().splitlines() if ln.strip()]
    errors = [ln for ln in lines if "Error" in ln or "error" in ln]
    return (errors or lines or ["no message"])[-1][:300]


def run_ranks(
    items: Sequence[Item],
    *,
    warmup: int,
    iters: int,
    on_result: Callable[[Result], None],
    on_ready: Callable[[str], None] | None = None,
    timeout_s: float = TIMEOUT_S,
) -> str:
    """Measure ``items`` (all of one world, backend and dtype) with ``world`` ranks, calling
    ``on_result`` as each is reported; return the ranks' device label."""
    if not items:
        return ""
    first = items[0]
    config = {
        "world": first.world,
        "backend": first.backend,
        "dtype": first.dtype,
        "items": [[i.op, i.count] for i in items],
        "warmup": warmup,
        "iters": iters,
        "timeout_s": timeout_s,
    }
    procs: list[subprocess.Popen[str]] = []
    with tempfile.TemporaryDirectory(prefix="attnroof-ranks-") as tmp:
        errs = [open(Path(tmp) / f"rank{r}.err", "w+", encoding="utf-8") for r in range(first.world)]  # noqa: SIM115
        try:
            for rank in range(first.world):
                procs.append(
                    subprocess.Popen(
                        [sys.executable, "-m", "attnroof.measure.collective_worker", str(rank)],
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE if rank == 0 else subprocess.DEVNULL,
                        stderr=errs[rank],
                        env=_worker_env(),
                        text=True,
                    )
                )
            for p in procs:
                assert p.stdin is not None
                p.stdin.write(json.dumps(config) + "\n")
                p.stdin.flush()
            lines: queue.Queue[dict[str, Any] | None] = queue.Queue()
            assert procs[0].stdout is not None
            threading.Thread(target=_reader, args=(procs[0].stdout, lines), daemon=True).start()

            stopped: list[int] = []  # ranks in the order they were seen to exit

            def next_message() -> dict[str, Any]:
                while True:
                    try:
                        msg = lines.get(timeout=0.2)
                    except queue.Empty:
                        msg = {}
                    if msg:
                        return msg
                    if msg is None:
                        procs[0].wait(timeout=timeout_s)  # its output closed: it is exiting
                    stopped.extend(
                        r for r, p in enumerate(procs) if p.poll() is not None and r not in stopped
                    )
                    failed = [r for r in stopped if procs[r].returncode != 0] or ([0] if msg is None else [])
                    if failed:  # the first to go is the likeliest cause; the others lost a peer
                        raise CollectiveError(
                            f"rank {failed[0]} of {first.world} ({first.backend}) stopped: "
                            + _last_words(errs[failed[0]])
                        )

            port = next_message()["port"]
            for p in procs:
                assert p.stdin is not None
                if p is not procs[0]:
                    p.stdin.write(f"{port}\n")
                p.stdin.close()
            label = next_message()["device"]
            if on_ready is not None:
                on_ready(label)
            for item in items:
                msg = next_message()
                if [msg.get("op"), msg.get("count")] != [item.op, item.count]:
                    raise CollectiveError(f"rank 0 reported {msg!r} where {item.key} was due")
                on_result(
                    Result(item, msg["status"], msg.get("reason", ""), msg.get("time_s"), msg.get("timing"))
                )
            next_message()  # done
            for p in procs:
                p.wait(timeout=timeout_s)
            return str(label)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                p.wait()
                for stream in (p.stdin, p.stdout):
                    if stream is not None and not stream.closed:
                        with contextlib.suppress(OSError):
                            stream.close()
            for f in errs:
                f.close()
