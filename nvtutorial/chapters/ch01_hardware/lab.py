"""The link A/B lab, the device-to-device copy and one GPU's own links: the bandwidth runs of notebooks 01 and 02.

Each function here launches (:func:`nvtutorial.run`); what the runs show is read by
:mod:`nvtutorial.chapters.ch01_hardware.report` and drawn by :mod:`nvtutorial.chapters.ch01_hardware.plots`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from nvtutorial import launch
from nvtutorial.chapters.ch01_hardware import report_gpu, schema_gpu_links, schema_p2p
from nvtutorial.chapters.ch01_hardware import report_reference as reference_runs
from nvtutorial.chapters.ch01_hardware.report import CopyRun, SendRecv, Sweep
from nvtutorial.chapters.ch01_hardware.report_lab import LabPath, LabRun
from nvtutorial.machine import hardware, nccl_debug

if TYPE_CHECKING:
    from nvtutorial.course import Part
    from nvtutorial.results import RunResult

LAB_PATHS: tuple[LabPath, ...] = (
    LabPath("default", {}, "NCCL's choice: P2P over NVLink where the GPUs have it"),
    LabPath("P2P off", {"NCCL_P2P_DISABLE": "1"}, "no GPU-to-GPU copies: staged through host shared memory (SHM)"),
    LabPath(
        "P2P+SHM off",
        {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"},
        "neither: TCP sockets over the loopback interface (NET/Socket)",
    ),
)
"""The three paths of notebook 01's lab, fastest first."""


SOURCE_AB_PATHS: tuple[LabPath, ...] = (
    LAB_PATHS[0],
    LabPath(
        "source's settings",
        {"NCCL_NET_GDR_LEVEL": "3", "NCCL_IB_DISABLE": "1"},
        "what the source exports: GPUDirect RDMA level and InfiniBand off (network transport only)",
    ),
    LAB_PATHS[1],
)
"""Notebook 02's A/B (claim C7): default, the source's settings, and P2P off as a control that does change things."""


DEBUG_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV,P2P,SHM,NET"}
"""What makes NCCL print the transport of every channel (read back by :mod:`nvtutorial.machine.nccl_debug`)."""


def run_env(*extra: Mapping[str, str]) -> dict[str, str]:
    """Environment overrides for a bandwidth run: ``extra`` merged, NVLink SHARP left off.

    ``NCCL_NVLS_ENABLE`` keeps the caller's value; where it is unset it is set to 0, as the reference machine (shared
    with others) sets it: every run of the course has NVLink SHARP off. NCCL 2.28.7 and later would set it up for two
    GPUs whose NVLinks reach NVSwitches, where the driver reports multicast (``ncclNvlsInit``, NCCL's
    ``src/transport/nvls.cc``; up to 2.28.3 only for more than two); what it would change is not measured here.
    """
    env: dict[str, str] = {} if "NCCL_NVLS_ENABLE" in os.environ else {"NCCL_NVLS_ENABLE": "0"}
    for e in extra:
        env.update({k: str(v) for k, v in e.items()})
    return env


def _backend(result: Sweep) -> str | None:
    return result.env.backend if result.env is not None else None


def run_lab(
    params: Mapping[str, Mapping[str, Any]],
    reuse: Mapping[str, Sweep] | None = None,
    paths: Sequence[LabPath] = LAB_PATHS,
    workload: str = "allreduce_bench",
    timeout: float = 600.0,
) -> list[LabRun]:
    """Run ``workload`` once per path with ``NCCL_DEBUG=INFO`` and read back the transport each used.

    A path runs when ``params`` has parameters for it (``params[path.name]``) or ``reuse`` has an
    earlier run of it (made with :data:`DEBUG_ENV`), used instead of a new launch; the others are
    left out (a notebook's CPU profile leaves out paths that differ only in ``NCCL_*`` variables,
    which gloo ignores). Used in notebooks 01 and 02.
    """
    out = []
    for path in paths:
        result = (reuse or {}).get(path.name)
        if result is None:
            if path.name not in params:
                continue
            print(
                f"{path.name}: {' '.join(f'{k}={v}' for k, v in path.env.items()) or '(no NCCL variables)'}", flush=True
            )
            result = launch.run(
                workload,
                params=dict(params[path.name]),
                env=run_env(DEBUG_ENV, path.env),
                output="none",
                timeout=timeout,
            )
        out.append(LabRun(path, result, nccl_debug.read_logs(result.log_files, backend=_backend(result))))
    if not out:
        raise ValueError(f"no path to run: give parameters for one of {', '.join(p.name for p in paths)}")
    return out


def device_copy(params: Mapping[str, Any] | None = None, timeout: float = 600.0) -> CopyRun:
    """Launch ``p2p_copy`` (one process, both GPUs: each way alone, then both at once) where there are 2 GPUs;
    otherwise no rows and a note saying it needs them (the table shows it as a row), and nothing is launched."""
    import torch  # importing torch does not initialise CUDA

    gpus = hardware.gpu_count() if torch.version.cuda else 0
    if gpus < 2:
        why = "a CPU-only torch" if not torch.version.cuda else f"{gpus} GPU visible"
        note = f"skipped: a GPU-to-GPU copy needs 2 GPUs ({why}); nothing was launched"
        return CopyRun(rows=(), label=f"this machine: {why}", note=note, path="cuda:0 → cuda:1")
    result = launch.run("p2p_copy", nproc=1, params=dict(params or {}), output="none", timeout=timeout)
    copied = result.metrics_as(schema_p2p.Rank)
    label = f"{result.label}; one process copying between cuda:0 and cuda:1" + (
        f" ({' and '.join(copied.devices)})" if copied.devices else ""
    )
    path = f"cuda:{result.params.get('src', 0)} → cuda:{result.params.get('dst', 1)}"
    return CopyRun(rows=copied.rows, label=label, note=copied.note, result=result, path=path)


CPU_AB = {
    "min_bytes": 65536,
    "max_bytes": 1048576,
    "factor": 4,
    "warmup": 2,
    "iters": 5,
    "repeats": 3,
    "target_s": 0.02,
}
"""Small A/B sizes for a CPU, used only where the reference runs are not there (an installed package)."""


SAVED = "the reference 2× H200's saved runs (reference/h200x2/runs)"
"""What :func:`source_ab` and :func:`point_to_point` show where they are given no parameters."""


def saved_instead() -> str | None:
    """The plan's ``instead`` for notebook 02's A/B and 01's point to point: without two GPUs they launch nothing and
    show :data:`SAVED`; None in an installed package without those runs (a small CPU run then stands in)."""
    return SAVED if reference_runs.available() else None


def source_ab(
    params: Mapping[str, Mapping[str, Any]], timeout: float = 600.0, why: str = "no GPUs here"
) -> list[LabRun]:
    """Notebook 02's A/B (claim C7) on :data:`SOURCE_AB_PATHS`: launched with ``params`` (path name → parameters).

    With no parameters (the small sizes: gloo ignores every ``NCCL_*`` variable, so both runs would be the
    same code) it reads the reference 2× H200's saved runs instead, each labelled with where it ran, and prints
    ``why`` (the notebook's plan says it); an installed package without them runs the A/B on the CPU with
    :data:`CPU_AB` to show the method.
    """
    if params:
        return run_lab(params, paths=SOURCE_AB_PATHS, timeout=timeout)
    if reference_runs.available():
        print(
            f"not run here ({why}): the A/B below is the reference 2× H200's, from its saved runs "
            "(reference/h200x2/runs)"
        )
        saved = {path.name: reference_runs.load(f"ab {path.name}") for path in SOURCE_AB_PATHS}
        return run_lab({}, reuse=saved, paths=SOURCE_AB_PATHS)
    return run_lab({"default": CPU_AB, "source's settings": CPU_AB}, paths=SOURCE_AB_PATHS, timeout=timeout)


def point_to_point(params: Mapping[str, Any], timeout: float = 600.0, why: str = "no GPUs here") -> SendRecv:
    """Notebook 01's ``sendrecv_bench`` run with ``params``; with none (the small sizes: two CPU processes have no
    link to be full duplex) the reference 2× H200's saved run, labelled as such (``why``: the plan's reason), or a
    small CPU run without it."""
    if params:
        return launch.run("sendrecv_bench", params=dict(params), output="none", timeout=timeout)
    if reference_runs.available():
        print(f"not run here ({why}): the send/recv run below is the reference 2× H200's, from its saved run")
        return reference_runs.load("sendrecv")
    return launch.run(
        "sendrecv_bench",
        params={"max_bytes": 262144, "factor": 16, "warmup": 2, "iters": 3, "repeats": 3, "target_s": 0.02},
        output="none",
        timeout=timeout,
    )


def gpu_limits(part: Part) -> report_gpu.Limits:
    """What NVML says GPU 0's PCIe link and memory carry at most, where ``part`` (notebook 01's "one GPU's links",
    from its plan) runs on a GPU; otherwise those of the GPU of the saved run shown instead (:func:`gpu_links`)."""
    if not part.gpus:
        saved = reference_runs.one_gpu("gpu_links")
        return report_gpu.saved_limits(saved.metrics_as(schema_gpu_links.Rank).device if saved else None)
    inv = hardware.inventory()
    return report_gpu.limits(inv.gpus[0] if inv.gpus else None, hardware.memory_peak(0))


def gpu_links_instead() -> str:
    """What notebook 01 shows of "one GPU's links" on a machine without a GPU (its plan's ``instead``)."""
    saved = reference_runs.one_gpu("gpu_links")
    if saved is None:
        return "the reference H200's limits (NVML and datasheet); the course has no saved run of it"
    gpu = saved.metrics_as(schema_gpu_links.Rank).device
    return f"a saved run on one {gpu} (reference/{saved.run_dir.parent.parent.name}) and that GPU's limits"


def gpu_links(params: Mapping[str, Any], part: Part, timeout: float = 300.0) -> report_gpu.GpuLinks:
    """Notebook 01's "one GPU's links": ``gpu_links`` on one rank on GPU 0 where the plan's ``part`` has a GPU;
    otherwise nothing is launched (the part says why) and the newest saved one-GPU run stands in, labelled so."""
    if part.gpus:
        result = launch.run("gpu_links", nproc=1, backend="nccl", params=dict(params), output="none", timeout=timeout)
        rank = result.metrics_as(schema_gpu_links.Rank)
        return report_gpu.GpuLinks(rank.rows, _label(result), rank.note, result, True, report_gpu.l2_of(rank))
    why = f"not run here: {part.why}"
    saved = reference_runs.one_gpu("gpu_links")
    if saved is None:
        return report_gpu.GpuLinks((), "nothing measured", f"{why}; the course has no saved run of it")
    rank = saved.metrics_as(schema_gpu_links.Rank)
    folder = f"reference/{saved.run_dir.parent.parent.name}/runs/{saved.run_dir.name}"
    print(f"{why}: the rows below are a saved run, {_label(saved)} ({folder})")
    label = f"{_label(saved)}: a saved run ({folder}), not this machine"
    return report_gpu.GpuLinks(rank.rows, label, why, saved, False, report_gpu.l2_of(rank))


def _label(result: RunResult) -> str:
    """A ``gpu_links`` run's label without NCCL's version: copies and kernels on one GPU make no NCCL call."""
    return result.env.label_without_nccl if result.env is not None else result.label
