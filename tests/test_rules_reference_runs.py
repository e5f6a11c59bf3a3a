"""The committed reference runs of notebooks 01 and 02, read with their logs (``report/reference_runs.py``)."""

from __future__ import annotations

import pytest

from nvtutorial.chapters.ch01_hardware import report_reference as reference_runs


def test_every_named_run_is_in_a_checkout_and_loads_with_its_logs():
    assert reference_runs.available()
    for name, folder in reference_runs.RUNS.items():
        run = reference_runs.load(name)
        assert run.run_dir == reference_runs.FOLDER / folder and run.env.is_gpu
        assert run.log_files == {r: reference_runs.FOLDER / folder / f"rank{r}.log" for r in range(run.env.world_size)}


def test_a_missing_run_says_where_it_ships(monkeypatch, tmp_path):
    monkeypatch.setattr(reference_runs, "FOLDER", tmp_path)
    assert not reference_runs.available()
    with pytest.raises(FileNotFoundError, match="no reference run 'sweep' in .*: it ships with a checkout"):
        reference_runs.load("sweep")
    with pytest.raises(KeyError):
        reference_runs.load("nope")
