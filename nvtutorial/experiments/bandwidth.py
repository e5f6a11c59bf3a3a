"""The link A/B lab and the device-to-device copy: the bandwidth runs of notebooks 01 and 02.

Each function here launches (:func:`nvtutorial.run`); what the runs show is read by
:mod:`nvtutorial.report.bandwidth` and drawn by :mod:`nvtutorial.plots.bandwidth`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from typing import Any

from .. import launch
from ..machine import hardware, nccl_debug
from ..report.bandwidth import CopyRun, LabRun, rows_of


@dataclasses.dataclass(frozen=True)
class LabPath:
    name: str
    env: dict[str, str]
    meaning: str


LAB_PATHS: tuple[LabPath, ...] = (
    LabPath("default", {}, "NCCL's choice: P2P over NVLink where the GPUs have it"),
    LabPath("P2P off", {"NCCL_P2P_DISABLE": "1"}, "no GPU-to-GPU copies: staged through host shared memory (SHM)"),
    LabPath("P2P+SHM off", {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"},
            "neither: TCP sockets over the loopback interface (NET/Socket)"),
)
"""The three paths of notebook 01's lab, fastest first."""


SOURCE_AB_PATHS: tuple[LabPath, ...] = (
    LAB_PATHS[0],
    LabPath("source's settings", {"NCCL_NET_GDR_LEVEL": "3", "NCCL_IB_DISABLE": "1"},
            "what the source exports for NVLink: GPUDirect RDMA level and InfiniBand off (network transport only)"),
    LAB_PATHS[1],
)
"""Notebook 02's A/B (claim C7): default, the source's settings, and P2P off as a control that does change things."""


DEBUG_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV,P2P,SHM,NET"}
"""What makes NCCL print the transport of every channel (read back by :mod:`nvtutorial.machine.nccl_debug`)."""


def run_env(*extra: Mapping[str, str]) -> dict[str, str]:
    """Environment overrides for a bandwidth run: ``extra`` merged, NVLink SHARP left off.

    ``NCCL_NVLS_ENABLE`` keeps the caller's value; where it is unset it is set to 0 (NVLS needs an
    NVSwitch, which two directly linked GPUs do not have, so this changes nothing measurable).
    """
    env: dict[str, str] = {} if "NCCL_NVLS_ENABLE" in os.environ else {"NCCL_NVLS_ENABLE": "0"}
    for e in extra:
        env.update({k: str(v) for k, v in e.items()})
    return env


def _backend(result: Any) -> str | None:
    env = getattr(result, "env", None)
    return getattr(env, "backend", None)


def run_lab(params: Mapping[str, Mapping[str, Any]], reuse: Mapping[str, Any] | None = None,
            paths: Sequence[LabPath] = LAB_PATHS, workload: str = "allreduce_bench", timeout: float = 300.0) -> list[LabRun]:
    """Run ``workload`` once per path with ``NCCL_DEBUG=INFO`` and read back the transport each used.

    ``params[path.name]`` are that run's parameters; ``reuse[path.name]`` is an earlier run of that
    path (made with :data:`DEBUG_ENV`) used instead of a new launch. Used in notebooks 01 and 02.
    """
    out = []
    for path in paths:
        result = (reuse or {}).get(path.name)
        if result is None:
            print(f"{path.name}: {' '.join(f'{k}={v}' for k, v in path.env.items()) or '(no NCCL variables)'}", flush=True)
            result = launch.run(workload, params=dict(params.get(path.name, {})), env=run_env(DEBUG_ENV, path.env),
                                output="none", timeout=timeout)
        out.append(LabRun(path, result, nccl_debug.read_logs(result.log_files, backend=_backend(result))))
    return out


def device_copy(params: Mapping[str, Any] | None = None, timeout: float = 300.0) -> CopyRun:
    """Launch ``p2p_copy`` (one process, both GPUs) where there are 2 GPUs; otherwise a row saying it needs them."""
    import torch  # importing torch does not initialise CUDA

    gpus = hardware.gpu_count() if torch.version.cuda else 0
    if gpus < 2:
        why = "a CPU-only torch" if not torch.version.cuda else f"{gpus} GPU visible"
        note = f"skipped: a GPU-to-GPU copy needs 2 GPUs ({why}); nothing was launched"
        return CopyRun(rows=[{"path": "cuda:0 → cuda:1", "size": None, "gbps": None, "note": note}],
                       label=f"this machine: {why}", note=note)
    result = launch.run("p2p_copy", nproc=1, params=dict(params or {}), output="none", timeout=timeout)
    devices = result.metrics.get("devices") or []
    label = f"{result.label}; one process copying between cuda:0 and cuda:1" + (f" ({' and '.join(devices)})" if devices else "")
    return CopyRun(rows=rows_of(result), label=label, note=result.metrics.get("note", ""), result=result)
