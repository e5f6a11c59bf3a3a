"""The time on the wire, read from the ranks' splits of a ``profile_step`` run (notebook 05; parent side, no CUDA).

Every rank's communication in its own trace includes waiting for the other ranks: the estimate of the link takes
the ranks' traces paired on one clock where the run has them, else the least communication of any rank
(:func:`link_estimate`), per rank of the step (:func:`exposure`) and per batch of the sweep (:func:`sweep_points`).
The interleaved repeats are compared by the noise rule (:func:`comparisons`). The tables and verdicts built on them
are :mod:`nvtutorial.chapters.ch05_profiling.report`'s.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Sequence
from typing import Literal

from nvtutorial.chapters.ch05_profiling.schema import Kinds, Link, Rank, Split, SweepRow
from nvtutorial.report.verdict import Comparison, compare
from nvtutorial.results import RunResult


def ranks(res: RunResult) -> list[Rank]:
    """Every rank's result of a ``profile_step`` run, typed (older layouts upgraded: :meth:`Rank.upgrade`)."""
    return res.ranks_as(Rank)


def paired_times(link: Link | None) -> tuple[float, float, float, float] | None:
    """``(wait, transfer, exposed wait, exposed transfer)`` ms of a paired split; None where the ranks' traces were
    not paired."""
    if link is None or link.wait_ms is None or link.transfer_ms is None:
        return None
    if link.exposed_wait_ms is None or link.exposed_transfer_ms is None:
        return None
    return link.wait_ms, link.transfer_ms, link.exposed_wait_ms, link.exposed_transfer_ms


@dataclasses.dataclass(frozen=True)
class LinkEstimate:
    """Time on the wire per step (ms), from a run's per-rank splits (:func:`link_estimate`)."""

    source: Literal["paired traces", "least of the ranks"]
    """How it was read: from the ranks' traces paired on one clock, or estimated from each rank's own."""
    link_ms: float
    """On the wire: the least transfer time (or communication time) of any rank."""
    exposed_link_ms: float
    """Its part with no compute under it."""
    wait_ms: tuple[float, ...]
    """Each rank's waiting for the other ranks."""


def link_estimate(splits: Sequence[Split | None]) -> LinkEstimate:
    """Time on the wire per step, from a run's per-rank splits (a rank's, or a sweep row's; None: not profiled).

    With paired traces: the least transfer time of any rank (``paired traces``); otherwise the least
    communication time of any rank (``least of the ranks``): the rank that arrived last at every
    collective waited for nobody, so its communication is the closest to the transfer alone.
    """
    profiled = [s for s in splits if s is not None]
    paired = [p for s in profiled if (p := paired_times(s.link)) is not None]
    if profiled and len(paired) == len(profiled):
        return LinkEstimate(
            "paired traces",
            min(transfer for _, transfer, _, _ in paired),
            min(exposed_transfer for _, _, _, exposed_transfer in paired),
            tuple(wait for wait, _, _, _ in paired),
        )
    comm = [s.comm_ms for s in profiled]
    exposed = [s.exposed_ms for s in profiled]
    return LinkEstimate(
        "least of the ranks",
        min(comm, default=float("nan")),
        min(exposed, default=float("nan")),
        tuple(c - min(comm) for c in comm),
    )


@dataclasses.dataclass(frozen=True)
class Exposure:
    """What each rank's communication was, per step (:func:`verdict_split`): waiting for the other rank, or data
    on the wire."""

    comm_ms: tuple[float, ...]
    exposed_ms: tuple[float, ...]
    """Each rank's communication with no compute under it."""
    waiting_share: tuple[float, ...]
    """Each rank's waiting over its communication, within [0, 1]."""
    link: LinkEstimate
    step_ms: float
    """The profiled step, mean of the ranks."""

    @property
    def exposed_link_share(self) -> float:
        """The exposed time on the wire over the profiled step."""
        return self.link.exposed_link_ms / self.step_ms


def exposure(res: RunResult) -> Exposure | None:
    """Each rank's communication split into waiting and time on the wire (None: a rank was not profiled)."""
    maybe = [m.split for m in ranks(res)]
    splits = [s for s in maybe if s is not None]
    if len(splits) < len(maybe):
        return None
    est = link_estimate(splits)
    comm = tuple(s.comm_ms for s in splits)
    waiting = tuple(min(1.0, max(0.0, w / c)) if c > 0 else 0.0 for w, c in zip(est.wait_ms, comm))
    step = statistics.mean(s.step_ms for s in splits)
    return Exposure(comm, tuple(s.exposed_ms for s in splits), waiting, est, step)


# --------------------------------------------------------------------------- the repeats


def joint_status(statuses: Sequence[str]) -> str:
    """One status for the ranks' comparisons: theirs where they agree, else ``no change``."""
    return statuses[0] if statuses and len(set(statuses)) == 1 else "no change"


def comparisons(repeats: Sequence[Kinds | None], baseline: str, candidate: str = "ddp") -> list[Comparison | None]:
    """``compare(baseline repeats, candidate repeats)`` on each rank (``repeats``: each rank's
    ``step_ms_repeats``, or a sweep row's ``repeats``); None where a side was not measured."""
    out = []
    for reps in repeats:
        measured = reps.measured() if reps is not None else {}
        a, b = measured.get(baseline, ()), measured.get(candidate, ())
        out.append(compare(a, b) if len(a) >= 2 and len(b) >= 2 else None)
    return out


# --------------------------------------------------------------------------- the batch sweep


@dataclasses.dataclass(frozen=True)
class SweepWire:
    """A batch size's profiled steps, every rank's (:class:`SweepPoint`): the profiler's share and the wire."""

    comm_shares: tuple[float, ...]
    """The profiler's communication share on each rank."""
    link: LinkEstimate
    step_ms: float
    """The profiled step, mean of the ranks."""

    @property
    def comm_share_mean(self) -> float:
        return statistics.mean(self.comm_shares)

    @property
    def link_share(self) -> float:
        return self.link.link_ms / self.step_ms

    @property
    def exposed_link_share(self) -> float:
        return self.link.exposed_link_ms / self.step_ms


@dataclasses.dataclass(frozen=True)
class SweepPoint:
    """One per-GPU batch size of a run's sweep, every rank's rows read together (:func:`sweep_points`)."""

    batch: int
    global_batch: int
    step_ms: float
    """The unprofiled DDP step, mean of the ranks."""
    samples_per_s: float
    wire: SweepWire | None
    """None: a rank's steps at this batch were not profiled."""
    exchange: tuple[Comparison, ...] | None
    """DDP against ``no_sync`` on each rank; None: the run has no repeats."""

    @property
    def exchange_ms(self) -> list[float]:
        """What the exchange costs each rank's step (DDP − ``no_sync``); empty without repeats."""
        return [c.candidate - c.baseline for c in self.exchange or ()]

    @property
    def exchange_status(self) -> str | None:
        return joint_status([c.status for c in self.exchange]) if self.exchange is not None else None

    def row(self) -> dict[str, object]:
        """This batch as a row of :func:`sweep_table`."""
        row: dict[str, object] = {
            "batch": self.batch,
            "global_batch": self.global_batch,
            "step_ms": self.step_ms,
            "samples_per_s": self.samples_per_s,
        }
        if (w := self.wire) is not None:
            row.update({f"comm_share_rank{i}": s for i, s in enumerate(w.comm_shares)})
            row.update(
                comm_share_mean=w.comm_share_mean,
                link_ms=w.link.link_ms,
                link_share=w.link_share,
                exposed_link_ms=w.link.exposed_link_ms,
                exposed_link_share=w.exposed_link_share,
                source=w.link.source,
            )
        if self.exchange is not None:
            row.update(
                exchange_ms=self.exchange_ms,
                exchange_status=self.exchange_status,
                exchange_noise_ms=[c.noise * c.baseline for c in self.exchange],
            )
        return row


def _sweep_wire(rows: Sequence[SweepRow]) -> SweepWire | None:
    maybe = [r.split for r in rows]
    splits = [s for s in maybe if s is not None]
    if len(splits) < len(maybe):
        return None
    return SweepWire(
        tuple(s.comm_share for s in splits), link_estimate(splits), statistics.mean(s.step_ms for s in splits)
    )


def sweep_points(res: RunResult) -> list[SweepPoint]:
    """The run's batch sweep, one point per per-GPU batch size (smallest first), every rank's rows read together."""
    per_batch: dict[int, list[SweepRow]] = {}
    for m in ranks(res):
        for sweep_row in m.sweep:
            per_batch.setdefault(sweep_row.batch, []).append(sweep_row)
    out = []
    for b in sorted(per_batch):
        rows = per_batch[b]
        comps = comparisons([r.repeats for r in rows], "no_sync")
        out.append(
            SweepPoint(
                b,
                rows[0].global_batch,
                statistics.mean(r.step_ms_unprofiled for r in rows),
                statistics.mean(r.samples_per_s for r in rows),
                _sweep_wire(rows),
                tuple(c for c in comps if c is not None) if all(comps) else None,
            )
        )
    return out
