"""Chapter 0's figure of a launch."""

from __future__ import annotations


def test_the_launch_figure_keeps_its_label_clear_of_the_axes():
    """Issue 14: the "measured on" line printed over the axis labels of notebook 00's figure."""
    import types

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from nvtutorial.chapters.ch00_welcome import plots as launch_plots
    from tests.helpers.hardware_runs import assert_readable

    run = types.SimpleNamespace(
        first_output_s=9.9,
        wall_s=11.7,
        workload="selftest",
        label="CPU, gloo, 2 processes on a-long-host-name: a simulation, not a GPU measurement",
    )
    fig, ax = launch_plots.launch_timeline([run], names=["selftest"])
    fig.canvas.draw()
    assert_readable(fig, ax)
    plt.close(fig)
