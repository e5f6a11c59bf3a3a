"""A made-up all-reduce sweep run, for the tests of chapter 1's reports, lab and plots."""

from __future__ import annotations

from pathlib import Path

from nvtutorial.chapters.ch01_hardware import schema_allreduce
from nvtutorial.machine import hardware
from nvtutorial.results import RunResult
from tests.helpers.hardware_runs import run_of, sweep, sweep_row

FIX = hardware.REFERENCE_DATA


def fake_result(
    tmp_path: Path,
    name: str,
    busbw: dict[int, float],
    log: str,
    gpu: bool = True,
    wire: schema_allreduce.Wire | None = None,
    spread: float = 0.01,
    names: tuple[str, ...] = ("NVIDIA H200", "NVIDIA H200"),
) -> RunResult:
    """An ``allreduce_bench`` run with busbw ``busbw[size]`` at each size, its repeats ``± spread``."""
    rows = [sweep_row(s, b, spread=spread) for s, b in busbw.items()]
    return run_of(sweep(rows, wire), gpu=gpu, names=names, name=name, folder=tmp_path / name, log=log)
