"""``make course``'s summary: a notebook whose cells all ran but which shows a failed check is a failed notebook."""

from __future__ import annotations

import nbformat
import pytest

from nvtutorial import course
from nvtutorial.report import claims
from nvtutorial.report.verdict import MIME, Verdict


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
