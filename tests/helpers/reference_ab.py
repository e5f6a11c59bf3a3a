"""The reference 2x H200's committed runs of chapter 1 (reference/h200x2/runs), and its A/B through the lab,
for the tests of chapters 1 and 2."""

from __future__ import annotations

import pytest

from nvtutorial.chapters.ch01_hardware import lab as bwlab
from nvtutorial.chapters.ch01_hardware import report_reference as reference_runs
from nvtutorial.results import RunResult


def reference_run(name: str) -> RunResult:
    """A committed run of the reference 2× H200 (``report.reference_runs.RUNS`` names them)."""
    return reference_runs.load(name)


@pytest.fixture(scope="module")
def ab():
    return bwlab.run_lab(
        {},
        reuse={
            "default": reference_run("ab default"),
            "source's settings": reference_run("ab source's settings"),
            "P2P off": reference_run("ab P2P off"),
        },
        paths=bwlab.SOURCE_AB_PATHS,
    )
