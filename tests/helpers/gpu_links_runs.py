"""Made-up rows and runs of the one GPU's links (gpu_links), for the tests of chapter 1's lab and report."""

from __future__ import annotations

from nvtutorial.chapters.ch01_hardware import report_gpu as gpu
from nvtutorial.chapters.ch01_hardware import schema_gpu_links as schema
from nvtutorial.machine import hardware
from nvtutorial.nvml import GPUDetail
from tests.helpers.hardware_runs import run_of

GIB = 1 << 30


PART = "one GPU's links"


H200 = GPUDetail(0, "NVIDIA H200", "GPU-x", "00000000:00:06.0", 143771, 1, 16, 5, 16)


PEAK = hardware.MemoryPeak(6144, 3201)


def link_row(link, host, gbps, size=GIB, spread=0.01):
    moved = 2 * size if link == "memory" else size
    return schema.Row(
        link, host, size, moved, moved / gbps / 1e3, gbps, (gbps * (1 - spread), gbps, gbps * (1 + spread)), 3
    )


def link_rows(h2d=54.0, d2h=52.0, h2d_pageable=20.0, d2h_pageable=15.0, memory=4200.0, size=GIB):
    return (
        link_row("host to device", "pinned", h2d, size),
        link_row("device to host", "pinned", d2h, size),
        link_row("host to device", "pageable", h2d_pageable, size),
        link_row("device to host", "pageable", d2h_pageable, size),
        link_row("memory", "device", memory, size),
    )


def measured(found=None, here=True, l2=None):
    found = link_rows() if found is None else found
    result = run_of(schema.Rank("gpu", "NVIDIA H200", found, "events", l2_bytes=l2), names=("NVIDIA H200",), link=None)
    return gpu.GpuLinks(found, result.label, "" if here else "not run here: no GPU", result, here, l2)


MIB = 1 << 20
