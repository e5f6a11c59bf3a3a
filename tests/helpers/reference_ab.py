"""The reference 2x H200's committed runs of chapter 1 (reference/h200x2/runs), and its A/B through the lab,
for the tests of chapters 1 and 2."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from nvtutorial.chapters.ch01_hardware import lab as bwlab
from nvtutorial.chapters.ch01_hardware import report_reference as reference_runs
from nvtutorial.chapters.ch01_hardware.report_lab import LabRun
from nvtutorial.results import RunResult


def reference_run(name: str) -> RunResult:
    """A committed run of the reference 2× H200 (``report.reference_runs.RUNS`` names them)."""
    return reference_runs.load(name)


def reference_lab(runs: Mapping[str, str], **kwargs: Any) -> list[LabRun]:
    """The lab read from committed runs (nothing launched): ``runs`` maps each path to the run it reuses."""
    return bwlab.run_lab({}, reuse={path: reference_run(name) for path, name in runs.items()}, **kwargs)


@pytest.fixture(scope="module")
def ab():
    return reference_lab(
        {"default": "ab default", "source's settings": "ab source's settings", "P2P off": "ab P2P off"},
        paths=bwlab.SOURCE_AB_PATHS,
    )
