"""The last-level cache in the bound (issue 33): the measured kernels that beat the single-level
bound, worked by hand against the two-level one, the rule of each context, and the single-level
flag giving back the old numbers.

The measurements are the issue's: kernels timed repeatedly without flushing L2 (a residual add of
Llama-2-7B at 880 tokens on an H100 in 5 µs; of Llama-3-8B at 680 tokens, TP 4, on an A100 in
6 µs; narrow GEMMs of 16-37 MiB reaching an effective 4.8 TB/s on an H100). The cache figures are
the catalog's, with their sources (H100: FlashAttention-3's 50 MiB at 12 TB/s, NVIDIA's 50 MB
kept as the size; A100: 40 MB at 7,219 GB/s, Table 3 of PMC10448217, 2.3x V100's as NVIDIA's
whitepaper writes).
"""

from __future__ import annotations

import json

import pytest

from attnroof.devices import get_device, parse_devices
from attnroof.errors import DeviceFileError
from attnroof.model.analysis import analyse
from attnroof.model.config import builtin
from attnroof.model.grid import grid
from attnroof.model.layers import Precision, weight_bytes
from attnroof.ops import add, attention, linear
from attnroof.roofline import Roof, loop_resident, place
from conftest import assert_one_line_error, run_cli

H100 = Roof.of(get_device("h100"), "bf16")
A100 = Roof.of(get_device("a100"), "bf16")
BF16 = 2


def test_the_catalog_figures_the_bound_reads():
    assert (H100.cache_bytes, H100.cache_bandwidth_bytes_per_s) == (50e6, 12e12)
    assert (A100.cache_bytes, A100.cache_bandwidth_bytes_per_s) == (40e6, 7.219e12)
    assert round(A100.cache_bandwidth_bytes_per_s / 1.41e9) == 5120  # bytes a clock at 1,410 MHz
    assert 7.219e12 / get_device("v100").cache_bandwidth_bytes_per_s == pytest.approx(2.3, abs=0.005)
    # the specification's device R has none: its roof is the single-level one, every number as it was
    assert Roof.of(get_device("R"), "bf16").levels == 1
    # a size without a bandwidth (GB200's 126 MB L2: no SM count or clock sourced) keeps the single level
    assert get_device("gb200").onchip_bytes == 126e6 and Roof.of(get_device("gb200"), "bf16").levels == 1


SM_PORT_BYTES_PER_CLOCK = 2 * 128
"""An SM's L1/shared memory moves at most 128 bytes a clock (32 banks × 32 bits, CUDA Programming
Guide; '128 bytes/clock per SM', GA102 whitepaper), and a byte to or from L2 passes it; reads and
writes counted apart."""


@pytest.mark.parametrize(
    ("name", "sms", "mhz"),
    [("RTX 5090", 170, 2407), ("RTX 4090", 128, 2535), ("L40S", 142, 2520), ("L40", 142, 2490), ("L4", 58, 2040),
     ("RTX 6000 Ada", 142, 2535), ("A40", 84, 1740), ("RTX A6000", 84, 1800), ("T4", 40, 1590), ("B200", 148, 1965)],
)  # fmt: skip
def test_a_gpu_without_a_published_l2_bandwidth_takes_its_sms_ports(name, sms, mhz):
    """No vendor publishes these L2 bandwidths: the catalog's is what the SMs could move, 256 bytes
    a clock × SMs × the highest clock (the RTX 5090: 256 · 170 · 2.407 GHz = 104.75 TB/s)."""
    assert get_device(name).cache_bandwidth_bytes_per_s == pytest.approx(
        SM_PORT_BYTES_PER_CLOCK * sms * mhz * 1e6
    )


def test_the_sm_port_figure_is_above_every_published_one():
    """The rule is an upper one where a figure is published: A100 256 · 108 · 1.41 GHz = 39.0 TB/s
    against Table 3's 7.219; H100 256 · 132 · 1.98 GHz = 66.9 TB/s against FlashAttention-3's 12;
    V100 256 · 80 · 1.53 GHz = 31.3 against 3.133."""
    for name, sms, mhz in (("a100", 108, 1410), ("h100", 132, 1980), ("v100", 80, 1530)):
        assert SM_PORT_BYTES_PER_CLOCK * sms * mhz * 1e6 > get_device(name).cache_bandwidth_bytes_per_s


def test_rtx_5090_warm_rmsnorm_of_4096_by_4096():
    """TileGym's warm fp16 rmsnorm of 4096 tokens × 4096 reads and writes 2 · 4096 · 4096 · 2 B =
    64 MiB at an effective 5.019 TB/s: 13.4 µs. The single-level bound, 67.1 MB / 1.792 TB/s =
    37.4 µs, is beaten 2.8×; the 64 MiB fit the 96 MiB L2, so the two-level bound charges them at
    104.75 TB/s: ≥ 0.64 µs, which holds."""
    from attnroof.ops.elementwise import norm

    roof = Roof.of(get_device("rtx 5090"), "fp16")
    c = norm(4096, 4096, itemsize=2)
    measured = 2 * 4096 * 4096 * 2 / 5.019e12
    assert round(measured * 1e6, 1) == 13.4
    assert place(c, roof.single_level()).time_s > 2.7 * measured
    two = place(c, roof)
    assert two.resident_bytes == c.bytes and two.time_s <= measured


def test_h100_residual_add_of_llama2_7b_at_880_tokens():
    """Two 880 × 4096 bf16 inputs and one output: 3 · 880 · 4096 · 2 B = 21,626,880 B = 21.6 MB.
    Single-level: 21.6 MB / 3.35 TB/s = 6.46 µs, above the 5 µs measured. It fits in the 50 MB L2
    (a kernel timed in a loop finds its operands there): 21.6 MB / 12 TB/s = 1.80 µs ≤ 5 µs."""
    c = add(880, 4096)
    assert c.bytes == 3 * 880 * 4096 * BF16 == 21_626_880
    single = place(c, H100.single_level())
    assert single.time_s == pytest.approx(21_626_880 / 3.35e12) and round(single.time_s * 1e6, 2) == 6.46
    two = place(c, H100)
    assert two.resident_bytes == c.bytes  # all of it: 21.6 MB ≤ 50 MB
    assert two.time_s == pytest.approx(21_626_880 / 12e12) and round(two.time_s * 1e6, 2) == 1.80
    assert two.time_s <= 5e-6 < single.time_s  # the measured 5 µs no longer beats the bound


def test_a100_residual_add_of_llama3_8b_at_680_tokens_tp4():
    """Llama-3-8B's residual stream is 4096 wide, whole on every device of TP 4: 3 · 680 · 4096 · 2 B
    = 16,711,680 B. Single-level 16.7 MB / 2.039 TB/s = 8.20 µs > 6 µs measured; in the 40 MB L2 at
    7.219 TB/s, 2.31 µs ≤ 6 µs."""
    c = add(680, 4096)
    assert c.bytes == 16_711_680
    assert round(place(c, A100.single_level()).time_s * 1e6, 2) == 8.20
    two = place(c, A100)
    assert two.time_s == pytest.approx(16_711_680 / 7.219e12) and round(two.time_s * 1e6, 2) == 2.31
    assert two.time_s <= 6e-6


def test_above_the_cache_a_kernel_is_the_single_level_bound():
    """At 4096 tokens the add moves 3 · 4096 · 4096 · 2 B = 100.7 MB: over the 50 MB L2, a sweep
    evicts each line before its reuse, and the bound is the single-level one to the last digit."""
    c = add(4096, 4096)
    assert c.bytes == 100_663_296 > 50e6
    assert loop_resident(c, H100) == [0]
    assert place(c, H100).time_s == place(c, H100.single_level()).time_s == 100_663_296 / 3.35e12


@pytest.mark.parametrize("n", [32, 64, 128])
def test_narrow_gemms_that_fit_the_l2(n: int):
    """n tokens through a 4096 × 4096 bf16 weight: (n·4096 + 4096·4096 + n·4096) · 2 B, the 32 MiB
    weight and 4n·4096 B of activations, 32.5-34 MiB, all in the 50 MB L2. Measured: an effective
    4.8 TB/s, 7.1-7.4 µs; the single-level bound at 3.35 TB/s (10.2-10.6 µs) is above it, the
    two-level one below: bytes / 12 TB/s (2.8-3.0 µs), or F/P where that is longer (n = 128:
    2 · 128 · 4096² / 989.4 TFLOP/s = 4.34 µs)."""
    c = linear(n, 4096, 4096)
    nbytes = (n * 4096 + 4096 * 4096 + n * 4096) * BF16
    assert c.bytes == nbytes <= 50e6
    measured = nbytes / 4.8e12
    single, two = place(c, H100.single_level()), place(c, H100)
    assert single.time_s > measured  # the violation
    assert two.time_s == pytest.approx(max(2 * n * 4096 * 4096 / 989.4e12, nbytes / 12e12))
    assert two.time_s <= measured


def test_unfused_attention_above_the_cache_keeps_what_the_kernel_before_wrote():
    """s = 4096, d = 128, one head: 138 MB in all, over 50 MB, so only the chain counts. Softmax
    reads the S that Q·Kᵀ wrote (4096² · 2 B = 33.6 MB, resident), P·V the P softmax wrote (33.6 MB
    of its 34.6 MB of reads); Q·Kᵀ, the first, has none."""
    c = attention(4096, 128)
    assert c.bytes > 50e6
    s = 4096 * 4096 * BF16
    assert loop_resident(c, H100) == [0, s, s]
    p = place(c, H100)
    assert p.time_s == pytest.approx((c.bytes - 2 * s) / 3.35e12 + 2 * s / 12e12)


def test_a_model_step_charges_the_input_the_operator_before_wrote():
    """Llama-3.1-8B's prefill of 880 tokens on an H100: the attention block's residual add reads
    the output projection's 7.2 MB output (880 · 4096 · 2 B, just written: resident) and the
    residual stream (7.2 MB, written four operators ago: not), writes 7.2 MB. Its bound:
    14.4 MB / 3.35 TB/s + 7.2 MB / 12 TB/s = 4.30 + 0.60 = 4.90 µs, under the 5 µs measured."""
    a = analyse(builtin("llama-3.1-8b"), "prefill", 1, 880, H100)
    op = a.op("residual add (attention)")
    x = 880 * 4096 * BF16
    assert op.bytes == 3 * x and op.resident_bytes == x
    assert op.time_s == pytest.approx(2 * x / 3.35e12 + x / 12e12) and round(op.time_s * 1e6, 2) == 4.90
    # the weights are not: 16 GB of them do not fit in 50 MB (the QKV projection: its input only)
    assert weight_bytes(builtin("llama-3.1-8b"), Precision()) > 50e6
    assert a.op("QKV projection").resident_bytes == x
    assert a.totals.resident_bytes == sum(o.count * o.resident_bytes for o in a.ops)


def test_weights_are_eligible_where_all_the_step_holds_fit():
    """GPT-2 (124 M parameters, 249 MB in bf16) fits in the MI300X's 256 MiB Infinity Cache: a
    decode step finds the weights where the last step read them. The QKV projection reads one
    token's 768 activations (the norm's output, just written) and its 768 × 2304 weight and bias,
    all resident."""
    gpt2, mi300x = builtin("gpt2"), Roof.of(get_device("mi300x"), "bf16")
    held = weight_bytes(gpt2, Precision())
    assert held < mi300x.cache_bytes == 256 * 2**20
    qkv = analyse(gpt2, "decode", 1, 1024, mi300x).op("QKV projection")
    weights = (768 * 2304 + 2304) * BF16
    assert qkv.resident_bytes == 768 * BF16 + weights == qkv.bytes - 2304 * BF16  # all but its output
    # on an H100 (50 MB) they do not fit: only the input is
    assert analyse(gpt2, "decode", 1, 1024, H100).op("QKV projection").resident_bytes == 768 * BF16


def test_the_grid_equals_the_scalar_step_on_a_two_level_roof():
    model = builtin("llama-3.1-8b")
    g = grid(model, "prefill", [1, 4], [512, 4096], H100)
    for i, b in enumerate([1, 4]):
        for j, c in enumerate([512, 4096]):
            t = analyse(model, "prefill", b, c, H100).totals
            assert g.time_s[i, j] == pytest.approx(t.time_s, rel=1e-12)
            assert g.memory_bound_share[i, j] == pytest.approx(t.memory_bound_share, rel=1e-9)


def test_memory_levels_1_gives_the_single_level_numbers():
    base = ("model", "--model", "llama-3.1-8b", "--device", "h100", "--context", "880", "--phase", "prefill")
    one = run_cli(*base, "--memory-levels", "1", "--json").json()
    old = analyse(builtin("llama-3.1-8b"), "prefill", 1, 880, Roof(989.4e12, 3.35e12))
    assert one["totals"]["time_s"] == old.totals.time_s and one["totals"]["resident_bytes"] == 0
    assert (one["memory_levels"], one["cache_bytes"]) == (1, None)
    two = run_cli(*base, "--json").json()
    assert (two["memory_levels"], two["cache_bytes"], two["cache_bandwidth_bytes_per_s"]) == (2, 50e6, 12e12)
    assert two["totals"]["time_s"] < one["totals"]["time_s"]
    lin = ("linear", "-n", "64", "-k", "4096", "-m", "4096", "--device", "h100")
    assert "single-level bound" in run_cli(*lin, "--memory-levels", "1").stdout.splitlines()[1]
    assert "cache 50 MB at 12 TB/s" in run_cli(*lin).stdout.splitlines()[1]
    assert_one_line_error(run_cli(*lin, "--memory-levels", "3"), "--memory-levels", "3")


def test_the_specification_device_prints_as_it_did():
    out = run_cli("linear", "-n", "64", "-k", "4096", "-m", "4096").stdout
    assert "cache" not in out and "in cache" not in out


def test_a_device_file_gives_a_cache_checked_like_the_other_figures(tmp_path):
    def one(extra: str) -> str:
        return f'name = "X"\nbandwidth_bytes_per_s = 2e12\n{extra}\n[peak_flops_per_s]\nbf16 = 1000e12\n'

    (dev,) = parse_devices(one("onchip_bytes = 64e6\ncache_bandwidth_bytes_per_s = 8e12"), "x.toml")
    roof = Roof.of(dev, "bf16")
    assert (roof.levels, roof.cache_bytes, roof.cache_bandwidth_bytes_per_s) == (2, 64e6, 8e12)
    for extra, needle in (
        ("cache_bandwidth_bytes_per_s = 8e12", "needs onchip_bytes"),
        ("onchip_bytes = 64e6\ncache_bandwidth_bytes_per_s = 1e12", "below bandwidth_bytes_per_s"),
        ("onchip_bytes = 64e6\ncache_bandwidth_bytes_per_s = 8", "implausibly small"),
        ('onchip_bytes = 64e6\ncache_bandwidth_bytes_per_s = "fast"', "is not a number"),
    ):
        with pytest.raises(DeviceFileError, match=needle):
            parse_devices(one(extra), "x.toml")
    path = tmp_path / "slow.toml"
    path.write_text(one("onchip_bytes = 64e6\ncache_bandwidth_bytes_per_s = 1e12"))
    assert_one_line_error(run_cli("linear", "-n", "8", "-k", "64", "-m", "64", "--device", str(path)),
                          "cache_bandwidth_bytes_per_s")  # fmt: skip
    # a --bandwidth above the cache's leaves the bound single-level (a cache no faster than memory)
    out = run_cli(
        "linear", "-n", "8", "-k", "64", "-m", "64", "--device", "h100", "--bandwidth", "20T", "--json"
    )
    assert json.loads(out.stdout)["memory_levels"] == 1


def test_a40_phi2_activation_at_128_tokens():
    """phi-2's GELU over 128 tokens of its 10,240-wide MLP reads and writes 2 · 128 · 10240 · 2 B =
    5.24 MB: single-level 5.24 MB / 696 GB/s = 7.53 µs, against 4 µs measured (issue 33). The 5.24
    MB fit the A40's 6 MiB L2 (6,291,456 B), charged at 256 · 84 · 1.74 GHz = 37.4 TB/s: 0.14 µs."""
    from attnroof.ops.elementwise import activation

    roof = Roof.of(get_device("a40"), "bf16")
    c = activation(128, 10240, gated=False)
    assert c.bytes == 5_242_880 < 6_291_456
    assert round(place(c, roof.single_level()).time_s * 1e6, 2) == 7.53
    assert place(c, roof).time_s == pytest.approx(5_242_880 / 37.41696e12) and place(c, roof).time_s <= 4e-6
