"""What a workload returns crosses the process boundary as JSON and comes back typed (results.typed,
RunResult.ranks_as)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Literal

import pytest

from nvtutorial.results import RunResult, typed
from tests.helpers.paths import ROOT


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


# --------------------------------------------------------------------------- every committed reference, typed

REFERENCES = sorted(ROOT.glob("reference/*/runs*/*/result.json"))


def _plain(value):
    """A typed result as JSON would hold it (tuples as lists), to compare with what the run wrote."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def test_the_committed_references_are_found():
    assert len(REFERENCES) >= 30, REFERENCES  # reference/h200x2/runs, reference/h200x1/runs and runs-10


@pytest.mark.parametrize("path", REFERENCES, ids=[str(p.relative_to(ROOT / "reference")) for p in REFERENCES])
def test_every_committed_reference_reads_typed_through_its_schema(path):
    """A committed GPU run reads back through its workload's schema (after the schema's ``upgrade`` of an older
    layout): every rank typed, and the typed result, written back as JSON, equals the UPGRADED metrics (a top-level
    field the layout did not write compared at its default). So nothing the upgraded layout holds is lost in the
    typing; what an upgrade itself drops or rewrites is not checked here, and each upgrade's docstring lists it with
    why (ch07 ``RingRow.upgrade``: ``ring_over_all_reduce``; ``schema_compression.Rank.upgrade``: ``step_ms_spread``,
    ``wall_ms_per_step``; ``schema_p2p.Rank.upgrade``: the skip row and ``role``; ch03 ``Rank.upgrade``: the
    committed variant names, ``per_gpu_batch`` and the earlier keys; ch05: an empty ``probe``; ch08: a failed
    ``fit``; docs/architecture.md lists them)."""
    from nvtutorial.workloads import result_type

    result = RunResult.load(path)
    schema = result_type(result.workload, result.params)
    typed_ranks = result.ranks_as(schema)
    assert len(typed_ranks) == len(result.ranks)
    upgrade = getattr(schema, "upgrade", None)
    for rank, metrics in zip(typed_ranks, result.ranks):
        assert isinstance(rank, schema)
        expected = upgrade(dict(metrics)) if callable(upgrade) else metrics
        assert _plain(rank) == _plain(_drop_defaults_absent(schema, expected, rank))


def _drop_defaults_absent(schema, expected, rank):
    """``expected`` with the fields an older layout did not write filled with the typed result's defaults, at every
    depth (a field added to a nested record, e.g. a calibration point, is absent from older runs too)."""
    return _filled(expected, {f.name: _plain(getattr(rank, f.name)) for f in dataclasses.fields(schema)})


def _filled(expected, typed):
    if isinstance(expected, dict) and isinstance(typed, dict):
        return {k: _filled(expected[k], v) if k in expected else v for k, v in typed.items()}
    if isinstance(expected, list) and isinstance(typed, list) and len(expected) == len(typed):
        return [_filled(e, t) for e, t in zip(expected, typed, strict=True)]
    return expected


def test_every_workload_declares_what_it_returns():
    """Every workload ``nvtutorial list`` shows has a schema: its ``Rank`` (or ``rank_type``) is found by name."""
    from nvtutorial import workloads
    from nvtutorial.workloads import result_type

    for name in workloads.names():
        schema = result_type(name, {})
        assert dataclasses.is_dataclass(schema), name
        with pytest.raises(dataclasses.FrozenInstanceError):  # frozen: a result read back is not edited
            setattr(_any_instance(schema), dataclasses.fields(schema)[0].name, None)


def _any_instance(schema):
    """An instance of ``schema`` built without its __init__ (the frozen check needs only the class's __setattr__)."""
    return object.__new__(schema)


def test_a_workload_without_a_schema_is_named():
    from nvtutorial.workloads import result_type

    with pytest.raises(LookupError, match="no schema declares what 'nope' returns"):
        result_type("nope")
