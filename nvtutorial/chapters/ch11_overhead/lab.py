"""Notebook 11's runs, launched through ``nvtutorial.run`` on the ranks its plan gives each part
(``nvtutorial.course.plan``): the calibration and the step on one rank (NCCL on the GPU, gloo on the CPU), the
all-reduce over two ranks. Kernel side: the one file of the chapter that starts runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import nvtutorial

if TYPE_CHECKING:
    from nvtutorial.course import Part
    from nvtutorial.results import RunResult


def run(part: str, where: Part, params: dict[str, Any], nproc: int = 1, timeout: float = 600.0) -> RunResult:
    """One run of the ``overhead`` workload's ``part`` (``schema.Params``) where the plan placed ``where``."""
    return nvtutorial.run(
        "overhead", nproc=nproc, backend=where.backend, timeout=timeout, output="none", params={"part": part, **params}
    )


def calibrate(where: Part, params: dict[str, Any]) -> RunResult:
    return run("calibrate", where, params)


def step(where: Part, params: dict[str, Any]) -> RunResult:
    """The step three ways: a GPU only (a CUDA graph replays CUDA kernels)."""
    if not where.gpus:
        raise ValueError(
            f"the step three ways needs a GPU (a CUDA graph replays CUDA kernels); here: {where.where} ({where.why})"
        )
    return run("step", where, params)


def allreduce(where: Part, params: dict[str, Any]) -> RunResult:
    """The small all-reduce over two ranks: two GPUs with NCCL, else two gloo processes (a simulation)."""
    return run("allreduce", where, params, nproc=2)


def step_instead() -> str:
    """What the notebook shows of the step three ways where this machine cannot run it (the plan's ``instead``):
    the committed one-GPU run, or nothing where none is committed; nothing is simulated."""
    from nvtutorial.chapters.ch11_overhead import report

    found = report.committed()
    if found is not None:
        return f"the committed one-GPU run (reference/{found.kind}/runs-11/)"
    return "nothing (no one-GPU run of notebook 11 is committed)"


def gpu_calibration(where: Part, calibrate_run: RunResult) -> tuple[RunResult | None, str]:
    """The calibration the step's predictions come from, and where it was measured: this machine's run where the
    plan runs the step on a GPU, else the committed one-GPU run's (labelled so); ``(None, why)`` when none exists."""
    from nvtutorial.chapters.ch11_overhead import report

    if where.gpus:
        return calibrate_run, calibrate_run.label
    found = report.committed()
    if found is None:
        return None, f"no CUDA graph runs here ({where.why}), and no one-GPU run of notebook 11 is committed yet"
    return found.calibrate, report.committed_where(found.calibrate, found.kind)


def compile_widths(where: Part, params: dict[str, Any]) -> tuple[int, ...] | None:
    """The widths the step part compiles, known before it runs (review RR15-4): this machine's plan where it runs the
    step on a GPU, else the committed one-GPU run's (:func:`gpu_step`'s); None where there is neither."""
    from nvtutorial.chapters.ch11_overhead import report

    if where.gpus:
        return tuple(params["compile_widths"])
    found = report.committed()
    return report.params(found.step).compile_widths if found is not None else None


def gpu_step(where: Part, params: dict[str, Any]) -> tuple[RunResult | None, str]:
    """The step three ways and where it ran: on this GPU, else the committed one-GPU run (the same machine as
    :func:`gpu_calibration`'s); ``(None, why)`` when there is none."""
    from nvtutorial.chapters.ch11_overhead import report

    if where.gpus:
        run = step(where, params)
        return run, run.label
    found = report.committed()
    if found is None:
        return None, f"no CUDA graph runs here ({where.why}), and no one-GPU run of notebook 11 is committed yet"
    return found.step, report.committed_where(found.step, found.kind)
