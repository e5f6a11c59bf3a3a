"""The package layout of docs/architecture.md, enforced: who may import whom.

Every ``import`` and ``from ... import`` of the package is read with ``ast``, at module level and
inside functions alike (a lazy import is still an import), relative imports resolved. An edge
``a -> b`` means module ``a`` names module ``b`` in an import; the implicit import of a parent
package's ``__init__`` is not an edge (every submodule would otherwise "import" the launcher
through ``nvtutorial/__init__.py``). The checks run on the real package and, to prove that each
can fail, on small fake packages with one violation each.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

import nbformat
import pytest

from tests.helpers.paths import ROOT

PACKAGE = ROOT / "nvtutorial"
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))

CORE = {"params", "results", "runtime", "units", "nvml", "tracesplit", "registry", "i18n"}
"""The floor both sides stand on: imports only itself; workers and the machine may import it."""
WORKER = {"lessons", "models", "workloads"}
"""Code that runs on the ranks."""
KERNEL_ONLY = {"report", "plots"}
"""Code that reads and draws in the notebook kernel: never launches."""
NEVER_FROM_KERNEL_ONLY = {"launch", "lab", "workloads"}
PROCESS_LAYER = CORE | {"launch", "machine"}
"""What ``launch/`` stands on, besides the workloads' registry (:data:`WORKLOAD_REGISTRY`): itself, the core and the
machine. Never a chapter (its lab, report, lessons or workloads), ``report/``, ``plots/``, ``teach/``, ``models/`` or
the commands (``cli``, ``course``): those are the process layer's clients."""
WORKLOAD_REGISTRY = "nvtutorial.workloads"
"""The one module of the workloads ``launch/`` names: it finds a workload by its name, never by importing its file."""
MOVED_TO_LAUNCH = ("guards", "diagnosis", "runtime_script", "progress", "slurm", "slurm_result")
"""The process layer's modules that once stood at the package's root (issue 30)."""
SHARED = {"schema"}
"""Torch-free files both sides import (a chapter's result schema and its cost model): only the core and each other."""
CHAPTER_ROLES = {
    "lessons": "lessons",
    "workload": "workloads",
    "schema": "schema",
    "model": "schema",
    "report": "report",
    "problems": "report",
    "plots": "plots",
    "lab": "lab",
    "exercises": "exercises",
}
"""A chapter file's role (``nvtutorial/chapters/chNN_topic/<file>``), by its name: it then obeys that area's rules."""
DISTRIBUTED = "torch.distributed"
CHAPTER = re.compile(r"^nvtutorial\.chapters\.ch(\d\d)_")
"""A chapter's module, and its chapter's number: a chapter imports only earlier chapters (its notebook's order)."""
LATER_CHAPTER_IMPORTS = {
    (
        "nvtutorial.chapters.ch01_hardware.lessons.busbw",
        "nvtutorial.chapters.ch03_ddp_training.lessons.ddp_train",
    ): "the lessons' one process-group set-up (ddp_train.setup), taught in notebook 03, used by notebook 01's lesson",
}
"""The imports of a later chapter the package makes on purpose, each with its reason (no other is allowed)."""


# --------------------------------------------------------------------------- reading imports


def modules(package: Path, name: str = "nvtutorial") -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` file of ``package``."""
    out = {}
    for path in sorted(package.rglob("*.py")):
        parts = [name, *path.relative_to(package).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def imported_names(path: Path, module: str, is_package: bool) -> set[tuple[str, str | None]]:
    """Every import of ``path`` as ``(absolute module, name imported from it or None)``: ``import a.b``
    gives ``("a.b", None)``, ``from .a import b`` inside ``pkg.m`` gives ``("pkg.a", "b")``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    base = module.split(".") if is_package else module.split(".")[:-1]
    found: set[tuple[str, str | None]] = set()
    typing_only = {
        id(n)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and _is_type_checking(block.test)
        for stmt in block.body
        for n in ast.walk(stmt)
    }
    for node in ast.walk(tree):
        if id(node) in typing_only:  # `if TYPE_CHECKING:` imports exist for annotations only, never at run time
            continue
        if isinstance(node, ast.Import):
            found.update((alias.name, None) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = base[: len(base) - (node.level - 1)]
                source = ".".join(anchor + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            found.update((source, alias.name) for alias in node.names)
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def import_graph(package: Path, name: str = "nvtutorial") -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """``(edges, external)``: the package's modules each module imports, and every other name it imports.

    ``from a import b`` is an edge to module ``a.b`` where that is a module, else to ``a``.
    """
    mods = modules(package, name)
    edges: dict[str, set[str]] = {}
    external: dict[str, set[str]] = {}
    for module, path in mods.items():
        edges[module] = set()
        external[module] = set()
        for source, imported in imported_names(path, module, path.name == "__init__.py"):
            full = f"{source}.{imported}" if imported and imported != "*" else source
            if source == name or source.startswith(name + "."):
                target = full if full in mods else source
                if target in mods:
                    edges[module].add(target)
            else:
                external[module].update({source, full})
        edges[module].discard(module)
    return edges, external


def area(module: str) -> str:
    """``nvtutorial.chapters.ch01_hardware.report`` -> ``report``; ``nvtutorial.units`` -> ``units``; ``nvtutorial`` ->
    ``""``. In a chapter the file's role: ``nvtutorial.chapters.ch10_x.workload`` -> ``workloads``, ``...lessons.y`` ->
    ``lessons`` (a role is a file's name or its prefix: ``workload_p2p`` is a workload); ``chapters`` for the
    chapters' packages themselves (lazy facades), ``registry`` for ``nvtutorial.chapters``; ``?`` for a file with no
    role."""
    parts = module.split(".")
    if len(parts) > 1 and parts[1] == "chapters":
        if len(parts) == 2:
            return "registry"  # nvtutorial/chapters/__init__.py: finds the chapters' named files, imports nothing
        if len(parts) == 3:
            return "chapters"
        role = parts[3]
        return next((a for key, a in CHAPTER_ROLES.items() if role == key or role.startswith(key + "_")), "?")
    return parts[1] if len(parts) > 1 else ""


def closure(edges: Mapping[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        m = todo.pop()
        for n in edges.get(m, ()):
            if n not in seen:
                seen.add(n)
                todo.append(n)
    return seen


# --------------------------------------------------------------------------- the rules


def cycles(edges: Mapping[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    counter = 0

    def visit(v: str) -> None:
        nonlocal counter
        index[v] = low[v] = counter
        counter += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def chapter(module: str) -> int | None:
    """The number of the chapter ``module`` belongs to (``nvtutorial.chapters.ch03_x.report`` -> 3), else None."""
    m = CHAPTER.match(module)
    return int(m.group(1)) if m else None


def _imports_distributed(names: Iterable[str]) -> list[str]:
    return sorted(n for n in names if n == DISTRIBUTED or n.startswith(DISTRIBUTED + "."))


def violations(edges: Mapping[str, set[str]], external: Mapping[str, set[str]]) -> list[str]:
    """Every broken import rule, one line each (empty: the layout holds)."""
    out = []
    for module in sorted(edges):
        a = area(module)
        targets = sorted(edges[module])
        if a in WORKER:
            for t in targets:
                if area(t) not in WORKER | CORE | SHARED:
                    out.append(
                        f"{module} runs on the ranks but imports {t} (only lessons, models, workloads, schemas "
                        "and the core)"
                    )
        if a in SHARED:
            for t in targets:
                if area(t) not in CORE | SHARED:
                    out.append(f"{module} is a torch-free schema or model but imports {t} (only the core and schemas)")
            for n in sorted(external.get(module, ())):
                if n == "torch" or n.startswith("torch."):
                    out.append(f"{module} is a torch-free schema or model but imports {n}")
        own = chapter(module)
        for t in targets:
            later = chapter(t)
            if own is not None and later is not None and later > own and (module, t) not in LATER_CHAPTER_IMPORTS:
                out.append(
                    f"{module} is chapter {own:02d}'s but imports {t} of the later chapter {later:02d} "
                    "(a chapter imports only earlier ones)"
                )
        eager = [t for t in targets if t != "nvtutorial.chapters"]  # the registry: its facade helper
        if a == "chapters" and eager:
            out.append(f"{module} is a chapter's facade but imports {eager[0]} (it imports its files lazily, on use)")
        if a == "?":
            out.append(f"{module} is a chapter file with no role: name it one of {', '.join(sorted(CHAPTER_ROLES))}")
        if a in CORE:
            for t in targets:
                if area(t) not in CORE:
                    out.append(f"{module} is core but imports {t} (the core imports only the core)")
        if a == "launch":
            for t in targets:
                if area(t) not in PROCESS_LAYER and t != WORKLOAD_REGISTRY:
                    out.append(
                        f"{module} is the process layer but imports {t} (only launch/, the core, machine/ and the "
                        "workloads' registry)"
                    )
        if a == "machine":
            for t in targets:
                if area(t) not in CORE | {"machine"}:
                    out.append(f"{module} is machine/ but imports {t} (only the core and machine/)")
        if a in KERNEL_ONLY:
            reach = closure(edges, module)
            for t in sorted(reach):
                if area(t) in NEVER_FROM_KERNEL_ONLY:
                    out.append(
                        f"{module} must never launch but imports {t}"
                        + ("" if t in edges[module] else " (through its imports)")
                    )
            for m in sorted({module} | reach):
                for n in _imports_distributed(external.get(m, ())):
                    out.append(f"{module} must not import {n}" + ("" if m == module else f" (through {m})"))
    for component in cycles(edges):
        out.append("import cycle: " + " -> ".join(component))
    return out


def notebook_violations(paths: Iterable[Path]) -> list[str]:
    """Notebook cells that import ``nvtutorial.workloads``: a notebook runs workloads by name."""
    out = []
    for path in paths:
        nb = nbformat.read(path, as_version=4)
        for i, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            lines = [line for line in cell.source.splitlines() if not line.lstrip().startswith(("%", "!"))]
            tree = ast.parse("\n".join(lines))
            for node in ast.walk(tree):
                names = []
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module:
                    names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
                bad = [n for n in names if n == "nvtutorial.workloads" or n.startswith("nvtutorial.workloads.")]
                if bad:
                    out.append(
                        f"{path.name} cell {i} imports {bad[0]}: run workloads by name, read results with report/"
                    )
    return out


# --------------------------------------------------------------------------- the package


def test_the_package_has_the_target_layout():
    mods = modules(PACKAGE)
    for folder in ("machine", "models", "workloads", "report", "plots", "chapters", "launch", "teach"):
        assert f"nvtutorial.{folder}" in mods, f"nvtutorial/{folder}/__init__.py is missing"
    assert {"nvtutorial.units", "nvtutorial.runtime", "nvtutorial.plots.style"} <= set(mods)
    chapters = sorted(p.name for p in (PACKAGE / "chapters").iterdir() if p.name.startswith("ch"))
    notebooks = sorted(p.stem[:2] for p in NOTEBOOKS)
    assert [c[2:4] for c in chapters] == notebooks, "one chapter folder per notebook, numbered as the notebooks"
    for folder in ("lessons", "experiments", "exercises"):  # what a chapter now holds
        assert not (PACKAGE / folder).exists(), f"nvtutorial/{folder}/ is gone: its files live in their chapters"


def test_every_import_edge_is_seen():
    """The reader finds relative, absolute and function-level imports (else every rule passes vacuously)."""
    edges, external = import_graph(PACKAGE)
    assert "nvtutorial.runtime" in edges["nvtutorial.workloads.selftest"]  # from nvtutorial import runtime
    assert (
        "nvtutorial.chapters.ch03_ddp_training.lessons.training"
        in edges["nvtutorial.chapters.ch03_ddp_training.workload"]
    )  # inside a function
    assert "nvtutorial.units" in edges["nvtutorial.chapters.ch01_hardware.report"]  # from ..units import ...
    assert (
        "nvtutorial.machine.hardware" in edges["nvtutorial.chapters.ch01_hardware.report"]
    )  # from ..machine import hardware
    assert "torch.distributed" in external["nvtutorial.chapters.ch07_collectives.lessons.collectives"]
    chapter = "nvtutorial.chapters.ch10_cost_model"
    assert f"{chapter}.schema" in edges[f"{chapter}.workload"]  # from .schema import ...
    assert (
        "nvtutorial.chapters.ch08_ladder.lessons.rungs" in edges[f"{chapter}.lessons.pipeline"]
    )  # a lesson of another chapter
    assert area(f"{chapter}.workload") == "workloads" and area(f"{chapter}.problems") == "report"


def test_import_rules_hold():
    edges, external = import_graph(PACKAGE)
    assert violations(edges, external) == []


def test_the_process_layer_imports_only_its_own_rule():
    """Every module of nvtutorial/launch/, read with ``ast`` (at module level and in functions): itself, the core,
    machine/ and the workloads' registry, nothing else (docs/architecture.md, the process layer)."""
    edges, external = import_graph(PACKAGE)
    layer = {m for m in edges if area(m) == "launch"}
    assert {f"nvtutorial.launch.{name}" for name in MOVED_TO_LAUNCH} <= layer
    assert not [name for name in MOVED_TO_LAUNCH if (PACKAGE / f"{name}.py").exists()], "no module left at the root"
    assert WORKLOAD_REGISTRY in {t for m in layer for t in edges[m]}  # the rule's one exception is still used
    assert [v for v in violations(edges, external) if " is the process layer " in v] == []


@pytest.mark.parametrize(
    "line, other, target",
    [
        ("from nvtutorial.chapters.ch99_x import lab", "chapters/ch99_x/lab.py", "nvtutorial.chapters.ch99_x.lab"),
        ("from ..report import verdict", "report/verdict.py", "nvtutorial.report.verdict"),
        ("import nvtutorial.plots.style", "plots/style.py", "nvtutorial.plots.style"),
        ("from nvtutorial.teach import show", "teach/show.py", "nvtutorial.teach.show"),
        ("from nvtutorial.models import unet", "models/unet.py", "nvtutorial.models.unet"),
        ("from nvtutorial.workloads import selftest", "workloads/selftest.py", "nvtutorial.workloads.selftest"),
        ("from .. import cli", "cli.py", "nvtutorial.cli"),
    ],
)
def test_the_process_layer_importing_a_client_is_reported(tmp_path, line, other, target):
    edges, external = import_graph(_fake(tmp_path, {"launch/runner.py": f"def f():\n    {line}\n", other: ""}))
    assert violations(edges, external) == [
        f"nvtutorial.launch.runner is the process layer but imports {target} (only launch/, the core, machine/ and "
        "the workloads' registry)"
    ]


def test_notebooks_never_import_workloads():
    assert NOTEBOOKS
    assert notebook_violations(NOTEBOOKS) == []


# --------------------------------------------------------------------------- each rule can fail


def _fake(tmp_path: Path, files: Mapping[str, str]) -> Path:
    root = tmp_path / "nvtutorial"
    for rel, text in {"__init__.py": "", **files}.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        for parent in path.relative_to(root).parents:
            init = root / parent / "__init__.py"
            if not init.exists():
                init.write_text("")
        path.write_text(text)
    return root


@pytest.mark.parametrize(
    "files, expected",
    [
        (
            {"units.py": "", "report/a.py": "def f():\n    from .. import launch\n", "launch/runner.py": ""},
            "nvtutorial.report.a must never launch but imports nvtutorial.launch",
        ),
        (
            {"report/a.py": "from ..chapters.ch99_x import lab\n", "chapters/ch99_x/lab.py": ""},
            "nvtutorial.report.a must never launch but imports nvtutorial.chapters.ch99_x.lab",
        ),
        (
            {
                "plots/a.py": "from nvtutorial.report import b\n",
                "report/b.py": "from nvtutorial.workloads import w\n",
                "workloads/w.py": "",
            },
            "nvtutorial.plots.a must never launch but imports nvtutorial.workloads.w (through its imports)",
        ),
        (
            {"report/a.py": "def f():\n    import torch.distributed as dist\n"},
            "nvtutorial.report.a must not import torch.distributed",
        ),
        (
            {"plots/a.py": "from torch.distributed import all_reduce\n"},
            "nvtutorial.plots.a must not import torch.distributed",
        ),
        (
            {"workloads/w.py": "from nvtutorial.machine import hardware\n", "machine/hardware.py": ""},
            "nvtutorial.workloads.w runs on the ranks but imports nvtutorial.machine.hardware",
        ),
        (
            {"chapters/ch99_x/lessons/l.py": "def f():\n    from nvtutorial.report import r\n", "report/r.py": ""},
            "nvtutorial.chapters.ch99_x.lessons.l runs on the ranks but imports nvtutorial.report.r",
        ),
        (
            {"models/m.py": "import nvtutorial.launch\n", "launch/runner.py": ""},
            "nvtutorial.models.m runs on the ranks but imports nvtutorial.launch",
        ),
        (
            {"machine/t.py": "from ..report import r\n", "report/r.py": ""},
            "nvtutorial.machine.t is machine/ but imports nvtutorial.report.r",
        ),
        (
            {"units.py": "from .machine import hardware\n", "machine/hardware.py": ""},
            "nvtutorial.units is core but imports nvtutorial.machine.hardware",
        ),
        (
            {"report/a.py": "from . import b\n", "report/b.py": "def f():\n    from .a import g\n"},
            "import cycle: nvtutorial.report.a -> nvtutorial.report.b",
        ),
        (
            {"chapters/ch99_x/workload.py": "def f():\n    from . import report\n", "chapters/ch99_x/report.py": ""},
            "nvtutorial.chapters.ch99_x.workload runs on the ranks but imports nvtutorial.chapters.ch99_x.report",
        ),
        (
            {
                "chapters/ch99_x/lessons/l.py": "from nvtutorial.chapters.ch99_x import plots\n",
                "chapters/ch99_x/plots.py": "",
            },
            "nvtutorial.chapters.ch99_x.lessons.l runs on the ranks but imports nvtutorial.chapters.ch99_x.plots",
        ),
        (
            {"chapters/ch99_x/schema.py": "def f():\n    import torch\n"},
            "nvtutorial.chapters.ch99_x.schema is a torch-free schema or model but imports torch",
        ),
        (
            {"chapters/ch99_x/model.py": "from . import report\n", "chapters/ch99_x/report.py": ""},
            "nvtutorial.chapters.ch99_x.model is a torch-free schema or model "
            "but imports nvtutorial.chapters.ch99_x.report",
        ),
        (
            {"chapters/ch99_x/report.py": "from . import lab\n", "chapters/ch99_x/lab.py": ""},
            "nvtutorial.chapters.ch99_x.report must never launch but imports nvtutorial.chapters.ch99_x.lab",
        ),
        (
            {"chapters/ch99_x/plots.py": "from . import workload\n", "chapters/ch99_x/workload.py": ""},
            "nvtutorial.chapters.ch99_x.plots must never launch but imports nvtutorial.chapters.ch99_x.workload",
        ),
        (
            {"chapters/ch99_x/problems.py": "import torch.distributed as dist\n"},
            "nvtutorial.chapters.ch99_x.problems must not import torch.distributed",
        ),
        (
            {"chapters/ch99_x/__init__.py": "from . import report\n", "chapters/ch99_x/report.py": ""},
            "nvtutorial.chapters.ch99_x is a chapter's facade but imports nvtutorial.chapters.ch99_x.report",
        ),
        ({"chapters/ch99_x/helpers.py": ""}, "nvtutorial.chapters.ch99_x.helpers is a chapter file with no role"),
        (
            {
                "chapters/ch98_a/report.py": "def f():\n    from nvtutorial.chapters.ch99_b import report\n",
                "chapters/ch99_b/report.py": "",
            },
            "nvtutorial.chapters.ch98_a.report is chapter 98's but imports nvtutorial.chapters.ch99_b.report of the "
            "later chapter 99",
        ),
        (
            {
                "chapters/ch98_a/lessons/l.py": "from nvtutorial.chapters.ch99_b.lessons import m\n",
                "chapters/ch99_b/lessons/m.py": "",
            },
            "nvtutorial.chapters.ch98_a.lessons.l is chapter 98's but imports nvtutorial.chapters.ch99_b.lessons.m",
        ),
    ],
)
def test_a_violation_is_reported(tmp_path, files, expected):
    edges, external = import_graph(_fake(tmp_path, files))
    found = violations(edges, external)
    assert any(v.startswith(expected) for v in found), found


def test_a_clean_fake_package_passes(tmp_path):
    files = {
        "units.py": "",
        "runtime.py": "from . import units\n",
        "launch/runner.py": "from .. import workloads\nfrom ..machine import hw\nfrom . import spec\n",
        "launch/spec.py": "from nvtutorial import runtime, units\nfrom nvtutorial.chapters import facade\n",
        "workloads/w.py": "from nvtutorial import runtime\nfrom nvtutorial.chapters.ch99_x.lessons import l\n",
        "models/m.py": "",
        "report/r.py": "from ..units import x\nfrom ..machine import hw\n",
        "machine/hw.py": "from .. import units\n",
        "plots/p.py": "from ..report import r\n",
        "chapters/ch99_x/__init__.py": "import importlib\n",
        "chapters/ch99_x/schema.py": "from nvtutorial import units\n",
        "chapters/ch99_x/model.py": "from . import schema\n",
        "chapters/ch99_x/lessons/l.py": "import torch.distributed\nfrom nvtutorial.models import m\n",
        "chapters/ch99_x/workload.py": (
            "from .schema import P\nfrom .lessons import l\nfrom nvtutorial import runtime\n"
        ),
        "chapters/ch99_x/report.py": "from . import model, schema\nfrom nvtutorial.report import r\n",
        "chapters/ch99_x/plots.py": "from . import report\n",
        "chapters/ch99_x/lab.py": "from nvtutorial import launch\nfrom . import report\nfrom ...report import r\n",
        "workloads/w2.py": "from nvtutorial.chapters.ch99_x import workload\n",
    }
    edges, external = import_graph(_fake(tmp_path, files))
    assert violations(edges, external) == []


def test_a_chapter_may_import_an_earlier_chapter_and_the_package_does_only_that(tmp_path):
    files = {
        "chapters/ch98_a/lessons/l.py": "",
        "chapters/ch98_a/report.py": "",
        "chapters/ch99_b/lessons/m.py": "from nvtutorial.chapters.ch98_a.lessons import l\n",
        "chapters/ch99_b/report.py": "from nvtutorial.chapters.ch98_a import report\n",
    }
    edges, external = import_graph(_fake(tmp_path, files))
    assert violations(edges, external) == []
    assert chapter("nvtutorial.chapters.ch03_ddp_training.workload") == 3 and chapter("nvtutorial.chapters") is None
    edges, _ = import_graph(PACKAGE)
    assert any(chapter(m) == 4 and chapter(t) == 3 for m, ts in edges.items() for t in ts)  # 04 reuses 03's
    back = {(m, t) for m, ts in edges.items() for t in ts if (chapter(m) or 99) < (chapter(t) or 0)}
    assert back == set(LATER_CHAPTER_IMPORTS)  # the ones listed, each still made (none listed in vain)


def test_a_notebook_importing_a_workload_is_reported(tmp_path):
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("%matplotlib inline\nimport nvtutorial\n"),
        nbformat.v4.new_code_cell("from nvtutorial.workloads import profile_step\n"),
    ]
    path = tmp_path / "99_bad.ipynb"
    nbformat.write(nb, path)
    assert notebook_violations([path]) == [
        "99_bad.ipynb cell 1 imports nvtutorial.workloads: run workloads by name, read results with report/"
    ]


def test_every_notebook_imports_its_chapter():
    """``from nvtutorial.chapters import chNN_topic as ch`` in each notebook, NN its own number."""
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
        own = re.findall(r"^from nvtutorial\.chapters import (ch\d\d_\w+) as ch\b", code, re.M)
        assert len(own) == 1 and own[0][2:4] == path.name[:2], f"{path.name} imports its chapter as ch: {own}"
