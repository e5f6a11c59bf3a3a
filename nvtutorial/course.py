"""Run the course headlessly: every notebook through papermill, then a summary.

``nvtutorial course --profile ci`` (small, fast: what CI runs) or ``--profile full`` (the
lesson sizes, for 2 GPUs). Each notebook's ``parameters`` cell holds ``profile = "auto"``,
which :func:`lesson_profile` turns into ``full`` on a machine with 2 GPUs and ``ci`` elsewhere,
so a learner who opens a notebook on a laptop gets sizes that finish there.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import time
from pathlib import Path
from typing import Literal

from nvtutorial import nvml
from nvtutorial.machine import hardware
from nvtutorial.results import write_json_atomic

Profile = Literal["ci", "full"]


class CourseError(ValueError):
    pass


def lesson_profile(profile: str = "auto", gpus_needed: int = 2) -> Profile:
    """``"full"`` or ``"ci"``; ``"auto"`` is full where ``gpus_needed`` GPUs and a CUDA torch exist."""
    if profile in ("ci", "full"):
        return profile  # type: ignore[return-value]
    if profile != "auto":
        raise CourseError(f"profile={profile!r}: use auto, ci or full")
    from nvtutorial.launch import torch_cuda  # torch's CUDA version, read without importing torch (seconds in a kernel)

    return "full" if torch_cuda() and hardware.gpu_count() >= gpus_needed else "ci"


def where() -> str:
    """Where the course runs: GPU names and link, or the CPU."""
    gpus = hardware.gpus()
    if not gpus:
        return f"CPU only ({platform.processor() or platform.machine()}, {os.cpu_count()} cores): gloo simulation"
    names = ", ".join(sorted({g.name for g in gpus}))
    link = nvml.link_label() if len(gpus) > 1 else None
    return f"{len(gpus)}× {names}" + (f" ({link})" if link else "")


def repository_notebooks() -> Path:
    """``notebooks/`` of the repository this package was installed from."""
    candidates = [Path.cwd() / "notebooks", Path(__file__).resolve().parent.parent / "notebooks"]
    for folder in candidates:
        if folder.is_dir() and any(folder.glob("*.ipynb")):
            return folder
    raise CourseError("no notebooks/ folder found: run from the repository or pass --notebooks DIR")


@dataclasses.dataclass
class NotebookOutcome:
    name: str
    passed: bool
    duration_s: float
    output: str
    error: str | None = None


@dataclasses.dataclass
class CourseSummary:
    profile: str
    where: str
    notebooks: list[NotebookOutcome]
    out: str


def run_course(
    out: str | os.PathLike[str] = "build/course",
    only: str | list[str] | None = None,
    profile: str = "full",
    notebooks_dir: str | os.PathLike[str] | None = None,
    kernel: str = "python3",
) -> CourseSummary:
    """Execute the notebooks into ``out`` with papermill; write and return the summary.

    ``profile`` is ``ci``, ``full`` or ``auto`` (see :func:`lesson_profile`).
    """
    import papermill

    profile = lesson_profile(profile)
    folder = Path(notebooks_dir) if notebooks_dir else repository_notebooks()
    patterns = [only] if isinstance(only, str) else list(only or [])
    notebooks = sorted(p for p in folder.glob("*.ipynb") if not patterns or any(s in p.name for s in patterns))
    if not notebooks:
        raise CourseError(
            f"no notebook in {folder} matches {', '.join(patterns)}" if patterns else f"no notebooks in {folder}"
        )
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    summary = CourseSummary(profile=profile, where=where(), notebooks=[], out=str(out))
    # The notebooks' runs land beside the executed copies, so results and notebooks travel together.
    # Relative to the notebooks' folder (the kernels' working directory), so results name no absolute paths.
    runs = os.path.relpath((out / "runs").resolve(), folder.resolve())
    previous = os.environ.get("NVTUTORIAL_RUNS_DIR")
    os.environ["NVTUTORIAL_RUNS_DIR"] = runs
    try:
        for nb in notebooks:
            target = out / nb.name
            print(f"== {nb.name} ({profile})", flush=True)
            t0 = time.perf_counter()
            error = None
            try:
                # store_widget_state: the progress bars' final state is saved with the notebook
                papermill.execute_notebook(
                    str(nb),
                    str(target),
                    parameters={"profile": profile},
                    kernel_name=kernel,
                    cwd=str(nb.parent),
                    progress_bar=False,
                    log_output=False,
                    store_widget_state=True,
                )
            except Exception as exc:  # papermill raises PapermillExecutionError with the cell's traceback
                error = f"{type(exc).__name__}: {exc}".strip()
            else:
                error = failed_check(target)
            summary.notebooks.append(
                NotebookOutcome(
                    name=nb.name,
                    passed=error is None,
                    duration_s=time.perf_counter() - t0,
                    output=str(target),
                    error=error,
                )
            )
            write_json_atomic(out / "summary.json", summary)
    finally:
        if previous is None:
            os.environ.pop("NVTUTORIAL_RUNS_DIR", None)
        else:
            os.environ["NVTUTORIAL_RUNS_DIR"] = previous
    return summary


def failed_check(executed: str | os.PathLike[str]) -> str | None:
    """Why an executed notebook failed although every cell ran: a check it shows that failed (a verdict with
    status ``fail``), unless the registry says that failing is the lesson there; None when none failed."""
    import nbformat

    from nvtutorial.report.claims import failed_checks
    from nvtutorial.report.verdict import verdicts_in_notebook

    path = Path(executed)
    failed = failed_checks(path.name, verdicts_in_notebook(nbformat.read(path, as_version=4)))
    if not failed:
        return None
    more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
    return f"a check failed: {failed[0]}{more}"


def format_summary(summary: CourseSummary) -> str:
    width = max(len(n.name) for n in summary.notebooks)
    lines = [f"course ({summary.profile} profile) on {summary.where}"]
    for n in summary.notebooks:
        status = "passed" if n.passed else "FAILED"
        lines.append(f"  {n.name:<{width}}  {status}  {n.duration_s:7.1f} s")
        if n.error:
            lines += ["      " + line for line in n.error.splitlines()[-6:]]
    passed = sum(n.passed for n in summary.notebooks)
    lines.append(
        f"{passed} passed, {len(summary.notebooks) - passed} failed  "
        f"(executed notebooks and summary.json in {summary.out})"
    )
    return "\n".join(lines)
