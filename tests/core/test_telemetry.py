"""nvtutorial.machine.telemetry: nvidia-smi dmon parsed, the NVML sampler, NVLink rates from counters."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from nvtutorial.chapters.ch05_profiling import report_monitoring as monitoring
from nvtutorial.machine import telemetry
from tests.helpers.trace_files import DMON_PLAIN, fake_sampler


def test_parse_dmon_and_its_columns():
    frame = telemetry.parse_dmon(DMON_PLAIN)
    assert list(frame.columns) == ["gpu", "sm", "mem", "enc", "dec", "jpg", "ofa"]
    assert frame["sm"].tolist() == [97, 95]
    assert telemetry.dmon_columns(DMON_PLAIN) == ["sm", "mem", "enc", "dec", "jpg", "ofa"]
    assert not telemetry.shows_nvlink(telemetry.dmon_columns(DMON_PLAIN))
    assert telemetry.shows_nvlink(["sm", "nvlrx"])
    assert telemetry.parse_dmon("").empty


def test_sampler_without_nvml_yields_an_empty_frame_with_a_reason(monkeypatch):
    import pynvml

    def fail():
        raise pynvml.NVMLError_LibraryNotFound()  # pyright: ignore[reportAttributeAccessIssue]  # made at import

    monkeypatch.setattr(pynvml, "nvmlInit", fail)
    with telemetry.sample(interval=0.05) as t:
        pass
    assert not t.available and "NVML is unavailable" in t.reason
    frame = t.frame()
    assert frame.empty and list(frame.columns) == telemetry.COLUMNS and frame.attrs["reason"] == t.reason
    assert t.summary() == t.reason


def test_nvlink_rates_from_cumulative_counters():
    t = telemetry.Sampler(interval=0.1)
    t.started_at = 100.0
    t._handles = [object()]
    # GPU 0 sends 1 GiB in 0.5 s (counters in KiB), then nothing; a counter reset gives no rate.
    for time_s, tx, rx in ((100.0, 0, 0), (100.5, 2**20, 2**19), (101.0, 2**20, 2**19), (101.5, 10, 10)):
        t._raw.append(telemetry._Raw(time_s, 0, 50.0, 10.0, 1000.0, 300.0, tx, rx))
    f = t.frame()
    assert np.isnan(f["nvlink_tx_gbs"].iloc[0])
    assert f["nvlink_tx_gbs"].iloc[1] == pytest.approx(2**30 / 0.5 / 1e9)
    assert f["nvlink_rx_gbs"].iloc[1] == pytest.approx(2**29 / 0.5 / 1e9)
    assert f["nvlink_tx_gbs"].iloc[2] == 0
    assert np.isnan(f["nvlink_tx_gbs"].iloc[3])
    assert t.nvlink_bytes(99.0, 101.0)[0]["tx_bytes"] == 2**30
    assert f["t_s"].tolist() == [0.0, 0.5, 1.0, 1.5]


def test_sampler_rejects_a_bad_interval():
    with pytest.raises(ValueError, match="interval"):
        telemetry.Sampler(interval=0)


DMON_T = """#Time        gpu     sm    mem    enc    dec    jpg    ofa
#HH:MM:SS    Idx      %      %      %      %      %      %
 10:00:01      0      0      0      0      0      0      0
 10:00:01      1      0      0      0      0      0      0
 10:00:02      0     99     58      0      0      0      0
 10:00:02      1     98     55      0      0      0      0
"""


def test_parse_dmon_with_its_time_column():
    day = time.mktime((2026, 11, 30, 12, 0, 0, 0, 0, -1))
    frame = telemetry.parse_dmon(DMON_T, day=day)
    assert list(frame.columns)[:3] == ["time", "gpu", "sm"] and frame["sm"].tolist() == [0, 0, 99, 98]
    assert frame["t"].iloc[2] - frame["t"].iloc[0] == 1.0
    assert frame["t"].iloc[0] == time.mktime((2026, 11, 30, 10, 0, 1, 0, 0, -1))
    assert telemetry.dmon_columns(DMON_T) == ["sm", "mem", "enc", "dec", "jpg", "ofa"]
    probe_start = time.mktime((2026, 11, 30, 10, 0, 1, 0, 0, -1)) + 0.2
    assert monitoring.dmon_busy_during(DMON_T, probe_start, probe_start + 0.9, day) == 99
    assert monitoring.dmon_busy_during(DMON_PLAIN, probe_start, probe_start + 0.9, day) is None  # no time column


def test_sampler_describes_what_it_measures_and_saves(tmp_path):
    t = fake_sampler()
    lines = t.describe()
    assert "every 0.1 s" in lines[0] and any(
        line.startswith("sm_util_pct: ") and "1/6 s to 1 s" in line for line in lines
    )
    assert any(line.startswith("nvlink_tx_gbs: ") and "cumulative counters" in line for line in lines)
    saved = json.loads(t.save(tmp_path / "telemetry.json").read_text())
    assert saved["interval_s"] == 0.1 and len(saved["samples"]) == 4 and saved["dmon_text"] == DMON_PLAIN
    assert saved["samples"][0]["nvlink_tx_gbs"] is None  # the first sample has no rate: JSON null, not NaN
    off = telemetry.Sampler(interval=0.5)
    off.reason = "NVML is unavailable here"
    assert off.describe() == ["no telemetry: NVML is unavailable here"]
