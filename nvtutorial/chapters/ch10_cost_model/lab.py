"""Notebook 10's runs, launched through ``nvtutorial.run`` where the notebook's plan (``course.plan``) puts each part:
which ranks answer what on this machine, the calibration, and the capstone's record. Kernel side: the one file of
the chapter that starts runs.

The notebook's parts (:data:`PARTS`) and what they need: the device's roofs, floors and problems one GPU; the
collectives, link problems, pipeline and capstone two GPUs. So (:func:`launches`):

- two GPUs or more: one run of two NCCL ranks answers everything, device and pair, at the lesson's sizes;
- one GPU: the device's roofs, floors and problems on the GPU (one NCCL rank, a world of one), at the lesson's sizes
  (small ones only when ``profile="ci"`` asks for them); the two-rank parts (link problems, pipeline, capstone) as
  the CPU simulation (two gloo ranks, the GPU hidden from them, small sizes), graded with the simulation's own fit;
  the link problems are answered a second time, at the lesson's sizes, with the committed 2× H200 fit and checked
  against that pair's committed runs;
- no GPU: two gloo ranks on the CPU for everything, small sizes: a simulation, labelled so.

Gloo ranks get one thread fewer than their share of the cores, so that gloo's own threads find a core.
"""

from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import nvtutorial
from nvtutorial import course

if TYPE_CHECKING:
    from nvtutorial.chapters.ch10_cost_model.problems_capstone import CapstoneRecord
    from nvtutorial.launch.spec import Backend, Output

DEVICE, PAIR, PIPELINE, CAPSTONE = "roofs and device problems", "link problems", "pipeline", "capstone"
PARTS: dict[str, course.Need | tuple[course.Need, str]] = {
    DEVICE: "one GPU",
    PAIR: "two GPUs",
    PIPELINE: "two GPUs",
    CAPSTONE: "two GPUs",
}
"""The notebook's parts and what each needs to run as taught."""


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


def course_plan(profile: str, machine: course.Machine | None = None) -> course.Plan:
    """Where each of :data:`PARTS` runs on this machine (or ``machine``), and at which sizes."""
    return course.plan("10_cost_model", profile, PARTS, machine)


def launches(plan: course.Plan) -> Plan:
    """The ranks of the device's runs and of the pair's, as ``plan`` places the parts: on one GPU the device
    runs alone on it; otherwise (two GPUs, or the CPU) one run of two ranks serves both."""
    device, pair = plan[DEVICE], plan[PAIR]
    both = Launch(2, pair.backend, pair.where)
    if device.gpus and not pair.gpus:
        return Plan(Launch(1, "nccl", f"{device.where}: one NCCL rank, a world of one"), both, 1)
    return Plan(both, both, pair.gpus)


def gloo_threads(cores: int | None = None, ranks: int = 2) -> int:
    """Threads per gloo rank: its share of the cores less one, for gloo's own threads (at least one)."""
    from nvtutorial.launch import guards

    return max(1, (cores if cores is not None else guards.usable_cores()) // ranks - 1)


def run(part: str, launch: Launch, params: dict[str, Any], timeout: float = 600.0, output: Output = "none"):
    """One run of the ``costmodel`` workload's ``part`` (``schema.Params``) on ``launch``'s ranks."""
    threads = {"OMP_NUM_THREADS": str(gloo_threads(ranks=launch.nproc))} if launch.backend == "gloo" else None
    return nvtutorial.run(
        "costmodel",
        nproc=launch.nproc,
        backend=launch.backend,
        timeout=timeout,
        output=output,
        env=threads,
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


def save_capstone(record: CapstoneRecord, folder: str | os.PathLike[str] | None = None) -> Path:
    """Write the capstone's record as ``capstone/<machine>-<strategy>.json`` under the runs folder (or ``folder``),
    so that scores from different machines sit side by side, each naming its machine."""
    from nvtutorial.launch import runs_root
    from nvtutorial.results import write_json_atomic

    target = Path(folder) if folder is not None else runs_root() / "capstone"
    path = target / f"{_slug(record.machine)}-{record.strategy}.json"
    return write_json_atomic(path, dataclasses.asdict(record))
