"""What a workload returns crosses the process boundary as JSON and comes back typed (results.typed,
RunResult.ranks_as)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Literal

import pytest

from nvtutorial.results import RunResult, typed


@dataclasses.dataclass(frozen=True)
class Point:
    size: int
    seconds: float


@dataclasses.dataclass(frozen=True)
class Rank:
    device: str
    kind: Literal["a", "b"]
    points: tuple[Point, ...]
    best: Point | None = None

    @staticmethod
    def upgrade(data: dict) -> dict:  # an older layout called the points "rows"
        if "rows" in data:
            data["points"] = data.pop("rows")
        return data


def test_typed_builds_nested_dataclasses_tuples_optionals_and_literals():
    got = typed(Rank, {"device": "cpu", "kind": "a", "points": [{"size": 4, "seconds": 1}], "best": None})
    assert got == Rank("cpu", "a", (Point(4, 1.0),), None)
    assert isinstance(got.points, tuple) and isinstance(got.points[0].seconds, float)
    assert typed(Rank, {"device": "cpu", "kind": "b", "rows": []}).points == ()  # upgraded from the old layout


@pytest.mark.parametrize(
    "data, words",
    [
        ({"device": "cpu", "kind": "a"}, "missing field 'points' of Rank"),
        ({"device": "cpu", "kind": "a", "points": [], "extra": 1}, "unknown field extra for Rank"),
        ({"device": "cpu", "kind": "c", "points": []}, "'c' is not one of ('a', 'b')"),
        ({"device": "cpu", "kind": "a", "points": [{"size": 4}]}, "Rank.points[0]: missing field 'seconds' of Point"),
        ({"device": "cpu", "kind": "a", "points": 3}, None),
    ],
)
def test_typed_names_what_does_not_fit(data, words):
    with pytest.raises((ValueError, TypeError)) as info:
        typed(Rank, data)
    if words:
        assert words in str(info.value)


def test_a_run_result_gives_every_rank_typed():
    ranks = [
        {"device": "cpu", "kind": "a", "points": []},
        {"device": "cpu", "kind": "b", "rows": [{"size": 1, "seconds": 2}]},
    ]
    result = RunResult(
        workload="w",
        params={},
        returncode=0,
        wall_s=1.0,
        first_output_s=0.1,
        env=None,
        ranks=ranks,
        run_dir=Path("run"),
        log_files={},
        log_tail=[],
    )
    assert result.ranks_as(Rank)[1].points == (Point(1, 2.0),)
    assert result.metrics_as(Rank).kind == "a"
    empty = dataclasses.replace(result, ranks=[], error={"type": "Timeout"})
    with pytest.raises(ValueError, match="no rank reported metrics"):
        empty.metrics_as(Rank)
