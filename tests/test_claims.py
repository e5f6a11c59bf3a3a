"""The registry of the source's 23 claims: complete, each decided by a named function that a test runs.

The topic tests (``tests/test_claims_*.py`` and the notebooks' tests) recompute each decision from
its evidence: a CPU run, the committed 2× H200 result JSON, or vendor data. This file checks that the
registry holds together, so a claim cannot lose its decider or its test unnoticed.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from nvtutorial.report import claims
from nvtutorial.report.verdict import CLAIM_STATUSES

TESTS = Path(__file__).resolve().parent
NOTEBOOKS = TESTS.parent / "notebooks"


def test_the_23_claims_of_the_source_each_once():
    assert [c.id for c in claims.CLAIMS] == [f"C{i}" for i in range(1, 24)]
    assert all(c.status in CLAIM_STATUSES for c in claims.CLAIMS)


@pytest.mark.parametrize("claim", claims.CLAIMS, ids=lambda c: c.id)
def test_each_claim_is_decided_by_a_function_a_test_runs(claim):
    decide = claim.decider()  # importable, named in the registry
    assert callable(decide) and decide.__doc__, f"{claim.id}: {claim.decided_by} needs a docstring saying what it decides"
    name = decide.__name__
    callers = [p.name for p in TESTS.glob("test_*.py") if p.name != Path(__file__).name
               and re.search(rf"\b{re.escape(name)}\s*\(|\.decider\(\)", p.read_text())]
    assert callers, f"{claim.id}: no test calls {claim.decided_by}"


@pytest.mark.parametrize("claim", claims.CLAIMS, ids=lambda c: c.id)
def test_each_claim_is_shown_in_its_notebook(claim):
    path = NOTEBOOKS / f"{claim.notebook}.ipynb"
    assert path.exists(), f"{claim.id}: no notebook {claim.notebook}"
    text = path.read_text()
    assert claim.id in text, f"{claim.id} is not mentioned in {path.name}"


def test_the_claims_table_is_in_the_readme_and_notebook_00():
    readme = (TESTS.parent / "README.md").read_text()
    assert "claims.markdown_table" in (NOTEBOOKS / "00_welcome.ipynb").read_text() or \
        "claims.frame" in (NOTEBOOKS / "00_welcome.ipynb").read_text()
    start, end = "<!-- claims-table: start", "<!-- claims-table: end -->"
    assert start in readme and end in readme, "README.md lacks the generated claims table"
    table = readme.split(start, 1)[1].split("-->", 1)[1].split(end, 1)[0].strip()
    assert table == claims.markdown_table(), "README's claims table is out of date: python -m nvtutorial.report.claims --readme"
