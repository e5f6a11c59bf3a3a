"""Notebook 05's runs beyond a plain launch: the ``profile_step`` parameters from the notebook's
sizes, the telemetry of the GPUs a part of the plan runs on (:func:`watch`), and the same run under Nsight Systems
(or the command to type where nsys is not here).

What the runs show is read by :mod:`nvtutorial.chapters.ch05_profiling.report` and
:mod:`nvtutorial.chapters.ch05_profiling.report_traces`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import sqlite3
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nvtutorial import launch, workloads
from nvtutorial import params as params_mod
from nvtutorial.chapters.ch05_profiling.report_traces import NsysResult, nsys_split, parse_kernel_summary
from nvtutorial.chapters.ch05_profiling.schema import Params
from nvtutorial.launch.environment import child_environment
from nvtutorial.launch.spec import torchrun_options, workload_program
from nvtutorial.launch.tree import ProcessTree
from nvtutorial.machine import telemetry

if TYPE_CHECKING:
    from nvtutorial.course import Part


def params_from(sizes: Mapping[str, Any], **overrides: Any) -> dict[str, Any]:
    """The entries of a notebook's size dict that are parameters of the ``profile_step`` workload, plus
    ``overrides``."""
    names = {f.name for f in dataclasses.fields(Params)}
    out = {k: v for k, v in sizes.items() if k in names}
    out.update(overrides)
    return out


ONE_GPU = {
    "profiler": False,
    "sweep": (),
    "probe_mb": 0,
    "local_baseline": False,
    "warmup": 2,
    "rounds": 2,
    "round_steps": 3,
}
"""What notebook 05's run on one GPU changes in the lesson's sizes: one rank there has no other rank to wait for or
exchange with, so no trace to split, no batch sweep, no all-reduce probe and no 1-GPU baseline; the steps, the
phases the telemetry is drawn against and the memory snapshot stay (``params_from(sizes, **ONE_GPU)``). Nothing
compares its DDP and ``no_sync`` steps (a world of one exchanges nothing), so it times the fewest the workload allows
(2 rounds) of 3 steps each, after 2 warm-up steps of each kind: enough for the telemetry to show each phase (a few
hundred ms at 0.1 s a sample) and for the memory peaks."""


@contextlib.contextmanager
def watch(part: Part, interval: float, dmon: bool = True) -> Iterator[telemetry.Sampler]:
    """NVML telemetry (and ``nvidia-smi dmon``) for the ``with`` block, where the plan puts ``part`` on GPUs; where
    it runs on the CPU nothing is sampled and the sampler says why (an idle GPU is never drawn under a CPU run)."""
    if part.gpus:
        with telemetry.sample(interval=interval, dmon=dmon) as sampler:
            yield sampler
        return
    sampler = telemetry.Sampler(interval=interval, dmon=dmon)
    sampler.reason = sampler.dmon_reason = f"not sampled: this run is {part.where}, on no GPU ({part.why})"
    yield sampler


def run_folder(name: str) -> Path:
    """A new run folder for a script run (``nvtutorial.run(script, out=...)``), under the runs root."""
    return launch.run_folder(name)


NSYS_TRACE = "cuda,nvtx"


def nsys_available() -> str | None:
    """The path of ``nsys`` when it is on PATH, else ``None``."""
    return shutil.which("nsys")


def nsys_command(run_command: Sequence[str], output: str | os.PathLike[str]) -> list[str]:
    """The ``nsys profile`` command line that records ``run_command`` (a launch) into ``output``.

    CUDA and NVTX only (no CPU sampling): small reports, and the NVTX ``train_step`` ranges mark
    the steps. ``torch.profiler`` must be off in that run: both use CUPTI.
    """
    return [
        "nsys",
        "profile",
        f"--trace={NSYS_TRACE}",
        "--sample=none",
        "--cpuctxsw=none",
        "--force-overwrite=true",
        "--output",
        str(output),
        *run_command,
    ]


def nsys_stats_command(report: str | os.PathLike[str]) -> list[str]:
    """``nsys stats`` for the GPU kernel summary as CSV (also exports the report's SQLite file)."""
    return ["nsys", "stats", "--report", "cuda_gpu_kern_sum", "--format", "csv", "--force-export=true", str(report)]


def run_nsys(
    workload: str,
    *,
    params: Any = None,
    nproc: int = 2,
    env: Mapping[str, Any] | None = None,
    timeout: float = 300.0,
    out: str | os.PathLike[str] | None = None,
) -> NsysResult:
    """Run ``workload`` under ``nsys profile``, then ``nsys stats``; the split per GPU from the report.

    Where ``nsys`` is not on PATH nothing runs: the result says so and holds the command that
    would have run. The run itself goes through the course launcher's command line, so it is
    exactly the run the notebook measures with ``torch.profiler`` (minus the profiler).
    """
    spec = launch.prepare(workload, nproc=nproc, params=params, env=env, out=out, timeout=timeout, output="none")
    report = spec.run_dir / "nsys_report"
    command = nsys_command(spec.command(), report)
    if nsys_available() is None:
        return NsysResult(
            available=False,
            command=command,
            reason="nsys (Nsight Systems) is not on PATH here: the split below comes from torch.profiler",
        )
    spec.run_dir.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    tree = ProcessTree()  # nsys, the torchrun it starts, the ranks: ended together whatever happens
    proc = tree.add(
        subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=child_environment(spec),
            start_new_session=True,
        )
    )
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        tree.end()
        output, _ = proc.communicate()
        return NsysResult(
            available=True,
            command=command,
            reason=f"nsys did not finish within {timeout:g} s",
            returncode=None,
            wall_s=time.perf_counter() - t0,
            output_tail=output.splitlines()[-20:],
        )
    finally:
        tree.end()
    wall = time.perf_counter() - t0
    rep = next((p for p in (report.with_suffix(".nsys-rep"), report.with_suffix(".qdrep")) if p.exists()), None)
    result = NsysResult(
        available=True,
        command=command,
        returncode=proc.returncode,
        wall_s=wall,
        report=str(rep) if rep else None,
        output_tail=output.splitlines()[-20:],
    )
    if rep is None:
        result.reason = f"nsys exited with code {proc.returncode} and wrote no report"
        return result
    stats = subprocess.run(nsys_stats_command(rep), capture_output=True, text=True, timeout=timeout, check=False)
    result.kernel_summary = parse_kernel_summary(stats.stdout)
    sqlite_path = rep.with_suffix(".sqlite")
    if sqlite_path.exists():
        result.sqlite = str(sqlite_path)
        try:
            result.splits = nsys_split(sqlite_path)
        except sqlite3.Error as exc:
            result.reason = f"could not read the kernel table of {sqlite_path.name}: {exc}"
    elif not result.reason:
        result.reason = "nsys stats wrote no SQLite export: only the kernel summary is available"
    return result


def nsys_display_command(
    workload: str, params: Mapping[str, Any] | None = None, nproc: int = 2, output: str = "profile_step_report"
) -> str:
    """The ``nsys profile`` command to type in a terminal for the same run (torchrun form).

    Only the parameters given are spelled out; pass ``profiler=False`` (nsys and torch.profiler
    both use CUPTI: one at a time)."""
    given = dict(params or {})
    strings = params_mod.to_strings(params_mod.build(workloads.load(workload).Params, given))  # validates
    sets = " ".join(params_mod.set_args({k: strings[k] for k in given if strings[k] != ""}))
    torchrun = " ".join(["torchrun", *torchrun_options(nproc), *workload_program(workload, {})])
    return (
        f"nsys profile --trace={NSYS_TRACE} --sample=none --cpuctxsw=none --output {output} \\\n    {torchrun} {sets}"
    )
