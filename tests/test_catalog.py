"""The device catalog: every entry sourced and plausible, ridges by hand, aliases, the user's own
devices through $ATTNROOF_DEVICES, each bad file's message, and ``attnroof devices``."""

from __future__ import annotations

import importlib.util
import re
import tomllib
from pathlib import Path
from types import ModuleType

import pytest

from attnroof.devices import (
    ENV_VAR,
    builtin_devices,
    catalog,
    device_from_record,
    get_device,
    load_device_file,
    parse_devices,
    user_devices,
)
from attnroof.errors import DeviceFileError, MissingPeak, UnknownDevice
from attnroof.text.devices import catalog_rows
from conftest import assert_one_line_error, run_cli

ROOT = Path(__file__).resolve().parents[1]
BUILTIN = builtin_devices()
NAMES = [d.name for d in BUILTIN]

REQUIRED = [
    "R",
    "A100 SXM 80GB",
    "H100 SXM",
    "H100 PCIe",
    "H200 SXM",
    "B200",
    "GB200",
    "H20",
    "L4",
    "L40S",
    "A10G",
    "T4",
    "V100 SXM2 16GB",
    "RTX 4090",
    "RTX 5090",
    "RTX 6000 Ada",
    "MI250X",
    "MI300X",
    "MI325X",
    "MI355X",
    "TPU v4",
    "TPU v5e",
    "TPU v5p",
    "TPU v6e",
    "TPU v7",
    "Gaudi 2",
    "Gaudi 3",
    "Trainium 2",
]
REAL = [d for d in BUILTIN if d.name != "R"]
TENSOR_RATES_UNPUBLISHED = {"A10G"}  # neither AWS nor NVIDIA publishes its tensor-core rates


def device_toml(name: str = "X", **fields: object) -> str:
    """One top-level device; ``peaks`` is the peak table, other fields go in as written."""
    peaks = fields.pop("peaks", {"bf16": "1000e12"})
    lines = [f'name = "{name}"'] if name else []
    lines += [f"{k} = {v}" for k, v in fields.items()]
    lines.append("[peak_flops_per_s]")
    lines += [f"{k} = {v}" for k, v in peaks.items()]  # type: ignore[union-attr]
    return "\n".join(lines) + "\n"


GOOD = dict(bandwidth_bytes_per_s="2e12", capacity_bytes="64e9")


# ---------------------------------------------------------------- the packaged catalog


def test_catalog_has_the_parts_people_own():
    assert set(REQUIRED) <= set(NAMES)
    assert len(NAMES) >= 40
    assert NAMES[0] == "R"  # the spec's device stays first and as it was
    r = get_device("R")
    assert dict(r.peak_flops_per_s) == {"bf16": 1200e12}
    assert (r.bandwidth_bytes_per_s, r.capacity_bytes) == (4.0e12, 192e9)


@pytest.mark.parametrize("dev", BUILTIN, ids=NAMES)
def test_every_entry_is_sourced_and_plausible(dev):
    assert len(dev.source) > 20, "a source names the reference, not just a code"
    if dev.name in TENSOR_RATES_UNPUBLISHED:
        assert "left out" in dev.notes and "--peak-flops" in dev.notes
    else:
        assert "bf16" in dev.peak_flops_per_s or "fp16" in dev.peak_flops_per_s
    # dense peaks of real parts: 1 TFLOP/s .. 20 PFLOP/s (B200 fp4 dense is 9e15)
    assert all(1e12 <= p <= 2e16 for p in dev.peak_flops_per_s.values()), dict(dev.peak_flops_per_s)
    assert 2.5e11 <= dev.bandwidth_bytes_per_s <= 2e13  # 0.25 .. 20 TB/s (the L4 has 300 GB/s)
    assert dev.capacity_bytes is not None and 8e9 <= dev.capacity_bytes <= 1e12  # 8 GB .. 1 TB
    if dev.onchip_bytes is not None:
        assert 1e6 <= dev.onchip_bytes <= 1e9
    if dev.links.scaleup_bytes_per_s is not None:  # one way per device: PCIe 3 x16 .. NVLink 5
        assert 1e10 <= dev.links.scaleup_bytes_per_s <= 2e12
    if dev.name != "R":
        assert dev.vendor and dev.kind


@pytest.mark.parametrize("dev", REAL, ids=[d.name for d in REAL])
def test_every_real_part_has_its_capacity_sourced_and_a_scaleup_link(dev):
    assert dev.capacity_bytes is not None and dev.capacity_marketed and dev.capacity_source
    # the bytes the device has, not the marketing GB: whole bytes, never a round decimal "80e9"
    assert dev.capacity_bytes == int(dev.capacity_bytes) and dev.capacity_bytes % 2**20 == 0
    links = dev.links
    assert links.scaleup_bytes_per_s is not None and links.scaleup_name and links.source
    if links.scaleup_domain is None:  # left out only where no reference system was found
        assert "domain" in links.notes.lower() or "domain" in dev.notes.lower()
    if links.scaleout_bytes_per_s is not None:
        assert links.scaleout_name and links.scaleout_bytes_per_s <= links.scaleup_bytes_per_s


def test_the_catalog_uses_no_legacy_interconnect_field():
    doc = tomllib.loads((ROOT / "src" / "attnroof" / "devices" / "catalog.toml").read_text(encoding="utf-8"))
    assert not [d["name"] for d in doc["device"] if "interconnect_bytes_per_s" in d]
    assert "links" not in doc["device"][0]  # R, the spec's part, has none
    assert get_device("R").links.scaleup is None


@pytest.mark.parametrize(
    ("name", "field", "expected"),
    [
        # capacities in bytes: the binary reading of a binary-built part, or the driver's total
        ("H100 SXM", "capacity_bytes", 85_899_345_920),  # 80 x 2**30 (sold as "80 GB")
        ("H200 SXM", "capacity_bytes", 150_108_897_280),  # CUDA's 143155 MiB x 2**20 (sold as "141 GB")
        ("MI300X", "capacity_bytes", 206_158_430_208),  # ROCm: 192 GiB = 192 x 2**30
        ("Trainium 2", "capacity_bytes", 103_079_215_104),  # AWS: 96 GiB = 96 x 2**30
        ("L4", "capacity_bytes", 25_769_803_776),  # 24 x 2**30 (GDDR6 chips)
        # links, one way per device: a vendor's both-ways headline halved once
        ("H100 SXM", "scaleup", 450e9),  # NVLink 4 "900 GB/s" / 2
        ("B200", "scaleup", 900e9),  # NVLink 5 "1.8 TB/s" / 2
        ("A100 SXM 80GB", "scaleup", 300e9),  # NVLink 3 "600 GB/s" / 2
        ("MI300X", "scaleup", 448e9),  # 7 links x (128 GB/s both ways / 2)
        ("TPU v7", "scaleup", 600e9),  # ICI 1200 GB/s both ways / 2
        ("Gaudi 3", "scaleup", 525e9),  # 21 scale-up ports x 200 Gb/s / 8 bits
        ("L40S", "scaleup", 31.5e9),  # PCIe 4.0 x16: 16 GT/s x 128/130 x 16 / 8 = 31.5 GB/s
        ("T4", "scaleup", 15.75e9),  # PCIe 3.0 x16: 8 GT/s x 128/130 x 16 / 8 = 15.75 GB/s
        ("H100 SXM", "scaleout", 50e9),  # one 400 Gb/s ConnectX-7 per GPU / 8 bits
        ("B300", "scaleout", 100e9),  # one 800 Gb/s ConnectX-8 per GPU / 8 bits
        ("Trainium 2", "scaleout", 25e9),  # EFAv3 3200 Gb/s / 16 chips / 8 bits
        # dense peaks: a "with sparsity" headline halved
        ("L4", "bf16", 121e12),  # 242 TFLOP/s with sparsity / 2
        ("RTX 5090", "fp4", 1676e12),  # 3352 AI TOPS (fp4, sparse) / 2
        ("GB200", "bf16", 2500e12),  # 5 PFLOP/s with sparsity / 2
    ],
)
def test_hand_checked_figures(name, field, expected):
    dev = get_device(name)
    if field in ("scaleup", "scaleout"):
        link = dev.links.scaleup if field == "scaleup" else dev.links.scaleout
        assert link is not None and link.bandwidth_bytes_per_s == pytest.approx(expected)
    elif field == "capacity_bytes":
        assert dev.capacity_bytes == expected
    else:
        assert dev.peak(field) == pytest.approx(expected)


def test_labels_are_unique_across_the_catalog():
    keys = [re.sub(r"[\s_\-.]+", "", x.lower()) for d in BUILTIN for x in {d.name, *d.aliases}]
    per_device = [{re.sub(r"[\s_\-.]+", "", x.lower()) for x in (d.name, *d.aliases)} for d in BUILTIN]
    assert sum(len(k) for k in per_device) == len(set(keys))


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("R", 1200e12 / 4.0e12),  # 1200e12 / 4.0e12 = 300.0 (the spec's ridge)
        ("A100 SXM 80GB", 153.0),  # A100 bf16 312e12 / 2.039e12 = 153.0
        ("H100 SXM", 295.3),  # 989.4e12 / 3.35e12 = 295.34
        ("H100 PCIe", 378.0),  # 756e12 / 2.0e12 = 378.0
        ("H200 SXM", 206.1),  # 989.4e12 / 4.8e12 = 206.125
        ("B200", 281.25),  # 2250e12 / 8e12 = 281.25
        ("L40S", 419.0),  # 362.05e12 / 864e9 = 419.04
        ("MI300X", 246.7),  # 1307.4e12 / 5.3e12 = 246.68
        ("TPU v5e", 240.5),  # 197e12 / 819e9 = 240.54
        ("Gaudi 3", 500.0),  # 1835e12 / 3.67e12 = 500.0
        ("GB200", 312.5),  # 2500e12 / 8e12 = 312.5
        ("MI355X", 312.5),  # 2500e12 / 8e12 = 312.5
        ("TPU v7", 313.0),  # 2307e12 / 7.37e12 = 313.03
        ("L4", 403.3),  # 121e12 / 300e9 = 403.33
        ("Trainium 2", 230.0),  # 667e12 / 2.9e12 = 230.0
    ],
)
def test_bf16_ridge_by_hand(name, expected):
    assert get_device(name).ridge("bf16") == pytest.approx(expected, abs=0.05)


def test_peaks_are_dense_and_sparse_headlines_say_so():
    h100 = get_device("H100 SXM")
    assert h100.peak("bf16") == 989.4e12  # not the 1979e12 2:4-sparse headline
    assert h100.peak("fp8") == 1978.9e12  # not 3958
    assert "1979" in h100.sparse_headline and "half" in h100.sparse_headline
    for name in (
        "A100 SXM 80GB",
        "H100 PCIe",
        "H200 SXM",
        "B200",
        "GB200",
        "L4",
        "L40S",
        "RTX 4090",
        "MI300X",
    ):
        assert "sparsity" in get_device(name).sparse_headline, name
    assert get_device("B200").peak("fp4") == 9000e12  # dense fp4: half of the 18 PFLOP/s headline
    for name in ("TPU v4", "TPU v5e", "TPU v5p", "TPU v6e", "Gaudi 3"):
        assert get_device(name).sparse_headline == "", name


def test_unverified_figures_are_left_out():
    assert "int8" not in get_device("H200 SXM").peak_flops_per_s  # n/v for the H200
    assert "fp64" not in get_device("L40S").peak_flops_per_s  # third-party approximation only
    assert get_device("H800 SXM").onchip_bytes is None  # no source gives the H800's L2
    assert "fp16" not in get_device("Gaudi 3").peak_flops_per_s  # Intel publishes bf16 and fp8 only


def test_disagreeing_sources_pick_the_vendor_and_say_so():
    b200 = get_device("B200")
    # NVIDIA's Blackwell datasheet: "192 GB" (read as 192 x 2**30 = 206,158,430,208 B) and 8 TB/s
    assert (b200.capacity_bytes, b200.bandwidth_bytes_per_s) == (192 * 2**30, 8e12)
    assert "180 GB" in b200.notes and "7.7 TB/s" in b200.notes


@pytest.mark.parametrize(
    ("alias", "name"),
    [
        ("h100", "H100 SXM"),
        ("H100-SXM", "H100 SXM"),
        ("h100 sxm", "H100 SXM"),
        ("H100_SXM5", "H100 SXM"),
        ("a100", "A100 SXM 80GB"),
        ("h100-pcie", "H100 PCIe"),
        ("h200", "H200 SXM"),
        ("b200", "B200"),
        ("4090", "RTX 4090"),
        ("mi300x", "MI300X"),
        ("Instinct MI325X", "MI325X"),
        ("v5e", "TPU v5e"),
        ("tpu-v6e", "TPU v6e"),
        ("Trillium", "TPU v6e"),
        ("gaudi3", "Gaudi 3"),
        ("gaudi2", "Gaudi 2"),
        ("ironwood", "TPU v7"),
        ("tpu7x", "TPU v7"),
        ("trn2", "Trainium 2"),
        ("v100", "V100 SXM2 16GB"),
        ("rtx-6000-ada", "RTX 6000 Ada"),
        ("5090", "RTX 5090"),
        ("gb200", "GB200"),
        ("l4", "L4"),
        ("device-r", "R"),
    ],
)
def test_aliases_resolve(alias, name):
    assert get_device(alias).name == name


def test_missing_peak_is_a_typed_error():
    # the library names its parameter; the CLI names the flag (test_cli_missing_peak)
    with pytest.raises(MissingPeak, match=r"H100 SXM has no fp4 peak in the catalog .*peak_flops_per_s"):
        get_device("h100").peak("fp4")
    with pytest.raises(UnknownDevice, match="did you mean"):
        get_device("h1000")


def test_listing_falls_back_to_fp16_then_dash():
    fp16_only, fp32_only = parse_devices(
        '[[device]]\nname = "A"\nbandwidth_bytes_per_s = 1e12\npeak_flops_per_s = { fp16 = 100e12 }\n'
        '[[device]]\nname = "B"\nbandwidth_bytes_per_s = 1e12\npeak_flops_per_s = { fp32 = 50e12 }\n',
        "t.toml",
    )
    (a, b) = catalog_rows([fp16_only, fp32_only])
    assert a[2] == "100 (fp16)" and a[9] == "100.0"  # 100e12 / 1e12 = 100.0
    assert b[2] == b[5] == b[6] == b[7] == b[9] == "—"  # no peak, no cache, no board power, no link, no ridge


# ---------------------------------------------------------------- the user's devices


def device_list(*records: str) -> str:
    """Several :func:`device_toml` records as one ``[[device]]`` file."""
    return "".join(
        "[[device]]\n" + r.replace("[peak_flops_per_s]", "[device.peak_flops_per_s]") for r in records
    )


USER_FILE = device_list(
    device_toml(
        "H100 SXM",
        bandwidth_bytes_per_s="3.09e12",
        capacity_bytes="80e9",
        source='"our STREAM triad"',
        peaks={"bf16": "989.4e12"},
    ),
    device_toml("Lab card", aliases='["lab"]', **GOOD),
)


@pytest.fixture
def user_file(tmp_path: Path) -> Path:
    path = tmp_path / "mine.toml"
    path.write_text(USER_FILE)
    return path


def test_user_file_adds_and_overrides(user_file):
    env = {ENV_VAR: str(user_file)}
    devices = catalog(env=env)
    assert len(devices) == len(BUILTIN) + 1  # one added, one replaced
    h100 = get_device("h100", env=env)  # the built-in's aliases follow the override
    assert h100.bandwidth_bytes_per_s == 3.09e12 and h100.source == "our STREAM triad"
    assert h100.ridge("bf16") == pytest.approx(320.2, abs=0.05)  # 989.4e12 / 3.09e12 = 320.19
    assert get_device("lab", env=env).name == "Lab card"
    assert get_device("h100", env={}).bandwidth_bytes_per_s == 3.35e12  # no env: the built-in
    assert catalog(env={ENV_VAR: "  "}) == BUILTIN


def test_user_folder_reads_every_toml(tmp_path):
    (tmp_path / "a.toml").write_text(device_toml("Card A", **GOOD))
    (tmp_path / "b.toml").write_text(device_toml("Card B", **GOOD))
    (tmp_path / "notes.txt").write_text("not a device")
    names = [d.name for d in user_devices(env={ENV_VAR: str(tmp_path)})]
    assert names == ["Card A", "Card B"]


def test_cli_uses_the_user_file(user_file):
    env = {ENV_VAR: str(user_file)}
    r = run_cli("devices", env=env)
    assert r.returncode == 0, r.stderr
    assert "Lab card" in r.stdout and "from $ATTNROOF_DEVICES: H100 SXM, Lab card" in r.stdout
    r = run_cli("attention", "-s", "8192", "-d", "128", "--device", "h100", "--json", env=env)
    assert r.returncode == 0, r.stderr
    assert r.json()["device"] == "H100 SXM"
    assert "3.09 TB/s" in run_cli("attention", "-s", "8k", "-d", "128", "--device", "h100", env=env).stdout
    r = run_cli("devices", str(user_file), "--json")  # a file named directly: every device in it
    assert r.returncode == 0, r.stderr
    assert [d["name"] for d in r.json()["devices"]] == ["H100 SXM", "Lab card"]


# ---------------------------------------------------------------- bad device files

BAD_FILES = {
    "bandwidth unit slip": (
        device_toml(bandwidth_bytes_per_s="3.35"),
        ["bandwidth_bytes_per_s = 3.35", "implausibly small", "3.35e12"],
    ),
    "peak unit slip": (
        device_toml(peaks={"bf16": "989.4"}, **GOOD),
        ["peak_flops_per_s.bf16 = 989.4", "implausibly small"],
    ),
    "capacity unit slip": (
        device_toml(bandwidth_bytes_per_s="2e12", capacity_bytes="80"),
        ["capacity_bytes = 80", "not GB"],
    ),
    "negative": (device_toml(bandwidth_bytes_per_s="-2e12"), ["bandwidth_bytes_per_s = -2", "positive"]),
    "not finite": (device_toml(peaks={"bf16": "inf"}, **GOOD), ["peak_flops_per_s.bf16 = inf", "finite"]),
    "not a number": (device_toml(bandwidth_bytes_per_s='"fast"'), ["'fast'", "not a number"]),
    "missing field": (device_toml(capacity_bytes="80e9"), ["missing required field 'bandwidth_bytes_per_s'"]),
    "missing name": (device_toml("", **GOOD), ["missing required field 'name'"]),
    "unknown dtype": (device_toml(peaks={"fp9": "1e15"}, **GOOD), ["peak_flops_per_s.fp9", "unknown dtype"]),
    "unknown field": (
        device_toml(bandwith_bytes_per_s="2e12"),
        ["unknown field 'bandwith_bytes_per_s'", "did you mean 'bandwidth_bytes_per_s'"],
    ),
    "malformed TOML": ('name = "X\nbandwidth_bytes_per_s = 2e12\n', ["not valid TOML"]),
    "duplicate names": (
        device_list(device_toml("Card", **GOOD), device_toml("card", **GOOD)),
        ["duplicate device name 'card'", "Card (", "card ("],
    ),
}


@pytest.mark.parametrize(("text", "needles"), BAD_FILES.values(), ids=BAD_FILES.keys())
def test_bad_file_library(tmp_path, text, needles):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(DeviceFileError) as e:
        load_device_file(path)
    assert str(path) in str(e.value)
    for needle in needles:
        assert needle in str(e.value)
    with pytest.raises(DeviceFileError):  # the same through the environment variable
        catalog(env={ENV_VAR: str(path)})


@pytest.mark.parametrize(("text", "needles"), BAD_FILES.values(), ids=BAD_FILES.keys())
def test_bad_file_cli(tmp_path, text, needles):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    assert_one_line_error(run_cli("devices", env={ENV_VAR: str(path)}), *needles)
    assert_one_line_error(run_cli("attention", "-s", "1k", "-d", "64", "--device", str(path)), *needles)


def test_duplicates_across_folder_files_name_both(tmp_path):
    (tmp_path / "a.toml").write_text(device_toml("Card", **GOOD))
    (tmp_path / "b.toml").write_text(device_toml("Other", aliases='["card"]', **GOOD))
    with pytest.raises(DeviceFileError) as e:
        user_devices(env={ENV_VAR: str(tmp_path)})
    assert str(tmp_path / "a.toml") in str(e.value) and str(tmp_path / "b.toml") in str(e.value)
    r = run_cli("devices", env={ENV_VAR: str(tmp_path)})
    assert_one_line_error(r, "duplicate device name 'card'", "a.toml", "b.toml")


def test_unreadable_paths(tmp_path):
    missing = tmp_path / "nowhere.toml"
    with pytest.raises(DeviceFileError, match="no such file or folder"):
        catalog(env={ENV_VAR: str(missing)})
    assert_one_line_error(run_cli("devices", env={ENV_VAR: str(missing)}), "nowhere.toml", "no such file")
    assert_one_line_error(run_cli("devices", str(missing)), "cannot read device file", "nowhere.toml")
    folder = tmp_path / "folder.toml"
    folder.mkdir()
    assert_one_line_error(run_cli("devices", str(folder)), "cannot read device file", "folder.toml")
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"\xff\xfe\x00name")
    with pytest.raises(DeviceFileError, match="cannot read device file"):
        load_device_file(binary)


# ---------------------------------------------------------------- attnroof devices


def test_cli_devices_table():
    r = run_cli("devices")
    assert r.returncode == 0, r.stderr
    for name in REQUIRED:
        assert f"| {name} " in r.stdout
    h100_row = next(line for line in r.stdout.splitlines() if line.startswith("| H100 SXM "))
    assert "989.4" in h100_row and "3.35" in h100_row and "295.3" in h100_row
    fp8 = run_cli("devices", "--dtype", "fp8").stdout
    a100_row = next(line for line in fp8.splitlines() if line.startswith("| A100 "))
    assert "—" in a100_row  # Ampere has no fp8


def test_cli_devices_json():
    r = run_cli("devices", "--json")
    assert r.returncode == 0, r.stderr
    assert [d["name"] for d in r.json()["devices"]] == NAMES
    one = run_cli("devices", "h100", "--json")
    assert one.returncode == 0, one.stderr
    (dev,) = one.json()["devices"]
    assert dev["name"] == "H100 SXM" and "h100" in dev["aliases"]
    assert dev["peak_flops_per_s"]["bf16"] == 989.4e12
    assert dev["bandwidth_bytes_per_s"] == 3.35e12 and dev["capacity_bytes"] == 80 * 2**30  # 80 GiB
    assert dev["capacity_marketed"] == "80 GB HBM3" and dev["links"]["scaleup_bytes_per_s"] == 450e9
    assert dev["ridge"]["bf16"] == pytest.approx(295.34, abs=0.01)  # 989.4e12 / 3.35e12
    assert "arXiv 2407.08608" in dev["source"] and dev["sparse_headline"]


def test_cli_one_device_text():
    r = run_cli("devices", "MI300X")
    assert r.returncode == 0, r.stderr
    assert "1307.4 TFLOP/s" in r.stdout and "2614.9 TOP/s" in r.stdout
    assert "source: ROCm documentation" in r.stdout and "sparsity:" in r.stdout


def test_cli_bad_device_name_suggests():
    assert_one_line_error(run_cli("devices", "h1000"), "unknown device 'h1000'", "did you mean", "h100")
    assert_one_line_error(run_cli("attention", "-s", "1k", "-d", "64", "--device", "mi300"), "MI300X")
    assert_one_line_error(run_cli("devices", "--dtype", "fp9"), "unknown dtype 'fp9'")


def test_cli_missing_peak():
    r = run_cli("attention", "-s", "8192", "-d", "128", "--device", "h100", "--dtype", "fp4")
    assert_one_line_error(r, "H100 SXM has no fp4 peak in the catalog", "set --peak-flops")


def test_attention_on_a_catalog_device():
    r = run_cli("attention", "-s", "8192", "-d", "128", "--device", "h100", "--json")
    assert r.returncode == 0, r.stderr
    out = r.json()
    assert out["device"] == "H100 SXM" and out["dtype"] == "bf16"
    text = run_cli("attention", "-s", "8192", "-d", "128", "--device", "h100").stdout
    assert "H100 SXM (bf16): peak 989 TFLOP/s, bandwidth 3.35 TB/s" in text


def test_sheet_on_a_catalog_device():
    r = run_cli("sheet", "--device", "mi300x")
    assert r.returncode == 0, r.stderr
    # MI300X bf16: 1307.4e12 / 5.3e12 = 246.7 FLOP/byte; fused: 517s/1024 ≥ 13074/53 ⇔ s ≥ 489.
    assert "# Attention roofline: MI300X, bf16" in r.stdout
    assert "ridge 247 FLOP/byte" in r.stdout
    assert "**Compute-bound from s = 489**" in r.stdout


# ---------------------------------------------------------------- the Devices page (docs/devices.md)


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("catalog_table", ROOT / "scripts" / "catalog_table.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _devices_section() -> str:
    return (ROOT / "docs" / "devices.md").read_text(encoding="utf-8")


def test_devices_page_table_is_generated_from_the_catalog():
    script = _script()
    readme = (ROOT / "docs" / "devices.md").read_text(encoding="utf-8")
    table = script.markdown_table()
    assert script.splice(readme, table) == readme, "run: python scripts/catalog_table.py --write"
    assert f"{script.BEGIN}\n{table}\n{script.END}" in _devices_section()


def test_devices_page_example_file_loads(tmp_path):
    blocks = re.findall(r"```toml\n(.*?)```", _devices_section(), flags=re.S)
    assert blocks, "the Devices page shows an ATTNROOF_DEVICES file"
    path = tmp_path / "devices.toml"
    path.write_text(blocks[-1])
    env = {ENV_VAR: str(path)}
    assert get_device("h100", env=env).bandwidth_bytes_per_s == 3.09e12
    assert get_device("lab", env=env).name == "Lab accelerator"


# ---------------------------------------------------------------- the parsed copy start-up reads


def test_the_parsed_catalog_is_current():
    assert _script().cache_is_current(), "run: python scripts/catalog_table.py --write"


def test_the_parsed_catalog_gives_the_toml_devices():
    import attnroof.devices as devices

    text = devices.CATALOG_FILE.read_text(encoding="utf-8")
    assert devices._parsed_catalog(text) is not None  # the JSON is what is read
    assert builtin_devices() == devices.parse_devices(text, "catalog.toml")


@pytest.mark.parametrize("cache", [None, "not json", '{"toml_crc32": 1, "document": {"device": []}}'])
def test_a_stale_or_missing_parsed_catalog_is_not_read(tmp_path, monkeypatch, cache):
    import attnroof.devices as devices

    path = tmp_path / "catalog.json"
    if cache is not None:
        path.write_text(cache, encoding="utf-8")
    monkeypatch.setattr(devices, "CATALOG_CACHE", path)
    text = devices.CATALOG_FILE.read_text(encoding="utf-8")
    assert devices._parsed_catalog(text) is None
    assert builtin_devices() == devices.parse_devices(text, "catalog.toml")


def test_a_parsed_catalog_that_does_not_hold_up_is_not_used(tmp_path, monkeypatch):
    """A copy whose CRC matches but whose figures were changed (NaN, an unknown field) is set
    aside: the TOML is read, and the devices are the catalog's."""
    import json

    import attnroof.devices as devices

    text = devices.CATALOG_FILE.read_text(encoding="utf-8")
    cache = json.loads(devices.catalog_cache(text))
    cache["document"]["device"][0]["bandwidth_bytes_per_s"] = float("nan")
    cache["document"]["device"].append({"kind": "mystery"})
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps(cache), encoding="utf-8")
    monkeypatch.setattr(devices, "CATALOG_CACHE", path)
    assert devices._parsed_catalog(text) is not None  # it passes the CRC check
    assert builtin_devices() == devices.parse_devices(text, "catalog.toml")


def test_a_measured_record_keeps_a_slow_rate_that_a_typed_one_may_not_have():
    """A loaded CPU's fp16 matmul measured at 4e8 FLOP/s is a true figure of a ``kind =
    "measured"`` record (attnroof typed no unit); the same 4e8 in a typed record is a unit slip.
    Below 1e6 — a 256³ matmul (3.4e7 FLOPs) taking 34 s — a measured one is refused too."""
    record = {"name": "measured cpu", "kind": "measured", "peak_flops_per_s": {"fp16": 4e8, "fp32": 3e10},
              "bandwidth_bytes_per_s": 8e9}  # fmt: skip
    assert device_from_record(record).peak_flops_per_s["fp16"] == 4e8
    with pytest.raises(
        DeviceFileError, match=r"peak_flops_per_s.fp16 = 400000000.0 FLOP/s is implausibly small"
    ):
        device_from_record({**record, "kind": "gpu"})
    with pytest.raises(DeviceFileError, match="implausibly small"):
        device_from_record({**record, "peak_flops_per_s": {"fp16": 9e5}})
