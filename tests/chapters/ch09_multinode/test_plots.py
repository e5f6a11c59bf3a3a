"""Tests of nvtutorial/chapters/ch09_multinode/plots*.py."""

from __future__ import annotations

import matplotlib

from nvtutorial.chapters.ch09_multinode import lab as recovery  # noqa: E402
from nvtutorial.chapters.ch09_multinode import plots as multinode_plots  # noqa: E402
from nvtutorial.results import RunResult  # noqa: E402
from tests.helpers.figure_runs import problems, said
from tests.helpers.paths import ROOT

matplotlib.use("Agg")


ELASTIC = ROOT / "reference/h200x1/runs/elastic_train-20261201-090952-62a9e2/result.json"


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
