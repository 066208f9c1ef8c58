"""Board power: every catalog figure sourced (an address) and plausible, the known figures checked
against their sources, the field read from a device file and from ``--board-power``, shown by
``attnroof devices``, and energy per token at board power (refused where a device has none)."""

from __future__ import annotations

import math
import re

import pytest

from attnroof.devices import builtin_devices, get_device, load_device_file
from attnroof.devices.energy import board_power, energy_per_token
from attnroof.errors import DeviceFileError, InputError, MissingBoardPower
from conftest import assert_one_line_error, run_cli

BUILTIN = builtin_devices()
WITH = [d for d in BUILTIN if d.board_power_w is not None]
WITHOUT = [d for d in BUILTIN if d.board_power_w is None]
URL = re.compile(r"https?://\S+")

# name -> (watts, a piece of the source that gives it), each read off that source
KNOWN = {
    "H100 SXM": (700, "gpu.blog/gpus/nvidia-h100-sxm"),
    "H100 PCIe": (350, "PB-11133-001_v02"),
    "H200 SXM": (700, "openmetal.io"),
    "A100 SXM 80GB": (400, "glennklockwood.com/garden/processors/A100"),
    "A100 PCIe 80GB": (300, "thundercompute.com"),
    "MI300X": (750, "MI300X-NPS1-SPX-192GB-750W"),
    "MI355X": (1400, "tomshardware.com"),
    "B200": (1000, "glennklockwood.com/garden/processors/B200"),
    "GB200": (1200, "glennklockwood.com/garden/processors/B200"),
    "L4": (72, "aiwiki.ai/wiki/nvidia_l4"),
    "TPU v4": (192, "glennklockwood.com/garden/tpuv4"),
    "Gaudi 3": (900, "theregister.com"),
}
NONE = ["R", "A10G", "B300", "MI325X", "TPU v3", "TPU v5e", "TPU v5p", "TPU v6e", "TPU v7", "Trainium 2"]


def test_most_of_the_catalog_has_a_figure_and_r_has_none():
    assert len(WITH) >= 25, [d.name for d in WITHOUT]
    assert {d.name for d in WITHOUT} >= set(NONE)


@pytest.mark.parametrize("dev", WITH, ids=lambda d: d.name)
def test_every_figure_has_a_source_address_and_is_plausible(dev):
    assert isinstance(dev.board_power_w, float)
    assert 10 <= dev.board_power_w <= 2000, dev.board_power_w  # an L4's 72 W to a GB300 GPU's 1400 W
    assert URL.search(dev.board_power_source), dev.board_power_source
    assert dev.board_power_note, "say which figure it is (TDP, maximum board power, per GPU)"


@pytest.mark.parametrize("dev", WITHOUT, ids=lambda d: d.name)
def test_every_device_without_a_figure_says_why(dev):
    assert dev.board_power_note and not dev.board_power_source


@pytest.mark.parametrize(("name", "watts", "source"), [(n, *v) for n, v in KNOWN.items()], ids=list(KNOWN))
def test_known_figures_with_their_sources(name, watts, source):
    dev = get_device(name)
    assert dev.board_power_w == watts
    assert source in dev.board_power_source


def test_an_sxm_record_has_the_modules_figure_not_the_cards():
    assert get_device("h100").board_power_w == 2 * get_device("h100-pcie-80gb").board_power_w
    assert get_device("a100").board_power_w > get_device("a100-pcie").board_power_w
    assert "SXM5 module" in get_device("h100").board_power_note


# ---------------------------------------------------------------- files and the flag


def _file(tmp_path, *lines: str):
    path = tmp_path / "d.toml"
    body = "".join(f"{line}\n" for line in lines)
    path.write_text(f'name = "Card"\nbandwidth_bytes_per_s = 1e12\n{body}[peak_flops_per_s]\nbf16 = 1e14\n')
    return path


def test_a_device_file_gives_board_power(tmp_path):
    path = _file(tmp_path, "board_power_w = 450", 'board_power_source = "https://example.com/sheet"')
    (dev,) = load_device_file(path)
    assert dev.board_power_w == 450.0 and dev.board_power_source == "https://example.com/sheet"
    (plain,) = load_device_file(_file(tmp_path))
    assert plain.board_power_w is None


@pytest.mark.parametrize(
    ("line", "needles"),
    [
        ("board_power_w = 0.7", ["board_power_w = 0.7", "not kW"]),
        ("board_power_w = 0", ["board_power_w = 0", "positive"]),
        ("board_power_w = -700", ["board_power_w = -700", "positive"]),
        ("board_power_w = inf", ["board_power_w = inf", "finite"]),
        ("board_power_w = 1e6", ["board_power_w = 1000000.0", "implausibly large"]),
        ('board_power_w = "700W"', ["'700W'", "not a number"]),
        ("board_power_w = true", ["True", "not a number"]),
        ("board_power_note = 3", ["'board_power_note' must be a string"]),
        ("board_power = 700", ["unknown field 'board_power'", "did you mean 'board_power_w'"]),
    ],
)
def test_a_bad_board_power_in_a_file_is_one_line(tmp_path, line, needles):
    path = _file(tmp_path, line)
    with pytest.raises(DeviceFileError) as e:
        load_device_file(path)
    for needle in needles:
        assert needle in str(e.value)
    assert_one_line_error(run_cli("attention", "-s", "1k", "-d", "64", "--device", str(path)), *needles)


def test_the_flag_overrides_the_figure():
    r = run_cli("sheet", "--device", "h100", "--board-power", "500", "--json")
    assert r.returncode == 0, r.stderr
    dev = r.json()["device"]
    assert dev["board_power_w"] == 500.0 and "board_power_w" in dev["overridden"]
    r = run_cli("sheet", "--board-power", "900", "--json")  # device R has none of its own: now 900
    assert r.json()["device"]["board_power_w"] == 900.0
    assert get_device("r").with_overrides("bf16", board_power_w=900).board_power_w == 900.0


@pytest.mark.parametrize("value", ["0", "-700", "nan", "1e6", "700W"])
def test_a_bad_flag_is_one_line(value):
    assert_one_line_error(
        run_cli("attention", "-s", "1k", "-d", "64", f"--board-power={value}"), "--board-power"
    )


def test_a_bad_override_in_the_library_names_the_parameter():
    with pytest.raises(InputError, match=r"board_power_w = 0\.5 W is implausibly small"):
        get_device("h100").with_overrides("bf16", board_power_w=0.5)


# ---------------------------------------------------------------- devices


def test_devices_shows_board_power_with_its_source():
    text = run_cli("devices", "h100").stdout
    assert "board power: 700 W. Maximum TDP of the SXM5 module" in text
    assert "board power source: https://gpu.blog/gpus/nvidia-h100-sxm" in text
    assert "board power: none." in run_cli("devices", "tpu-v5e").stdout
    (dev,) = run_cli("devices", "mi300x", "--json").json()["devices"]
    assert dev["board_power_w"] == 750.0 and "mlcommons" in dev["board_power_source"]
    table = run_cli("devices").stdout
    header = table.splitlines()[0]
    assert "| W |" in re.sub(r" +", " ", header)
    row = next(line for line in table.splitlines() if line.startswith("| H200 SXM "))
    assert "| 700 |" in re.sub(r" +", " ", row)


# ---------------------------------------------------------------- energy per token


def test_energy_per_token_by_hand():
    h100 = get_device("h100")
    assert energy_per_token(h100, 0.020, 64) == pytest.approx(700 * 0.020 / 64)  # 0.21875 J
    assert energy_per_token(h100, 0.020, 64, devices=8) == pytest.approx(8 * 700 * 0.020 / 64)
    assert energy_per_token(get_device("l4"), 1.0, 72) == pytest.approx(1.0)  # 72 W, 1 s, 72 tokens
    assert board_power(get_device("mi300x")) == 750.0


@pytest.mark.parametrize("name", ["R", "TPU v5e", "A10G"])
def test_energy_is_refused_without_a_figure(name):
    dev = get_device(name)
    with pytest.raises(MissingBoardPower) as e:
        energy_per_token(dev, 0.020, 64)
    message = str(e.value)
    assert name in message and "board power" in message and "\n" not in message
    assert e.value.param == "board_power_w"  # the CLI names --board-power in its place
    from attnroof.cli import _with_flags

    assert "--board-power" in _with_flags(e.value)


@pytest.mark.parametrize(
    ("kwargs", "param"),
    [
        ({"time_s": 0.0, "tokens": 64}, "time_s"),
        ({"time_s": math.nan, "tokens": 64}, "time_s"),
        ({"time_s": 0.02, "tokens": 0}, "tokens"),
        ({"time_s": 0.02, "tokens": 64, "devices": 0}, "devices"),
        ({"time_s": 0.02, "tokens": 64, "devices": 2.5}, "devices"),
    ],
)
def test_energy_refuses_bad_arguments(kwargs, param):
    with pytest.raises(InputError) as e:
        energy_per_token(get_device("h100"), **kwargs)
    assert e.value.param == param
