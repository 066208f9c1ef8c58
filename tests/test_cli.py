"""The command line, as a user runs it. Most commands run in-process (see ``conftest.run_cli``);
the tests at the end run ``python -m attnroof`` and check that both ways print the same."""

from __future__ import annotations

import subprocess
import sys

import pytest

from attnroof.commands import MODULE_OF_COMMAND
from conftest import SRC, assert_one_line_error, run_cli, run_cli_process


def test_attention_json_fields():
    r = run_cli("attention", "-s", "8192", "-d", "128", "--json")
    assert r.returncode == 0, r.stderr
    j = r.json()
    for key in ("flops", "softmax_share", "ridge", "traffic_ratio", "speedup_ceiling", "unfused", "fused"):
        assert key in j
    assert j["flops"] == 34_695_282_688
    assert j["ridge"] == 300
    assert j["traffic_ratio"] == 65
    for variant in ("unfused", "fused"):
        v = j[variant]
        for key in ("bytes", "intensity", "attainable_flops_per_s", "time_s", "limiter", "verdict", "stages"):
            assert key in v
        for stage in v["stages"]:
            assert {"name", "flops", "bytes_read", "bytes_written"} <= set(stage)
    assert [st["name"] for st in j["unfused"]["stages"]] == ["Q·Kᵀ", "softmax", "P·V"]
    assert j["unfused"]["bytes"] == 545_259_520  # 8sd + 8s²
    assert j["fused"]["bytes"] == 8_388_608  # 8sd
    assert (j["unfused"]["limiter"], j["fused"]["limiter"]) == ("memory", "compute")


def test_attention_text_and_batch_heads():
    r = run_cli("attention", "-s", "8k", "-d", "128", "--batch", "2", "--heads", "4")
    assert r.returncode == 0, r.stderr
    assert "memory-bound" in r.stdout and "compute-bound" in r.stdout
    j = run_cli("attention", "-s", "8192", "-d", "128", "--batch", "2", "--heads", "4", "--json").json()
    assert j["flops"] == 8 * 34_695_282_688  # batch × heads


def test_attention_causal_and_softmax_convention():
    j = run_cli("attention", "-s", "8192", "-d", "128", "--causal", "--softmax-flops", "0", "--json").json()
    assert j["flops"] == 2 * 8192**2 * 128  # 4s²d / 2, no softmax FLOPs
    assert j["softmax_share"] == 0


def test_sweep_json_rows():
    j = run_cli("sweep", "-d", "128", "-s", "512,1024,8192", "--json").json()
    assert [r["s"] for r in j["rows"]] == [512, 1024, 8192]
    assert j["rows"][0]["fused"]["verdict"] == "near ridge"
    assert j["rows"][2]["unfused"]["limiter"] == "memory"
    assert round(j["rows"][2]["fused"]["intensity"]) == 4136


def test_sweep_default_list_and_range():
    r = run_cli("sweep", "-d", "64", "-s", "512..4096")
    assert r.returncode == 0, r.stderr
    assert all(str(n) in r.stdout for n in (512, 1024, 2048, 4096))


def test_crossover_json():
    j = run_cli("crossover", "-d", "128", "--json").json()
    assert j["ridge"] == 300
    assert j["fused"] == j["fused"] | {
        "s_min": 595,
        "exact": "307200/517",
        "never": False,
        "limit_intensity": None,
    }
    assert j["unfused"]["never"] is True and j["unfused"]["s_min"] is None
    assert j["unfused"]["limit_intensity"] == pytest.approx(64.625)
    causal = run_cli("crossover", "-d", "128", "--causal", "--json").json()
    assert causal["fused"]["s_min"] == 1189


def test_crossover_on_another_device_via_overrides():
    j = run_cli("crossover", "-d", "128", "--peak-flops", "100T", "--bandwidth", "4T", "--json").json()
    assert j["ridge"] == 25
    assert j["unfused"]["never"] is False and j["unfused"]["s_min"] == 81


def test_decode_json():
    j = run_cli("decode", "-s", "8192", "-d", "128", "--json").json()
    assert j["flops"] == 4 * 8192 * 128 + 5 * 8192
    assert round(j["unfused"]["intensity"], 3) == 0.994
    g = run_cli("decode", "-s", "8192", "-d", "128", "--heads", "32", "--group", "8", "--json").json()
    assert g["fused"]["intensity"] == pytest.approx(8, rel=0.02)


def test_linear_json():
    j = run_cli("linear", "-n", "64", "-k", "4096", "-m", "4096", "--json").json()
    assert j["flops"] == 2 * 64 * 4096 * 4096
    assert j["bytes"] == 2 * (64 * 4096 + 4096 * 4096 + 64 * 4096)
    assert j["limiter"] == "memory"
    assert j["crossover"]["n_min"] > 64


def test_footprint_json():
    j = run_cli("footprint", "-s", "8192", "--batch", "8", "--heads", "32", "--json").json()
    assert j["bytes_per_head"] == 134_217_728
    assert j["bytes"] == 256 * 134_217_728
    assert round(j["fraction_of_capacity"], 2) == 0.18
    assert j["fits"] is True


def test_sheet_default_is_device_R():
    r = run_cli("sheet")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    for needle in (
        "300 FLOP/byte",
        "307200/517",
        "s = 595",
        "never compute-bound",
        "s = 1189",
        "0.994",
        "34.4 GB",
        "4.71×",
    ):
        assert needle in out, needle


def test_sheet_json_and_other_shape():
    j = run_cli("sheet", "-s", "4096", "-d", "64", "--json").json()
    assert j["shape"]["s"] == 4096 and j["shape"]["d"] == 64
    assert j["crossover"]["unfused"]["never"] is True
    assert j["crossover"]["unfused"]["limit_intensity"] == pytest.approx((4 * 64 + 5) / 8)


def test_sheet_with_a_device_file(tmp_path):
    f = tmp_path / "mine.toml"
    f.write_text(
        'name = "Mine"\nbandwidth_bytes_per_s = 2e12\ncapacity_bytes = 80e9\n[peak_flops_per_s]\nbf16 = 500e12\n'
    )
    j = run_cli("sheet", "--device", str(f), "--json").json()
    assert j["ridge"] == 250
    assert j["crossover"]["fused"]["s_min"] == 496  # 517s/1024 ≥ 250 ⇔ s ≥ 256000/517 = 495.2


def test_python_dash_m_and_help():
    r = subprocess.run(
        [sys.executable, "-m", "attnroof", "--help"],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(SRC), "PATH": ""},
    )
    assert r.returncode == 0
    for cmd in ("sheet", "attention", "sweep", "crossover", "decode", "linear", "footprint"):
        assert cmd in r.stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["attention", "-s", "0", "-d", "128"], "'0'"),
        (["attention", "-s", "-5", "-d", "128"], "-5"),
        (["attention", "-s", "1.5", "-d", "128"], "'1.5'"),
        (["attention", "-s", "abc", "-d", "128"], "'abc'"),
        (["attention", "-s", "8192"], "-d"),
        (["attention", "-s", "8192", "-d", "128", "--device", "h10"], "'h10'"),
        (["attention", "-s", "8192", "-d", "128", "--dtype", "fp7"], "'fp7'"),
        (["attention", "-s", "8192", "-d", "128", "--dtype", "fp32"], "fp32"),  # device R has no fp32 peak
        (["attention", "-s", "8192", "-d", "128", "--peak-flops", "0"], "'0'"),
        (["attention", "-s", "8192", "-d", "128", "--bandwidth=-4e12"], "-4e12"),
        (["attention", "-s", "8192", "-d", "128", "--bandwidth", "4"], "4"),
        (["attention", "-s", "8192", "-d", "128", "--heads", "6", "--group", "4"], "--heads 6"),
        (["attention", "-s", "8192", "-d", "128", "--softmax-flops", "-1"], "'-1'"),
        (["sweep", "-d", "128", "-s", "512,0"], "'0'"),
        (["sweep", "-d", "128", "-s", "4096..512"], "4096..512"),
        (["footprint", "-s", "8192", "--capacity", "0"], "'0'"),
        (["linear", "-n", "0", "-k", "1", "-m", "1"], "'0'"),
        (["decode", "-s", "8192", "-d", "0"], "'0'"),
        (["sheet", "--device", "/nonexistent/dev.toml"], "/nonexistent/dev.toml"),
        (["nosuchcommand"], "nosuchcommand"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, needle):
    assert_one_line_error(run_cli(*args), needle)


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (
            "name = 'X'\nbandwidth_bytes_per_s = 4.0\n[peak_flops_per_s]\nbf16 = 1e15\n",
            "bandwidth_bytes_per_s",
        ),
        (
            "name = 'X'\nbandwidth_bytes_per_s = 4e12\n[peak_flops_per_s]\nbf16 = -1e15\n",
            "peak_flops_per_s.bf16",
        ),
        ("name = 'X'\n[peak_flops_per_s]\nbf16 = 1e15\n", "bandwidth_bytes_per_s"),
        ("name = 'X'\nbandwidth = 4e12\n", "'bandwidth'"),
        ("name = 'X\n", "not valid TOML"),
    ],
)
def test_malformed_device_file_names_the_field(tmp_path, content, needle):
    f = tmp_path / "bad.toml"
    f.write_text(content)
    assert_one_line_error(run_cli("attention", "-s", "8192", "-d", "128", "--device", str(f)), needle)


def test_import_attnroof_is_light():
    code = (
        "import sys, attnroof, attnroof.cli, attnroof.sheet\n"
        "attnroof.cli.build_parser()\n"
        "heavy = [m for m in ('torch', 'matplotlib', 'triton') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={"PYTHONPATH": str(SRC)}
    )
    assert r.returncode == 0, r.stderr


def test_import_attnroof_does_not_load_sympy():
    code = "import sys, attnroof\nassert 'sympy' not in sys.modules\n"
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={"PYTHONPATH": str(SRC)}
    )
    assert r.returncode == 0, r.stderr


def test_sheet_on_a_low_ridge_device_shows_unfused_crossing():
    r = run_cli("sheet", "--peak-flops", "100T")
    assert r.returncode == 0, r.stderr
    assert "[overridden: peak_flops_per_s.bf16]" in r.stdout
    assert "ridge 25 FLOP/byte" in r.stdout
    assert "here it does cross, at s = 81" in r.stdout  # 517s ≥ 200(8s + 1024) ⇔ s ≥ 25600/317 = 80.8


def test_exact_thresholds_stay_exact_fractions():
    # L40S fp32: ridge 91.6e12 / 864e9; 1029s/2048 ≥ ridge ⇔ s ≥ 11724800/27783 (sympy's nsimplify
    # once turned this into an irrational look-alike)
    j = run_cli("crossover", "-d", "256", "--device", "l40s", "--dtype", "fp32", "--json").json()
    assert j["fused"]["exact"] == "11724800/27783" and j["fused"]["s_min"] == 423
    assert j["fused"]["limit_exact"] == "inf" and j["fused"]["limit_intensity"] is None
    # fp4 is half a byte per element: still exact rationals, never floats in the algebra
    j = run_cli("crossover", "-d", "128", "--device", "b200", "--dtype", "fp4", "--json").json()
    assert j["fused"]["intensity_expr"] == "517*s/256"  # s²(4d + 5) / (4sd · ½)
    assert j["fused"]["exact"] == "288000/517"  # 9e15 / 8e12 = 1125 = 517s/256
    assert j["unfused"]["limit_exact"] == "517/2"


def test_sheet_text_follows_the_numbers():
    both_compute = run_cli("sheet", "--peak-flops", "100T").stdout  # ridge 25: unfused compute-bound too
    assert "fusion buys no time here" in both_compute
    low = run_cli("sheet", "--peak-flops", "1T", "--bandwidth", "4T").stdout  # ridge 0.25: decode is above it
    assert "above the ridge" in low and "Decode speed follows memory bandwidth" not in low
    r = run_cli("sheet").stdout
    assert "clear of that band (I ≥ 600) from **s = 1189**" in r  # 517s/1024 ≥ 2 × 300
    assert (
        "| **8** |      7.17 |    8.07 |                8.08 |               4.2 µs |" in r
    )  # 32 heads on 4 KV heads; the default group (8) in bold


def test_sheet_with_softmax_zero_says_so():
    r = run_cli("sheet", "--softmax-flops", "0")
    assert r.returncode == 0, r.stderr
    assert "0 FLOPs here" in r.stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["sweep", "-d", "128", "-s", "99999999999999999999"], "implausibly large"),
        (["sheet", "--softmax-flops", "1e308"], "'1e308'"),
    ],
)
def test_absurd_sizes_are_refused(args, needle):
    assert_one_line_error(run_cli(*args), needle)


@pytest.mark.parametrize(
    "args",
    [
        ["attention", "-s", "8k", "-d", "128", "--json"],  # exit 0, JSON
        ["sheet", "--heads", "32", "--group", "8"],  # exit 0, text
        ["attention", "-s", "0", "-d", "128"],  # argparse's usage error
        ["attention", "-s", "8192", "-d", "128", "--heads", "6", "--group", "4"],  # the library's error
        ["sheet", "--device", "/nonexistent/dev.toml"],
        ["atention"],  # a mistyped command
        ["--version"],
        [],  # no command: the help, exit 2
    ],
    ids=lambda a: " ".join(a) or "(none)",
)
def test_in_process_runs_print_what_a_process_prints(args):
    """``python -m attnroof`` (stdin closed, this checkout's src) and the in-process call that
    most tests use give the same exit status, stdout and stderr."""
    proc, here = run_cli_process(*args), run_cli(*args)
    assert (here.returncode, here.stdout, here.stderr) == (proc.returncode, proc.stdout, proc.stderr)


def test_the_console_script_runs_main():
    """The ``attnroof`` command pip installs (``[project.scripts]``) calls :func:`attnroof.cli.main`
    and exits with what it returns: run here as pip's wrapper runs it, in a new process."""
    import tomllib

    pyproject = tomllib.loads((SRC.parent / "pyproject.toml").read_text(encoding="utf-8"))
    module, func = pyproject["project"]["scripts"]["attnroof"].split(":")
    wrapper = f"import sys\nfrom {module} import {func}\nsys.argv[0] = 'attnroof'\nsys.exit({func}())\n"
    for args, code, needle in (
        (["--version"], 0, "attnroof "),
        (["decode", "-s", "0", "-d", "128"], 2, "'0'"),
    ):
        r = subprocess.run(
            [sys.executable, "-c", wrapper, *args],
            capture_output=True, text=True, env={"PYTHONPATH": str(SRC)}, stdin=subprocess.DEVNULL, timeout=120,
        )  # fmt: skip
        assert r.returncode == code, r.stderr
        assert needle in (r.stdout if code == 0 else r.stderr)


@pytest.mark.parametrize("name", sorted(MODULE_OF_COMMAND))
def test_every_command_prints_its_help(name):
    """argparse formats each help with %: a bare % in a flag's help (a default of "10%") would
    crash ``--help`` alone, and no other use of the command shows it."""
    r = run_cli(name, "--help")
    assert r.returncode == 0 and r.stdout.startswith("usage: attnroof " + name), r.stderr
