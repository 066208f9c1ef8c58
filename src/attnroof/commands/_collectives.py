"""``attnroof measure collectives``: all-reduce, all-gather, reduce-scatter, all-to-all and
send/recv through ``torch.distributed`` over message sizes, nccl-tests' algbw and busbw, on the
link roof of a catalog device. Every input is checked before a rank starts; torch is imported
only to count GPUs (nccl, or no ``--backend``). Under ``torchrun`` this process is one rank of
the group (``attnroof.measure.launch``): rank 0 writes the results file and prints.

    attnroof measure collectives [--ops all-reduce,all-gather] [--sizes 1K..256M] [--world N]
        [--backend gloo|nccl] [--device h100] [--link scale-up|scale-out|bridge] [-o r.jsonl] [--resume]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from typing import Any

from attnroof.commands._common import emit_json, require
from attnroof.commands._measure_flags import COLLECTIVE_SIZES, byte_sizes
from attnroof.devices import get_device
from attnroof.devices.links import BRIDGE, SCALE_OUT, SCALE_UP, Link
from attnroof.text.render import plural

GLOO_RANKS_PER_CORE = 2
"""Most gloo ranks per CPU core of this machine. A rank waits for its peers at every barrier and
every collective: with more ranks than cores some always wait for a core instead of the link
(the time measured is the scheduler's), and each rank is a Python with torch to start. Twice
the cores still lets a two-core machine run a world of 4; beyond that nothing is measured."""


def _gpus() -> int:
    from attnroof.measure import require_torch

    torch = require_torch()
    return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0


def _backend_and_world(args: argparse.Namespace) -> tuple[str, int]:
    backend = args.backend
    gpus = _gpus() if backend != "gloo" else 0
    if backend is None:
        backend = "nccl" if gpus >= 2 else "gloo"
    if backend == "nccl":
        import torch.distributed as dist

        require(gpus >= 1, "--backend nccl: no CUDA GPU here (use --backend gloo for CPU processes)")
        require(dist.is_nccl_available(), "--backend nccl: this torch has no NCCL (use --backend gloo)")
        world = args.world or gpus
        require(
            world >= 2,
            f"--backend nccl: one rank per GPU, and there is {plural(gpus, 'GPU')} here (2 needed)",
        )
        require(
            world <= gpus,
            f"--world {world}: one rank per GPU, and there {'is' if gpus == 1 else 'are'} {plural(gpus, 'GPU')} here",
        )
        return backend, world
    if importlib.util.find_spec("torch") is None:
        from attnroof.measure import require_torch

        require_torch()  # says which extra to install
    world = args.world or 2
    cores = os.cpu_count() or 1
    most = GLOO_RANKS_PER_CORE * cores
    require(
        world <= most,
        f"--world {world}: at most {most} gloo processes on this machine ({GLOO_RANKS_PER_CORE} per CPU "
        f"core, {plural(cores, 'core')}; more would time the scheduler, not the link)",
    )
    return backend, world


def _check_memory(items: Any, backend: str, world: int, ranks_here: int | None = None) -> None:
    """Refuse, before any rank starts, a plan whose buffers do not fit: gloo's ranks share this
    machine's RAM, NCCL's each have a GPU. What a run may use is what a kernel measurement may
    (:data:`attnroof.measure.env.MEMORY_SHARE` of the available RAM; of a GPU's capacity, as its
    free memory cannot be asked without opening a CUDA context on each GPU here)."""
    from attnroof.measure.collectives import check_memory
    from attnroof.measure.env import MEMORY_SHARE, ram_bytes

    if backend == "nccl":
        from attnroof.measure import require_torch

        cuda = require_torch().cuda
        smallest = min(cuda.get_device_properties(i).total_memory for i in range(ranks_here or world))
        check_memory(items, smallest * MEMORY_SHARE, shared=False)
    else:
        check_memory(items, ram_bytes()[1] * MEMORY_SHARE, shared=True, ranks_here=ranks_here)


def _link(args: argparse.Namespace) -> tuple[Link | None, str]:
    if not args.device:
        return None, ""
    dev = get_device(args.device)
    link = {SCALE_UP: dev.links.scaleup, SCALE_OUT: dev.links.scaleout, BRIDGE: dev.links.bridge}[args.link]
    what = args.link.replace("-", "") + "_bytes_per_s"
    require(
        link is not None,
        f"--device {args.device}: {dev.name} has no {args.link} link figure ([device.links] {what}); "
        "give a device file that has one, or leave out --device",
    )
    assert link is not None
    return link, f"{dev.name} {link.kind}" + (f" ({link.name})" if link.name else "")


def _results(args: argparse.Namespace) -> Any:
    """The results file (kept with --resume, started over with --force), or None without -o."""
    if not args.output:
        require(not args.resume, "--resume continues the file named by -o: give -o FILE.jsonl")
        return None
    from attnroof.commands._results import suite_file

    results = suite_file(args)
    from attnroof.measure.records import ERROR

    failed = [r for r in results.records if r.get("status") == ERROR]
    if failed:  # a failed measurement is tried again; its record goes
        results.rewrite([r for r in results.records if r.get("status") != ERROR])
    return results


def _launched_backend(args: argparse.Namespace, launch: Any) -> str:
    """Under torchrun: the backend (NCCL where this node has GPUs, else gloo), with one rank per
    GPU of each node, and no more gloo ranks on a node than its cores allow."""
    backend = args.backend
    gpus = _gpus() if backend != "gloo" else 0
    if backend is None:
        backend = "nccl" if gpus >= 1 else "gloo"
    require(
        args.world in (None, launch.world),
        f"--world {args.world}: torchrun started {launch.world} ranks (WORLD_SIZE); leave out --world under torchrun",
    )
    n = launch.local_world
    if backend == "nccl":
        import torch.distributed as dist

        require(gpus >= 1, "--backend nccl: no CUDA GPU on this node (use --backend gloo for CPU processes)")
        require(dist.is_nccl_available(), "--backend nccl: this torch has no NCCL (use --backend gloo)")
        require(
            n <= gpus,
            f"--nproc-per-node {n}: one rank per GPU, and this node has {plural(gpus, 'GPU')}",
        )
        return backend
    cores = os.cpu_count() or 1
    most = GLOO_RANKS_PER_CORE * cores
    require(
        n <= most,
        f"--nproc-per-node {n}: at most {most} gloo processes on this node ({GLOO_RANKS_PER_CORE} per CPU "
        f"core, {plural(cores, 'core')}; more would time the scheduler, not the link)",
    )
    return backend


def run(args: argparse.Namespace) -> int:
    from attnroof.measure.collectives import collective_record, plan, run_ranks
    from attnroof.measure.kernels import check_dtype
    from attnroof.measure.launch import launched
    from attnroof.ops.collectives import COLLECTIVES

    dt = check_dtype(args.dtype)
    link, link_name = _link(args)
    launch = launched()
    if launch is not None:
        if importlib.util.find_spec("torch") is None:
            from attnroof.measure import require_torch

            require_torch()
        backend, world = _launched_backend(args, launch), launch.world
    else:
        backend, world = _backend_and_world(args)
    sizes = args.sizes or byte_sizes(COLLECTIVE_SIZES[backend])
    items = plan(args.ops or COLLECTIVES, sizes, world=world, backend=backend, dt=dt)
    _check_memory(items, backend, world, launch.local_world if launch else None)
    results: Any = None
    done: dict[str, dict[str, Any]] = {}
    made: dict[str, dict[str, Any]] = {}
    device = ""

    def todo() -> list[Any]:
        """The items the results file lacks (it is opened here: by rank 0 alone under torchrun)."""
        nonlocal results, done
        results = _results(args)
        done = {r["key"]: r for r in results.records} if results is not None else {}
        left = [i for i in items if i.key not in done]
        if len(left) < len(items):
            print(
                f"resuming: {len(items) - len(left)} of {len(items)} already in {args.output}",
                file=sys.stderr,
            )
        return left

    def ready(label: str) -> None:
        nonlocal device
        device = label
        if not args.json:
            print(f"measuring on {label}", file=sys.stderr, flush=True)

    def emit(res: Any) -> None:
        rec = collective_record(
            res.item,
            device,
            time_s=res.time_s,
            status=res.status,
            reason=res.reason,
            link=link,
            link_name=link_name,
            timing=res.timing,
        )
        if results is not None:
            results.append(rec)  # on disk before the next measurement starts
        made[rec["key"]] = rec
        if not args.json:
            print(f"  {rec['status']:5} {res.item.op} {res.item.bytes} B", file=sys.stderr, flush=True)

    try:
        if launch is not None:
            from attnroof.measure.collective_worker import run_launched

            opts = {"warmup": args.warmup, "iters": args.iters, "on_result": emit, "on_ready": ready}
            if not run_launched(launch, items, todo=todo, **opts):
                return 0  # not rank 0: rank 0 writes and prints
        else:
            run_ranks(todo(), warmup=args.warmup, iters=args.iters, on_result=emit, on_ready=ready)
    except KeyboardInterrupt:
        if launch is not None and launch.rank != 0:
            raise KeyboardInterrupt(f"rank {launch.rank}: rank 0 keeps what was measured") from None
        if results is None:
            raise KeyboardInterrupt(f"{plural(len(made), 'measurement')} made, none kept (no -o)") from None
        from attnroof.commands._results import interrupted

        raise KeyboardInterrupt(interrupted(results, args.output)) from None
    finally:
        if results is not None:
            results.close()
    records = [made.get(i.key) or done[i.key] for i in items]
    return _print(args, records, link, link_name, backend, world, dt)


def _print(
    args: argparse.Namespace,
    records: list[dict[str, Any]],
    link: Link | None,
    link_name: str,
    backend: str,
    world: int,
    dt: str,
) -> int:
    link_json = None
    if link is not None:
        link_json = {
            "name": link_name,
            "kind": link.kind,
            "bandwidth_bytes_per_s": link.bandwidth_bytes_per_s,
            "latency_s": link.latency_s,
        }
    if args.json:
        emit_json(
            {
                "backend": backend,
                "world": world,
                "dtype": dt,
                "link": link_json,
                "results": args.output,
                "records": records,
            }
        )
        return 0
    from attnroof.text.collectives import collectives_table, link_line

    devices = sorted({r["device"] for r in records if r.get("device")})
    print(f"on {'; '.join(devices) or 'nothing measured'}")
    if link is not None:
        print(link_line(link_name, link.bandwidth_bytes_per_s, link.latency_s, link.base_latency_s))
    print()
    print(collectives_table(records))
    if args.output:
        print()
        print(f"results: {args.output} ({plural(len(records), 'record')})")
    return 0
