"""Hardware facts from NVML, without ever creating a CUDA context in the calling process, and
the reference machine's saved outputs where this machine has no GPUs.

The notebook kernel and the launcher call these; only the launched workers touch CUDA. That
way a GPU is never held by the kernel, and forking or spawning later stays safe. The NVML
reading itself (inventory, NVLinks, counters) is :mod:`nvtutorial.nvml`.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from nvtutorial.nvml import GPUDetail, Inventory, NvLink, inventory, nvml, nvml_text, visible_handles


@dataclasses.dataclass(frozen=True)
class GPU:
    index: int
    name: str
    uuid: str
    pci_bus_id: str
    memory_mib: int


def gpus() -> list[GPU]:
    """The visible GPUs, in ``CUDA_VISIBLE_DEVICES`` order; empty where there are none."""
    with nvml() as pynvml:
        if pynvml is None:
            return []
        out = []
        for i, h in enumerate(visible_handles(pynvml)):
            out.append(
                GPU(
                    index=i,
                    name=nvml_text(pynvml.nvmlDeviceGetName(h)),
                    uuid=nvml_text(pynvml.nvmlDeviceGetUUID(h)),
                    pci_bus_id=nvml_text(pynvml.nvmlDeviceGetPciInfo(h).busId),
                    memory_mib=int(pynvml.nvmlDeviceGetMemoryInfo(h).total // 2**20),
                )
            )
        return out


def gpu_count() -> int:
    """How many GPUs a worker started now could use (0 without a driver)."""
    return len(gpus())


def driver_version() -> str | None:
    with nvml() as pynvml:
        return None if pynvml is None else nvml_text(pynvml.nvmlSystemGetDriverVersion())


@dataclasses.dataclass(frozen=True)
class MemoryPeak:
    """A GPU memory's peak as NVML gives it: bus width × the highest memory clock × 2 transfers per clock (the clock
    NVML reports for HBM and GDDR alike gives the datasheets' bandwidth this way: H100 SXM 5120 bits × 2619 MHz × 2
    = 3.35 TB/s). Used in notebook 01 (one GPU's links)."""

    bus_width_bits: int
    clock_mhz: int

    @property
    def gbps(self) -> float:
        return self.bus_width_bits / 8 * self.clock_mhz * 1e6 * 2 / 1e9

    def describe(self) -> str:
        return f"{self.bus_width_bits}-bit bus × {self.clock_mhz} MHz × 2 (NVML)"


def memory_peak(index: int = 0) -> MemoryPeak | None:
    """GPU ``index``'s memory peak from NVML, or None where there is no GPU or NVML cannot say."""
    with nvml() as pynvml:
        if pynvml is None:
            return None
        handles = visible_handles(pynvml)
        if len(handles) <= index:
            return None
        try:
            width = int(pynvml.nvmlDeviceGetMemoryBusWidth(handles[index]))
            clock = int(pynvml.nvmlDeviceGetMaxClockInfo(handles[index], pynvml.NVML_CLOCK_MEM))
        except Exception:  # noqa: BLE001 - NVMLError_NotSupported (some virtual GPUs): no peak to predict from
            return None
        return MemoryPeak(width, clock) if width and clock else None


# --- The reference machine: its saved outputs, for machines without 2 GPUs ---------------------------

REFERENCE_MACHINE = "2× NVIDIA H200 SXM, NV18, driver 580.159.04, CUDA 13.0"
"""The machine whose saved outputs ship with the course (``nvtutorial/data/h200x2/``)."""


REFERENCE_P2P = {"read": "no answer from NVML", "write": "OK", "nvlink": "OK", "atomics": "OK"}
"""NVML's P2P answers between the reference machine's two GPUs (read live there, reference/h200x2/01_hardware.ipynb)."""

REFERENCE_PCIE = {"pcie_gen": 5, "pcie_width": 16, "pcie_gen_max": 5, "pcie_width_max": 16}
"""Each reference GPU's PCIe link, now and at most (read live there by NVML, reference/h200x2/01_hardware.ipynb);
the saved ``nvidia-smi`` output does not give it."""

REFERENCE_DATA = Path(__file__).resolve().parent.parent / "data" / "h200x2"
"""Saved outputs of the reference machine, shipped with the package (also the parsers' test fixtures)."""


def reference_output(name: str) -> Path:
    """A saved output of the reference machine (``nvidia-smi-topo-m.txt``, ``nccl-tests-…``)."""
    path = REFERENCE_DATA / name
    if not path.is_file():
        raise FileNotFoundError(f"no saved output {name!r} of the reference machine in {REFERENCE_DATA}")
    return path


def parse_nvidia_smi(text: str) -> tuple[str | None, str | None, list[GPUDetail]]:
    """Driver, CUDA version and GPUs from the table plain ``nvidia-smi`` prints (a saved output)."""
    driver = re.search(r"Driver Version:\s*([\d.]+)", text)
    cuda = re.search(r"CUDA Version:\s*([\d.]+)", text)
    gpus = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        m = re.match(r"^\|\s+(\d+)\s+(.+?)\s{2,}(On|Off)\s+\|\s+([0-9A-Fa-f:.]+)\s", line)
        if not m:
            continue
        memory = re.search(r"/\s*(\d+)MiB", lines[i + 1]) if i + 1 < len(lines) else None
        gpus.append(
            GPUDetail(
                index=int(m.group(1)),
                name=m.group(2).strip(),
                uuid="",
                pci_bus_id=m.group(4),
                memory_mib=int(memory.group(1)) if memory else 0,
            )
        )
    return (driver.group(1) if driver else None, cuda.group(1) if cuda else None, gpus)


def parse_nvlink_status(text: str) -> dict[int, list[float]]:
    """``nvidia-smi nvlink -s`` (a saved output): GPU index -> per-link speed in GB/s."""
    out: dict[int, list[float]] = {}
    gpu = None
    for line in text.splitlines():
        m = re.match(r"^GPU (\d+):", line)
        if m:
            gpu = int(m.group(1))
            out[gpu] = []
            continue
        m = re.match(r"^\s+Link (\d+):\s+([\d.]+) GB/s", line)
        if m and gpu is not None:
            out[gpu].append(float(m.group(2)))
    return out


def reference_inventory() -> Inventory:
    """The reference machine's inventory, read from its saved ``nvidia-smi`` outputs (simulation mode)."""
    driver, cuda, gpus = parse_nvidia_smi(reference_output("nvidia-smi.txt").read_text())
    speeds = parse_nvlink_status(reference_output("nvidia-smi-nvlink-s.txt").read_text())
    detailed = []
    for g in gpus:
        # NVLink 4.0 with every link ending at an NVSwitch (remote_gpu None): what NVML said live on the reference
        # HGX board (reference/h200x2/01_hardware.ipynb); nvidia-smi nvlink -s gives neither version nor far end
        links = tuple(
            NvLink(link=k, active=True, remote_gpu=None, version="4.0", speed_mbps=int(s * 1000))
            for k, s in enumerate(speeds.get(g.index, []))
        )
        detailed.append(dataclasses.replace(g, nvlinks=links, **REFERENCE_PCIE))
    p2p = {"0-1": dict(REFERENCE_P2P)} if len(gpus) == 2 else {}
    return Inventory(
        source=f"a saved output of the reference machine ({REFERENCE_MACHINE})",
        driver=driver,
        cuda_driver=cuda,
        gpus=tuple(detailed),
        p2p=p2p,
    )


def inventory_or_reference(gpus_needed: int = 2) -> Inventory:
    """This machine's inventory when it has ``gpus_needed`` GPUs, else the reference machine's (simulation mode)."""
    inv = inventory()
    return inv if len(inv.gpus) >= gpus_needed else reference_inventory()
