"""The chapter's fixtures that more than one of its test files uses."""

import json

import pytest

from tests.helpers.paths import ROOT
from tests.helpers.profile_step_results import ref  # noqa: F401 - a fixture

H100_TELEMETRY = ROOT / "tests" / "fixtures" / "telemetry-h100x1-2026-12-07" / "telemetry.json"


@pytest.fixture
def h100_telemetry(utc):
    """The one-H100 run's NVML samples and dmon's lines (review RR13-8), through the readers notebook 05 uses."""
    import pandas as pd

    from nvtutorial.machine.telemetry import parse_dmon

    saved = json.loads(H100_TELEMETRY.read_text())
    return pd.DataFrame(saved["samples"]), parse_dmon(saved["dmon_text"], day=saved["started_at"]), saved
