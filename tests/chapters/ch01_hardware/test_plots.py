"""Chapter 1's plots: the sweep on log axes, with the run's label."""

from __future__ import annotations

import numpy as np
import pytest

from nvtutorial.chapters.ch01_hardware import lab as bwlab
from nvtutorial.chapters.ch01_hardware import plots as bwplots
from nvtutorial.machine import links
from tests.helpers.bandwidth_runs import fake_result
from tests.helpers.hardware_runs import assert_readable


def test_plots_show_decades_on_log_axes_and_carry_the_label(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    result = fake_result(tmp_path, "plot", {1024: 0.027, 1 << 20: 27.0, 1 << 30: 331.0}, "")
    fig, ax = bwplots.plot_sweep(result, links.expect("NV18", "NVIDIA H200"))
    assert any("2× NVIDIA H200" in t.get_text() for t in fig.texts)
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"  # sizes and busbw both span decades
    sizes = [t.get_text() for t in ax.get_xticklabels()]
    assert sizes[0] == "1\u00a0KiB" and sizes[-1] == "4\u00a0GiB" and len(sizes) <= 9  # nccl-tests' points reach 4 GiB
    assert len(ax.get_lines()) >= 2  # this run and the reference points
    fig.canvas.draw()
    assert_readable(fig, ax)
    plt.close(fig)
    log = "x NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM\n"
    ab = bwlab.run_lab(
        {},
        reuse={
            "default": fake_result(tmp_path, "a", {16 << 20: 220.0, 1 << 30: 330.0}, log),
            "source's settings": fake_result(tmp_path, "b", {16 << 20: 219.0, 1 << 30: 331.0}, log),
        },
        paths=bwlab.SOURCE_AB_PATHS,
    )
    fig, ax = bwplots.plot_difference(ab)  # identical runs: drawn as their difference, inside the noise band
    (line,) = [ln for ln in ax.get_lines() if str(ln.get_label()).startswith("source's")]
    assert np.asarray(line.get_ydata()).tolist() == pytest.approx([100 * (219 / 220 - 1), 100 * (331 / 330 - 1)])
    fig.canvas.draw()
    assert_readable(fig, ax)
    plt.close(fig)
    fig, ax = bwplots.plot_lab(ab)
    fig.canvas.draw()
    assert_readable(fig, ax)
    plt.close(fig)
