"""One rank of ``attnroof measure collectives``: ``python -m attnroof.measure.collective_worker RANK``.

Started by :func:`attnroof.measure.collectives.run_ranks`, never by hand (under ``torchrun`` each
process the launcher started runs :func:`run_launched` instead: ``env://``, no standard input).
Standard input brings the plan (one JSON line) and, to ranks other than 0, the rendezvous port
(one more line). Rank 0 hosts the ``TCPStore``, says its port, then reports each measurement on
standard output as one line starting with :data:`~attnroof.measure.collectives.TAG`. torch is
imported in :func:`main`.

For each (operation, count) every rank, in step:

1. allocates its buffers; the ranks agree (an all-reduce of a status code) that all could;
2. runs the operation once on known values (rank r sends r + 1, or ones for a reduction) and
   checks what it received; the ranks agree again. A backend without the operation raises on
   every rank before any byte moves: a ``skip`` with torch's reason; a wrong result: ``wrong``;
3. warms up, then times ``iters`` calls, each after a barrier (and a CUDA synchronize);
4. takes the slowest rank's time of each call (all-reduce, MAX) and reports the median.
"""

from __future__ import annotations

import json
import re
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

from attnroof.errors import AttnroofError
from attnroof.measure.collectives import TAG, TIMEOUT_S, CollectiveError, Item, Result, buffer_counts
from attnroof.measure.launch import Launch
from attnroof.ops.collectives import ALL_GATHER, ALL_REDUCE, ALL_TO_ALL, REDUCE_SCATTER, SEND_RECV

HOST = "127.0.0.1"
OK, SKIP, WRONG, ERROR = "ok", "skip", "wrong", "error"
CODES = (OK, SKIP, WRONG, ERROR)
"""A rank's status as a number, so that the ranks agree on the worst with one MAX all-reduce."""


def say(**message: Any) -> None:
    sys.stdout.write(TAG + json.dumps(message) + "\n")
    sys.stdout.flush()


def one_line(e: BaseException, limit: int = 240) -> str:
    text = re.sub(r"\s+", " ", f"{type(e).__name__}: {e}").strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


class Rank:
    """This process's place in the group, and what the measurements need from torch."""

    def __init__(self, torch: Any, dist: Any, rank: int, world: int, device: Any) -> None:
        self.torch, self.dist, self.rank, self.world, self.device = torch, dist, rank, world, device

    def sync(self) -> None:
        if self.device.type == "cuda":
            self.torch.cuda.synchronize(self.device)

    def agree(self, status: str, reason: str) -> tuple[str, str]:
        """The worst status of all ranks, and the reason of the first rank that has it."""
        code = self.torch.tensor([CODES.index(status)], dtype=self.torch.int32, device=self.device)
        self.dist.all_reduce(code, op=self.dist.ReduceOp.MAX)
        worst = CODES[int(code.item())]
        if worst == OK:
            return OK, ""
        said: list[Any] = [None] * self.world
        self.dist.all_gather_object(said, (status, reason))
        r, (_, why) = next((r, s) for r, s in enumerate(said) if s[0] == worst)
        return worst, why if r == 0 else f"rank {r}: {why}"

    def buffers(self, op: str, count: int, dt: Any) -> tuple[Any, Any]:
        """(send, receive) buffers of ``op`` for a message of ``count`` elements, filled with
        this rank's known values."""
        t, n = self.torch, self.world
        send_count, recv_count = buffer_counts(op, count, n)
        value = 1.0 if op in (ALL_REDUCE, REDUCE_SCATTER) else float(self.rank + 1)
        send = t.full((send_count,), value, dtype=dt, device=self.device)
        recv = t.zeros((recv_count,), dtype=dt, device=self.device)
        return send, recv

    def call(self, op: str, send: Any, recv: Any) -> Any:
        """A function that runs ``op`` once (the tensor entry points of torch.distributed)."""
        d = self.dist
        if op == ALL_REDUCE:
            return lambda: d.all_reduce(send)
        if op == ALL_GATHER:
            gather = getattr(d, "all_gather_single", None) or d.all_gather_into_tensor
            return lambda: gather(recv, send)
        if op == REDUCE_SCATTER:
            scatter = getattr(d, "reduce_scatter_single", None) or d.reduce_scatter_tensor
            return lambda: scatter(recv, send)
        if op == ALL_TO_ALL:
            return lambda: d.all_to_all_single(recv, send)
        if op == SEND_RECV:  # a ring: send to the next rank, receive from the previous one
            nxt, prev = (self.rank + 1) % self.world, (self.rank - 1) % self.world

            def exchange() -> None:
                ops = [d.P2POp(d.isend, send, nxt), d.P2POp(d.irecv, recv, prev)]
                for work in d.batch_isend_irecv(ops):
                    work.wait()

            return exchange
        raise ValueError(f"unknown collective {op!r}")

    def check(self, op: str, send: Any, recv: Any) -> str:
        """Why the first call's result is wrong ('' when it is right)."""
        t, n = self.torch, self.world
        if op == ALL_REDUCE:
            got, want = send, t.full_like(send, n)
        elif op == REDUCE_SCATTER:
            got, want = recv, t.full_like(recv, n)
        elif op in (ALL_GATHER, ALL_TO_ALL):  # piece j came from rank j, which sent j + 1
            got = recv
            want = t.arange(1, n + 1, dtype=recv.dtype, device=recv.device).repeat_interleave(
                recv.numel() // n
            )
        else:
            got, want = recv, t.full_like(recv, (self.rank - 1) % n + 1)
        if t.equal(got, want):
            return ""
        bad = int((got != want).sum().item())
        return f"{bad} of {got.numel()} elements differ from what the ranks sent"

    def measure(self, op: str, count: int, dt: Any, warmup: int, iters: int) -> dict[str, Any]:
        status, reason = OK, ""
        send: Any = None
        recv: Any = None
        fn: Any = None
        try:
            send, recv = self.buffers(op, count, dt)
            fn = self.call(op, send, recv)
        except Exception as e:
            oom = isinstance(e, MemoryError) or "out of memory" in str(e).lower()
            status, reason = (SKIP if oom else ERROR), one_line(e)
        status, reason = self.agree(status, reason)
        if status != OK:
            return {"status": status, "reason": reason}
        try:
            fn()
            self.sync()
            wrong = self.check(op, send, recv)
            status, reason = (WRONG, wrong) if wrong else (OK, "")
        except Exception as e:
            text = str(e).lower()
            unsupported = (
                isinstance(e, NotImplementedError) or "not support" in text or "not implement" in text
            )
            status, reason = (SKIP if unsupported else ERROR), one_line(e)
        status, reason = self.agree(status, reason)
        if status != OK:
            return {"status": status, "reason": reason}
        send.zero_()  # an in-place all-reduce would otherwise grow its values every call
        for _ in range(warmup):
            fn()
        self.sync()
        times = []
        for _ in range(iters):
            self.dist.barrier()
            self.sync()
            t0 = time.perf_counter()
            fn()
            self.sync()
            times.append(time.perf_counter() - t0)
        slowest = self.torch.tensor(times, dtype=self.torch.float64, device=self.device)
        self.dist.all_reduce(slowest, op=self.dist.ReduceOp.MAX)
        per_call = slowest.tolist()
        sync = ", CUDA synchronize" if self.device.type == "cuda" else ""
        return {
            "status": OK,
            "time_s": statistics.median(per_call),
            "timing": (
                f"perf_counter{sync}; barrier before each call; slowest of {self.world} ranks per call; "
                f"median of {iters} calls after {warmup} warm-up"
            ),
        }


def _label(torch: Any, device: Any, world: int, backend: str, nodes: int = 1) -> str:
    where = f" on {nodes} nodes" if nodes > 1 else ""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        v = torch.cuda.nccl.version() if backend == "nccl" else ""
        version = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)  # an int in old torch
        gpus = f"cuda ({name}) × {world}{where}" if nodes > 1 else f"cuda:0-{world - 1} ({name}) × {world}"
        return f"{gpus}, {backend} {version}".strip()
    from attnroof.measure.env import _cpu_name

    return f"cpu ({_cpu_name()}) × {world} processes{where}, {backend}"


def _device(torch: Any, backend: str, local_rank: int) -> Any:
    """NCCL: the GPU of this rank's place on its node (one rank per GPU); gloo: the CPU."""
    if backend == "nccl":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        return device
    return torch.device("cpu")


def _measure_all(me: Rank, items: list[tuple[str, int]], plan: dict[str, Any], report: Any) -> None:
    """Every (operation, count) in step on every rank; ``report(op, count, result)`` on rank 0."""
    torch = me.torch
    from attnroof.measure.inputs import TORCH_DTYPES

    dt = getattr(torch, TORCH_DTYPES[plan["dtype"]])
    for op, count in items:
        result = me.measure(op, int(count), dt, int(plan["warmup"]), int(plan["iters"]))
        if me.rank == 0:
            report(op, count, result)
        if me.device.type == "cuda":
            torch.cuda.empty_cache()


def main(argv: list[str] | None = None) -> int:
    rank = int((sys.argv[1:] if argv is None else argv)[0])
    plan = json.loads(sys.stdin.readline())
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    world, backend = int(plan["world"]), plan["backend"]
    timeout = timedelta(seconds=float(plan["timeout_s"]))
    if rank == 0:
        store = dist.TCPStore(HOST, 0, world, is_master=True, wait_for_workers=False, timeout=timeout)
        say(port=store.port)
    else:
        port = int(sys.stdin.readline())
        store = dist.TCPStore(HOST, port, world, is_master=False, timeout=timeout)
    device = _device(torch, backend, rank)
    extra = {"device_id": device} if backend == "nccl" else {}
    dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout, **extra)
    me = Rank(torch, dist, rank, world, device)
    if rank == 0:
        say(device=_label(torch, device, world, backend))
    _measure_all(me, plan["items"], plan, lambda op, count, result: say(op=op, count=count, **result))
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        say(done=True)
    return 0


def run_launched(
    launch: Launch,
    items: Sequence[Item],
    *,
    warmup: int,
    iters: int,
    todo: Callable[[], Sequence[Item]],
    on_result: Callable[[Result], None],
    on_ready: Callable[[str], None] | None = None,
    timeout_s: float = TIMEOUT_S,
) -> bool:
    """Measure as one rank of a group a launcher started (``torchrun``): the group meets by
    ``env://`` (``MASTER_ADDR``, ``MASTER_PORT``, ``RANK``, ``WORLD_SIZE``), one rank per GPU of
    each node for NCCL. Rank 0 alone calls ``todo()`` (which of ``items`` its results file
    lacks: a :class:`~attnroof.errors.AttnroofError` there stops every rank, with its reason),
    ``on_ready`` and ``on_result``, each result as soon as it is measured. True on rank 0."""
    import torch
    import torch.distributed as dist

    first = items[0]
    if first.backend == "gloo":
        torch.set_num_threads(1)
    timeout = timedelta(seconds=timeout_s)
    device = _device(torch, first.backend, launch.local_rank)
    extra = {"device_id": device} if first.backend == "nccl" else {}
    dist.init_process_group(
        first.backend,
        init_method="env://",
        rank=launch.rank,
        world_size=launch.world,
        timeout=timeout,
        **extra,
    )
    try:
        payload: list[Any] = [None]
        failure: AttnroofError | None = None
        if launch.rank == 0:
            try:
                keys = {i.key for i in todo()}
                payload = [[n for n, i in enumerate(items) if i.key in keys]]
            except AttnroofError as e:
                failure, payload = e, [str(e)]
        dist.broadcast_object_list(payload, src=0)
        if failure is not None:
            raise failure
        if isinstance(payload[0], str):
            raise CollectiveError(f"rank 0 stopped before measuring: {payload[0]}")
        chosen = [items[n] for n in payload[0]]
        me = Rank(torch, dist, launch.rank, launch.world, device)
        if launch.rank == 0 and on_ready is not None:
            on_ready(_label(torch, device, launch.world, first.backend, launch.nodes))
        by_op_count = {(i.op, i.count): i for i in chosen}
        plan = {"dtype": first.dtype, "warmup": warmup, "iters": iters}

        def report(op: str, count: int, result: dict[str, Any]) -> None:
            item = by_op_count[(op, count)]
            on_result(
                Result(
                    item,
                    result["status"],
                    result.get("reason", ""),
                    result.get("time_s"),
                    result.get("timing"),
                )
            )

        _measure_all(me, [(i.op, i.count) for i in chosen], plan, report)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return launch.rank == 0


if __name__ == "__main__":
    raise SystemExit(main())
