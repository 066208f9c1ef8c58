"""The flags of ``attnroof measure``'s subcommands (the handlers are in
:mod:`attnroof.commands.measure`)."""

from __future__ import annotations

import argparse

from attnroof.commands._common import add_force_arg, add_head_dim_arg, add_json_arg, positive_int

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
        "-o", "--output", metavar="FILE.json", help="write the ceilings here (usable as --device FILE.json)"
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
