"""One rank of ``attnroof measure collectives``: ``python -m attnroof.measure.collective_worker RANK``.

Started by :func:`attnroof.measure.collectives.run_ranks`, never by hand. Standard input brings
the plan (one JSON line) and, to ranks other than 0, the rendezvous port (one more line). Rank 0
hosts the ``TCPStore``, says its port, then reports each measurement on standard output as one
line starting with :data:`~attnroof.measure.collectives.TAG`. torch is imported in :func:`main`.

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
from datetime import timedelta
from typing import Any

from attnroof.measure.collectives import TAG, buffer_counts
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


def _label(torch: Any, device: Any, world: int, backend: str) -> str:
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        v = torch.cuda.nccl.version() if backend == "nccl" else ""
        version = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)  # an int in old torch
        return f"cuda:0-{world - 1} ({name}) × {world}, {backend} {version}".strip()
    from attnroof.measure.env import _cpu_name

    return f"cpu ({_cpu_name()}) × {world} processes, {backend}"


def main(argv: list[str] | None = None) -> int:
    rank = int((sys.argv[1:] if argv is None else argv)[0])
    plan = json.loads(sys.stdin.readline())
    import torch
    import torch.distributed as dist

    from attnroof.measure.kernels import TORCH_DTYPES

    torch.set_num_threads(1)
    world, backend = int(plan["world"]), plan["backend"]
    timeout = timedelta(seconds=float(plan["timeout_s"]))
    if rank == 0:
        store = dist.TCPStore(HOST, 0, world, is_master=True, wait_for_workers=False, timeout=timeout)
        say(port=store.port)
    else:
        port = int(sys.stdin.readline())
        store = dist.TCPStore(HOST, port, world, is_master=False, timeout=timeout)
    if backend == "nccl":
        device = torch.device("cuda", rank)
        torch.cuda.set_device(device)
        dist.init_process_group(
            "nccl", store=store, rank=rank, world_size=world, timeout=timeout, device_id=device
        )
    else:
        device = torch.device("cpu")
        dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)
    me = Rank(torch, dist, rank, world, device)
    if rank == 0:
        say(device=_label(torch, device, world, backend))
    dt = getattr(torch, TORCH_DTYPES[plan["dtype"]])
    for op, count in plan["items"]:
        result = me.measure(op, int(count), dt, int(plan["warmup"]), int(plan["iters"]))
        if rank == 0:
            say(op=op, count=count, **result)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        say(done=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
