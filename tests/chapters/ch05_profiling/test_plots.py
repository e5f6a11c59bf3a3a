"""Tests of nvtutorial/chapters/ch05_profiling/plots*.py."""

from __future__ import annotations

import pytest

from nvtutorial.chapters.ch05_profiling import report as profiling
from nvtutorial.chapters.ch05_profiling import schema


# --------------------------------------------------------------------------- what notebook 05's cells pass
def _pixels(fig):
    """What a figure shows, pixel for pixel (Agg), to tell two drawings apart."""
    import numpy as np

    fig.canvas.draw()
    return np.asarray(fig.canvas.buffer_rgba()).copy()


@pytest.mark.parametrize("path", ["NVLink", "host-staged"])
def test_the_telemetry_figure_takes_the_phases_as_the_run_wrote_them(ref, path):
    """Notebook 05's telemetry cell (the text of the committed 2x H200 copy, which the site shows only while the
    cell is unchanged) passes ``run.metrics["phases"]`` and ``run.metrics["step_ends"]``, raw JSON: the figure types
    them through the schema and draws exactly what it draws from rank 0's typed result."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd

    from nvtutorial.chapters.ch05_profiling import plots as pp

    run = ref[path]
    rank0 = profiling.ranks(run)[0]
    assert schema.phases_typed(run.metrics["phases"]) == rank0.phases and len(rank0.phases) >= 7  # 7 without the probe
    assert schema.phases_typed(rank0.phases) == rank0.phases  # typed phases as they are
    t0, t1 = rank0.phases[0].start - 1.0, rank0.phases[-1].end + 1.0
    frame = pd.DataFrame(
        [
            {
                "t": t0 + (t1 - t0) * i / 40,
                "gpu": gpu,
                "sm_util_pct": 50.0 + 10 * gpu,
                "nvlink_tx_gbs": 1.0 + i,
                "nvlink_rx_gbs": 2.0,
                "mem_used_mib": 1024.0 * (1 + gpu),
            }
            for gpu in (0, 1)
            for i in range(41)
        ]
    )
    raw_fig, raw = pp.telemetry(frame, run, phases=run.metrics["phases"], step_ends=run.metrics["step_ends"])
    typed_fig, typed_axes = pp.telemetry(frame, run, phases=rank0.phases, step_ends=rank0.step_ends)
    try:
        assert [t.get_text() for t in raw[0].texts] == [ph.name for ph in rank0.phases]  # every phase named
        assert [t.get_text() for t in raw[0].texts] == [t.get_text() for t in typed_axes[0].texts]
        assert len(raw[0].lines) == len(typed_axes[0].lines) == 2 + len(rank0.step_ends)  # 2 GPUs, a tick per step
        assert (_pixels(raw_fig) == _pixels(typed_fig)).all()
    finally:
        plt.close(raw_fig)
        plt.close(typed_fig)


def test_dmon_is_drawn_over_the_second_it_was_printed_in(h100_telemetry):
    """Review RR13-8: on one H100, dmon's 97 % line (stamped 23:01:18, printed within that second) was drawn over the
    second before its stamp, 0.3 s before NVML's burst began; drawn over [S, S + 1), it covers NVML's first busy
    sample, and the legend says how it is drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from nvtutorial.chapters.ch05_profiling import plots as pp

    nvml, dmon, _ = h100_telemetry
    fig, axes = pp.telemetry(nvml, "1× NVIDIA H100 80GB HBM3", dmon=dmon)
    try:
        line = next(ln for ln in axes[0].lines if "dmon" in ln.get_label())
        assert line.get_drawstyle() == "steps-post" and "each over its stamp's second" in line.get_label()
        x, y = line.get_xdata(), line.get_ydata()
        i = list(y).index(97)
        t0, first_busy = nvml["t"].min(), nvml.loc[nvml["sm_util_pct"] >= 80, "t"].min()
        assert x[i] <= first_busy - t0 < x[i + 1] == x[i] + 1  # 2.3 s ≤ 2.6 s < 3.3 s
    finally:
        plt.close(fig)
