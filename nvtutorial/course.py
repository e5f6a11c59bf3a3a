"""Run the course headlessly: every notebook through papermill, then a summary; and what this machine runs.

``nvtutorial course`` passes ``profile`` to every notebook as it is given (``auto`` by default). Each notebook
declares its parts and what each needs (:data:`Need`); :func:`plan` resolves ``auto`` per part, at run time, on
this machine: the lesson's sizes (``full``) wherever the machine can run the part as taught, the small sizes
(``ci``) only for the CPU simulation. ``ci`` or ``full`` force the sizes everywhere (``full`` falls back to ``ci``
where the part cannot run as taught, and says so). A notebook opens with its plan (part, where, sizes, why), and
the course summary lists the plans again.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import platform
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from nvtutorial import nvml
from nvtutorial.i18n import N_, _, tr
from nvtutorial.machine import hardware
from nvtutorial.results import write_json_atomic

Profile = Literal["ci", "full"]
Need = Literal["one GPU", "two GPUs", "two ranks", "two nodes", "CPU ranks", "CPU"]
"""What a part of a notebook needs to run as taught: ``one GPU`` (one process on a GPU: its memory, its
kernels; two emulated nodes sharing it), ``two GPUs`` (two ranks, one GPU each, NCCL: a link between GPUs),
``two ranks`` (any two processes: gloo on the CPU runs it as taught, NCCL where two GPUs are there), ``two nodes``
(two emulated nodes of one rank each: a GPU each, both on one GPU where there is one, gloo on the CPU), ``CPU ranks``
(two gloo processes on the CPU on every machine, at small sizes: a lesson about processes, not devices), ``CPU``
(the kernel itself, or files: nothing to place)."""
PLAN_MIME = "application/vnd.nvtutorial.plan+json"


class CourseError(ValueError):
    pass


@dataclasses.dataclass(frozen=True)
class Machine:
    """What the plan is made for: the GPUs a CUDA build of torch can use here (none with a CPU build)."""

    gpus: tuple[str, ...]
    cores: int
    nccl: str | None = None

    @classmethod
    def here(cls) -> Machine:
        from nvtutorial.launch import torch_cuda  # read without importing torch (seconds in a kernel)

        names = tuple(g.name for g in hardware.gpus()) if torch_cuda() else ()
        return cls(names, os.cpu_count() or 1, _nccl_version() if names else None)

    def gpu_label(self, n: int, nccl: bool = True) -> str:
        """``n`` GPUs' names, and NCCL's version where the part's ranks talk through it (``nccl``)."""
        names = ", ".join(sorted(set(self.gpus[:n])))
        return f"{n}× {names}" + (f", NCCL {self.nccl}" if self.nccl and nccl else "")


def _nccl_version() -> str | None:
    """NCCL's version: torch's own where torch is loaded (reading it initialises no GPU), else that of the NCCL wheel a
    pip install of torch loads (``nvidia-nccl-cu12``/``-cu13``), read without importing torch; None without either."""
    import sys
    from importlib import metadata

    torch = sys.modules.get("torch")
    try:
        v = torch.cuda.nccl.version() if torch is not None else None  # type: ignore[union-attr]
    except Exception:  # noqa: BLE001 - a build without NCCL
        v = None
    if isinstance(v, tuple):
        return ".".join(map(str, v))
    for dist in metadata.distributions():
        if (dist.metadata["Name"] or "").lower().startswith("nvidia-nccl-cu"):
            return dist.version.split("+")[0]
    return None


@dataclasses.dataclass(frozen=True)
class Part:
    """One part of a notebook, placed on this machine: ``profile`` is its sizes, ``gpus`` the GPUs it runs on
    (0: the CPU), ``backend`` its ranks' (``nccl`` on GPUs, ``gloo`` on the CPU)."""

    name: str
    need: Need
    profile: Profile
    gpus: int
    where: str
    why: str
    runs: bool = True
    """False where this machine cannot run the part as taught and the notebook shows something else instead (its
    ``where`` says what): nothing is simulated."""

    @property
    def backend(self) -> Literal["nccl", "gloo"]:
        return "nccl" if self.gpus else "gloo"

    @property
    def sized(self) -> bool:
        """Whether sizes mean anything for this part here: it runs, and runs something (not the kernel alone)."""
        return self.runs and self.need != "CPU"

    @property
    def simulated(self) -> bool:
        """A GPU lesson that runs on the CPU here: its numbers are a simulation, labelled so."""
        return self.need in ("one GPU", "two GPUs") and not self.gpus


def place(
    name: str, need: Need, profile: str, machine: Machine, instead: str | None = None, collective: bool = True
) -> Part:
    """Where ``need`` runs on ``machine``, and at which sizes (see the module's docstring). ``instead``: what the
    notebook shows where the machine cannot run the part as taught (None: it runs as the CPU simulation).
    ``collective=False``: the part's rank makes no NCCL call that its numbers depend on (launched with NCCL only to
    get its GPU), so its ``where`` names no NCCL version."""
    if profile not in ("auto", "ci", "full"):
        raise CourseError(f"profile={profile!r}: use auto, ci or full")
    have = len(machine.gpus)
    if need == "CPU ranks":
        return Part(
            name, need, "ci", 0, N_("2 gloo ranks on the CPU"), N_("a lesson about processes: the CPU on every machine")
        )
    if need == "two nodes":
        return _two_nodes(name, profile, machine)
    want = {"one GPU": 1, "two GPUs": 2, "two ranks": 2, "CPU": 0}[need]
    if need == "CPU":
        return Part(name, need, "ci" if profile == "ci" else "full", 0, N_("this kernel (CPU)"), N_("nothing to place"))
    if have >= want:
        sizes: Profile = "ci" if profile == "ci" else "full"
        why = N_("small sizes asked for (profile='ci')") if profile == "ci" else N_("the lesson, as taught")
        return Part(name, need, sizes, want, machine.gpu_label(want, collective), why)
    if want == 1:
        where = N_("the CPU simulation ({cores} cores)", cores=machine.cores)
    else:
        where = N_("the CPU simulation ({ranks} gloo ranks, {cores} cores)", ranks=want, cores=machine.cores)
    if need == "two ranks":
        where = N_("{ranks} gloo ranks on the CPU", ranks=want)
    if not have:
        why = N_("no GPU visible to a CUDA build of torch")
    else:
        why = N_("{ranks} ranks need {ranks} GPUs for NCCL; this machine has {have}", ranks=want, have=have)
    if instead is not None:
        return Part(name, need, "ci", 0, N_("not run here; shown instead: {instead}", instead=instead), why, runs=False)
    if profile == "full":
        why = N_("{why} (profile='full' asked for the lesson sizes: small sizes here)", why=why)
    return Part(name, need, "ci", 0, where, why)


def _two_nodes(name: str, profile: str, machine: Machine) -> Part:
    """Two emulated nodes of one rank each: a GPU each; both on the one GPU (NCCL then talks through its network
    transport, each node with its own ``NCCL_HOSTID``: a test set-up NCCL does not support); gloo on the CPU."""
    have = len(machine.gpus)
    sizes: Profile = "ci" if profile == "ci" or not have else "full"
    if have >= 2:
        where = N_("2 emulated nodes, a GPU each: {gpus}", gpus=machine.gpu_label(2))
        return Part(name, "two nodes", sizes, 2, where, N_("as taught"))
    if have == 1:
        where = N_("2 emulated nodes sharing {gpu} (NCCL's network transport)", gpu=machine.gpu_label(1))
        why = N_("one GPU: both nodes on it, each with its own NCCL_HOSTID (a test set-up NCCL does not support)")
        return Part(name, "two nodes", sizes, 1, where, why)
    return Part(
        name,
        "two nodes",
        "ci",
        0,
        N_("2 emulated nodes, gloo on the CPU"),
        N_("no GPU visible to a CUDA build of torch"),
    )


@dataclasses.dataclass(frozen=True)
class Plan:
    """What this machine runs of a notebook: one :class:`Part` per entry, in order. Displayed, it is the table a
    notebook opens with (and a machine-readable copy the course summary reads)."""

    notebook: str
    parts: tuple[Part, ...]

    def __getitem__(self, name: str) -> Part:
        for part in self.parts:
            if part.name == name:
                return part
        raise KeyError(f"no part {name!r} in this plan: {', '.join(p.name for p in self.parts)}")

    def rows(self) -> list[tuple[str, str, str, str]]:
        """The table's rows as shown, in the learner's language (the parts themselves keep the English)."""
        sizes = {"full": _("the lesson's"), "ci": _("small")}
        return [(tr(p.name), tr(p.where), sizes[p.profile] if p.sized else "-", tr(p.why)) for p in self.parts]

    @staticmethod
    def headings() -> tuple[str, str, str, str]:
        return _("part"), _("where"), _("sizes"), _("why")

    def __str__(self) -> str:
        rows = [self.headings(), *self.rows()]
        widths = [max(_width(r[i]) for r in rows) for i in range(3)]
        lines = ["  ".join(_pad(cell, w) for cell, w in zip(row[:3], widths)) + "  " + row[3] for row in rows]
        return _("What this machine runs of {notebook}:", notebook=self.notebook) + "\n" + "\n".join(lines)

    def _repr_mimebundle_(self, include=None, exclude=None):  # noqa: ARG002 - IPython's signature
        import html

        cells = "".join(
            "<tr>" + "".join(f"<td style='text-align:left'>{html.escape(c)}</td>" for c in row) + "</tr>"
            for row in self.rows()
        )
        head = "".join(f"<th style='text-align:left'>{h}</th>" for h in self.headings())
        title = _("What this machine runs of {notebook}:", notebook=html.escape(self.notebook))
        table = f"<p>{title}</p><table><tr>{head}</tr>{cells}</table>"
        return {"text/plain": str(self), "text/html": table, PLAN_MIME: self.to_dict()}

    def to_dict(self) -> dict:
        return {"notebook": self.notebook, "parts": [dataclasses.asdict(p) for p in self.parts]}

    @classmethod
    def from_dict(cls, d: dict) -> Plan:
        return cls(d["notebook"], tuple(Part(**p) for p in d["parts"]))


def _width(text: str) -> int:
    """The columns ``text`` takes in a terminal: a Chinese character takes two."""
    import unicodedata

    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def _pad(text: str, width: int) -> str:
    return text + " " * (width - _width(text))


def plan(
    notebook: str,
    profile: str,
    parts: Mapping[str, Need | tuple[Need, str | None]],
    machine: Machine | None = None,
    no_collective: tuple[str, ...] = (),
) -> Plan:
    """The plan of ``notebook``'s ``parts`` on this machine (or ``machine``): name -> need, or name -> (need, what the
    notebook shows instead where this machine cannot run the part as taught). ``no_collective``: the parts whose rank
    makes no collective (see :func:`place`)."""
    machine = machine or Machine.here()
    unknown = set(no_collective) - set(parts)
    if unknown:
        raise CourseError(f"no_collective names no part of {notebook}: {', '.join(sorted(unknown))}")
    placed = []
    for name, need in parts.items():
        need, instead = need if isinstance(need, tuple) else (need, None)
        placed.append(place(name, need, profile, machine, instead, collective=name not in no_collective))
    return Plan(notebook, tuple(placed))


def plans_in_notebook(nb) -> list[Plan]:
    """The plans an executed notebook displayed (``nbformat`` node or dict)."""
    import json

    found = []
    for cell in nb["cells"]:
        for output in cell.get("outputs", []) if cell.get("cell_type") == "code" else []:
            payload = output.get("data", {}).get(PLAN_MIME)
            if payload is not None:
                found.append(Plan.from_dict(json.loads(payload) if isinstance(payload, str) else payload))
    return found


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


@functools.cache
def _encrypted_kernel_manager():
    from jupyter_client.manager import AsyncKernelManager

    class EncryptedKernelManager(AsyncKernelManager):
        """A kernel whose messages are encrypted (CurveZMQ keys from the manager, where the kernel's spec says it
        can: ipykernel's does): the kernel then has no reason to warn that it talks in plain text over TCP."""

        def __init__(self, **kw):
            super().__init__(**kw)
            self.transport_encryption = "auto"

    return EncryptedKernelManager


def __getattr__(name: str):
    if name == "EncryptedKernelManager":  # papermill imports it by name; jupyter_client loads only then
        return _encrypted_kernel_manager()
    raise AttributeError(name)


@dataclasses.dataclass
class NotebookOutcome:
    name: str
    passed: bool
    duration_s: float
    output: str
    error: str | None = None
    plans: list[dict] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class CourseSummary:
    profile: str
    where: str
    notebooks: list[NotebookOutcome]
    out: str


def run_course(
    out: str | os.PathLike[str] = "build/course",
    only: str | list[str] | None = None,
    profile: str = "auto",
    notebooks_dir: str | os.PathLike[str] | None = None,
    kernel: str = "python3",
) -> CourseSummary:
    """Execute the notebooks into ``out`` with papermill; write and return the summary.

    ``profile`` is ``ci``, ``full`` or ``auto``, passed to every notebook as it is: each resolves it per part
    (:func:`plan`).
    """
    import papermill

    if profile not in ("auto", "ci", "full"):
        raise CourseError(f"profile={profile!r}: use auto, ci or full")
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
                papermill.execute_notebook(
                    str(nb),
                    str(target),
                    parameters={"profile": profile},
                    kernel_name=kernel,
                    cwd=str(nb.parent),
                    progress_bar=False,
                    log_output=False,
                    kernel_manager_class="nvtutorial.course.EncryptedKernelManager",
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
                    plans=_plans_of(target),
                )
            )
            write_json_atomic(out / "summary.json", summary)
    finally:
        if previous is None:
            os.environ.pop("NVTUTORIAL_RUNS_DIR", None)
        else:
            os.environ["NVTUTORIAL_RUNS_DIR"] = previous
    return summary


def _plans_of(executed: Path) -> list[dict]:
    import nbformat

    try:
        return [p.to_dict() for p in plans_in_notebook(nbformat.read(executed, as_version=4))]
    except (OSError, ValueError):  # papermill failed before writing it
        return []


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
        for part in (Part(**p) for plan in n.plans for p in plan["parts"]):
            sizes = ("lesson sizes" if part.profile == "full" else "small sizes") if part.sized else ""
            lines.append(f"      {part.name}: {part.where}" + (f", {sizes}" if sizes else ""))
        if n.error:
            lines += ["      " + line for line in n.error.splitlines()[-6:]]
    passed = sum(n.passed for n in summary.notebooks)
    lines.append(
        f"{passed} passed, {len(summary.notebooks) - passed} failed  "
        f"(executed notebooks and summary.json in {summary.out})"
    )
    return "\n".join(lines)
