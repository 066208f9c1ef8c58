"""model: a whole transformer's prefill, decode or training step, operator by operator, on one device
or spread over many."""

from __future__ import annotations

import argparse
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from attnroof.commands import _calibration, _forecast
from attnroof.commands._common import (
    Command,
    add_device_args,
    add_json_arg,
    emit_json,
    int_list,
    positive_int,
    require,
    roof_from_args,
)
from attnroof.commands._grid import check_grid, run_grid
from attnroof.commands._parallel import add_parallel_args, run_parallel, wants_parallel
from attnroof.commands._routing import add_routing_arg, routing_of
from attnroof.commands._train import add_train_args, check_train_flags, run_train
from attnroof.dtypes import DType, dtype
from attnroof.formats import WeightFormat, weight_format
from attnroof.model import ModelConfig, builtin, builtin_names, get_model
from attnroof.model.train_options import TRAIN
from attnroof.ops.experts import Routing
from attnroof.ops.latent import ABSORBED, MLA_FORMS

if TYPE_CHECKING:  # the analysis is loaded when a step is analysed, the text layer for text output
    from attnroof.devices import Device
    from attnroof.model.analysis import ModelAnalysis
    from attnroof.model.layers import Precision
    from attnroof.roofline import Roof
    from attnroof.text.model import Setting


def _setup(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model",
        metavar="NAME|config.json|org/name",
        help="built-in model (see --list), a local config.json, or a Hugging Face repository "
        "(its hub cache; downloaded when online with attnroof[hub])",
    )
    p.add_argument("--list", action="store_true", help="list the built-in models")
    p.add_argument(
        "--phase",
        choices=("prefill", "decode", "train"),
        default="decode",
        help="step to analyse (default decode); train: forward + backward + optimizer memory",
    )
    p.add_argument("--batch", type=positive_int, default=1, help="sequences in the batch (default 1)")
    p.add_argument(
        "--context",
        type=positive_int,
        metavar="C",
        help="prefill: prompt length; decode: tokens in each KV cache",
    )
    p.add_argument(
        "--sweep-batch", type=int_list, metavar="LIST", help="batches to compare: 1,8,64 or 1..256"
    )
    p.add_argument(
        "--sweep-context",
        type=int_list,
        metavar="LIST",
        help="contexts: with --sweep-batch (or --batch) the batch × context grid, costed in one pass "
        "on arrays: 1024,8192 or 1k..128k",
    )
    p.add_argument("--unfused", action="store_true", help="unfused attention (S and P go through memory)")
    p.add_argument(
        "--weight-dtype",
        metavar="FORMAT",
        help="every weight in one dtype or quantized layout: bf16, fp8, fp8-block, int8, int4-g128, awq, gptq, "
        "mxfp4, nvfp4 (default: as the checkpoint's quantization_config stores them, the rest --dtype)",
    )
    p.add_argument("--kv-dtype", metavar="DTYPE", help="dtype of the KV cache (default: --dtype)")
    add_routing_arg(p)
    p.add_argument(
        "--mla",
        choices=MLA_FORMS,
        default=ABSORBED,
        help="latent attention at decode: 'absorbed' (one latent read for all heads) or 'naive' "
        "(K and V decompressed per head, as transformers runs it) (default absorbed)",
    )
    add_train_args(p)
    add_parallel_args(p)
    add_device_args(p)
    _calibration.add_calibration_args(p)
    _forecast.add_profile_args(p)
    add_json_arg(p)


@dataclass(frozen=True)
class _Job:
    """What every output needs: the model, the device and the three dtypes."""

    model: ModelConfig
    args: argparse.Namespace
    device: Device
    roof: Roof
    dt: DType
    wdt: DType | WeightFormat
    kdt: DType

    @property
    def prec(self) -> Precision:
        """The dtypes' bytes; weights as the checkpoint stores them unless --weight-dtype is given."""
        from attnroof.model.layers import Precision

        return Precision(
            self.dt.itemsize, self.wdt.itemsize, self.kdt.itemsize, stored=not self.args.weight_dtype
        )

    @property
    def fused(self) -> bool:
        return not self.args.unfused

    @property
    def options(self) -> dict[str, Any]:
        """How experts are routed and latent attention decoded."""
        return {"routing": self.routing, "latent_form": self.args.mla}

    @property
    def routing(self) -> Routing:
        """``--routing``, read (a trace's file) and checked against the model in :func:`_run`."""
        routing: Routing = self.args.routing
        return routing

    def analyse(self, batch: int, roof: Roof | None = None) -> ModelAnalysis:
        """The step at ``batch`` on the bound's roof (or on ``roof``: a forecast's)."""
        from attnroof.model.analysis import analyse

        a = self.args
        return analyse(
            self.model, a.phase, batch, a.context, roof or self.roof, self.prec,
            capacity_bytes=self.device.capacity_bytes, fused=self.fused, **self.options,
        )  # fmt: skip

    @functools.cached_property
    def forecast_roof(self) -> Any:
        """The roof with ``--profile``'s efficiencies, or ``None`` (no profile: the bound alone)."""
        return _forecast.forecast_roof(self.args, self.device, self.dt, self.roof)

    def json_head(self) -> dict[str, Any]:
        from attnroof.model.layers import config_json
        from attnroof.model.weights import weights_json

        return {
            "model": self.model.name,
            "phase": self.args.phase,
            "context": self.args.context,
            "device": self.device.name,
            "dtype": self.dt.name,
            "weight_dtype": self.wdt.name,
            **weights_json(self.model, self.prec, self.wdt.name, always=isinstance(self.wdt, WeightFormat)),
            "kv_dtype": self.kdt.name,
            "fused": self.fused,
            **({"routing": str(self.routing), **self.routing.to_json()} if self.model.experts else {}),
            **({"latent_attention": self.args.mla} if self.model.latent else {}),
            "ridge": self.roof.ridge,
            **self.roof.cache_json(),
            "config": config_json(self.model),
            # analysed as asked; the text's header warns (a grid lists its contexts past the limit)
            **self._past_positions_json(),
        }

    def _past_positions_json(self) -> dict[str, Any]:
        from attnroof.model.notes import past_positions

        a = self.args
        if a.context is None:
            return {"contexts_beyond_model_limit": past_positions(self.model, a.sweep_context or [])}
        return {"context_beyond_model_limit": bool(past_positions(self.model, [a.context]))}

    @property
    def setting(self) -> Setting:
        from attnroof.model.weights import stored_rows
        from attnroof.text.model import Setting

        a = self.args
        return Setting(
            self.model, self.device, self.roof, a.phase, a.context, self.fused, self.dt, self.wdt, self.kdt,
            stored_rows(self.model, self.prec),
        )  # fmt: skip


def _run(args: argparse.Namespace) -> int:
    if args.list:
        return _print_list([builtin(n) for n in builtin_names()], args.json)
    require(args.model is not None, "--model is required (a built-in name or a config.json; see --list)")
    if args.sweep_context:
        check_grid(args)
    else:
        require(args.context is not None, "--context is required (prompt or KV-cache length, e.g. 8192)")
    check_train_flags(args)
    _check_calibration_use(args)
    sweep = next((f for f, on in (("--sweep-batch", args.sweep_batch), ("--sweep-context", args.sweep_context),
                                   ("--sweep-tp", args.sweep_tp), ("--fit", args.fit)) if on), None)  # fmt: skip
    require(
        args.profile in (None, "none") or sweep is None,
        f"--profile forecasts one step (one device or one plan): not with {sweep}, whose rows are bounds",
    )
    model = get_model(args.model)
    args.routing = routing_of(args, model)
    dev, dt, roof = roof_from_args(args)
    wdt = _weight_dtype(args, dt)
    kdt = dtype(args.kv_dtype) if args.kv_dtype else dt
    job = _Job(model, args, dev, roof, dt, wdt, kdt)
    if args.sweep_context:
        return run_grid(job)
    if wants_parallel(args):
        return run_parallel(job)
    if args.phase == TRAIN:
        assert isinstance(wdt, DType)
        return run_train(model, args, dev, roof, dt, wdt)
    return _sweep(job) if args.sweep_batch else _single(job)


def _weight_dtype(args: argparse.Namespace, dt: DType) -> DType | WeightFormat:
    """``--weight-dtype``: a dtype, or for prefill and decode a quantized layout (:mod:`attnroof.formats`)."""
    fmt = weight_format(args.weight_dtype) if args.weight_dtype else None
    if fmt is None or not fmt.scaled:
        return dt if fmt is None else dtype(fmt.name)
    require(
        args.phase != TRAIN,
        f"--weight-dtype {fmt.name} is a serving layout (scaled groups or blocks): a training step keeps "
        "its weights in a dtype (bf16, fp32, fp8)",
    )
    return fmt


def _check_calibration_use(args: argparse.Namespace) -> None:
    """``--calibration`` forecasts one prefill or decode step (on one device or one plan); every
    other answer would drop it without a word."""
    if args.calibration is None:
        return
    other = next(
        (
            flag
            for flag, given in (
                ("--phase train (its backward kernels are not calibrated)", args.phase == TRAIN),
                ("--sweep-batch", args.sweep_batch),
                ("--fit", args.fit),
                ("--sweep-tp", args.sweep_tp),
            )
            if given
        ),
        None,
    )
    require(
        other is None,
        f"--calibration forecasts one prefill or decode step: not with {other}",
    )


def _single(job: _Job) -> int:
    batch = job.args.batch
    a = job.analyse(batch)
    f = None if job.forecast_roof is None else job.analyse(batch, job.forecast_roof)
    cal = _calibration.load(job.args, job.device, job.dt)
    pred = None if cal is None else _calibration.step(job.args, cal, job.model, job.prec, job.fused, a)
    if job.args.json:
        ops = [o.to_json() for o in a.ops]
        totals, mem = a.totals.to_json(), a.memory.to_json()
        extra = {} if pred is None else {"predicted": pred}
        if f is not None:
            for o, fo in zip(ops, f.ops, strict=True):
                o["forecast_time_s"] = fo.time_s
            totals |= _forecast.step_totals_json(f.totals, batch, job.args.phase)
            extra["forecast"] = _forecast.forecast_json(
                job.forecast_roof.profile, "step", f.totals.time_s, a.totals.bound_s
            )
        emit_json(
            {**job.json_head(), "batch": batch, "ops": ops, "totals": totals, "memory": mem, "notes": a.notes}
            | extra
        )
        return 0
    from attnroof.text.model import step_text

    print(step_text(job.setting, a) + ("" if f is not None else _forecast.missing_line(job.args, job.device)))
    if f is not None:
        from attnroof.text.forecast import forecast_line

        print(
            "\n" + forecast_line(job.forecast_roof.profile, "step", f.totals.time_s, a.totals.bound_s, "step")
        )
    if pred is not None:
        print("\n" + _calibration.step_text(pred, a.totals.time_s, batch, job.args.phase == "decode"))
    return 0


def _sweep(job: _Job) -> int:
    from attnroof.model.batching import compute_bound_batch, gemm_crossovers

    decode = job.args.phase == "decode"
    runs = [job.analyse(b) for b in job.args.sweep_batch]
    gemms = gemm_crossovers(job.model, job.roof, job.prec, job.routing)
    step_batch, share = None, 1.0
    if decode:
        step_batch, share = compute_bound_batch(
            job.model, job.args.context, job.roof, job.prec, fused=job.fused, **job.options
        )
    if job.args.json:
        json_rows = [
            {
                "batch": a.batch,
                "totals": a.totals.to_json(),
                "memory": a.memory.to_json(),
                "ops": [o.to_json() for o in a.ops],
            }
            for a in runs
        ]
        emit_json(
            {
                **job.json_head(),
                "rows": json_rows,
                "notes": runs[0].notes,
                "gemm_crossovers": [g.to_json() for g in gemms],
                # decode only: the first batch with under half the time memory-bound (None: never),
                # and the memory-bound share there (or at the largest batch searched)
                "step_crossover": {"batch": step_batch, "memory_bound_share": share} if decode else None,
            }
        )
        return 0
    from attnroof.text.model import sweep_text

    print(sweep_text(job.setting, runs, gemms, step_batch, share))
    return 0


def _print_list(models: list[ModelConfig], as_json: bool) -> int:
    if as_json:
        from attnroof.model.layers import config_json

        emit_json({"models": [config_json(m) for m in models]})
        return 0
    from attnroof.text.model import models_table

    print(models_table(models))
    return 0


COMMANDS = (
    Command(
        "model",
        _setup,
        _run,
        description="A whole transformer's prefill, decode or training step (--phase), operator by operator, "
        "on a device: each operator on the roofline, the step's time bound and its memory. With --tp, --pp, "
        "--ep or --dp, the step spread over devices, each collective on the link roof.",
    ),
)
