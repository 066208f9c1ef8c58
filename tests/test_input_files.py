"""The files and names a user hands attnroof, in detail (issue 20; the one-line cases are rows of
tests/hostile/files.py): the size limit of every reader, the flag substitution that leaves file
names alone, the calibration file's schema against what ``calibrate`` writes, and the memory a
collectives run is refused for."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from attnroof import calibration
from attnroof.calibration.fit import BOUNDS
from attnroof.calibration.schema import ROUNDING, check_file
from attnroof.errors import FILE_LIMITS, InputError, read_text, with_flag
from attnroof.measure.collectives import RANK_OVERHEAD_BYTES, Item, check_memory, rank_bytes
from attnroof.measure.reading import parse_results
from attnroof.units import GiB, MiB
from conftest import assert_one_line_error, run_cli
from hostile.files import calibration as calibration_text

DATA = Path(__file__).resolve().parent / "data"

# ---------------------------------------------------------------- the size limit


def test_read_text_reads_up_to_the_limit_and_refuses_one_byte_more(tmp_path: Path) -> None:
    path = tmp_path / "d.toml"
    path.write_bytes(b"x" * 10)
    assert read_text(path, "device file", InputError, limit=10) == "x" * 10
    path.write_bytes(b"x" * 11)
    with pytest.raises(InputError, match=r"'.*d\.toml': larger than 10 bytes, the most attnroof reads"):
        read_text(path, "device file", InputError, limit=10)


def test_the_limits_leave_real_files_far_inside() -> None:
    """A limit stops /dev/zero, never a real file: the packaged catalog (all its devices in one
    TOML) and the largest packaged model config are each under a hundredth of their kind's limit."""
    import attnroof.devices
    import attnroof.model.config

    catalog = Path(attnroof.devices.__file__).with_name("catalog.toml").stat().st_size
    assert 100 * catalog < FILE_LIMITS["device file"] == FILE_LIMITS["ceilings file"]
    configs = Path(attnroof.model.config.__file__).with_name("configs").glob("*.json")
    assert 100 * max(p.stat().st_size for p in configs) < FILE_LIMITS["model config"]


def test_an_endless_file_is_refused_after_limit_plus_one_bytes() -> None:
    # /dev/zero never ends: the reader stops at 16 MiB + 1 byte and says so
    r = run_cli("devices", "/dev/zero")
    assert_one_line_error(r, "'/dev/zero'", "larger than 16,777,216 bytes")


def test_text_that_is_not_utf8_names_the_byte(tmp_path: Path) -> None:
    path = tmp_path / "d.toml"
    path.write_bytes(b'name = "\xff"')
    with pytest.raises(InputError, match=r"not UTF-8 text \(byte 8\)"):
        read_text(path, "device file", InputError)


# ---------------------------------------------------------------- the flag substitution


@pytest.mark.parametrize(
    "message, expected",
    [
        # the parameter's own word becomes the flag
        ("device takes a file of one device", "--device takes a file of one device"),
        # a file name holding the word is left alone, quoted or not
        ("two_devices.toml: device takes one", "two_devices.toml: --device takes one"),
        ("'device.toml' holds 2; device takes one", "'device.toml' holds 2; --device takes one"),
        ("/tmp/device/x.toml: pass the device", "/tmp/device/x.toml: pass the --device"),
        ("my-device.toml, device_x: device", "my-device.toml, device_x: --device"),
        # an apostrophe inside a word opens no quote
        ("can't place it: pass the device", "can't place it: pass the --device"),
        # no mention at all: the message as it was
        ("'device' and \"device\"", "'device' and \"device\""),
    ],
)
def test_only_the_parameter_as_a_word_of_its_own_becomes_the_flag(message: str, expected: str) -> None:
    assert with_flag(message, "device", "--device") == expected


# ---------------------------------------------------------------- the calibration file


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What calibrate wrote for the CPU suite's records, with their device string removed and
    the device given (a fit with held parameters: efficiencies at 1.0, t0 at 0)."""
    folder = tmp_path_factory.mktemp("cal")
    lines = [json.loads(x) for x in (DATA / "cpu-quick-suite.jsonl").read_text().splitlines()]
    (folder / "r.jsonl").write_text("".join(json.dumps({**r, "device": None}) + "\n" for r in lines))
    r = run_cli("calibrate", str(folder / "r.jsonl"), "--device", "h200", "-o", str(folder / "cal.json"))
    assert r.returncode == 0, r.stderr
    return folder / "cal.json"


def test_what_calibrate_writes_passes_its_schema_and_reads_back(written: Path) -> None:
    doc = json.loads(written.read_text())
    check_file(doc, str(written))
    (cal,) = calibration.read(written)
    assert cal.device is None and cal.catalog_device == "H200 SXM"
    for raw, fit in zip(doc["calibrations"][0]["fits"], cal.fits.values(), strict=True):
        p = fit.fit.params
        assert (p.sharpness, p.causal_block, p.split_kv) == (
            raw["params"]["sharpness"],
            raw["params"]["causal_block"],
            raw["params"]["split_kv"],
        )


def test_a_parameter_at_its_bound_reads_within_rounding(tmp_path: Path) -> None:
    # the fit works in log space: exp(log(1.5)) = 1.5000000000000002 is the bound 1.5
    hi = BOUNDS["eta_memory"][2]
    path = tmp_path / "cal.json"
    path.write_text(calibration_text(eta_memory=hi * (1 + ROUNDING / 2)))
    calibration.read(path)
    path.write_text(calibration_text(eta_memory=hi * (1 + 2 * ROUNDING)))
    with pytest.raises(
        InputError, match=r"params\.eta_memory = 1\.5.* must be a number from 0\.01 to 1\.5, or 1"
    ):
        calibration.read(path)


def test_one_fit_per_kind_and_implementation(tmp_path: Path) -> None:
    doc = json.loads(calibration_text())
    fits = doc["calibrations"][0]["fits"]
    fits.append(fits[0])
    path = tmp_path / "cal.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(
        InputError, match=r"fits\[2\] fits linear 'linear' again \(calibrations\[0\]\.fits\[0\]\)"
    ):
        calibration.read(path)


def test_calibrate_names_no_device_and_its_files_when_it_cannot_place_the_records(tmp_path: Path) -> None:
    records = [json.loads(x) for x in (DATA / "cpu-quick-suite.jsonl").read_text().splitlines()]
    unnamed = [{k: v for k, v in r.items() if k != "device"} for r in records]
    (tmp_path / "r.jsonl").write_text("".join(json.dumps(r) + "\n" for r in unnamed))
    parse_results((tmp_path / "r.jsonl").read_text(), "r.jsonl")  # valid records, without a device
    r = run_cli("calibrate", str(tmp_path / "r.jsonl"))
    assert_one_line_error(r, f"the results in '{tmp_path / 'r.jsonl'}' hold no ceilings", "pass the --device")


# ---------------------------------------------------------------- collectives


def test_a_ranks_bytes_are_its_buffers_and_its_check() -> None:
    # all-reduce of 1 MiB of fp32 (262,144 elements) in place: send 1 MiB, no receive buffer,
    # the expected values 1 MiB and the mask 262,144 bytes
    item = Item("all-reduce", 262_144, 2, "gloo", "fp32")
    assert rank_bytes(item) == 1 * MiB + 1 * MiB + 262_144
    # all-gather over 4 ranks: send a quarter, receive the whole, check the whole
    item = Item("all-gather", 262_144, 4, "gloo", "fp32")
    assert rank_bytes(item) == MiB // 4 + MiB + MiB + 262_144


def test_the_world_and_its_buffers_must_fit_before_any_rank_starts() -> None:
    big = Item("all-reduce", 4 * GiB // 4, 2, "gloo", "fp32")  # 4 GiB of fp32
    need = 2 * (RANK_OVERHEAD_BYTES + rank_bytes(big))  # two processes: 2 × (300 MiB + 9 GiB)
    assert need == 2 * (300 * MiB + 9 * GiB)
    check_memory([big], need, shared=True)
    with pytest.raises(
        InputError, match=r"--sizes 4294967296: all-reduce over 2 ranks needs about 18\.6 GiB"
    ):
        check_memory([big], need - 1, shared=True)
    check_memory([big], rank_bytes(big), shared=False)  # NCCL: one rank's buffers on its GPU
