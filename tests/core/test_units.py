"""nvtutorial.units: the bus factors and the message sizes."""

from __future__ import annotations

import pytest

from nvtutorial import units


def test_bus_factors():
    assert units.bus_factor("all_reduce", 2) == 1.0
    assert units.bus_factor("all_reduce", 8) == pytest.approx(1.75)
    assert units.bus_factor("all_gather", 4) == pytest.approx(0.75)
    assert units.bus_factor("sendrecv", 8) == 1.0
    assert units.ring_bytes_per_rank(1 << 30, 2) == 1 << 30
    with pytest.raises(ValueError, match="unknown collective"):
        units.bus_factor("allreduce", 2)
    with pytest.raises(ValueError):
        units.algbw(1, 0)


def test_sizes():
    assert units.size_sweep(1024, 1 << 30, 4)[:3] == [1024, 4096, 16384]
    assert units.size_sweep(1024, 1 << 30, 4)[-1] == 1 << 30
    assert units.size_sweep(1000, 5000, 2) == [1000, 2000, 4000, 5000]
    assert units.parse_size("256M") == 256 << 20 and units.parse_size("1GiB") == 1 << 30
    assert units.parse_size(17) == 17
    assert units.format_size(1 << 30) == "1 GiB" and units.format_size(1536) == "1.5 KiB"
    assert units.format_size(100) == "100 B"
    with pytest.raises(ValueError):
        units.parse_size("lots")
    with pytest.raises(ValueError):
        units.size_sweep(10, 5)
