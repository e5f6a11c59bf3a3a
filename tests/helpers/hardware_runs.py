"""Chapter 01's results made up for the readers' tests: sweep, send/recv and copy rows, runs of them; a figure's
readability."""

from __future__ import annotations

import dataclasses
import importlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

from nvtutorial.chapters.ch01_hardware import schema_allreduce, schema_p2p, schema_sendrecv
from nvtutorial.results import EnvInfo, RunResult


def sweep_row(
    size: int,
    busbw: float = 1.0,
    *,
    time_us: float | None = None,
    spread: float = 0.0,
    samples: Iterable[float] | None = None,
    repeats: int = 3,
) -> schema_allreduce.Row:
    """A row of an ``allreduce_bench`` sweep (n = 2: algbw = busbw); its repeats ``busbw · (1 ∓ spread)`` and
    ``busbw``, or ``samples``; its time from the size and busbw unless given."""
    each = tuple(samples) if samples is not None else (busbw * (1 - spread), busbw, busbw * (1 + spread))
    return schema_allreduce.Row(
        size=size,
        count=size // 4,
        dtype="float32",
        iters=20,
        correct=True,
        time_us=time_us if time_us is not None else size / busbw / 1e3,
        algbw=busbw,
        busbw=busbw,
        busbw_min=min(each),
        busbw_max=max(each),
        repeats=repeats,
        busbw_repeats=each,
    )


def sweep(rows: Iterable[schema_allreduce.Row], wire: schema_allreduce.Wire | None = None) -> schema_allreduce.Rank:
    """Rank 0's result of an ``allreduce_bench`` run with these rows."""
    rows = tuple(rows)
    largest = max(rows, key=lambda r: r.size) if rows else None
    return schema_allreduce.Rank(
        rows=rows,
        collective="all_reduce",
        world_size=2,
        dtype="float32",
        timer="cuda events",
        largest_size=largest.size if largest else 0,
        busbw_at_largest=largest.busbw if largest else 0.0,
        wire=wire,
    )


def sendrecv_row(
    size: int,
    direction: Literal["one way", "both ways"],
    busbw: float,
    *,
    spread: float = 0.005,
    samples: Iterable[float] | None = None,
) -> schema_sendrecv.Row:
    """A row of a ``sendrecv_bench`` run: busbw = algbw per direction."""
    each = tuple(samples) if samples is not None else (busbw * (1 - spread), busbw, busbw * (1 + spread))
    return schema_sendrecv.Row(
        size=size,
        direction=direction,
        iters=20,
        dtype="float32",
        time_us=size / busbw / 1e3,
        algbw=busbw,
        busbw=busbw,
        busbw_min=min(each),
        busbw_max=max(each),
        repeats=len(each),
        busbw_repeats=each,
        total_gbps=busbw * (2 if direction == "both ways" else 1),
    )


def sendrecv(rows: Iterable[schema_sendrecv.Row]) -> schema_sendrecv.Rank:
    """Rank 0's result of a ``sendrecv_bench`` run with these rows."""
    return schema_sendrecv.Rank(
        rows=tuple(rows), collective="sendrecv", world_size=2, dtype="float32", timer="cuda events"
    )


def copy_row(
    path: str,
    mode: Literal["one way", "both at once"],
    size: int,
    gbps: float,
    *,
    samples: Iterable[float] | None = None,
    busy_share: float | None = None,
) -> schema_p2p.Row:
    """A row of a ``p2p_copy`` run; its repeats ``samples`` (default: three of ``gbps``)."""
    each = tuple(samples) if samples is not None else (gbps,) * 3
    return schema_p2p.Row(
        path=path,
        mode=mode,
        size=size,
        time_us=size / gbps / 1e3,
        gbps=gbps,
        gbps_min=min(each),
        gbps_max=max(each),
        gbps_repeats=each,
        iters=10,
        busy_share=busy_share,
    )


def run_of(
    rank,
    *,
    gpu: bool = True,
    names: tuple[str, ...] = ("NVIDIA H200", "NVIDIA H200"),
    link: str | None = "NV18",
    name: str = "fake",
    folder: Path | None = None,
    log: str = "",
) -> RunResult:
    """A RunResult whose rank 0 returned ``rank`` (written as JSON and read back, as a launch does), on two H200s
    joined by NV18 (or a CPU with ``gpu=False``). ``name`` tells runs apart in their labels (it is their torch
    version); with ``folder``, rank 0's log holds ``log``."""
    if folder is not None:
        folder.mkdir()
        (folder / "rank0.log").write_text(log)
    env = EnvInfo(
        host="fakehost",
        backend="nccl" if gpu else "gloo",
        world_size=len(names),
        device_names=names,
        torch=f"2.13.0 ({name})",
        cuda="13.0" if gpu else None,
        nccl="2.28.9" if gpu else None,
        python="3.12",
        link=link,
    )
    return RunResult(
        workload=importlib.import_module(type(rank).__module__).NAME,
        params={},
        returncode=0,
        wall_s=1.0,
        first_output_s=0.1,
        env=env,
        ranks=[json.loads(json.dumps(dataclasses.asdict(rank)))],
        run_dir=folder or Path(name),
        log_files={0: folder / "rank0.log"} if folder is not None else {},
        log_tail=[],
    )


def assert_readable(fig, ax):
    """Issue 14: the "measured on" line overlaps nothing, and no tick reads like 3×10²."""
    renderer = fig.canvas.get_renderer()
    (stamp,) = [t for t in fig.texts if t.get_text().startswith("measured on:")]
    box = stamp.get_window_extent(renderer)
    assert not box.overlaps(ax.get_tightbbox(renderer)), "the stamp overlaps the axes, their labels or the legend"
    for legend in fig.legends:
        assert not box.overlaps(legend.get_window_extent(renderer))
    labels = [t.get_text() for t in ax.get_xticklabels() + ax.get_yticklabels()]
    assert labels and not any("times" in t or "^" in t or "×" in t for t in labels), labels
