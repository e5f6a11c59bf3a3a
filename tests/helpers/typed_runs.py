"""Runs built from typed results, for the readers' tests: each rank written as a run writes it
(``dataclasses.asdict`` as JSON, what ``rank{R}.json`` holds) and read back through the real reader
(``RunResult.ranks_as``)."""

from __future__ import annotations

import dataclasses
import json
import types
from pathlib import Path
from typing import Any, cast

from nvtutorial.results import EnvInfo, RunResult


@dataclasses.dataclass
class TestRun(RunResult):
    """A :class:`RunResult` of made-up ranks, with a label of its own (a real one comes from the run's environment)."""

    __test__ = False  # not a pytest test class
    given_label: str = "2× test GPU"

    @property
    def label(self) -> str:
        return self.given_label


def run_of(
    *ranks: Any,
    label: str = "2× test GPU",
    gpu: bool | None = True,
    workload: str = "test",
    params: dict[str, Any] | None = None,
) -> TestRun:
    """A run whose ranks returned ``ranks`` (dataclasses, or dicts as JSON would hold them); ``gpu=None``: a run
    without an environment block."""
    return TestRun(
        workload=workload,
        params=dict(params or {}),
        returncode=0,
        wall_s=1.0,
        first_output_s=None,
        # is_gpu is all the readers ask of it
        env=cast(EnvInfo, types.SimpleNamespace(is_gpu=gpu)) if gpu is not None else None,
        ranks=[
            json.loads(
                json.dumps(dataclasses.asdict(r) if dataclasses.is_dataclass(r) and not isinstance(r, type) else r)
            )
            for r in ranks
        ],
        run_dir=Path("run"),
        log_files={},
        log_tail=[],
        given_label=label,
    )
