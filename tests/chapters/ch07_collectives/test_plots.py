"""Tests of nvtutorial/chapters/ch07_collectives/plots*.py."""

from __future__ import annotations

import pytest

from nvtutorial.chapters.ch07_collectives import report
from nvtutorial.results import RunResult
from tests.helpers.collectives_runs import BENCH, COMPRESSION


def plotted(fig_ax) -> list:
    import matplotlib.pyplot as plt

    fig, ax = fig_ax
    lines = [(line.get_label(), line.get_xydata().tolist()) for line in ax.get_lines()]
    bars = [(p.get_x(), p.get_height()) for p in ax.patches]
    title, ticks = ax.get_title(), [t.get_text() for t in ax.get_xticklabels()]
    plt.close(fig)
    return [lines, bars, title, ticks]


def test_the_bench_plots_draw_the_same_from_the_raw_json(bench):
    pytest.importorskip("matplotlib")
    from nvtutorial.chapters.ch07_collectives import plots

    raw = RunResult.load(BENCH).ranks[0]
    assert plotted(plots.ring_share(report.ring_rows(raw), "2× H200", target=0.8)) == plotted(
        plots.ring_share(bench[0].ring, "2× H200", target=0.8)
    )
    assert plotted(plots.sparse_vs_dense(raw["sparse"], "2× H200")) == plotted(
        plots.sparse_vs_dense(bench[0].sparse, "2× H200")
    )


def test_the_compression_plots_draw_the_same_from_the_raw_json(hooks):
    pytest.importorskip("matplotlib")
    from nvtutorial.chapters.ch07_collectives import plots

    raw = RunResult.load(COMPRESSION[0]).ranks[0]
    typed_rank = hooks[raw["link"]]
    assert plotted(plots.gradient_density(raw["density"], "2× H200")) == plotted(
        plots.gradient_density(typed_rank.density, "2× H200")
    )
    assert plotted(plots.loss_differences(raw, "2× H200")) == plotted(plots.loss_differences(typed_rank, "2× H200"))
