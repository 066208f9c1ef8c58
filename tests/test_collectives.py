"""Collectives, by hand: bytes each device sends for n devices, their time on the link roof,
and nccl-tests' algbw/busbw convention (busbw = algbw × factor = bytes sent per device / time);
the algorithms a fabric allows (one-shot, two-shot, NVLS, a bridge) against published figures."""

from __future__ import annotations

from dataclasses import replace

import pytest

from attnroof.devices import get_device
from attnroof.devices.links import Links, links_from_record
from attnroof.errors import DeviceFileError, InputError
from attnroof.model.parallel import group_link
from attnroof.ops.collectives import (
    HIERARCHICAL,
    NVLS,
    ONE_SHOT,
    PAIRWISE,
    RING,
    TWO_SHOT,
    across_nodes,
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


# --------------------------------------------------------------- across nodes

HGX_H100 = get_device("H100 SXM").links  # 8 a node: NVLink 450e9, one 400 Gb/s NIC (50e9) a GPU


def test_a_group_across_nodes_rides_every_nic_of_a_node_and_nvlink_inside():
    link = group_link(HGX_H100, 16, 1, "--tp 16")
    assert (link.kind, link.per_node, link.inner) == ("scale-out", 8, HGX_H100.scaleup)
    assert group_link(HGX_H100, 4, 8, "--dp 4").per_node == 1  # TP 8 inside: one replica a node
    assert group_link(HGX_H100, 8, 4, "--dp 8").per_node == 2  # TP 4: two replicas a node
    assert group_link(HGX_H100, 8, 1, "--tp 8").per_node == 0  # one domain: scale-up, no nodes


@pytest.mark.parametrize(
    ("fn", "nic", "least", "steps", "local"),
    [  # 4 nodes of 8 (k = 4, g = 8, n = 32), M = 64 MiB; H100's peer access: h = 1
        (all_reduce, 2 * 3 / 4 * M / 8, M, 2 * 2, 2),  # X = 2(k − 1)/k · M over 8 NICs; D = M; 2⌊log₂ 4⌋
        (reduce_scatter, 3 / 4 * M / 8, 31 / 32 * M, 2, 1),  # X = (k − 1)/k · M; D = (n − 1)/n · M
        (all_gather, 3 / 4 * M / 8, 31 / 32 * M, 2, 1),
        (all_to_all, 3 / 4 * M, 31 / 32 * M, 24, 7),  # each device's 24/32 of its buffer on its NIC
    ],
)
def test_across_nodes_each_collective_sends_what_must_leave_a_node(fn, nic, least, steps, local):
    ring = fn(M, 32)
    c = across_nodes(ring, group_link(HGX_H100, 32, 1, "32 devices"))
    assert c.algorithm == HIERARCHICAL and c.per_node == 8
    assert c.bytes_per_device == pytest.approx(ring.bytes_per_device)  # in all: the ring's, most on NVLink
    assert (c.network_bytes, c.least_bytes, c.steps, c.local_steps) == pytest.approx(
        (nic, least, steps, local)
    )


def test_across_nodes_a_send_stays_a_send_and_one_a_node_keeps_the_rings_bytes():
    link = group_link(HGX_H100, 4, 8, "--dp 4")  # one device of the group a node, on its own NIC
    assert send_recv(M).on(link) == pytest.approx(3.6e-6 + 2.7e-6 + M / 50e9)
    c, t = fastest(reduce_scatter(M, 4), link)
    # g = 1: X = 3/4 · M from each device's one NIC, the ring's bytes; ⌊log₂ 4⌋ = 2 hops, not 3
    assert (c.algorithm, c.network_bytes, c.steps, c.local_steps) == (HIERARCHICAL, 3 / 4 * M, 2, 0)
    assert c.bytes_per_device == c.network_bytes
    assert t == pytest.approx(3.6e-6 + 2 * 2.7e-6 + 3 / 4 * M / 50e9)


def test_the_oci_16_gib_all_reduce_over_two_hgx_h100_nodes_by_hand():
    """OCI's 2 × BM.GPU.H100.8 (16 × 200 Gb/s RoCE a node = 50 GB/s a GPU), nccl-tests all_reduce_perf
    at 16 GiB: 69.338 ms measured (data/public/collectives.jsonl, comm-oci-nccltests-h100). Each
    node sends 2 · 1/2 · M = M out over its 8 NICs, 2^31 B a NIC at 50e9: 42.950 ms; each device
    takes in the 2^34-byte sum over NVLink and its NIC at once, 2^34 / 500e9 = 34.360 ms; latency
    3.6 + 2 · ⌊log₂ 2⌋ · 2.7 + 2 · 1 · 0.47 (peer access: one hop each way in a node) = 9.94 µs.
    42.960 ms, 1.61× under the measurement; the ring over all 16 at one NIC's β was 0.644 s."""
    m = 2**34
    c, t = fastest(all_reduce(m, 16), group_link(HGX_H100, 16, 1, "16 devices"))
    assert (c.network_bytes, c.least_bytes, c.steps, c.local_steps) == (2**31, m, 2, 2)
    assert c.bytes_per_device == 2 * 15 / 16 * m  # in all, as a ring sends: 7/8 · 2M of it on NVLink
    assert t == pytest.approx(3.6e-6 + 2 * 2.7e-6 + 2 * 0.47e-6 + 2**31 / 50e9)
    assert t == pytest.approx(42.960e-3, rel=1e-4) and t < 69.338e-3
    assert all_reduce(m, 16).time_s(50e9, 2.7e-6, 3.6e-6) == pytest.approx(0.6443, rel=1e-3)  # the old ring


def test_two_hgx_a100_nodes_by_hand():
    """OCI's 2 × BM.GPU4.8 (A100 40GB; 16 × 100 Gb/s RoCE a node: 200 GB/s, 25 GB/s a GPU), 10 GiB
    all-reduce, 90.33 ms measured (comm-oci-nccltests-a100). NICs: M/8 = 1,342,177,280 B at 25e9 =
    53.687 ms; a device: M / (300e9 + 25e9) = 33.038 ms; 9.94 µs of latency (NVSwitch 2: peer
    access, no NVLS). 53.697 ms: 1.68× under. On AWS p4d's 50 GB/s a node (the catalog's 6.25e9 a
    GPU) the NICs take 214.7 ms instead, and the network, not NVLink, sets the bound either way."""
    m = 10 * 2**30
    links = replace(get_device("A100 SXM 40GB").links, scaleout_bytes_per_s=25e9)
    c, t = fastest(all_reduce(m, 16), group_link(links, 16, 1, "16 devices"))
    assert c.network_bytes == m / 8 and c.least_bytes / (300e9 + 25e9) < c.network_bytes / 25e9
    assert t == pytest.approx(9.94e-6 + m / 8 / 25e9) and t == pytest.approx(53.697e-3, rel=1e-4)
    assert t < 90.33e-3
    p4d = all_reduce(m, 16).on(group_link(get_device("A100 SXM 40GB").links, 16, 1, "16 devices"))
    assert p4d == pytest.approx(9.94e-6 + m / 8 / 6.25e9) and p4d == pytest.approx(214.76e-3, rel=1e-4)


def test_a_small_all_reduce_across_four_nodes_pays_a_trees_hops_not_a_rings():
    """8 kB over 4 × 8 H100 (a decode all-reduce at TP 32): 3.6 µs + 2 · ⌊log₂ 4⌋ · 2.7 µs + 2 ·
    0.47 µs = 15.34 µs before the bytes (8,192 · 2 · 3/4 / 8 = 1,536 B a NIC: 0.03 µs), where a ring
    of 32 at one NIC took 3.6 + 62 · 2.7 = 171 µs. NCCL's own model of its tree (tuning.cc, 2.17:
    4.4 + 2 · (7 · 0.52 + 2 · 5.0)) is 31.7 µs; the B200 rows of the same shape (4 nodes of 8, EFA)
    measure 6.3 ms at 32 KiB through all_reduce_bench.py (data/public/collectives.jsonl)."""
    m = 8192
    c, t = fastest(all_reduce(m, 32), group_link(HGX_H100, 32, 1, "--tp 32"))
    assert (c.steps, c.local_steps, c.network_bytes) == (4, 2, 1536)
    assert t == pytest.approx(3.6e-6 + 4 * 2.7e-6 + 2 * 0.47e-6 + 1536 / 50e9)
    assert t == pytest.approx(15.371e-6, rel=1e-4)
    assert t < 4.4e-6 + 2 * (7 * 0.52e-6 + 2 * 5.0e-6) < all_reduce(m, 32).time_s(50e9, 2.7e-6, 3.6e-6)
    # without peer access in the node (a PCIe box): a chain of g − 1 = 7 hops each way, 14 × 0.47
    pcie = replace(HGX_H100, scaleup_peer_access=False, scaleup_switch_reduction=False)
    assert across_nodes(all_reduce(m, 32), group_link(pcie, 32, 1, "--tp 32")).local_steps == 14


def test_a_wide_domain_is_bound_by_what_each_device_takes_in():
    """Two 72-GPU NVLink domains (GB200 NVL72: 900 GB/s one way, 50 GB/s NICs): the 72 NICs of a
    domain carry its M out in M / 3.6e12 B/s, less than each device's own M in over NVLink and its
    NIC, M / 950e9: that limit sets the bound."""
    links = Links(
        scaleup_bytes_per_s=900e9, scaleup_domain=72, scaleout_bytes_per_s=50e9, scaleup_peer_access=True
    )
    c, t = fastest(all_reduce(2**30, 144), group_link(links, 144, 1, "144 devices"))
    assert c.network_bytes == 2**30 / 72
    assert t == pytest.approx(3.6e-6 + 2 * 2.7e-6 + 2 * 0.47e-6 + 2**30 / 950e9)


def test_across_nodes_without_a_known_scale_up_link_leaves_only_the_nics():
    links = Links(scaleup_domain=8, scaleout_bytes_per_s=50e9)  # no NVLink figure: NVLink free
    c, t = fastest(all_reduce(M, 16), group_link(links, 16, 1, "16 devices"))
    assert c.local_steps == 14 and t == pytest.approx(3.6e-6 + 2 * 2.7e-6 + M / 8 / 50e9)


def test_across_nodes_on_arrays_of_sizes():
    np = pytest.importorskip("numpy")
    sizes = np.array([8192.0, 2.0**30])
    link = group_link(HGX_H100, 16, 1, "16 devices")
    c, t = fastest(all_reduce(sizes, 16), link)
    assert t.tolist() == pytest.approx([all_reduce(float(m), 16).on(link) for m in sizes], rel=1e-12)
    assert c.algorithm == HIERARCHICAL
