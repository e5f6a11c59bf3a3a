"""The notebooks: reviewable as committed, executed once per test run, and their conclusions checked.

Each notebook is executed once per test run with the ``ci`` profile: ``tests/test_jupyterlab.py`` runs every
notebook with Run All in a real JupyterLab and saves the executed copy into ``$NVTUTORIAL_EXECUTED_DIR``, where
``executed`` reads it. A notebook nothing executed yet (no Chromium here, or a test file run alone) is executed by
papermill the first time a test asks for it. The executed copies stay in that folder. The cells marked
``# NBVAL_CHECK_OUTPUT`` are then compared with their committed CPU outputs by nbval's comparison
(``tests/nbval_outputs.py``), on that one executed copy.

Every claim a notebook shows is compared with the registry, and a check that fails fails the notebook unless
the registry says that failing is the lesson there (``claims.LESSON_FAILS``).
"""

from __future__ import annotations

import ast
import re
from typing import cast

import nbformat
import pytest

from nvtutorial.report import claims
from nvtutorial.report.verdict import CLAIM_STATUSES, STATUSES, Verdict, verdicts_in_notebook
from tests.helpers import nbval_outputs
from tests.helpers.executed import NOTEBOOKS, executed

ABSOLUTE_PATH = re.compile(r"(?<![\w.])(/(home|Users|root|work|tmp|mnt)/|[A-Z]:\\\\)")
DISTRIBUTED_CALL = re.compile(
    r"\bdist\.\w+\(|torch\.distributed\.\w+\(|DistributedDataParallel\(|\bDDP\(|fully_shard\("
)


def test_there_are_notebooks():
    assert NOTEBOOKS and NOTEBOOKS[0].name.startswith("00_")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_clean_and_follows_the_skeleton(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(not c.outputs and c.execution_count is None for c in code), "commit notebooks without outputs"
    assert nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith("# "), "first cell: the title"
    params = [c for c in code if "parameters" in c.metadata.get("tags", [])]
    assert len(params) == 1, "exactly one cell tagged `parameters`"
    tree = ast.parse(params[0].source)
    assert all(isinstance(node, ast.Assign) for node in tree.body), "the parameters cell only assigns"
    for node in tree.body:
        ast.literal_eval(node.value)  # literals only: papermill cannot update derived values
    assert "profile" in {t.id for node in tree.body for t in node.targets}
    headings = [line for c in nb.cells if c.cell_type == "markdown" for line in c.source.splitlines()]
    assert "## Summary" in headings and "## Exercises" in headings
    text = "\n".join(c.source for c in nb.cells)
    assert not ABSOLUTE_PATH.search(text), f"absolute path in {path.name}: {ABSOLUTE_PATH.search(text).group(0)}"
    assert "plt.show()" not in text


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_no_distributed_code_is_copied_into_markdown(path):
    """Code the course teaches is shown from the file that runs (teach.show), never copied into markdown."""
    nb = nbformat.read(path, as_version=4)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type != "markdown":
            continue
        for block in re.findall(r"```(?:python|py)?\n(.*?)```", cell.source, re.S):
            calls = DISTRIBUTED_CALL.findall(block)
            assert len(block.splitlines()) <= 3 or not calls, (
                f"{path.name}, markdown cell {i}: {len(block.splitlines())} lines of distributed code in markdown "
                f"({', '.join(calls[:3])}); show it from its file with nvtutorial.teach.show"
            )


GPU_EVIDENCE = ("2× H200 run", "pending a 2× H200 run")
NOT_DECIDED_HERE = ("info", "undecided", "unverifiable")
"""What a verdict on a claim that only GPUs settle may say on the CPU instead of the registered status: that it
is not decided here ("unverifiable" where the CPU cannot check it, e.g. no dmon, no CUDA allocator)."""
PRINTED_VERDICT = re.compile(r"^(C\d{1,2}) · ([a-z ]+?): ", re.MULTILINE)


def shown_claims(nb) -> list[Verdict]:
    """Every verdict on one of the source's claims that a notebook displayed or printed."""
    shown = [v for v in verdicts_in_notebook(nb) if v.key in claims.BY_ID]
    for cell in nb.cells:
        for output in cell.get("outputs", []) if cell.cell_type == "code" else []:
            if output.get("output_type") == "stream":
                shown += [
                    Verdict(cid, status, "printed")
                    for cid, status in PRINTED_VERDICT.findall(output.text)
                    if status in STATUSES
                ]
    return shown


def claim_problems(name: str, shown: list[Verdict], on_gpu: bool) -> list[str]:
    """Where the claims a notebook shows disagree with the registry, and the registry's claims it does not show."""
    problems = []
    for v in shown:
        c = claims.BY_ID[v.key]
        if v.status == c.status:
            continue
        if not on_gpu and c.evidence in GPU_EVIDENCE and v.status in NOT_DECIDED_HERE:
            continue  # a GPU claim, not decided on the CPU: it says so
        problems.append(f"{name}: {v.key} · {v.status} (registered: {c.status}, from a {c.evidence})")
    home = name.removesuffix(".ipynb")
    missing = sorted(
        {c.id for c in claims.CLAIMS if c.notebook == home} - {v.key for v in shown}, key=lambda cid: int(cid[1:])
    )
    problems += [f"{name}: {cid} is registered as shown here but no verdict on it was displayed" for cid in missing]
    return problems


def test_the_claims_comparison_fails_on_a_flip_and_on_a_claim_not_shown():
    ok = [Verdict("C4", "wrong", "t"), Verdict("C6", "unverifiable", "t"), Verdict("C7", "wrong", "t")]
    assert claim_problems("02_environment.ipynb", ok, on_gpu=False) == []
    flipped = [Verdict("C4", "partly", "t"), *ok[1:]]
    assert claim_problems("02_environment.ipynb", flipped, on_gpu=False) == [
        "02_environment.ipynb: C4 · partly (registered: wrong, from a primary source)"
    ]
    assert claim_problems("02_environment.ipynb", ok[:2], on_gpu=False) == [
        "02_environment.ipynb: C7 is registered as shown here but no verdict on it was displayed"
    ]
    gpu_claim = [
        Verdict("C1", "info", "not decided on the CPU"),
        Verdict("C14", "info", "t"),
        Verdict("C15", "info", "t"),
    ]
    assert claim_problems("03_ddp_training.ipynb", gpu_claim + [Verdict("C18", "partly", "t")], on_gpu=False) == []
    assert claim_problems("03_ddp_training.ipynb", gpu_claim[:1], on_gpu=True)[0].startswith(
        "03_ddp_training.ipynb: C1 · info (registered: wrong"
    )
    assert (
        claim_problems("03_ddp_training.ipynb", [Verdict("C18", "info", "t")], on_gpu=False)[0]
        == "03_ddp_training.ipynb: C18 · info (registered: partly, from a CPU run)"
    )
    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell(
                "print(v)",
                outputs=[
                    nbformat.v4.new_output("stream", text="C22 · wrong: the source's code fails\nC23 · maybe: no\n")
                ],
            )
        ]
    )
    assert [(v.key, v.status) for v in shown_claims(nb)] == [("C22", "wrong")]
    assert set(CLAIM_STATUSES) <= set(STATUSES)


def _on_gpu() -> bool:
    import torch

    from nvtutorial.machine import hardware

    return bool(torch.version.cuda) and hardware.gpu_count() >= 2


@pytest.mark.notebooks
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_and_its_checks_hold(path):
    nb = executed(path.name)
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors, f"{path.name}: {errors[0].get('ename')}: {errors[0].get('evalue')}"
    failed = claims.failed_checks(path.name, verdicts_in_notebook(nb))
    assert not failed, f"{path.name}: a check failed: {failed[0]}"
    # Every claim the notebook shows reaches the registered status (or, for a claim only GPUs settle, says on the
    # CPU that it is not decided there), and every claim registered as shown here is shown.
    problems = claim_problems(path.name, shown_claims(nb), _on_gpu())
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_committed_outputs_match_the_notebooks_cells(path):
    """nbval compares the marked cells with tests/nbval/<notebook>: that file must be of today's cells."""
    problems = nbval_outputs.stale(path.name)
    assert not problems, "\n".join(problems) + "\nregenerate them with `make nbval-outputs`"


@pytest.mark.notebooks
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_the_marked_cells_print_their_committed_conclusions(path):
    """nbval's comparison of the copy this run executed with tests/nbval/<notebook>: a verdict that flips or a line
    that vanishes fails; numbers, times, paths and the host do not (tests/nbval/sanitize.cfg)."""
    if not (nbval_outputs.REFERENCE / path.name).exists():
        assert not any(nbval_outputs.marked(c) for c in nbformat.read(path, as_version=4).cells), (
            f"{path.name} marks cells but has no committed outputs: `make nbval-outputs`"
        )
        return
    problems = nbval_outputs.compare_executed(path.name, executed(path.name))
    assert not problems, "\n\n".join(problems)


def test_the_output_comparison_fails_on_a_flipped_verdict_and_a_vanished_line():
    """nbval's comparison with the sanitize file, on the committed outputs of 06: numbers may change, conclusions
    not."""
    name = "06_pitfalls.ipynb"
    committed = nbformat.read(nbval_outputs.REFERENCE / name, as_version=4)
    assert nbval_outputs.compare_executed(name, committed) == []
    cell = next(
        c for c in committed.cells if "C21" in "".join(o.get("data", {}).get("text/plain", "") for o in c.outputs)
    )
    text = cell.outputs[0].data["text/plain"]
    other_numbers = cast(nbformat.NotebookNode, nbformat.from_dict(committed))
    renumbered = next(c for c in other_numbers.cells if c.source == cell.source)
    renumbered.outputs[0].data["text/plain"] = text.replace("N", "7")  # other numbers: still the same conclusion
    renumbered.outputs[0].data["text/markdown"] = cell.outputs[0].data["text/markdown"].replace("N", "12.5")
    assert nbval_outputs.compare_executed(name, other_numbers) == []
    flipped = cast(nbformat.NotebookNode, nbformat.from_dict(committed))
    target = next(c for c in flipped.cells if c.source == cell.source)
    target.outputs[0].data["text/plain"] = text.replace("C21 · partly", "C21 · holds")
    (problem,) = nbval_outputs.compare_executed(name, flipped)
    assert "C21 · holds" in problem and "C21 · partly" in problem
    vanished = cast(nbformat.NotebookNode, nbformat.from_dict(committed))
    streams = next(c for c in vanished.cells if any(o.output_type == "stream" for o in c.outputs))
    streams.outputs = [o for o in streams.outputs if o.output_type != "stream"]
    assert len(nbval_outputs.compare_executed(name, vanished)) == 1


def test_the_comparison_drops_the_narrations_timing_lines_and_only_them():
    """A loaded CI machine printed "[check 1.53 s] still waiting (2 s)" inside a marked cell of 09: such lines depend on
    timing, not on a conclusion; a rank's own lines and the conclusion stay."""
    text = (
        "checking resume: first\n[check   1.53 s] still waiting (2 s)\n[lab  12.00 s] now: the agents restart\n"
        "[rank0  3.10 s] still waiting (1 s)\nFAIL (multinode_resume): the weights were not loaded\n"
    )
    (kept,) = nbval_outputs._without_timing_lines([{"output_type": "stream", "name": "stdout", "text": text}])
    assert kept["text"] == (
        "checking resume: first\n[rank0  3.10 s] still waiting (1 s)\n"
        "FAIL (multinode_resume): the weights were not loaded\n"
    )
    waiting = {"output_type": "stream", "text": "[run 1.5 s] still waiting (3 s)\n"}
    assert nbval_outputs._without_timing_lines([waiting]) == []


@pytest.mark.notebooks
@pytest.mark.parametrize(
    "path", [p for p in NOTEBOOKS if p.name[:2] in {"03", "04", "05", "06", "07", "08", "09"}], ids=lambda p: p.stem
)
def test_lesson_runs_distributed_code_from_a_cell(path):
    """Issue 10: every lesson from 03 on runs at least one cell that calls torch.distributed or DDP directly
    (through %%ranks), or runs a lesson file that it shows (nvtutorial.run on a path under lessons/)."""
    nb = executed(path.name)
    code = [c.source for c in nb.cells if c.cell_type == "code"]
    ranks_cells = [s for s in code if s.lstrip().startswith("%%ranks") and DISTRIBUTED_CALL.search(s)]
    shown_and_run = [
        s
        for s in code
        if re.search(r"nvtutorial\.run\(\s*[\w.]*(lesson|LESSON|path|PATH|script)", s)
        or re.search(r"\.run\(\s*[\"']nvtutorial/chapters/ch\d\d_\w+/lessons/", s)
        or re.search(r"ch\.lab\.run_lesson\(", s)  # notebook 09's lab runs its lesson file (shown in section 1)
    ]
    assert ranks_cells or shown_and_run, f"{path.name} runs no distributed code the learner can read"
