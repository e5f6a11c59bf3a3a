"""A fake pynvml: the GPUs, links and errors a test gives it."""

from __future__ import annotations

import types
from typing import Any


class FakeNVMLError(Exception):
    pass


def fake_nvml(
    links: int = 18, gpus: int = 2, counters: dict | None = None, switched: bool = False, old_pynvml: bool = False
) -> types.ModuleType:
    """A stand-in for ``pynvml``: ``gpus`` H200s joined by ``links`` NVLinks, NVLink data counters in KiB.

    ``switched``: the links end at NVSwitches (an HGX board, as on the reference VM), not at the other
    GPU; ``old_pynvml``: an nvidia-ml-py without ``nvmlDeviceGetNvLinkRemotePciInfo_v2`` (as there).
    """
    m: Any = types.ModuleType("pynvml")  # given pynvml's attributes below, which a bare module does not declare
    m.NVMLError = FakeNVMLError
    m.NVML_NVLINK_MAX_LINKS = 36
    m.NVML_FEATURE_ENABLED = 1
    m.NVML_P2P_CAPS_INDEX_READ, m.NVML_P2P_CAPS_INDEX_WRITE, m.NVML_P2P_CAPS_INDEX_NVLINK = 0, 1, 2
    m.NVML_P2P_CAPS_INDEX_ATOMICS = 3
    m.counters = counters if counters is not None else {}
    bus = [f"00000000:00:0{6 + i}.0" for i in range(gpus)]
    m.nvmlInit = m.nvmlShutdown = lambda: None
    m.nvmlDeviceGetCount = lambda: gpus
    m.nvmlDeviceGetHandleByIndex = lambda i: i
    m.nvmlDeviceGetUUID = lambda h: f"GPU-0000000{h}-aaaa-bbbb-cccc-dddddddddddd"
    m.nvmlDeviceGetName = lambda h: b"NVIDIA H200"
    m.nvmlDeviceGetPciInfo = lambda h: types.SimpleNamespace(busId=bus[h].encode())
    m.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(total=143771 * 2**20)
    m.nvmlDeviceGetCurrPcieLinkGeneration = m.nvmlDeviceGetMaxPcieLinkGeneration = lambda h: 5
    m.nvmlDeviceGetCurrPcieLinkWidth = m.nvmlDeviceGetMaxPcieLinkWidth = lambda h: 16
    m.nvmlSystemGetDriverVersion = lambda: "580.159.04"
    m.nvmlSystemGetCudaDriverVersion = lambda: 13000

    def state(h, link):
        if link >= 18:
            raise FakeNVMLError("invalid link")
        return 1 if link < links else 0

    def remote(h, link):
        if switched:
            return types.SimpleNamespace(busId=f"00000000:0{link % 4}:00.0".encode())  # an NVSwitch
        return types.SimpleNamespace(busId=bus[1 - h].replace("00000000:", "0000:").encode())

    def field_values(h, fields):
        out = []
        for field_id, link in fields:
            value = types.SimpleNamespace(uiVal=26562, ullVal=m.counters.get((h, field_id, link), 0))
            ok = link < 18 and (field_id == 164 or (h, field_id, link) in m.counters)
            out.append(
                types.SimpleNamespace(nvmlReturn=0 if ok else 3, valueType=1 if field_id == 164 else 3, value=value)
            )
        return out

    m.nvmlDeviceGetNvLinkState = state
    if old_pynvml:
        m.nvmlDeviceGetNvLinkRemotePciInfo = remote
    else:
        m.nvmlDeviceGetNvLinkRemotePciInfo_v2 = remote
    m.nvmlDeviceGetNvLinkVersion = lambda h, link: 6  # NVML_NVLINK_VERSION_4_0
    m.nvmlDeviceGetFieldValues = field_values
    m.nvmlDeviceGetP2PStatus = lambda a, b, index: 0 if links else 5
    return m
