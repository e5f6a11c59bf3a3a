"""Notebook 10's runs, launched through ``nvtutorial.run``: which ranks answer what on this machine, the
calibration, and the capstone's record. Kernel side: the one file of the chapter that starts runs.

Three machines, three plans (:func:`plan`):

- two GPUs or more: one run of two NCCL ranks answers everything, device and pair;
- one GPU: the device's roofs and problems on the GPU (one NCCL rank, a world of one), at the lesson's sizes; the
  two-rank parts (link problems, pipeline, capstone) as the CPU simulation (two gloo ranks, the GPU hidden from
  them, small sizes), graded with the simulation's own fit; the link problems are answered a second time, at the
  lesson's sizes, with the committed 2× H200 fit and checked against that pair's committed runs;
- no GPU: two gloo ranks on the CPU for everything, small sizes: a simulation, labelled so.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import nvtutorial

if TYPE_CHECKING:
    from nvtutorial.launch.spec import Backend, Output


@dataclasses.dataclass(frozen=True)
class Launch:
    nproc: int
    backend: Backend
    what: str


@dataclasses.dataclass(frozen=True)
class Plan:
    """``device``: who measures the roofs and the device problems; ``pair``: who runs the two-rank parts."""

    device: Launch
    pair: Launch
    gpus: int

    @property
    def shared(self) -> bool:
        """One run serves both (two GPUs, or the CPU)."""
        return self.device == self.pair

    @property
    def real_pair(self) -> bool:
        return self.pair.backend == "nccl"


def plan(gpus: int) -> Plan:
    """The plan for a machine with ``gpus`` usable GPUs (and a CUDA build of torch; 0 otherwise)."""
    if gpus >= 2:
        both = Launch(2, "nccl", "two GPUs, one NCCL rank each")
        return Plan(both, both, gpus)
    cpu = Launch(2, "gloo", "the CPU simulation: two gloo ranks")
    if gpus == 1:
        return Plan(Launch(1, "nccl", "the one GPU: one NCCL rank, a world of one"), cpu, 1)
    return Plan(cpu, cpu, 0)


def run(part: str, launch: Launch, params: dict[str, Any], timeout: float = 600.0, output: Output = "none"):
    """One run of the ``costmodel`` workload's ``part`` (``schema.Params``) on ``launch``'s ranks."""
    return nvtutorial.run(
        "costmodel",
        nproc=launch.nproc,
        backend=launch.backend,
        timeout=timeout,
        output=output,
        params={"part": part, **params},
    )


def calibrate(p: Plan, device_params: dict[str, Any], pair_params: dict[str, Any] | None = None):
    """``(device run, pair run or None)``: the roofs (and, when the device run has two ranks, the collectives);
    on one GPU a second run calibrates the CPU simulation's ranks and their gloo collectives."""
    device = run("calibrate", p.device, device_params)
    if p.shared:
        return device, None
    return device, run("calibrate", p.pair, pair_params or device_params)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower()[:80]


def save_capstone(record: dict[str, Any], folder: str | os.PathLike[str] | None = None) -> Path:
    """Write the capstone's record as ``capstone/<machine>-<strategy>.json`` under the runs folder (or ``folder``),
    so that scores from different machines sit side by side, each naming its machine."""
    from nvtutorial.launch import runs_root
    from nvtutorial.results import write_json_atomic

    target = Path(folder) if folder is not None else runs_root() / "capstone"
    path = target / f"{_slug(record['machine'])}-{record['strategy']}.json"
    return write_json_atomic(path, record)
