"""Collectives, by hand: bytes each device sends for n devices, their time on the link roof,
and nccl-tests' algbw/busbw convention (busbw = algbw × factor = bytes sent per device / time);
the algorithms a fabric allows (one-shot, two-shot, NVLS, a bridge) against published figures."""

from __future__ import annotations

import pytest

from attnroof.devices import get_device
from attnroof.devices.links import Links, links_from_record
from attnroof.errors import DeviceFileError, InputError
from attnroof.model.parallel import group_link
from attnroof.ops.collectives import (
    NVLS,
    ONE_SHOT,
    PAIRWISE,
    RING,
    TWO_SHOT,
    algorithms,
    all_gather,
    all_reduce,
    all_to_all,
    fastest,
    one_shot_all_reduce,
    reduce_scatter,
    send_recv,
    two_shot_all_reduce,
)

M = 64 * 2**20  # a 64 MiB message


@pytest.mark.parametrize(
    ("fn", "n", "sent", "steps"),
    [
        (all_reduce, 2, 2 * 1 / 2 * M, 2),  # 2(n−1)/n · M = M on 2 devices, 2 ring steps
        (all_reduce, 8, 2 * 7 / 8 * M, 14),  # 1.75 M; 2(n−1) = 14 steps
        (reduce_scatter, 8, 7 / 8 * M, 7),
        (all_gather, 4, 3 / 4 * M, 3),
        (all_to_all, 8, 7 / 8 * M, 7),  # M/8 to each of 7 peers
        (send_recv, 2, M, 1),
        (all_reduce, 1, 0, 0),  # one device sends nothing
    ],
)
def test_bytes_per_device_and_steps(fn, n, sent, steps):
    c = fn(M, n)
    assert c.bytes_per_device == pytest.approx(sent)
    assert c.steps == steps


def test_time_on_the_link_roof():
    # all-reduce of 64 MiB on 8 devices over 450 GB/s one way, 2 µs a step:
    # 14 × 2e-6 + 1.75 × 67,108,864 / 450e9 = 28e-6 + 260.98e-6 = 288.98 µs
    t = all_reduce(M, 8).time_s(450e9, 2e-6)
    assert t == pytest.approx(14 * 2e-6 + 1.75 * M / 450e9)
    assert t == pytest.approx(288.98e-6, rel=1e-4)
    assert all_reduce(M, 1).time_s(450e9, 2e-6) == 0.0


def test_nccl_tests_bus_bandwidth_convention():
    # nccl-tests: busbw = algbw × 2(n−1)/n for all-reduce, (n−1)/n for all-gather, reduce-scatter
    # and all-to-all, 1 for send/recv; with no latency busbw equals the link's one-way rate.
    for fn, factor in (
        (all_reduce, 2 * 7 / 8),
        (all_gather, 7 / 8),
        (reduce_scatter, 7 / 8),
        (all_to_all, 7 / 8),
    ):
        c = fn(M, 8)
        t = c.time_s(100e9, 0.0)
        algbw = M / t
        assert c.bus_factor == pytest.approx(factor)
        assert algbw * c.bus_factor == pytest.approx(100e9)


def test_bad_input_is_named():
    with pytest.raises(InputError, match="devices"):
        all_reduce(M, 0)
    with pytest.raises(InputError, match="message_bytes"):
        all_gather(-1, 4)


# --------------------------------------------------------------- the fabric's own algorithms

H100 = get_device("H100 SXM").links.scaleup  # NVLink 4 on NVSwitch 3: 450e9 one way, 0.47 µs a step


def _times(comm, link):
    return {c.algorithm: c.time_s(link.bandwidth_bytes_per_s, link.latency_s, link.base_latency_s)
            for c in algorithms(comm, link)}  # fmt: skip


def test_nvls_all_reduce_of_1_gib_on_8_h100_allows_the_busbw_nccl_tests_measure():
    m = 2**30
    ring = all_reduce(m, 8).time_s(450e9, 0.47e-6, 3.6e-6)
    # the ring: 3.6 µs + 14 × 0.47 µs + 2 · 7/8 · 2^30 B / 450e9 B/s = 10.18 + 4175.66 = 4185.84 µs
    assert ring == pytest.approx(4185.84e-6, rel=1e-6)
    assert m / ring * 1.75 < 450e9  # its busbw: at most the link's 450 GB/s one way
    c, t = fastest(all_reduce(m, 8), H100)
    # NVLS: M into the switch and the sum back, 2 steps and no α₀:
    # 2 × 0.47 µs + 2^30 B / 450e9 B/s = 0.94 + 2386.09 = 2387.03 µs
    assert (c.algorithm, c.bytes_per_device, c.steps) == (NVLS, m, 2)
    assert t == pytest.approx(2387.03e-6, rel=1e-5)
    algbw = m / t  # 449.82 GB/s
    busbw = algbw * 2 * 7 / 8  # nccl-tests' all-reduce factor, whatever the algorithm: 787.2 GB/s
    assert busbw == pytest.approx(787.2e9, rel=1e-4)
    # measured on 8-GPU NVSwitch boards: up to 475 GB/s (8 × H200, NVIDIA/nccl-tests#272), about
    # 480 (8 × H100, NVIDIA/nccl-tests#212): above the ring's 450, below NVLS's bound
    assert m / ring * 1.75 < 471e9 <= 480e9 <= busbw


def test_a_decode_all_reduce_on_8_h100_is_bound_below_what_the_engines_measure():
    m = 8 * 8192 * 2  # 8 tokens × hidden 8192 × 2 B = 131,072 B
    t = _times(all_reduce(m, 8), H100)
    assert t[RING] == pytest.approx(3.6e-6 + 14 * 0.47e-6 + 1.75 * m / 450e9)  # 3.6 + 6.58 + 0.51
    assert t[RING] == pytest.approx(10.690e-6, rel=1e-4)
    assert t[ONE_SHOT] == pytest.approx(0.47e-6 + 7 * m / 450e9)  # 0.47 + 2.039 = 2.509 µs
    assert t[TWO_SHOT] == pytest.approx(2 * 0.47e-6 + 1.75 * m / 450e9)  # 0.94 + 0.510 = 1.450 µs
    assert t[NVLS] == pytest.approx(2 * 0.47e-6 + m / 450e9)  # 0.94 + 0.291 = 1.231 µs
    c, best = fastest(all_reduce(m, 8), H100)
    assert c.algorithm == NVLS and best == pytest.approx(1.2313e-6, rel=1e-4)
    assert best <= 2.25e-6  # the engines' custom all-reduces: 2.25-4.6 µs on 8 GPUs (issue 33)
    # one token (16,384 B): one-shot wins, 0.47 µs + 7 × 16,384 / 450e9 = 0.725 µs, against
    # two-shot's 0.94 + 0.064 and NVLS's 0.94 + 0.036; SGLang's H100 custom all-reduce at TP 8
    # measures 5.7-7.8 µs at 4-32 kB without CUDA graphs (sgl-project/sglang#2904): above it
    c, one = fastest(all_reduce(8192 * 2, 8), H100)
    assert c.algorithm == ONE_SHOT and one == pytest.approx(0.7249e-6, rel=1e-3)
    # A100's NVSwitch 2 has peer access but no NVLS: two-shot, 0.94 + 1.75 × 131,072 / 300e9 = 1.705 µs
    c, a100 = fastest(all_reduce(m, 8), get_device("A100 SXM 80GB").links.scaleup)
    assert c.algorithm == TWO_SHOT and a100 == pytest.approx(1.7046e-6, rel=1e-4)


def test_one_shot_reads_every_peers_whole_message():
    # vLLM's cross_device_reduce_1stage: each rank sums ptrs[0..n)[idx] over the whole size
    c = one_shot_all_reduce(1000, 8)
    assert (c.bytes_per_device, c.steps, c.bus_factor) == (7000, 1, 7.0)
    assert two_shot_all_reduce(1000, 8).bytes_per_device == all_reduce(1000, 8).bytes_per_device == 1750


def test_without_peer_access_or_a_switch_only_the_ring_is_allowed():
    pcie = get_device("L40S").links.scaleup  # PCIe 4.0 slots: a ring
    assert [c.algorithm for c in algorithms(all_reduce(1024, 8), pcie)] == [RING]
    assert [c.algorithm for c in algorithms(all_gather(1024, 8), H100)] == [RING]  # all-reduce only
    assert [c.algorithm for c in algorithms(all_to_all(1024, 8), H100)] == [PAIRWISE]


def test_arrays_of_sizes_take_each_sizes_fastest():
    np = pytest.importorskip("numpy")
    sizes = np.array([16384.0, 131072.0, 2.0**30])
    c, t = fastest(all_reduce(sizes, 8), H100)
    one = [fastest(all_reduce(float(m), 8), H100) for m in sizes]
    assert t.tolist() == pytest.approx([x for _, x in one], rel=1e-12)
    assert c.bytes_per_device.tolist() == [x.bytes_per_device for x, _ in one]
    assert c.algorithm == "ring|one-shot|two-shot|NVLS"


def test_a_bridged_pair_of_h100_nvl_rides_its_bridge():
    links = get_device("H100 NVL").links
    bridge = group_link(links, 2, 1, "--tp 2")
    assert (bridge.kind, bridge.bandwidth_bytes_per_s, bridge.peer_access) == ("bridge", 300e9, True)
    assert group_link(links, 4, 1, "--tp 4").kind == "scale-up"  # four cards: the PCIe slots
    assert group_link(links, 2, 2, "--pp 2").kind == "scale-up"  # cards 0 and 2: two bridges apart
    m = 8 * 8192 * 2
    c, t = fastest(all_reduce(m, 2), bridge)
    # one-shot on two: 0.47 µs + 1 × 131,072 B / 300e9 B/s = 0.47 + 0.437 = 0.907 µs, against the
    # PCIe 5 slot's ring, 3.6 + 2 × 0.47 + 131,072 / 63e9 = 4.54 + 2.08 = 6.62 µs: 7.3× lower
    assert c.algorithm == ONE_SHOT and t == pytest.approx(0.9069e-6, rel=1e-4)
    slot = all_reduce(m, 2).on(links.scaleup)
    assert slot == pytest.approx(6.6205e-6, rel=1e-4) and slot / t == pytest.approx(7.3, abs=0.05)
    # a pipeline send of 8 MiB: 3.6 + 0.47 + 8,388,608 / 300e9 = 32.03 µs, not 137.2 on PCIe
    send = send_recv(8 * 2**20)
    assert send.on(bridge) == pytest.approx(32.032e-6, rel=1e-4)
    assert send.on(links.scaleup) == pytest.approx(137.22e-6, rel=1e-4)


def test_a_devices_new_link_fields_are_read_and_checked():
    raw = {"links": {"scaleup_bytes_per_s": 450e9, "scaleup_peer_access": True, "scaleup_switch_reduction": True,
                     "bridge_bytes_per_s": 300e9, "bridge_devices": 2}}  # fmt: skip
    links = links_from_record(raw, "")
    assert links.scaleup.switch_reduction and links.scaleup.peer_access and links.bridge.kind == "bridge"
    again = links_from_record({"links": Links(**raw["links"]).to_json()}, "")  # JSON nulls skipped
    assert again.bridge == links.bridge and again.scaleup == links.scaleup
    with pytest.raises(DeviceFileError, match="scaleup_peer_access = 'yes' must be true or false"):
        links_from_record({"links": {"scaleup_peer_access": "yes"}}, "")
