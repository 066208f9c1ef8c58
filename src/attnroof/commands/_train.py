"""``model --phase train``: a training step's flags, and its output (text or JSON)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from attnroof.commands._common import emit_json, int_list, positive_int, require
from attnroof.devices import Device
from attnroof.dtypes import DType, dtype
from attnroof.model import ModelConfig
from attnroof.model.layers import config_json
from attnroof.model.notes import past_positions
from attnroof.model.train_options import (
    GRAD_REDUCES,
    NONE,
    OPTIMIZER_STATES,
    RECOMPUTE,
    TRAIN,
    WEIGHT_GATHERS,
)
from attnroof.roofline import Roof
from attnroof.text import render

if TYPE_CHECKING:
    from attnroof.model.training_memory import TrainPrecision

SHARDING_FLAGS = ("weight_gather", "grad_reduce", "dp_shard")
"""The sharding policy's flags beside ``--zero`` (their parsed names)."""
TRAIN_ONLY = (
    "recompute",
    "optimizer",
    "grad_dtype",
    "master_dtype",
    "zero",
    "weight_gather",
    "grad_reduce",
    "dp_shard",
)


def add_train_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("training (--phase train)")
    g.add_argument(
        "--recompute",
        choices=RECOMPUTE,
        default=None,
        help="activation recomputation: none, selective (the attention core), full (keep each "
        "layer's input) (default none)",
    )
    g.add_argument(
        "--optimizer", choices=tuple(OPTIMIZER_STATES), default=None, help="optimizer state (default adamw)"
    )
    g.add_argument("--grad-dtype", metavar="DTYPE", help="dtype of the gradients (default: the weights')")
    g.add_argument(
        "--master-dtype", metavar="DTYPE", help="dtype of the master copy and states (default fp32)"
    )
    g.add_argument(
        "--zero",
        type=int,
        choices=(0, 1, 2, 3),
        default=None,
        help="ZeRO stage over the --dp replicas: 1 shards the optimizer state, 2 the gradients "
        "too, 3 the weights too (FSDP) (default 0)",
    )
    add_sharding_args(g)


def add_sharding_args(g: Any, *, many: bool = False) -> None:
    """The sharding policy's flags beside ``--zero`` (``many``: a plan search's, each a list of
    values to try)."""
    each = " (a list: each tried)" if many else ""
    g.add_argument(
        "--weight-gather",
        type=word_list("--weight-gather", WEIGHT_GATHERS) if many else None,
        choices=None if many else WEIGHT_GATHERS,
        default=None,
        metavar="|".join(WEIGHT_GATHERS) if many else None,
        help="ZeRO 3: all-gather the weights before each pass (FSDP's reshard_after_forward=True, default), "
        "once a micro-batch, kept to its backward (reshard_after_forward=False), or once a step, kept "
        f"through every micro-batch (with --grad-reduce step: as PyTorch's pipeline schedules run FSDP2){each}",
    )
    g.add_argument(
        "--grad-reduce",
        type=word_list("--grad-reduce", GRAD_REDUCES) if many else None,
        choices=None if many else GRAD_REDUCES,
        default=None,
        metavar="|".join(GRAD_REDUCES) if many else None,
        help="ZeRO 2 and 3: reduce-scatter the gradients after every micro-batch (default), or once a "
        "step, accumulated unsharded (FSDP2's set_requires_gradient_sync(False) until the last; "
        f"Megatron's distributed optimizer){each}",
    )
    g.add_argument(
        "--dp-shard",
        type=int_list if many else positive_int,
        default=None,
        metavar="LIST" if many else "S",
        help="hybrid sharding (HSDP): ZeRO shards over S of the --dp replicas (× --cp) and the --dp/S groups "
        "hold copies, their gradients all-reduced across (torchtitan's data_parallel_shard_degree; default "
        f"all of --dp){each}",
    )


def sharding_of(args: argparse.Namespace) -> dict[str, Any]:
    """The sharding policy's fields of a plan from the flags given (the rest their defaults)."""
    return {f: getattr(args, f) for f in SHARDING_FLAGS if getattr(args, f) is not None}


def sharding_choices(args: argparse.Namespace, *, many: bool = False) -> dict[str, Any]:
    """A plan search's sharding choices (:class:`attnroof.model.search.Choices`) from the flags
    given: each one value, or (``many``: ``plan``'s flags) a list of values to try."""
    names = {"weight_gather": "gathers", "grad_reduce": "grad_reduces", "dp_shard": "dp_shards"}
    given = sharding_of(args)
    return {names[f]: tuple(v) if many else (v,) for f, v in given.items()}


def word_list(flag: str, words: tuple[str, ...]) -> Any:
    """A parser of a comma-separated list of ``words``: ``pass,step``."""

    def parse(text: str) -> tuple[str, ...]:
        got = tuple(dict.fromkeys(w.strip() for w in text.split(",") if w.strip()))
        bad = [w for w in got if w not in words]
        if bad or not got:
            raise argparse.ArgumentTypeError(f"{text!r}: expected a list of {', '.join(words)}")
        return got

    return parse


def recompute_of(args: argparse.Namespace) -> str:
    """``--recompute``, or its default (left None by the parser to tell a given flag apart)."""
    return args.recompute or NONE


def check_train_flags(args: argparse.Namespace) -> None:
    """The training flags only with ``--phase train``; ``--sweep-batch`` and ``--kv-dtype`` not with it."""
    if args.phase != TRAIN:
        given = [f"--{n.replace('_', '-')}" for n in TRAIN_ONLY if getattr(args, n) is not None]
        require(not given, f"{', '.join(given)} applies to --phase train only")
        return
    require(not args.sweep_batch, "--sweep-batch is not available with --phase train")
    require(args.kv_dtype is None, "--kv-dtype does not apply to --phase train (training keeps no KV cache)")


def train_precision(args: argparse.Namespace, dt: DType, wdt: DType) -> tuple[TrainPrecision, DType, DType]:
    """The step's precision from the flags, with the gradient and master dtypes it names."""
    from attnroof.model.training_memory import TrainPrecision

    gdt = dtype(args.grad_dtype) if args.grad_dtype else wdt
    mdt = dtype(args.master_dtype or "fp32")
    prec = TrainPrecision(dt.itemsize, wdt.itemsize, gdt.itemsize, mdt.itemsize, args.optimizer or "adamw")
    return prec, gdt, mdt


def train_head(
    model: ModelConfig, args: argparse.Namespace, dev: Device, roof: Roof, dt: DType, wdt: DType
) -> dict[str, Any]:
    """The JSON fields that say which training step this is."""
    prec, gdt, mdt = train_precision(args, dt, wdt)
    return {
        "model": model.name,
        "phase": TRAIN,
        "batch": args.batch,
        "context": args.context,
        "device": dev.name,
        "dtype": dt.name,
        "weight_dtype": wdt.name,
        "grad_dtype": gdt.name,
        "master_dtype": mdt.name,
        "optimizer": prec.optimizer,
        "recompute": recompute_of(args),
        "fused": not args.unfused,
        "ridge": roof.ridge,
        **roof.cache_json(),
        "config": config_json(model),
        "context_beyond_model_limit": bool(past_positions(model, [args.context])),
    }


def train_what(args: argparse.Namespace, dt: DType, wdt: DType) -> str:
    """The line that says, in words, which training step this is."""
    prec, gdt, mdt = train_precision(args, dt, wdt)
    attn = "unfused" if args.unfused else "fused"
    return (
        f"training step of batch {args.batch} × {render.plural(args.context, 'token')}; weights {wdt.name}, "
        f"gradients {gdt.name}, master and {prec.optimizer} state {mdt.name}, activations {dt.name}; "
        f"{attn} attention, recompute {recompute_of(args)}"
    )


def run_train(
    model: ModelConfig, args: argparse.Namespace, dev: Device, roof: Roof, dt: DType, wdt: DType
) -> int:
    from attnroof.model.training import analyse_train

    prec, _, _ = train_precision(args, dt, wdt)
    recompute = recompute_of(args)
    a = analyse_train(
        model,
        args.batch,
        args.context,
        roof,
        prec,
        capacity_bytes=dev.capacity_bytes,
        fused=not args.unfused,
        recompute=recompute,
    )
    from attnroof.commands import _forecast

    fc_roof = _forecast.forecast_roof(args, dev, dt, roof)
    f = None
    if fc_roof is not None:
        f = analyse_train(
            model, args.batch, args.context, fc_roof, prec, capacity_bytes=dev.capacity_bytes,
            fused=not args.unfused, recompute=recompute,
        ).totals  # fmt: skip
    if args.json:
        totals = a.totals.to_json()
        extra = {}
        if f is not None:
            totals |= {
                "forecast_time_s": f.time_s,
                "forecast_tokens_per_s": f.tokens / f.time_s,
                "forecast_mfu": f.mfu,
            }
            extra["forecast"] = _forecast.forecast_json(fc_roof.profile, "train", f.time_s, a.totals.time_s)
        emit_json(
            {
                **train_head(model, args, dev, roof, dt, wdt),
                "ops": [o.to_json() for o in a.ops],
                "totals": totals,
                "memory": a.memory.to_json(),
                "notes": a.notes,
            }
            | extra
        )
        return 0
    from attnroof.text.training import train_text

    print(
        train_text(train_header(model, args, dev, roof, dt, wdt), a)
        + ("" if f else _forecast.missing_line(args, dev))
    )
    if f is not None:
        from attnroof.text.forecast import forecast_line

        line = forecast_line(fc_roof.profile, "train", f.time_s, a.totals.time_s, "step")
        print(f"\n{line}; forecast MFU {f.mfu:.1%}")
    return 0


def train_header(
    model: ModelConfig, args: argparse.Namespace, dev: Device, roof: Roof, dt: DType, wdt: DType
) -> list[str]:
    """The text's first lines: the model, the device, and the step in words."""
    from attnroof.text.model import Setting, header, past_positions_lines

    setting = Setting(model, dev, roof, "prefill", args.context, not args.unfused, dt, wdt, dt)
    return [
        *header(setting, None)[:2],
        train_what(args, dt, wdt),
        *past_positions_lines(model, [args.context]),
    ]
