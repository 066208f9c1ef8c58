"""Files a user hands attnroof — device files and names, calibration files, model configs and
names, results for calibrate — and the flags that size a collectives run: each case a crash, a
hang (a reader that read ``/dev/zero`` until memory ran out), an OSError or a silently accepted
nonsense value once. Detailed tests: tests/test_input_files.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hostile import Case

LONG = "a" * 300
"""A name longer than a file name may be (255 bytes): ``open`` and ``stat`` raise ENAMETOOLONG."""


def device(*lines: str) -> str:
    """A valid one-device TOML file, with ``lines`` added to its top-level fields."""
    top = "".join(f"{line}\n" for line in lines)
    return f'name = "A"\nbandwidth_bytes_per_s = 1e12\n{top}[peak_flops_per_s]\nbf16 = 1e14\n'


CEILINGS_DEVICE = {"name": "measured", "peak_flops_per_s": {"bf16": 9e14}, "bandwidth_bytes_per_s": 3e12}
TWO_DEVICES = (
    '[[device]]\nname = "A"\nbandwidth_bytes_per_s = 1e12\n[device.peak_flops_per_s]\nbf16 = 1e14\n'
    '[[device]]\nname = "B"\nbandwidth_bytes_per_s = 1e12\n[device.peak_flops_per_s]\nbf16 = 1e14\n'
)


def _fit(kind: str, operator_class: str, impl: str, shape: dict[str, Any]) -> dict[str, Any]:
    return {
        "kind": kind, "operator_class": operator_class, "impl": impl, "points": 2,
        "params": {
            "t0_s": 5e-6, "eta_compute": {"any": 0.8}, "eta_memory": 0.7, "eta_pass": {"any": 0.7},
            "eta_mask": None, "sharpness": 4.0, "l2_speedup": 1.0, "causal_block": 128, "split_kv": False,
        },
        "fitted": ["t0_s", "eta_compute"], "not_fitted": [],
        "in_sample_error": {"median": 0.01, "p90": 0.02, "n": 2},
        "held_out_error": {"median": 0.05, "p90": 0.08, "n": 2},
        "band": {"low": -0.08, "high": 0.09},
        "held_out": [{"shape": shape, "time_s": 1e-5, "predicted_s": 1.05e-5}],
    }  # fmt: skip


def calibration(**params: Any) -> str:
    """A small, valid calibration (H200 SXM, bf16: one GEMM fit and one causal attention fit),
    with the attention fit's ``params`` changed as given (``None`` removes one); a top-level
    ``roofs_sms`` sets the roofs' SM count."""
    attention = _fit("attention", "attention", "sdpa-flash", {"s": 4096, "d": 128, "batch": 1, "heads": 8})
    cal = {
        "device": "NVIDIA H200", "catalog_device": "H200 SXM", "dtype": "bf16",
        "roofs": {"peak_flops_per_s": 7.9e14, "bandwidth_bytes_per_s": 4.2e12, "sms": 132, "l2_bytes": 6e7},
        "fits": [_fit("linear", "gemm", "linear", {"n": 8, "k": 64, "m": 64}), attention],
        "skipped": [],
    }  # fmt: skip
    if "roofs_sms" in params:
        cal["roofs"]["sms"] = params.pop("roofs_sms")
    for key, value in params.items():
        if value is None:
            del attention["params"][key]
        else:
            attention["params"][key] = value
    return json.dumps({"format": "attnroof-calibration/1", "calibrations": [cal]})


FORECAST = ("attention", "-s", "4096", "-d", "128", "--causal", "--device", "h200")
"""A causal attention forecast: what reads every parameter (sharpness, causal block, η_c, SMs)."""


def _forecast_answers(result: Any, folder: Path) -> None:
    assert "sdpa-flash" in result.stdout and "forecast" in result.stdout, result.stdout


def _tampered(case_id: str, needles: tuple[str, ...], **params: Any) -> Case:
    return Case(
        f"calibration {case_id}",
        (*FORECAST, "--calibration", "{dir}/cal.json"),
        files={"cal.json": calibration(**params)},
        error=("cal.json", *needles),
    )


RESULTS_LINE = {
    "kind": "linear", "impl": "linear", "dtype": "bf16", "status": "ok",
    "shape": {"n": 8, "k": 64, "m": 64}, "time_s": 1e-5, "flops": 65536.0, "bytes": 17408.0,
}  # fmt: skip


def _results(n_values: tuple[int, ...], **extra: Any) -> str:
    return "".join(
        json.dumps({**RESULTS_LINE, "shape": {"n": n, "k": 64, "m": 64}, "time_s": 1e-5 * n, **extra}) + "\n"
        for n in n_values
    )


def _calibrated_unnamed(result: Any, folder: Path) -> None:
    assert "no device named" in result.stdout and "H200 SXM" in result.stdout, result.stdout


CASES: list[Case] = [
    # ---- item 1: every reader has a size limit (/dev/zero read until memory ran out)
    Case("device file /dev/zero", ("attention", "-s", "1k", "-d", "64", "--device", "/dev/zero"),
         error=("'/dev/zero'", "device file", "16,777,216 bytes")),
    Case("calibration file /dev/zero", ("linear", "-n", "8", "-k", "64", "-m", "64", "--calibration", "/dev/zero"),
         error=("'/dev/zero'", "calibration file", "67,108,864 bytes")),
    Case("calibrate /dev/zero", ("calibrate", "/dev/zero"), error=("/dev/zero:1", "longer than 64 KiB")),
    Case("plot --ceilings /dev/zero", ("plot", "-o", "{dir}/c.png", "--ceilings", "/dev/zero"),
         error=("'/dev/zero'", "ceilings file")),
    Case("model config /dev/zero", ("model", "--model", "/dev/zero", "--context", "1024"),
         error=("'/dev/zero'", "model config")),
    # ---- item 2: calibrate on records that name no device
    Case("calibrate records without device", ("calibrate", "{dir}/r.jsonl", "--device", "h200"),
         files={"r.jsonl": _results((8, 64, 512))}, error=None, check=_calibrated_unnamed),
    Case("calibrate records with device null", ("calibrate", "{dir}/r.jsonl", "--device", "h200"),
         files={"r.jsonl": _results((8, 64, 512), device=None)}, error=None, check=_calibrated_unnamed),
    Case("calibrate unnamed records, no --device", ("calibrate", "{dir}/r.jsonl"),
         files={"r.jsonl": _results((8, 64, 512))}, error=("r.jsonl", "--device")),
    # ---- item 3: a tampered calibration file: one line naming the file, the field and the value
    Case("calibration untampered", (*FORECAST, "--calibration", "{dir}/cal.json"),
         files={"cal.json": calibration()}, error=None, check=_forecast_answers),
    _tampered("sharpness 0", ("params.sharpness = 0", "from 1 to 50"), sharpness=0),
    _tampered("sharpness -2", ("params.sharpness = -2",), sharpness=-2),
    _tampered("causal_block 0", ("params.causal_block = 0", "64, 128, 256"), causal_block=0),
    _tampered("eta_compute empty", ("params.eta_compute = {}",), eta_compute={}),
    _tampered("eta_compute key", ('eta_compute key = "x"',), eta_compute={"x": 0.5}),
    _tampered("roofs.sms text", ('roofs.sms = "abc"',), roofs_sms="abc"),
    _tampered("roofs.sms negative", ("roofs.sms = -4",), roofs_sms=-4),
    _tampered("split_kv text", ('params.split_kv = "no"', "true or false"), split_kv="no"),
    _tampered("eta_memory text", ('params.eta_memory = "0.5"',), eta_memory="0.5"),
    _tampered("t0_s 1e308", ("params.t0_s = 1e+308",), t0_s=1e308),
    _tampered("misspelt field", ("split_KV", "did you mean 'split_kv'"), split_KV=True),
    _tampered("missing sharpness", ("params.sharpness is missing",), sharpness=None),
    Case("calibration empty", ("linear", "-n", "8", "-k", "64", "-m", "64", "--calibration", "{dir}/cal.json"),
         files={"cal.json": ""}, error=("cal.json", "it is empty")),
    # ---- item 4: a name over 255 characters is no file: one line, exit 2 (was OSError, exit 1)
    Case("devices long name", ("devices", LONG), error=("unknown device",)),
    Case("--device long name", ("attention", "-s", "1k", "-d", "64", "--device", LONG), error=("unknown device",)),
    Case("--device long file name", ("attention", "-s", "1k", "-d", "64", "--device", LONG + ".toml"),
         error=("device file", "File name too long")),
    Case("--model long name", ("model", "--model", LONG, "--context", "1024"), error=("unknown model",)),
    Case("ATTNROOF_DEVICES long name", ("devices",), env={"ATTNROOF_DEVICES": LONG},
         error=("ATTNROOF_DEVICES", "File name too long")),
    # ---- item 5: the flag substitution leaves file names alone; ceilings checked as a device file
    Case("two-device file keeps its name", ("attention", "-s", "1k", "-d", "64", "--device", "{dir}/two_devices.toml"),
         files={"two_devices.toml": TWO_DEVICES}, error=("two_devices.toml'", "--device takes a file of one device")),
    Case("onchip above capacity", ("attention", "-s", "1k", "-d", "64", "--device", "{dir}/d.toml"),
         files={"d.toml": device("capacity_bytes = 80e9", "onchip_bytes = 2e11")},
         error=("d.toml", "onchip_bytes = 2e+11", "capacity_bytes = 8e+10")),
    Case("plot --ceilings unknown field", ("plot", "-o", "{dir}/c.png", "--ceilings", "{dir}/c.json"),
         files={"c.json": json.dumps({"device": {**CEILINGS_DEVICE, "bandwidth": 1e12}})},
         error=("c.json", "unknown field 'bandwidth'")),
    Case("plot --ceilings implausible capacity", ("plot", "-o", "{dir}/c.png", "--ceilings", "{dir}/c.json"),
         files={"c.json": json.dumps({"device": {**CEILINGS_DEVICE, "capacity_bytes": 80}})},
         error=("c.json", "capacity_bytes = 80")),
    # ---- item 6: a collectives run that cannot fit is refused before any process starts
    Case("collectives 16G", ("measure", "collectives", "--backend", "gloo", "--world", "2", "--sizes", "16G"),
         error=("--sizes 17179869184", "GiB", "--world"), needs_torch=True),
    Case("collectives world 64", ("measure", "collectives", "--backend", "gloo", "--world", "64"),
         error=("--world 64", "per CPU core"), needs_torch=True),
    # ---- item 7: a path that exists is a config to read, not a model name
    Case("--model /dev/null", ("model", "--model", "/dev/null", "--context", "1024"),
         error=("cannot read model config '/dev/null'", "empty")),
    Case("--model folder without config", ("model", "--model", "{dir}", "--context", "1024"),
         files={"notes.txt": "not a model"}, error=("holds no config.json",)),
]  # fmt: skip
