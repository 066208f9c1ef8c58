"""The flags of ``attnroof measure``'s subcommands (the handlers are in
:mod:`attnroof.commands.measure`)."""

from __future__ import annotations

import argparse
import re
from typing import Any

from attnroof.commands._common import (
    add_force_arg,
    add_head_dim_arg,
    add_json_arg,
    doubling_list,
    path_arg,
    positive_int,
)

DEFAULT_RESULTS = "results.jsonl"


def _common(p: argparse.ArgumentParser, *, ceilings: bool = True) -> None:
    g = p.add_argument_group("device")
    g.add_argument(
        "--device",
        default=None,
        metavar="NAME|FILE",
        help="catalog device (or device file) to compare with, e.g. h200; default: none",
    )
    g.add_argument("--dtype", default="bf16", help="bf16 (default), fp16 or fp32")
    if ceilings:
        g.add_argument(
            "--ceilings",
            type=path_arg,
            metavar="FILE.json",
            help="ceilings saved by 'attnroof measure ceilings -o FILE.json' (default: measure them now)",
        )
        g.add_argument(
            "--ncu", action="store_true", help="also read DRAM bytes with Nsight Compute (CUDA, ncu on PATH)"
        )
    g.add_argument("--cpu", action="store_true", help="run on the CPU even when CUDA is present")
    add_json_arg(p)


def _append_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-o",
        "--output",
        type=path_arg,
        metavar="FILE.jsonl",
        help="also append each measurement to this JSON-lines file as soon as it is made",
    )


def _impl_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--impl", metavar="A,B", help="only these implementations, e.g. eager,sdpa-flash")


def _heads(p: argparse.ArgumentParser, *, group: bool) -> None:
    p.add_argument("--batch", type=positive_int, default=1, help="sequences in the batch (default 1)")
    default, what = (None, "--group, one KV head") if group else (1, "1")
    p.add_argument("--heads", type=positive_int, default=default, help=f"query heads (default {what})")
    if group:
        p.add_argument(
            "--group", type=positive_int, default=1, metavar="G", help="query heads per KV head (default 1)"
        )


def ceilings_setup(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quick", action="store_true", help="fewer, smaller matmul sizes")
    p.add_argument(
        "-o",
        "--output",
        type=path_arg,
        metavar="FILE.json",
        help="write the ceilings here (usable as --device FILE.json)",
    )
    add_force_arg(p)
    _common(p, ceilings=False)


def attention_setup(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-s", "--seq", dest="s", type=positive_int, required=True, metavar="S", help="sequence length"
    )
    add_head_dim_arg(p)
    _heads(p, group=False)
    p.add_argument("--causal", action="store_true", help="causal mask")
    _impl_arg(p)
    _append_arg(p)
    _common(p)


def decode_setup(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-s", "--context", dest="s", type=positive_int, required=True, metavar="S", help="KV cache length"
    )
    add_head_dim_arg(p)
    _heads(p, group=True)
    _impl_arg(p)
    _append_arg(p)
    _common(p)


def linear_setup(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "-n", "--tokens", dest="n", type=positive_int, required=True, help="tokens through the layer"
    )
    p.add_argument("-k", dest="k", type=positive_int, required=True, help="input features")
    p.add_argument("-m", dest="m", type=positive_int, required=True, help="output features")
    _append_arg(p)
    _common(p)


def suite_setup(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--quick", action="store_true", help="the small campaign (under a minute on two CPU cores)"
    )
    p.add_argument(
        "-o",
        "--output",
        default=DEFAULT_RESULTS,
        type=path_arg,
        metavar="FILE.jsonl",
        help=f"JSON-lines results, one measurement a line (default {DEFAULT_RESULTS})",
    )
    p.add_argument(
        "--resume",
        action="store_true",
        help="keep the results file and measure only what it lacks (ceilings included)",
    )
    add_force_arg(p)
    _impl_arg(p)
    _common(p)


# ---------------------------------------------------------------- measure collectives

COLLECTIVE_SIZES = {"gloo": "1K..16M", "nccl": "1K..256M"}
"""Default message sizes per backend: nccl-tests' usual sweep on GPUs; on CPU processes (gloo
over loopback) the top stops at 16 MiB, where a sweep of all five operations takes seconds."""
_BYTES = re.compile(r"(\d+)\s*([KMG]?)(?:I?B)?", re.IGNORECASE)
_BYTE_SCALE = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}
MAX_MESSAGE = 2**40
MAX_WORLD = 1024
MAX_ITERS = 100_000


def _byte_size(text: str) -> int:
    m = _BYTES.fullmatch(text.strip())
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size in bytes (such as 4096, 64K, 256M or 1G)")
    value = int(m.group(1)) * _BYTE_SCALE[m.group(2).upper()]
    if not 0 < value <= MAX_MESSAGE:
        raise argparse.ArgumentTypeError(f"{text!r}: a message size must be 1 byte to 1T (2^40)")
    return value


def byte_sizes(text: str) -> list[int]:
    """Message sizes in bytes: ``1K..256M`` (doubling from the first while at most the last) or
    a list ``4K,1M,64M``; K, M, G are powers of 1024 (nccl-tests' ``-b 8 -e 128M -f 2``)."""
    return doubling_list(text, _byte_size, "sizes in bytes")


def _squash(name: str) -> str:
    return re.sub(r"[-_/\s]", "", name.lower())


def collective_ops(text: str) -> list[str]:
    """``all`` or names from :data:`attnroof.ops.collectives.COLLECTIVES`, comma-separated
    (``allreduce``, ``all_reduce``, ``sendrecv`` are the same names)."""
    from attnroof.ops.collectives import COLLECTIVES

    known = {_squash(c): c for c in COLLECTIVES}
    out: list[str] = []
    for word in (w.strip() for w in text.split(",")):
        if not word:
            continue
        if word.lower() == "all":
            out += [c for c in COLLECTIVES if c not in out]
            continue
        if _squash(word) not in known:
            raise argparse.ArgumentTypeError(
                f"{word!r} is not a collective (known: {', '.join(COLLECTIVES)}, all)"
            )
        if known[_squash(word)] not in out:
            out.append(known[_squash(word)])
    if not out:
        raise argparse.ArgumentTypeError(f"{text!r} names no collective")
    return out


def world_size(text: str) -> int:
    n = positive_int(text)
    if n < 2:
        raise argparse.ArgumentTypeError(f"{text!r}: a collective needs at least 2 ranks")
    if n > MAX_WORLD:
        raise argparse.ArgumentTypeError(f"{text!r}: at most {MAX_WORLD} ranks on one machine")
    return n


def _count(least: int) -> Any:
    def parse(text: str) -> int:
        try:
            n = int(text)
        except ValueError:
            n = -1
        if not least <= n <= MAX_ITERS:
            raise argparse.ArgumentTypeError(f"{text!r} must be a whole number from {least} to {MAX_ITERS}")
        return n

    return parse


def collectives_setup(p: argparse.ArgumentParser) -> None:
    p.add_argument("--ops", type=collective_ops, metavar="A,B", help="collectives to measure (default: all)")
    p.add_argument(
        "--sizes",
        type=byte_sizes,
        metavar="LO..HI|A,B",
        help="message sizes in bytes, nccl-tests' size: 1K..256M doubles, or a list such as 4K,1M "
        f"(default: {COLLECTIVE_SIZES['nccl']} with nccl, {COLLECTIVE_SIZES['gloo']} with gloo)",
    )
    p.add_argument(
        "--world",
        type=world_size,
        metavar="N",
        help="ranks started here (default: every GPU with nccl, 2 with gloo); under torchrun each "
        "process it starts is a rank (--nnodes × --nproc-per-node, any number of nodes)",
    )
    p.add_argument(
        "--backend",
        choices=("gloo", "nccl"),
        help="torch.distributed backend (default: nccl with 2 or more GPUs, else gloo on CPU processes)",
    )
    p.add_argument("--warmup", type=_count(0), default=5, metavar="K", help="untimed calls first (default 5)")
    p.add_argument(
        "--iters", type=_count(1), default=20, metavar="K", help="timed calls, median kept (default 20)"
    )
    g = p.add_argument_group("device")
    g.add_argument(
        "--device",
        metavar="NAME|FILE",
        help="catalog device (or device file) whose link is the roof, e.g. h100; default: none",
    )
    g.add_argument(
        "--link",
        choices=("scale-up", "scale-out", "bridge"),
        default="scale-up",
        help="which of its links: scale-up (NVLink, default), scale-out (the NIC) or bridge "
        "(the NVLink bridge of a pair of PCIe cards)",
    )
    g.add_argument(
        "--dtype", default="fp32", help="element type: fp32 (default, nccl-tests' float), bf16, fp16"
    )
    p.add_argument(
        "-o",
        "--output",
        type=path_arg,
        metavar="FILE.jsonl",
        help="JSON-lines results, one measurement a line, written as each is made",
    )
    p.add_argument("--resume", action="store_true", help="keep -o's file and measure only what it lacks")
    add_force_arg(p)
    add_json_arg(p)
