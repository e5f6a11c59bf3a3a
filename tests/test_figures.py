"""The figures issue 20 fixed show their finding: identical series said in words, not drawn on top of each other;
bars from zero; nothing the figure says overlapping anything else it says, nor wider than the figure; plain tick
labels; where it was measured. Drawn from committed runs (reference/) and small synthetic results, not timed.

tests/test_jupyterlab.py photographs the same figures as JupyterLab shows them after Run All.
"""

from __future__ import annotations

import itertools

import matplotlib
import pytest

matplotlib.use("Agg")

from matplotlib.text import Text  # noqa: E402

from nvtutorial.chapters.ch03_ddp_training import plots as training_plots  # noqa: E402
from nvtutorial.chapters.ch03_ddp_training import report as training_report  # noqa: E402
from nvtutorial.chapters.ch03_ddp_training import schema as training_schema  # noqa: E402
from nvtutorial.chapters.ch08_ladder import plots as ladder_plots  # noqa: E402
from nvtutorial.chapters.ch08_ladder import report as ladder  # noqa: E402
from nvtutorial.chapters.ch09_multinode import lab as recovery  # noqa: E402
from nvtutorial.chapters.ch09_multinode import plots as multinode_plots  # noqa: E402
from nvtutorial.results import RunResult, typed  # noqa: E402
from tests.helpers.paths import ROOT

LADDER_CPU = ROOT / "reference/h200x1/runs/ladder-20261201-090801-c915c3/result.json"
"""Notebook 08's ladder on the CPU (gloo, 2 processes, the ci sizes), committed with the 1× H200 reference."""
ELASTIC = ROOT / "reference/h200x1/runs/elastic_train-20261201-090952-62a9e2/result.json"


def texts(fig) -> list[tuple[str, object]]:
    """Every text ``fig`` draws, not empty, with its box on the canvas (tick labels only of ticks in view)."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    ticks, shown = set(), []
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            lo, hi = sorted(axis.get_view_interval())
            span = (hi - lo) * 1e-9
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                ticks.update((id(tick.label1), id(tick.label2)))
                if lo - span <= tick.get_loc() <= hi + span:
                    shown += [lab for lab in (tick.label1, tick.label2) if lab.get_visible()]
    drawn = [t for t in fig.findobj(Text) if id(t) not in ticks and t.get_visible()] + shown
    return [(t.get_text(), t.get_window_extent(renderer)) for t in drawn if t.get_text().strip()]


def problems(fig) -> list[str]:
    """Texts that overlap one another, or that are wider than the figure."""
    boxes = texts(fig)
    width = fig.bbox.width
    out = [f"{a!r} is {box.width:.0f} px wide in a {width:.0f} px figure" for a, box in boxes if box.width > width]
    for (a, p), (b, q) in itertools.combinations(boxes, 2):
        if p.overlaps(q) and p.intersection(p, q).width > 2 and p.intersection(p, q).height > 2:
            out.append(f"{a!r} overlaps {b!r}")
    return out


def said(fig) -> str:
    return "\n".join(t for t, _ in texts(fig))


@pytest.fixture(scope="module")
def ladder_run():
    return RunResult.load(LADDER_CPU)


def test_the_loss_figure_names_the_identical_rungs_and_draws_only_those_that_differ(ladder_run):
    fig, ax = ladder_plots.loss_differences(ladder_run, 1e-4)
    first = ladder.ranks(ladder_run)[0]
    diffs = {g.rung: any(a != b for a, b in zip(g.losses, ladder.reference_losses(first))) for g in first.rungs}
    same = [ladder.LABELS[r] for r, differ in diffs.items() if not differ]
    drawn = [line.get_label() for line in ax.get_lines() if not line.get_label().startswith("_")]
    assert same and drawn == [ladder.LABELS[r] for r, differ in diffs.items() if differ]
    title = ax.get_title().replace("\n", " ")
    assert "identical at every step, bit for bit" in title and all(name in title for name in same)
    assert "tolerance 0.0001" in said(fig) and "tolerance" not in " ".join(ax.get_legend_handles_labels()[1])
    assert not any("$" in t.get_text() for t in ax.get_yticklabels()), "log ticks as powers of ten"
    assert "simulation" in said(fig) and not problems(fig), problems(fig)


def test_the_bytes_figure_draws_bars_from_zero_with_ddps_bytes_marked(ladder_run):
    table = ladder.bytes_table(ladder_run)
    fig, ax = ladder_plots.bytes_bars(table, ladder_run)
    bars = ax.patches
    assert len(bars) == len(table.index.get_level_values("rung").unique())
    assert all(b.get_x() == 0 and b.get_width() > 0 for b in bars), "a bar that does not start at zero hides its row"
    ddp = table["recorded (ring cost)"].groupby(level="rung", sort=False).max().iloc[0]
    assert any(abs(line.get_xdata()[0] - ddp) < 1e-12 for line in ax.get_lines()), "DDP's bytes are not marked"
    assert "1.00× DDP" in said(fig) and not problems(fig), problems(fig)


def test_without_a_gpu_the_largest_model_figure_leaves_out_the_offload_rung_and_says_why():
    setup = ladder.Setup(vocab=256, seq_len=32, dim=64, heads=4, layers=4, mlp_ratio=4, global_batch=8)
    fit = ladder.fit_table(setup, 8e6, 4e9)
    fig, ax = ladder_plots.fit_bars(fit, "a budget of 8 MB per rank", device_memory=False)
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert ladder.LABELS["fsdp_offload"] not in labels and len(labels) == len(fit) - 1
    assert "not drawn: ZeRO-3 + ckpt + CPU offload" in ax.get_title().replace("\n", " ")
    assert all(" M" in t.get_text() or " B" in t.get_text() for t in ax.get_xticklabels() if t.get_text())
    assert "not measured" in said(fig) and not problems(fig), problems(fig)
    gpu_fig, gpu_ax = ladder_plots.fit_bars(fit, "119 GB per rank of NVIDIA H200")
    assert ladder.LABELS["fsdp_offload"] in [t.get_text() for t in gpu_ax.get_yticklabels()]
    assert not problems(gpu_fig), problems(gpu_fig)


def test_the_memory_model_figure_keeps_its_legend_off_the_bars():
    setup = ladder.Setup(vocab=256, seq_len=32, dim=64, heads=4, layers=4, mlp_ratio=4, global_batch=8)
    fig, ax = ladder_plots.memory_bars(setup)
    fig.canvas.draw()
    legend = ax.get_legend().get_window_extent(fig.canvas.get_renderer())
    assert not any(legend.overlaps(p.get_window_extent()) for p in ax.patches), "the legend covers a bar"
    assert "MB on rank 0" in ax.get_xlabel() and not problems(fig), problems(fig)


SCALING = {
    "memory": "counted_gb",
    "one_gpu_batch": 8,
    "solo_memory_gb": 0.1,
    "fixed_per_gpu": {
        "per_gpu_batch": 8,
        "speedup": 1.02,
        "efficiency": 0.51,
        "samples_per_s_1": 512.0,
        "samples_per_s_2": 523.8,
        "memory_ratio_per_rank": [1.0, 1.0],
    },
    "fixed_global": {
        "per_gpu_batch": 4,
        "speedup": 0.54,
        "efficiency": 0.27,
        "samples_per_s_1": 512.0,
        "samples_per_s_2": 274.5,
        "memory_ratio_per_rank": [0.93, 0.93],
    },
}


@pytest.mark.parametrize("gpu", [False, True])
def test_the_scaling_figure_shows_speed_up_against_the_limit_and_memory_against_one_and_half(gpu):
    summary = {**SCALING, "memory": "peak_mem_gb" if gpu else "counted_gb"}
    fig, (speed, memory) = training_plots.plot_scaling(summary, "GPUs" if gpu else "CPU, gloo: a simulation")
    assert [round(p.get_height(), 2) for p in speed.patches] == [1.02, 0.54]
    assert {round(line.get_ydata()[0], 2) for line in speed.get_lines()} == {1.0, 2.0}
    assert {round(line.get_ydata()[0], 2) for line in memory.get_lines()} == {0.5, 1.0}
    words = said(fig)
    assert ("1 GPU" in words) is gpu and ("1 process" in words) is not gpu
    assert "1.02× (51 % efficiency)" in words and "½: half" in words
    assert not problems(fig), problems(fig)


def _path(variant: str, **measured) -> training_report.PathRow:
    row = {"variant": variant, "code": "", "per_gpu_batch": 8, "world_size": 2, "global_batch": 16, "status": "ok"}
    return training_report.PathRow(typed(training_schema.Row, {**row, **measured}))


def test_the_source_table_figure_says_why_a_slot_is_empty():
    rows = {
        "1gpu": _path(training_report.SOLO, samples_per_s=100.0),
        "nvlink": _path("baseline", samples_per_s=98.0, comm_share=0.2),
        "host": None,
        "socket": None,
    }
    fig, axes = training_plots.plot_source_comparison(rows, "CPU, gloo: a simulation")
    assert said(fig).count("not run:") == 4  # host-staged and sockets, in both panels
    assert not problems(fig), problems(fig)


def test_the_recovery_timeline_starts_at_zero_and_times_the_start_up_and_each_recovery():
    steps = (
        [(14.0 + 0.02 * s, 0, s) for s in range(1, 15)]
        + [(27.0 + 0.02 * s, 1, s) for s in range(9, 22)]
        + [(43.0 + 0.02 * s, 2, s) for s in range(17, 31)]
    )
    faults = (recovery.Fault("rank", 13, target=1), recovery.Fault("node", 21, target=1, replace_after_s=0.0))
    outcome = recovery.ElasticOutcome(
        result=RunResult.load(ELASTIC),
        fault=faults[0],
        every=8,
        steps=steps,
        attempts=[(13.5, 0, 0), (26.5, 1, 8), (42.5, 2, 16)],
        events=[(0.02, "started")],
        killed_at_s=14.4,
        faults=faults,
        kill_times=(14.4, 27.5),
    )
    fig, (ax,) = multinode_plots.plot_recovery({"rank 1 killed, then node 1 lost": outcome})
    assert ax.get_xlim()[0] == 0, "the seconds before the first step are hidden"
    words = said(fig)
    assert "start-up\n14.0 s" in words and "rank lost: back after\n12.8 s, 6 steps again" in words
    assert "node lost: back after" in words
    assert "were training steps; the rest: start-up, recovery and the agents' exit" in ax.get_title()
    assert "H200" in words and not problems(fig), problems(fig)
