"""NVML, read without ever creating a CUDA context: the GPUs' NVLinks and P2P status, and the
NVLink byte counters. Used on both sides: by the kernel (:mod:`nvtutorial.machine`, the launcher)
and by workloads that count the bytes on the wire around their own collectives.

``nvidia-ml-py`` only (imported inside :func:`nvml`); no torch, no pandas.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator
from typing import Any

# --- The NVML session ---------------------------------------------------------------------------------


@contextlib.contextmanager
def nvml() -> Iterator[Any]:
    """``pynvml`` initialised for the block, or ``None`` where there is no NVIDIA driver."""
    try:
        import pynvml
    except ImportError:
        yield None
        return
    try:
        pynvml.nvmlInit()
    except Exception:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        yield None
        return
    try:
        yield pynvml
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def nvml_text(value: Any) -> str:
    """NVML strings come as bytes from older nvidia-ml-py and as str from newer."""
    return value.decode() if isinstance(value, bytes) else str(value)


def visible_handles(pynvml: Any) -> list[Any]:
    """NVML handles of the GPUs a CUDA program started now would see (``CUDA_VISIBLE_DEVICES``)."""
    count = pynvml.nvmlDeviceGetCount()
    all_handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return all_handles
    handles = []
    for token in (t.strip() for t in visible.split(",")):
        if not token or token.startswith("-"):
            break  # CUDA stops at the first invalid entry
        if token.isdigit():
            if int(token) >= count:
                break
            handles.append(all_handles[int(token)])
        else:
            match = [h for h in all_handles if nvml_text(pynvml.nvmlDeviceGetUUID(h)).startswith(token)]
            if not match:
                break
            handles.append(match[0])
    return handles


def remote_pci_info(pynvml: Any) -> Any:
    """``nvmlDeviceGetNvLinkRemotePciInfo_v2``, or the older spelling where nvidia-ml-py predates it."""
    return getattr(pynvml, "nvmlDeviceGetNvLinkRemotePciInfo_v2", None) or pynvml.nvmlDeviceGetNvLinkRemotePciInfo


def _bus_key(bus_id: str) -> str:
    """PCI bus ids come as ``00000000:18:00.0`` or ``0000:18:00.0``: compare bus:device.function."""
    return bus_id.lower().split(":", 1)[-1].lstrip("0") if bus_id.count(":") == 2 else bus_id.lower()


# --- The inventory: GPUs, NVLinks, P2P status (notebook 01, the doctor, the launcher's link label) ---

NVLINK_VERSIONS = {1: "1.0", 2: "2.0", 3: "2.2", 4: "3.0", 5: "3.1", 6: "4.0", 7: "5.0", 8: "6.0"}
"""NVML's ``nvmlNvlinkVersion_t`` codes (``NVML_NVLINK_VERSION_4_0 = 6``) as version strings."""


P2P_STATUS = {
    0: "OK",
    1: "chipset not supported",
    2: "GPU not supported",
    3: "topology not supported",
    4: "disabled by regkey",
    5: "not supported",
    6: "unknown",
}
"""``nvmlDeviceGetP2PStatus`` answers, in words."""


NVLINK_SPEED_FIELD = 164
"""``NVML_FI_DEV_NVLINK_GET_SPEED``: a link's speed in MB/s (scopeId = link)."""


@dataclasses.dataclass(frozen=True)
class NvLink:
    link: int
    active: bool
    remote_bus_id: str | None = None
    remote_gpu: int | None = None  # index of the visible GPU at the far end, if it is one
    version: str | None = None  # "4.0"
    speed_mbps: int | None = None  # NVML's per-link speed


@dataclasses.dataclass(frozen=True)
class GPUDetail:
    index: int
    name: str
    uuid: str
    pci_bus_id: str
    memory_mib: int
    pcie_gen: int | None = None
    pcie_width: int | None = None
    pcie_gen_max: int | None = None
    pcie_width_max: int | None = None
    nvlinks: tuple[NvLink, ...] = ()

    @property
    def active_links(self) -> list[NvLink]:
        return [link for link in self.nvlinks if link.active]


@dataclasses.dataclass(frozen=True)
class Inventory:
    """What NVML says about this machine (or what a saved ``nvidia-smi`` output says)."""

    source: str
    driver: str | None
    cuda_driver: str | None  # the newest CUDA the driver supports, e.g. "13.0"
    gpus: tuple[GPUDetail, ...]
    p2p: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)  # "0-1" -> {"read": "OK", ...}

    @property
    def simulated(self) -> bool:
        return not self.source.startswith("NVML")

    def links_between(self, a: int = 0, b: int = 1) -> int:
        """NVLinks joining GPUs ``a`` and ``b``, counted as ``nvidia-smi topo -m`` does (``NV#``).

        Links may end at the other GPU (a bridge, a direct mesh) or at NVSwitches (HGX boards, where
        2 GPUs of a VM show NV18): then NVML's P2P status says whether the pair talks over NVLink,
        and the pair's count is the GPU's active links.
        """
        if max(a, b) >= len(self.gpus) or a == b:
            return 0
        direct = sum(1 for link in self.gpus[a].active_links if link.remote_gpu == b)
        if direct:
            return direct
        if self.through_switch(a, b):
            return len(self.gpus[a].active_links)
        return 0

    def through_switch(self, a: int = 0, b: int = 1) -> bool:
        """True where the pair's NVLinks end at NVSwitches rather than at each other."""
        pair = self.p2p.get(f"{min(a, b)}-{max(a, b)}", {})
        switched = [link for link in self.gpus[a].active_links if link.remote_gpu is None]
        return bool(switched) and pair.get("nvlink") == "OK"

    def gpu_rows(self) -> list[dict[str, Any]]:
        rows = []
        for g in self.gpus:
            versions = sorted({link.version for link in g.active_links if link.version})
            speeds = sorted({link.speed_mbps for link in g.active_links if link.speed_mbps})
            rows.append(
                {
                    "gpu": g.index,
                    "name": g.name,
                    "memory_GiB": round(g.memory_mib / 1024, 1),
                    "pci_bus_id": g.pci_bus_id,
                    "pcie": f"Gen{g.pcie_gen} x{g.pcie_width}" if g.pcie_gen else None,
                    "pcie_max": f"Gen{g.pcie_gen_max} x{g.pcie_width_max}" if g.pcie_gen_max else None,
                    "nvlinks_active": len(g.active_links) if g.nvlinks else None,
                    "nvlink_version": ", ".join(versions) or None,
                    "nvlink_speed_GBps": ", ".join(f"{s / 1000:.3f}" for s in speeds) or None,
                }
            )
        return rows

    def p2p_rows(self) -> list[dict[str, Any]]:
        return [{"pair": pair, **caps} for pair, caps in self.p2p.items()]

    def describe(self) -> str:
        """A few lines: GPUs, driver, the link between GPU 0 and 1, P2P. Used in notebook 01."""
        if not self.gpus:
            return f"no NVIDIA GPU ({self.source})"
        names = sorted({g.name for g in self.gpus})
        lines = [
            f"source: {self.source}",
            f"{len(self.gpus)} GPU(s): "
            + ", ".join(f"{sum(g.name == n for g in self.gpus)}× {n}" for n in names)
            + f", {self.gpus[0].memory_mib / 1024:.1f} GiB each",
            f"driver {self.driver or '?'} (supports CUDA ≤ {self.cuda_driver or '?'})",
        ]
        if len(self.gpus) >= 2:
            n = self.links_between(0, 1)
            g = self.gpus[0]
            versions = sorted({link.version for link in g.active_links if link.version})
            speeds = sorted({link.speed_mbps for link in g.active_links if link.speed_mbps})
            detail = (
                (
                    f" (NVLink {', '.join(versions) or '?'}"
                    + (f", {speeds[0] / 1000:.3f} GB/s per link as reported" if speeds else "")
                    + ")"
                )
                if n
                else ""
            )
            via = " through NVSwitch" if n and self.through_switch(0, 1) else ""
            lines.append(f"GPU 0–1: {n} active NVLinks{via}{detail}" if n else "GPU 0–1: no active NVLink (PCIe only)")
            if "0-1" in self.p2p:
                lines.append("P2P GPU 0–1: " + ", ".join(f"{k} {v}" for k, v in self.p2p["0-1"].items()))
        return "\n".join(lines)

    def to_frame(self):  # -> pandas.DataFrame
        import pandas as pd

        return pd.DataFrame(self.gpu_rows()).set_index("gpu") if self.gpus else pd.DataFrame()


def _nvml_call(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception:  # noqa: BLE001 - NVMLError_NotSupported and friends: a fact we cannot read is None
        return None


def _nvlinks(pynvml: Any, handle: Any, bus_to_index: dict[str, int]) -> tuple[NvLink, ...]:
    links = []
    for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
        try:
            state = pynvml.nvmlDeviceGetNvLinkState(handle, link)
        except pynvml.NVMLError:
            continue  # the link does not exist on this GPU
        active = state == pynvml.NVML_FEATURE_ENABLED
        remote = version = speed = None
        if active:
            info = _nvml_call(remote_pci_info(pynvml), handle, link)
            remote = nvml_text(info.busId) if info is not None else None
            code = _nvml_call(pynvml.nvmlDeviceGetNvLinkVersion, handle, link)
            version = NVLINK_VERSIONS.get(code) if code is not None else None
            values = _nvml_call(pynvml.nvmlDeviceGetFieldValues, handle, [(NVLINK_SPEED_FIELD, link)])
            value = field_value(values[0]) if values is not None else None
            speed = int(value) if value else None
        links.append(
            NvLink(
                link=link,
                active=active,
                remote_bus_id=remote,
                remote_gpu=bus_to_index.get(_bus_key(remote)) if remote else None,
                version=version,
                speed_mbps=speed,
            )
        )
    return tuple(links)


_VALUE_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def field_value(value: Any) -> float | int | None:
    """The number in one ``nvmlFieldValue_t``, or ``None`` where NVML could not read it."""
    if getattr(value, "nvmlReturn", 1) != 0:
        return None
    member = _VALUE_MEMBERS.get(int(value.valueType))
    return getattr(value.value, member) if member else None


def inventory() -> Inventory:
    """Every visible GPU with memory, PCI, PCIe link and NVLinks; P2P status per pair. NVML only.

    Without a driver the inventory is empty (``gpus == ()``): notebook 01 then says so and
    shows the reference machine's saved ``nvidia-smi`` output instead (:func:`reference_inventory`).
    """
    import socket

    with nvml() as pynvml:
        if pynvml is None:
            return Inventory(source="no NVIDIA driver (NVML not available)", driver=None, cuda_driver=None, gpus=())
        handles = visible_handles(pynvml)
        bus_ids = [nvml_text(pynvml.nvmlDeviceGetPciInfo(h).busId) for h in handles]
        bus_to_index = {_bus_key(b): i for i, b in enumerate(bus_ids)}
        gpus = []
        for i, h in enumerate(handles):
            gpus.append(
                GPUDetail(
                    index=i,
                    name=nvml_text(pynvml.nvmlDeviceGetName(h)),
                    uuid=nvml_text(pynvml.nvmlDeviceGetUUID(h)),
                    pci_bus_id=bus_ids[i],
                    memory_mib=int(pynvml.nvmlDeviceGetMemoryInfo(h).total // 2**20),
                    pcie_gen=_nvml_call(pynvml.nvmlDeviceGetCurrPcieLinkGeneration, h),
                    pcie_width=_nvml_call(pynvml.nvmlDeviceGetCurrPcieLinkWidth, h),
                    pcie_gen_max=_nvml_call(pynvml.nvmlDeviceGetMaxPcieLinkGeneration, h),
                    pcie_width_max=_nvml_call(pynvml.nvmlDeviceGetMaxPcieLinkWidth, h),
                    nvlinks=_nvlinks(pynvml, h, bus_to_index),
                )
            )
        caps = {
            "read": pynvml.NVML_P2P_CAPS_INDEX_READ,
            "write": pynvml.NVML_P2P_CAPS_INDEX_WRITE,
            "nvlink": pynvml.NVML_P2P_CAPS_INDEX_NVLINK,
            "atomics": pynvml.NVML_P2P_CAPS_INDEX_ATOMICS,
        }
        p2p = {}
        for a in range(len(handles)):
            for b in range(a + 1, len(handles)):
                row = {}
                for key, index in caps.items():
                    status = _nvml_call(pynvml.nvmlDeviceGetP2PStatus, handles[a], handles[b], index)
                    row[key] = P2P_STATUS.get(status, f"code {status}") if status is not None else "no answer from NVML"
                p2p[f"{a}-{b}"] = row
        raw_cuda = _nvml_call(pynvml.nvmlSystemGetCudaDriverVersion)
        return Inventory(
            source=f"NVML on {socket.gethostname()}",
            driver=nvml_text(pynvml.nvmlSystemGetDriverVersion()),
            cuda_driver=cuda_version_text(raw_cuda),
            gpus=tuple(gpus),
            p2p=p2p,
        )


def link_label(a: int = 0, b: int = 1) -> str | None:
    """``"NV18"`` for 18 NVLinks between the pair (as ``nvidia-smi topo -m`` says), ``"PCIe"`` without
    NVLink, ``None`` without 2 GPUs."""
    inv = inventory()
    if len(inv.gpus) <= max(a, b):
        return None
    n = inv.links_between(a, b)
    return f"NV{n}" if n else "PCIe"


def cuda_version_text(code: int | None) -> str | None:
    """NVML/CUDA's integer version (``13000``) as ``"13.0"``."""
    if not code:
        return None
    return f"{code // 1000}.{(code % 1000) // 10}"


# --- NVLink byte counters, read from a worker (notebooks 01, 05, 07) ---------------------------------

NVLINK_TX_FIELD = 138
"""``NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX``: data payload KiB sent over one link (scopeId = link), cumulative."""


NVLINK_RX_FIELD = 139
"""``NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX``: the same, received."""


def handle_for_uuid(pynvml: Any, uuid: str | None, fallback_index: int) -> tuple[Any, str]:
    """``(NVML handle, how it was found)`` of the GPU with this UUID (CUDA's and NVML's orders can
    differ), else of the visible GPU ``fallback_index``."""
    wanted = (uuid or "").lower().removeprefix("gpu-")
    if wanted:
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            if nvml_text(pynvml.nvmlDeviceGetUUID(h)).lower().removeprefix("gpu-") == wanted:
                return h, "uuid"
    return visible_handles(pynvml)[fallback_index], "visible index"


def active_nvlinks(pynvml: Any, handle: Any) -> list[int]:
    """Indices of this GPU's NVLinks that are up."""
    links = []
    for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
        try:
            if pynvml.nvmlDeviceGetNvLinkState(handle, link) == pynvml.NVML_FEATURE_ENABLED:
                links.append(link)
        except pynvml.NVMLError:
            continue  # no such link on this GPU
    return links


def nvlink_counters(pynvml: Any, handle: Any, links: list[int]) -> dict[int, tuple[int, int]]:
    """Link → (data KiB sent, data KiB received), for the ``links`` whose counters NVML can read."""
    fields = [(NVLINK_TX_FIELD, link) for link in links] + [(NVLINK_RX_FIELD, link) for link in links]
    try:
        values = list(pynvml.nvmlDeviceGetFieldValues(handle, fields))
    except pynvml.NVMLError:  # some drivers refuse a batch with one unsupported entry: ask one by one
        values = []
        for field in fields:
            try:
                values.append(pynvml.nvmlDeviceGetFieldValues(handle, [field])[0])
            except pynvml.NVMLError:
                values.append(None)
    n = len(links)
    out = {}
    for i, link in enumerate(links):
        tx = field_value(values[i]) if values[i] is not None else None
        rx = field_value(values[n + i]) if values[n + i] is not None else None
        if tx is not None and rx is not None:
            out[link] = (int(tx), int(rx))
    return out
