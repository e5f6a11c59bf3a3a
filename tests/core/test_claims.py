"""The registry of the source's 23 claims: complete, each decided by a named function that a test runs.

The topic tests (``tests/test_claims_*.py`` and the notebooks' tests) recompute each decision from
its evidence: a CPU run, the committed 2× H200 result JSON, or vendor data. This file checks that the
registry holds together, so a claim cannot lose its decider or its test unnoticed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nvtutorial.report import claims
from nvtutorial.report.verdict import CLAIM_STATUSES
from tests.helpers.paths import TESTS

NOTEBOOKS = TESTS.parent / "notebooks"


def test_the_23_claims_of_the_source_each_once():
    assert [c.id for c in claims.CLAIMS] == [f"C{i}" for i in range(1, 24)]
    assert [claims.claim(f"C{i}").id for i in range(1, 24)] == [c.id for c in claims.CLAIMS]
    with pytest.raises(KeyError, match="the source's claims are C1–C23"):
        claims.claim("C24")


def test_a_claim_is_refused_with_an_unknown_status_or_evidence():
    c = claims.claim("C1")
    fields: dict[str, Any] = dict(
        id="C0", part=1, source="s", finding="f", status="wrong", evidence="CPU run", notebook="00_welcome"
    )
    assert claims.Claim(**fields).status == "wrong"
    with pytest.raises(ValueError, match="is not one of " + ", ".join(CLAIM_STATUSES)):
        claims.Claim(**{**fields, "status": "pass"})
    with pytest.raises(ValueError, match="evidence 'a hunch'"):
        claims.Claim(**{**fields, "evidence": "a hunch"})
    with pytest.raises(LookupError, match="C0 names no function"):
        claims.Claim(**fields).decider()
    assert c.decider() is __import__("nvtutorial.chapters.ch03_ddp_training.report", fromlist=["x"]).verdict_c1


CALLS = claims.decider_calls(
    {str(p.relative_to(TESTS)): p.read_text() for p in TESTS.rglob("test_*.py") if p != Path(__file__).resolve()}
)


@pytest.mark.parametrize("claim", claims.CLAIMS, ids=lambda c: c.id)
def test_each_claim_is_decided_by_a_function_a_test_runs(claim):
    decide = claim.decider()  # importable, named in the registry
    assert callable(decide) and decide.__doc__, (
        f"{claim.id}: {claim.decided_by} needs a docstring saying what it decides"
    )
    assert CALLS[claim.id], f"{claim.id}: no test calls {claim.decided_by}"


SOURCES = {
    "by_module.py": "from nvtutorial.chapters.ch03_ddp_training import report\nv = report.verdict_c1(summary)\n",
    "dotted.py": (
        "import nvtutorial.chapters.ch01_hardware.report_links\n"
        "nvtutorial.chapters.ch01_hardware.report_links.claim_c2()\n"
    ),
    "by_name.py": (
        "from nvtutorial.chapters.ch07_collectives.report_compression import density_verdict\ndensity_verdict({}, '')\n"
    ),
    "registry.py": "from nvtutorial.report import claims\nclaims.claim('C22').decider()(rows, 'CPU')\n",
    # none of these runs a decider:
    "mentioned.py": "# verdict_c14(rows) decides C14\ntext = 'verdict_c15(summary)'\n",
    "not_called.py": "from nvtutorial.report import claims\nassert callable(claims.claim('C16').decider())\n",
    "any_claim.py": "for claim in claims.CLAIMS:\n    claim.decider()(x)\n",
    "other_module.py": "from nvtutorial.chapters.ch05_profiling import report\nreport.verdict_c1(summary)\n",
    "same_name.py": "def verdict_c11(x):\n    return x\nverdict_c11(3)\n",
}


def test_the_decider_check_fails_where_no_test_runs_the_decider():
    """The check above, on test files written for it: it finds the four real calls and nothing else."""
    found = claims.decider_calls(SOURCES)
    assert {cid: lines for cid, lines in found.items() if lines} == {
        "C1": ["by_module.py:2"],
        "C2": ["dotted.py:2"],
        "C23": ["by_name.py:2"],
        "C22": ["registry.py:2"],
    }
    assert not any(found[c] for c in ("C11", "C14", "C15", "C16"))


@pytest.mark.parametrize("claim", claims.CLAIMS, ids=lambda c: c.id)
def test_each_claim_is_shown_in_its_notebook(claim):
    path = NOTEBOOKS / f"{claim.notebook}.ipynb"
    assert path.exists(), f"{claim.id}: no notebook {claim.notebook}"
    text = path.read_text()
    assert claim.id in text, f"{claim.id} is not mentioned in {path.name}"


def test_the_claims_table_is_in_the_readme_and_notebook_00():
    readme = (TESTS.parent / "README.md").read_text()
    assert (
        "claims.markdown_table" in (NOTEBOOKS / "00_welcome.ipynb").read_text()
        or "claims.frame" in (NOTEBOOKS / "00_welcome.ipynb").read_text()
    )
    start, end = "<!-- claims-table: start", "<!-- claims-table: end -->"
    assert start in readme and end in readme, "README.md lacks the generated claims table"
    table = readme.split(start, 1)[1].split("-->", 1)[1].split(end, 1)[0].strip()
    assert table == claims.markdown_table(), (
        "README's claims table is out of date: python -m nvtutorial.report.claims --readme"
    )


def test_the_table_as_markdown_and_as_a_frame(tmp_path):
    rows = claims.markdown_table().splitlines()
    assert (
        rows[:2]
        == [
            "| # | the source says | verdict | what is true | evidence | shown in |",
            "| --- | --- | --- | --- | --- | --- |",
        ]
        and len(rows) == 25
    )
    c1 = claims.claim("C1")
    assert rows[2] == f"| C1 | {c1.source} | **{c1.status}** | {c1.finding} | {c1.evidence} | `{c1.notebook}` |"
    linked = claims.markdown_table(lambda c: f"[{c.notebook}](x)").splitlines()[2]
    assert linked.endswith("| [03_ddp_training](x) |")
    assert claims._cell("a | b\nc") == "a \\| b c"
    frame = claims.frame()
    assert list(frame.index) == [c.id for c in claims.CLAIMS] and frame.loc["C22", "verdict"] == "wrong"
    assert list(frame.columns) == ["the source says", "verdict", "what is true", "evidence", "notebook"]


def test_the_readme_table_is_written_between_its_markers(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{claims.README_START}\nold table\n{claims.README_END}\noutro\n")
    assert claims.update_readme(str(readme)) is True
    text = readme.read_text()
    assert text == f"intro\n{claims.README_START}\n{claims.markdown_table()}\n{claims.README_END}\noutro\n"
    assert claims.update_readme(str(readme)) is False and readme.read_text() == text
    readme.write_text("no markers\n")
    with pytest.raises(SystemExit, match="has no claims-table markers"):
        claims.update_readme(str(readme))
