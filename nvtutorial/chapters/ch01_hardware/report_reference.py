"""The reference 2× H200's committed runs of notebooks 01 and 02 (``reference/h200x2/runs/`` in a checkout), and the
one-GPU machines' runs of notebook 01's part "one GPU's links" (``reference/h100x1/runs/``, ``reference/h200x1/runs/``).

On a machine without GPUs some of those notebooks' runs would measure nothing (gloo ignores every
``NCCL_*`` variable; two CPU processes have no link to be full duplex): the notebooks show these saved
GPU runs instead, labelled with the machine they ran on. ``tests/chapters/ch01_hardware/test_report.py``
recomputes their verdicts. When the reference is run again, update :data:`RUNS`.
"""

from __future__ import annotations

from pathlib import Path

from nvtutorial.results import RunResult

FOLDER = Path(__file__).resolve().parents[3] / "reference" / "h200x2" / "runs"
"""Where a checkout of the course keeps the reference runs (absent from an installed package)."""
ONE_GPU_FOLDERS = (FOLDER.parent.parent / "h100x1" / "runs", FOLDER.parent.parent / "h200x1" / "runs")
"""Where a checkout keeps the one-GPU machines' runs (``scripts/gpu_links_check.py`` writes one)."""

RUNS = {
    "sweep": "allreduce_bench-20261130-014824-f3bc9e",  # notebook 01, section 5: 1 KiB .. 1 GiB
    "lab P2P off": "allreduce_bench-20261130-014903-51011f",
    "lab P2P+SHM off": "allreduce_bench-20261130-014914-413939",
    "ab default": "allreduce_bench-20261130-014936-7adb80",  # notebook 02, claim C7
    "ab source's settings": "allreduce_bench-20261130-014947-7f3fbd",
    "ab P2P off": "allreduce_bench-20261130-014959-963ea0",
    "sendrecv": "sendrecv_bench-20261130-014839-652f0b",  # notebook 01, section 6
}


def available() -> bool:
    """Whether this copy of the course has the reference runs (a checkout does, an installed package not)."""
    return all((FOLDER / name / "result.json").is_file() for name in RUNS.values())


def load(name: str) -> RunResult:
    """One reference run by its name in :data:`RUNS`, with its rank logs (for the transport lines)."""
    folder = FOLDER / RUNS[name]
    if not (folder / "result.json").is_file():
        raise FileNotFoundError(
            f"no reference run {name!r} in {FOLDER}: it ships with a checkout of the course, "
            "not with the installed package"
        )
    result = RunResult.load(folder / "result.json")
    result.run_dir = folder
    world = result.env.world_size if result.env is not None else len(result.ranks)
    result.log_files = {r: folder / f"rank{r}.log" for r in range(world)}
    return result


def one_gpu(workload: str) -> RunResult | None:
    """The newest committed one-GPU run of ``workload`` (``reference/h100x1/runs/<workload>-*`` or ``h200x1``'s, by
    the date in the folder's name), or None: an installed package, or a run not made there yet."""
    found = [p.parent for folder in ONE_GPU_FOLDERS for p in folder.glob(f"{workload}-*/result.json")]
    if not found:
        return None
    newest = max(found, key=lambda p: p.name)
    result = RunResult.load(newest / "result.json")
    result.run_dir = newest
    return result


def saved_label(result: RunResult) -> str:
    """``result.label``, and for a run kept under :data:`FOLDER` what it is: the reference's saved run, not this
    machine's (the verdicts read from it carry this as their ``where``)."""
    folder = Path(result.run_dir).resolve()
    if FOLDER not in folder.parents:
        return result.label
    return f"{result.label}: the reference 2× H200's saved run (reference/h200x2/runs/{folder.name}), not this machine"
