"""Notebook 04's A/Bs, launched where the notebook's plan puts each part (``course.plan``).

The A/Bs one GPU can show (precision, ``channels_last``, checkpointing, ``torch.compile``) run on one rank on a
GPU, a world of one; DDP's options and ``no_sync`` accumulation need two ranks (two GPUs, NCCL). Each part is one
launch of chapter 03's ``train`` workload with the baseline first, so that its A/Bs compare within one launch. Parts
placed alike and sized alike share a launch: on a machine without a GPU both are the CPU simulation, one launch of
two gloo ranks, as the chapter always ran.

    runs = lab.measure(PLAN, {"one GPU": (P1, ["fp32", "fp16"]), "DDP's options": (P2, ["static_graph=True"])})
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from nvtutorial.course import Part, Plan
from nvtutorial.results import RunResult

RANKS = {"one GPU": 1, "two GPUs": 2, "two ranks": 2, "CPU": 1}
"""The ranks a part runs on, by what it needs."""


@dataclasses.dataclass(frozen=True)
class Launch:
    """One run of the ``train`` workload: the parts it measures, on ``nproc`` ranks with ``backend``."""

    parts: tuple[str, ...]
    nproc: int
    backend: Literal["nccl", "gloo"]
    params: Mapping[str, Any]
    timeout: float


def launches(plan: Plan, parts: Mapping[str, tuple[Mapping[str, Any], Sequence[str]]]) -> list[Launch]:
    """The launches that measure ``parts`` (plan part -> (its sizes, its variants)), in order. A launch runs on the
    ranks its parts need, each on a GPU of its own where the plan gave them GPUs; it counts the bytes DDP
    all-reduces only where there are ranks to exchange them (a world of one exchanges nothing)."""
    groups: dict[tuple[int, str], list[tuple[Part, Mapping[str, Any], Sequence[str]]]] = {}
    for name, (sizes, variants) in parts.items():
        part = plan[name]
        groups.setdefault((part.gpus, part.profile), []).append((part, sizes, variants))
    out = []
    for members in groups.values():
        sizes = members[0][1]
        nproc = max(RANKS[part.need] for part, _, _ in members)
        variants = dict.fromkeys(["baseline", *(v for _, _, vs in members for v in vs)])
        params = {
            "model": sizes["model"],
            "image_size": sizes["image_size"],
            "batch_sizes": (sizes["batch"],),
            "samples": sizes["samples"],
            "variants": tuple(variants),
            "accumulation": sizes["accumulation"],
            "comm_share": False,
            "count": nproc > 1,
            "warmup": sizes["warmup"],
            "steps": sizes["steps"],
            "repeats": sizes["repeats"],
        }
        backend = members[0][0].backend
        out.append(Launch(tuple(p.name for p, _, _ in members), nproc, backend, params, sizes["timeout"]))
    return out


def measure(plan: Plan, parts: Mapping[str, tuple[Mapping[str, Any], Sequence[str]]]) -> dict[str, RunResult]:
    """Run :func:`launches`; each part's run by its name (parts that shared a launch share the run)."""
    import nvtutorial

    out: dict[str, RunResult] = {}
    for launch in launches(plan, parts):
        fewer = [name for name in launch.parts if RANKS[plan[name].need] < launch.nproc]
        if fewer:  # the CPU simulation: a one-process part shares the launch of the two ranks' part
            others = ", ".join(name for name in launch.parts if name not in fewer)
            print(
                f"{', '.join(fewer)}: measured by rank 0 of the {launch.nproc} {launch.backend} ranks that run {others}"
            )
        run = nvtutorial.run(
            "train", nproc=launch.nproc, backend=launch.backend, timeout=launch.timeout, params=dict(launch.params)
        )
        out.update(dict.fromkeys(launch.parts, run))
    return out
