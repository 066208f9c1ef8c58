"""Collectives, by hand: bytes each device sends for n devices, their time on the link roof,
and nccl-tests' algbw/busbw convention (busbw = algbw × factor = bytes sent per device / time)."""

from __future__ import annotations

import pytest

from attnroof.errors import InputError
from attnroof.ops.collectives import all_gather, all_reduce, all_to_all, reduce_scatter, send_recv

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
