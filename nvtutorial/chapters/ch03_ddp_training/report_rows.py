"""Notebook 03's ``train`` runs read typed (:mod:`~nvtutorial.chapters.ch03_ddp_training.schema`: a ``Rank`` per
rank, a ``Row`` per configuration): where a run was measured, its rows, one configuration's row and repeats, its A/A
gap. Re-exported by ``report.py`` (notebooks 03 and 04 read them there); it imports nothing of it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeGuard

from nvtutorial.chapters.ch03_ddp_training import schema
from nvtutorial.chapters.ch03_ddp_training.schema import Row
from nvtutorial.report.verdict import aa_gap
from nvtutorial.results import EnvInfo, RunResult, Where, label_of

FLASH_OFF = "flash_sdp=False"
"""A committed variant that does the baseline's work exactly (a UNet calls no attention): its A/A pair."""

Train = RunResult | schema.Rank
"""A run of the ``train`` workload, or one rank's typed result (rank 0's, for a reader of one rank)."""


# --- reading the train workload's rows ---------------------------------------------------------
_READ: dict[int, tuple[object, list[schema.Rank]]] = {}
"""Runs read typed, by the run object's id, with the list of rank results each was read from (the committed run
reads in tens of milliseconds, and a table reads it once per variant)."""


def ranks_of(run: Train) -> list[schema.Rank]:
    """Every rank's typed result of a ``train`` run (one, for a rank's result given as it is)."""
    if isinstance(run, schema.Rank):
        return [run]
    seen = _READ.get(id(run))
    if seen is not None and seen[0] is run.ranks:
        return seen[1]
    if len(_READ) >= 16:
        _READ.clear()
    read = run.ranks_as(schema.Rank)
    _READ[id(run)] = (run.ranks, read)
    return read


def where(result: Train | Where) -> str:
    """Where a run was measured (its label), or a plain string as given; "" for a rank's result (it names no machine).
    A GPU run of one rank names no NCCL version: DDP in a world of one does no collective work on the GPU, so the
    version says nothing about its numbers."""
    env = result.env if isinstance(result, RunResult) else None
    if env is not None and env.is_gpu and env.world_size == 1 and env.nccl:
        return env.label_without_nccl
    return label_of(result) if isinstance(result, (RunResult, EnvInfo, str)) else ""


def is_gpu(result: Train) -> bool:
    """Measured on GPUs: the run's environment says so, or (a rank's result) its device."""
    env = result.env if isinstance(result, RunResult) else None
    if env is not None:
        return bool(env.is_gpu)
    ranks = ranks_of(result)
    return bool(ranks) and ranks[0].device.startswith("cuda")


def rows_of(result: Train, rank: int = 0) -> tuple[Row, ...]:
    """The rows of ``rank`` (rank 0: the run's summary), typed; none for a run that returned nothing."""
    ranks = ranks_of(result)
    return ranks[rank].rows if ranks else ()


def find_row(rows: Sequence[Row], variant: str, batch: int | None = None, aa_repeat: bool = False) -> Row | None:
    """The measured row of ``variant`` (at per-GPU ``batch`` if given); the A/A repeat only if asked."""
    for row in rows:
        if row.variant == variant and (batch is None or row.per_gpu_batch == batch) and row.aa_repeat == aa_repeat:
            return row
    return None


def ok(row: Row | None) -> TypeGuard[Row]:
    """A measured row (not None) whose status is ok and that holds its step-time repeats."""
    return row is not None and row.status == "ok" and bool(row.repeats)


def measured(value: float | None, row: Row, what: str) -> float:
    """``value``, a number an ok row holds (``what``: its field), or a ValueError naming the row."""
    if value is None:
        raise ValueError(f"the row of {row.variant!r} at per-GPU batch {row.per_gpu_batch} has no {what}")
    return value


def aa_gap_of(rows: Sequence[Row]) -> float | None:
    """The relative gap between two measurements of the same code in one run: the first configuration
    and its repeat at the end (today), or the baseline and ``flash_sdp=False`` (committed 04 run)."""
    repeat = next((r for r in rows if r.aa_repeat and ok(r)), None)
    if repeat is not None:
        first = find_row(rows, repeat.variant, repeat.per_gpu_batch)
        return aa_gap(first.repeats, repeat.repeats) if ok(first) else None
    base, same = find_row(rows, "baseline"), find_row(rows, FLASH_OFF)
    return aa_gap(base.repeats, same.repeats) if ok(base) and ok(same) else None


def repeats_on_every_rank(result: Train, variant: str, batch: int | None = None) -> list[float]:
    """The step-time repeats of one configuration from every rank of the run, together."""
    out: list[float] = []
    for rank in ranks_of(result):
        row = find_row(rank.rows, variant, batch)
        if ok(row):
            out += row.repeats
    return out
