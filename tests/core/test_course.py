"""Where each part of a notebook runs, and at which sizes: ``course.plan`` on every kind of machine."""

from __future__ import annotations

import nbformat
import pytest

from nvtutorial import course
from nvtutorial.report import claims
from nvtutorial.report.verdict import MIME, Verdict
from tests.helpers.paths import ROOT

CPU = course.Machine((), 2)
ONE = course.Machine(("NVIDIA H200",), 16, "2.28.9")
TWO = course.Machine(("NVIDIA H200", "NVIDIA H200"), 32, "2.28.9")
PARTS: dict[str, course.Need | tuple[course.Need, str]] = {
    "roofs": "one GPU",
    "link": "two GPUs",
    "hang": "two ranks",
    "doctor": "CPU",
}


def _cells(machine, profile="auto"):
    p = course.plan("10_cost_model", profile, PARTS, machine)
    return {part.name: (part.profile, part.gpus, part.backend, part.simulated) for part in p.parts}


def test_auto_gives_the_lesson_sizes_wherever_the_part_runs_as_taught():
    assert _cells(TWO) == {
        "roofs": ("full", 1, "nccl", False),
        "link": ("full", 2, "nccl", False),
        "hang": ("full", 2, "nccl", False),
        "doctor": ("full", 0, "gloo", False),
    }
    assert _cells(ONE) == {
        "roofs": ("full", 1, "nccl", False),
        "link": ("ci", 0, "gloo", True),
        "hang": ("ci", 0, "gloo", False),
        "doctor": ("full", 0, "gloo", False),
    }
    assert _cells(CPU) == {
        "roofs": ("ci", 0, "gloo", True),
        "link": ("ci", 0, "gloo", True),
        "hang": ("ci", 0, "gloo", False),
        "doctor": ("full", 0, "gloo", False),
    }


def test_ci_forces_small_sizes_but_keeps_the_gpu_and_full_falls_back_with_a_reason():
    assert _cells(ONE, "ci")["roofs"] == ("ci", 1, "nccl", False)
    assert _cells(TWO, "ci")["doctor"][0] == "ci"
    part = course.plan("x", "full", PARTS, ONE)["link"]
    assert part.profile == "ci" and "profile='full'" in part.why and "2 ranks need 2 GPUs" in part.why
    assert "this machine has 1" in part.why
    assert "no GPU" in course.plan("x", "auto", PARTS, CPU)["roofs"].why


def test_where_names_the_gpus_and_nccl_or_the_simulation():
    p = course.plan("x", "auto", PARTS, ONE)
    assert p["roofs"].where == "1× NVIDIA H200, NCCL 2.28.9"
    assert p["link"].where == "the CPU simulation (2 gloo ranks, 16 cores)"
    assert course.plan("x", "auto", PARTS, TWO)["link"].where == "2× NVIDIA H200, NCCL 2.28.9"
    assert course.plan("x", "auto", PARTS, CPU)["roofs"].where == "the CPU simulation (2 cores)"
    assert p["hang"].where == "2 gloo ranks on the CPU"


def test_a_part_without_a_collective_names_no_nccl_version():
    """Review RR1 N8: a one-GPU part whose rank makes no NCCL call (launched with NCCL only to get its GPU) names
    its GPU and not NCCL's version; the parts that talk through NCCL keep it, on one GPU and on two."""
    for machine, gpus in ((ONE, "1× NVIDIA H200"), (TWO, "1× NVIDIA H200")):
        p = course.plan("x", "auto", PARTS, machine, no_collective=("roofs",))
        assert (p["roofs"].where, p["roofs"].backend, p["roofs"].profile) == (gpus, "nccl", "full")
        assert "NCCL 2.28.9" in course.plan("x", "auto", PARTS, machine)["roofs"].where
    assert course.plan("x", "auto", PARTS, TWO, no_collective=("roofs",))["link"].where == "2× NVIDIA H200, NCCL 2.28.9"
    assert (
        course.plan("x", "auto", PARTS, CPU, no_collective=("roofs",))["roofs"].where == "the CPU simulation (2 cores)"
    )
    with pytest.raises(course.CourseError, match="no_collective names no part of x: roof"):
        course.plan("x", "auto", PARTS, ONE, no_collective=("roof",))


def test_a_gpu_is_never_told_it_needs_one():
    for machine in (ONE, TWO):
        text = str(course.plan("x", "auto", PARTS, machine))
        assert "needs a GPU" not in text and "no GPU" not in text


def test_bad_input_is_refused_before_anything_runs():
    with pytest.raises(course.CourseError, match="profile='big'"):
        course.plan("x", "big", PARTS, ONE)
    with pytest.raises(KeyError, match="no part 'nope'.*roofs, link, hang, doctor"):
        course.plan("x", "auto", PARTS, ONE)["nope"]
    with pytest.raises(course.CourseError, match="profile='big'"):
        course.run_course(profile="big")


def test_the_plan_travels_in_the_notebook_and_into_the_summary(tmp_path):
    p = course.plan("10_cost_model", "auto", PARTS, ONE)
    bundle = p._repr_mimebundle_()
    assert "roofs" in bundle["text/html"] and bundle["text/plain"].startswith("What this machine runs of 10_cost_model")
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("plan")
    cell.outputs = [nbformat.v4.new_output("display_data", data=bundle)]
    nb.cells.append(cell)
    nbformat.write(nb, tmp_path / "10_cost_model.ipynb")
    assert course.plans_in_notebook(nbformat.read(tmp_path / "10_cost_model.ipynb", as_version=4)) == [p]
    outcome = course.NotebookOutcome("10_cost_model.ipynb", True, 1.0, "x", plans=[p.to_dict()])
    text = course.format_summary(course.CourseSummary("auto", "1× NVIDIA H200", [outcome], "out"))
    assert "      roofs: 1× NVIDIA H200, NCCL 2.28.9, lesson sizes" in text
    assert "      link: the CPU simulation (2 gloo ranks, 16 cores), small sizes" in text


def test_cpu_ranks_run_small_on_the_cpu_on_every_machine():
    """Notebook 09's rendezvous-store lab and Slurm job: gloo processes on the CPU wherever they run, not GPU parts."""
    for machine in (CPU, ONE, TWO):
        for profile in ("auto", "ci", "full"):
            part = course.plan("x", profile, {"store": "CPU ranks"}, machine)["store"]
            assert (part.profile, part.gpus, part.backend, part.simulated) == ("ci", 0, "gloo", False)
            assert part.where == "2 gloo ranks on the CPU" and "needs a GPU" not in part.why


def test_a_part_that_cannot_run_here_says_what_is_shown_instead_and_simulates_nothing():
    parts = {"oom": ("one GPU", "the command that runs it on one GPU"), "roofs": "one GPU"}
    cpu = course.plan("06_pitfalls", "auto", parts, CPU)
    assert cpu["oom"].where == "not run here; shown instead: the command that runs it on one GPU"
    assert not cpu["oom"].runs and cpu["oom"].why == "no GPU visible to a CUDA build of torch"
    assert cpu["roofs"].runs and cpu["roofs"].where == "the CPU simulation (2 cores)"
    assert "oom    not run here; shown instead: the command that runs it on one GPU  -      no GPU" in str(cpu)
    one = course.plan("06_pitfalls", "auto", parts, ONE)["oom"]
    assert one.runs and (one.profile, one.gpus, one.where) == ("full", 1, "1× NVIDIA H200, NCCL 2.28.9")
    outcome = course.NotebookOutcome("06_pitfalls.ipynb", True, 1.0, "x", plans=[cpu.to_dict()])
    text = course.format_summary(course.CourseSummary("auto", "CPU", [outcome], "out"))
    assert "      oom: not run here; shown instead: the command that runs it on one GPU\n" in text
    assert course.Plan.from_dict(cpu.to_dict()) == cpu


def test_ncclversion_comes_from_torch_when_loaded_else_from_the_nccl_wheel(monkeypatch):
    import sys
    import types
    from importlib import metadata

    class Dist:
        def __init__(self, name, version):
            self.metadata, self.version = {"Name": name}, version

    monkeypatch.setattr(metadata, "distributions", lambda: [Dist("numpy", "2.0"), Dist("nvidia-nccl-cu13", "2.28.9")])
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert course._nccl_version() == "2.28.9"
    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(nccl=types.SimpleNamespace(version=lambda: (2, 27, 3))))
    monkeypatch.setitem(sys.modules, "torch", fake)
    assert course._nccl_version() == "2.27.3"
    monkeypatch.setattr(metadata, "distributions", lambda: [Dist("numpy", "2.0")])
    monkeypatch.delitem(sys.modules, "torch")
    assert course._nccl_version() is None


def test_two_emulated_nodes_take_a_gpu_each_share_one_or_run_on_the_cpu():
    cells = {
        m: (p.profile, p.gpus, p.backend, p.simulated, p.where)
        for m, p in ((m, course.plan("09", "auto", {"nodes": "two nodes"}, m)["nodes"]) for m in (CPU, ONE, TWO))
    }
    assert cells[TWO] == ("full", 2, "nccl", False, "2 emulated nodes, a GPU each: 2× NVIDIA H200, NCCL 2.28.9")
    assert cells[ONE] == (
        "full",
        1,
        "nccl",
        False,
        "2 emulated nodes sharing 1× NVIDIA H200, NCCL 2.28.9 (NCCL's network transport)",
    )
    assert cells[CPU] == ("ci", 0, "gloo", False, "2 emulated nodes, gloo on the CPU")
    one = course.plan("09", "auto", {"nodes": "two nodes"}, ONE)["nodes"]
    assert "NCCL_HOSTID" in one.why and "does not support" in one.why
    assert course.plan("09", "ci", {"nodes": "two nodes"}, ONE)["nodes"].profile == "ci"


def test_sizes_are_shown_only_for_parts_that_run_something():
    p = course.plan("x", "auto", PARTS, ONE)
    sizes = {row[0]: row[2] for row in p.rows()}
    assert sizes == {"roofs": "the lesson's", "link": "small", "hang": "small", "doctor": "-"}
    outcome = course.NotebookOutcome("x.ipynb", True, 1.0, "x", plans=[p.to_dict()])
    text = course.format_summary(course.CourseSummary("auto", "1× NVIDIA H200", [outcome], "out"))
    assert "      doctor: this kernel (CPU)\n" in text


def test_a_part_that_shows_the_saved_runs_says_so_and_not_the_cpu_simulation(monkeypatch):
    """R5-2: without two GPUs notebook 01's point to point and 02's A/B (C7) launch nothing (their small sizes are
    no parameters) and show the reference 2× H200's saved runs: the plan says so, with no sizes, on a CPU and on one
    GPU; with two GPUs the part runs; an installed package without the saved runs runs the CPU simulation."""
    import json

    from nvtutorial.chapters.ch01_hardware import lab

    saved = lab.saved_instead()
    assert saved == lab.SAVED == "the reference 2× H200's saved runs (reference/h200x2/runs)"
    assert saved is not None  # (said above) for the type checker
    parts: dict[str, course.Need | tuple[course.Need, str]] = {"point to point": ("two GPUs", saved)}
    for machine, why in ((CPU, "no GPU visible"), (ONE, "2 ranks need 2 GPUs for NCCL; this machine has 1")):
        p = course.plan("01_hardware", "auto", parts, machine)
        assert p.rows() == [("point to point", f"not run here; shown instead: {lab.SAVED}", "-", p.parts[0].why)]
        assert p.parts[0].why.startswith(why) and not p.parts[0].runs and p.parts[0].profile == "ci"
    assert course.plan("01_hardware", "auto", parts, TWO)["point to point"].where == "2× NVIDIA H200, NCCL 2.28.9"
    monkeypatch.setattr(lab.reference_runs, "available", lambda: False)
    # saved_instead() is None here: then the part is planned as if nothing were shown instead
    instead: dict[str, tuple[course.Need, str | None]] = {"p": ("two GPUs", lab.saved_instead())}
    assert course.plan("01", "auto", instead, ONE)["p"].where.startswith("the CPU sim")
    root = ROOT / "notebooks"
    for notebook, part, lab_module in (
        ("01_hardware", "point to point", "ch.lab"),
        ("02_environment", "the source's NCCL settings, A/B (C7)", "ch01.lab"),
    ):
        source = "".join("".join(c["source"]) for c in json.loads((root / f"{notebook}.ipynb").read_text())["cells"])
        assert f'"{part}": ("two GPUs", {lab_module}.saved_instead()),' in source


def _notebook(path, *verdicts: Verdict) -> None:
    """A notebook as papermill saves it: one code cell per verdict, displayed with its machine-readable copy."""
    nb = nbformat.v4.new_notebook()
    for v in verdicts:
        cell = nbformat.v4.new_code_cell("v")
        cell.outputs = [nbformat.v4.new_output("display_data", data={"text/plain": str(v), MIME: v.to_dict()})]
        nb.cells.append(cell)
    nbformat.write(nb, path)


PASS = Verdict("ring all-reduce", "pass", "equal")


FAIL = Verdict("ring all-reduce", "fail", "not equal")


CLAIM_WRONG = Verdict("C22", "wrong", "the source's code fails")  # a claim found wrong is a finding, not a failure


def test_a_failed_check_fails_the_notebook(tmp_path):
    _notebook(tmp_path / "07_custom_collectives.ipynb", PASS, CLAIM_WRONG, FAIL, FAIL)
    why = course.failed_check(tmp_path / "07_custom_collectives.ipynb")
    assert why == f"a check failed: {FAIL} (and 1 more)"
    _notebook(tmp_path / "ok.ipynb", PASS, CLAIM_WRONG, Verdict("x", "info", "read"), Verdict("y", "undecided", "?"))
    assert course.failed_check(tmp_path / "ok.ipynb") is None


def test_a_fail_the_registry_names_as_the_lesson_does_not(tmp_path, monkeypatch):
    _notebook(tmp_path / "07_custom_collectives.ipynb", FAIL)
    monkeypatch.setattr(claims, "LESSON_FAILS", {("07_custom_collectives", "ring all-reduce"): "shown on purpose"})
    assert course.failed_check(tmp_path / "07_custom_collectives.ipynb") is None
    assert claims.failed_checks("07_custom_collectives.ipynb", [FAIL]) == []
    assert claims.failed_checks("06_pitfalls", [FAIL]) == [FAIL]  # the same key elsewhere still fails
    other = Verdict("ring: 3 slices", "fail", "x")
    assert claims.failed_checks("07_custom_collectives", [FAIL, other]) == [other]


@pytest.mark.timeout(180)
def test_the_course_summary_counts_it_failed(tmp_path):
    """Through papermill, as ``make course`` runs it: every cell runs, one displays a failed check."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [
        nbformat.v4.new_code_cell('profile = "ci"', metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell(
            "from nvtutorial.report.verdict import Verdict\nVerdict('resume', 'fail', 'the checkpoint lost state')"
        ),
    ]
    (tmp_path / "in").mkdir()
    nbformat.write(nb, tmp_path / "in" / "checks.ipynb")
    nbformat.write(nbformat.v4.new_notebook(cells=nb.cells[:1], metadata=nb.metadata), tmp_path / "in" / "plain.ipynb")
    summary = course.run_course(out=tmp_path / "out", notebooks_dir=tmp_path / "in", profile="ci")
    outcome = {n.name: n for n in summary.notebooks}
    assert not outcome["checks.ipynb"].passed and outcome["plain.ipynb"].passed
    assert outcome["checks.ipynb"].error == "a check failed: resume · fail: the checkpoint lost state"
    text = course.format_summary(summary)
    assert "checks.ipynb  FAILED" in text and "1 passed, 1 failed" in text
