"""Shared by the tests of several files (first written for tests/test_claims_collectives.py)."""

from __future__ import annotations

import pytest

from nvtutorial.chapters.ch07_collectives import schema, schema_compression
from nvtutorial.results import RunResult
from tests.helpers.paths import ROOT

RUNS = ROOT / "reference" / "h200x2" / "runs"


BENCH = RUNS / "collectives_bench-20261130-022952-f3a4e5" / "result.json"


COMPRESSION = [
    RUNS / "compression-20261130-023009-540e2f" / "result.json",
    RUNS / "compression-20261130-023036-220ce9" / "result.json",
]


@pytest.fixture(scope="module")
def bench() -> list[schema.Rank]:
    return RunResult.load(BENCH).ranks_as(schema.Rank)


@pytest.fixture(scope="module")
def hooks() -> dict[str, schema_compression.Rank]:
    runs = [RunResult.load(p).metrics_as(schema_compression.Rank) for p in COMPRESSION]
    return {m.link: m for m in runs}
