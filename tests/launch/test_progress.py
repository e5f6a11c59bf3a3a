"""The launcher's progress bars end in a state that tells the truth: green when the phase finished,
red only for a failed or interrupted run; a saved notebook keeps that final state as plain HTML (no widget: a
reopened notebook shows it with no kernel behind it, and JupyterLab has no widget model to restore)."""

from __future__ import annotations

import dataclasses
import json
import re
from typing import ClassVar

import nbformat
import pytest

from nvtutorial import course
from nvtutorial.launch.progress import NotebookBar, Phase, RunProgress, TextBar


def events(desc: str, total: int, ns: list[int]) -> list[dict]:
    return [{"event": "progress", "n": n, "total": total, "desc": desc} for n in ns]


def drawn(bar: NotebookBar) -> tuple[str, str, str]:
    """The bar as a notebook shows (and saves) it: its status class, the filled width, and its text form."""
    html, text = bar.bundle["text/html"], bar.bundle["text/plain"]
    status = re.search(r'class="nvtutorial-bar nvtutorial-bar-(\w+)"', html)
    width = re.findall(r"width: ([\d.]+%)", html)
    assert status and len(width) == 1, html
    return status[1], width[0], text


class Recorder:
    """A bar that records what it was asked to draw."""

    made: ClassVar[list[Recorder]] = []

    def __init__(self, phase: Phase) -> None:
        self.shown: list[tuple[int, str]] = []
        self.ended: Phase | None = None
        Recorder.made.append(self)

    def show(self, phase: Phase) -> None:
        self.shown.append((phase.n, phase.desc))

    def end(self, phase: Phase) -> None:
        self.ended = dataclasses.replace(phase)


def test_phase_change_completes_the_previous_bar_green():
    progress = RunProgress(bar=NotebookBar)
    for e in events("lesson epochs", 10, [2, 5, 8]):  # the workload reports every few epochs: last seen 8/10
        progress.update(e)
    first = progress._bar
    assert isinstance(first, NotebookBar)
    for e in events("variants", 4, [0, 1]):
        progress.update(e)
    assert drawn(first)[:2] == ("done", "100.0%") and "10/10" in drawn(first)[2]
    assert [(p.desc, p.n, p.total, p.status) for p in progress.phases] == [
        ("lesson epochs", 10, 10, "done"),
        ("variants", 1, 4, "running"),
    ]
    second = progress._bar
    assert isinstance(second, NotebookBar)
    progress.close("done")
    assert drawn(second)[:2] == ("done", "100.0%")
    assert "4/4" in drawn(second)[2]  # the text form a viewer without HTML shows


@pytest.mark.parametrize("outcome", ["failed", "interrupted"])
def test_a_failed_or_interrupted_run_ends_red_and_says_so(outcome):
    progress = RunProgress(bar=NotebookBar)
    for e in events("all-reduce", 50, [1, 2, 3]):
        progress.update(e)
    bar = progress._bar
    assert isinstance(bar, NotebookBar)
    progress.close(outcome)
    status, width, text = drawn(bar)
    assert (status, width) == (outcome, "6.0%")
    assert "3/50" in text and outcome in text and "3/50" in bar.bundle["text/html"]
    assert progress.phases[-1].status == outcome


def test_a_failure_after_the_last_step_is_still_red():
    progress = RunProgress(bar=NotebookBar)
    for e in events("traps", 2, [0, 1, 2]):
        progress.update(e)
    bar = progress._bar
    assert isinstance(bar, NotebookBar)
    progress.close("failed")
    assert drawn(bar)[:2] == ("failed", "100.0%")
    assert 'background: #d32f2f"' in bar.bundle["text/html"]  # red, though full


def test_one_phase_renamed_step_by_step_stays_one_bar():
    # notebook 06's traps: "trap <name>" for step i of 3, then "traps" 3/3
    Recorder.made = []
    progress = RunProgress(bar=Recorder)
    for i, name in enumerate(["rank0_validation", "seeds", "oom"]):
        progress.update({"n": i, "total": 3, "desc": f"trap {name}"})
    progress.update({"n": 3, "total": 3, "desc": "traps"})
    progress.close("done")
    assert len(Recorder.made) == 1
    (bar,) = Recorder.made
    assert bar.shown[-1] == (3, "traps") and bar.ended.status == "done"


def test_each_phase_of_a_run_keeps_its_own_name():
    # notebook 08's ladder: the one-process reference, each rung, the checkpoint, the largest model: each at 0/1,
    # then 1/1 when it ends; the finished list must name each phase once, in order
    Recorder.made = []
    progress = RunProgress(bar=Recorder)
    progress.update({"n": 0, "total": 1, "desc": "one-process reference"})
    for rung in ("ddp", "zero1", "fsdp_zero3"):
        progress.update({"n": 0, "total": 1, "desc": rung})
        progress.update({"n": 1, "total": 1, "desc": rung})
    progress.update({"n": 0, "total": 1, "desc": "checkpoint"})
    progress.update({"n": 0, "total": 1, "desc": "the largest model: fsdp_zero3, 9 blocks"})
    progress.update({"n": 1, "total": 1, "desc": "the largest model: fsdp_zero3, 9 blocks"})
    progress.close("done")
    assert [(b.ended.desc, b.ended.n, b.ended.status) for b in Recorder.made] == [
        ("one-process reference", 1, "done"),
        ("ddp", 1, "done"),
        ("zero1", 1, "done"),
        ("fsdp_zero3", 1, "done"),
        ("checkpoint", 1, "done"),
        ("the largest model: fsdp_zero3, 9 blocks", 1, "done"),
    ]
    assert all(b.shown[0][1] == b.ended.desc for b in Recorder.made), "a bar was renamed after the phase it counted"


def test_a_count_that_starts_again_is_a_new_phase():
    Recorder.made = []
    progress = RunProgress(bar=Recorder)
    for e in events("round", 5, [1, 3, 5]) + events("round", 5, [1, 2]):
        progress.update(e)
    progress.close("failed")
    first, second = Recorder.made
    assert (first.ended.n, first.ended.status) == (5, "done")
    assert (second.ended.n, second.ended.status) == (2, "failed")


def test_a_finished_phase_then_another_with_the_same_total_gets_its_own_bar():
    Recorder.made = []
    progress = RunProgress(bar=Recorder)
    for e in events("warm-up", 3, [3]) + events("measure", 3, [3]):
        progress.update(e)
    progress.close()
    assert [b.ended.desc for b in Recorder.made] == ["warm-up", "measure"]
    assert all(b.ended.status == "done" for b in Recorder.made)


def test_extra_values_and_no_run_at_all():
    progress = RunProgress(bar=NotebookBar)
    progress.close("failed")  # a run that failed before any progress: no bar, no error
    assert progress.phases == []
    progress.update({"n": 1, "total": 2, "desc": "sweep", "busbw": 123.456789, "size": 1024})
    assert progress.phases[0].text() == "busbw=123.5, size=1024"
    with pytest.raises(ValueError, match="use done, failed or interrupted"):
        progress.close("crashed")  # pyright: ignore[reportArgumentType]  # bad input on purpose


def test_text_bars_end_with_their_final_count(capsys):
    progress = RunProgress(bar=TextBar)
    for e in events("all-reduce", 5, [1, 4]):
        progress.update(e)
    progress.close("done")
    assert "5/5" in capsys.readouterr().out.splitlines()[-1].split("\r")[-1]


KERNEL_CELL = """
from nvtutorial.launch.progress import RunProgress
ok = RunProgress()
for n in (1, 3):
    ok.update({"n": n, "total": 4, "desc": "phase one"})
ok.update({"n": 0, "total": 2, "desc": "phase two"})
ok.close("done")
bad = RunProgress()
bad.update({"n": 2, "total": 7, "desc": "doomed"})
bad.close("failed")
"""


@pytest.mark.timeout(180)
def test_an_executed_notebook_saves_the_final_state_and_its_kernel_warns_of_nothing(tmp_path, capfd):
    """Headless execution (the course runner) saves each bar as it ended, as HTML and text, with no widget (state or
    view) to restore; and its kernel, encrypted, prints no warning that it talks in plain text over TCP."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell('profile = "ci"', metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell(KERNEL_CELL),
    ]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    (tmp_path / "in").mkdir()
    nbformat.write(nb, tmp_path / "in" / "bars.ipynb")
    summary = course.run_course(out=tmp_path / "out", notebooks_dir=tmp_path / "in", profile="ci")
    assert summary.notebooks[0].passed, summary.notebooks[0].error
    printed = capfd.readouterr()
    assert "without encryption" not in printed.out + printed.err, printed.err[-2000:]
    executed = json.loads((tmp_path / "out" / "bars.ipynb").read_text())
    assert "widgets" not in executed["metadata"]
    outputs = [o for c in executed["cells"] for o in c.get("outputs", [])]
    assert not [o for o in outputs if "application/vnd.jupyter.widget-view+json" in o.get("data", {})]
    bars = []
    for o in outputs:
        html = "".join(o.get("data", {}).get("text/html", ""))
        status = re.search(r"nvtutorial-bar-(\w+)", html)
        if status:
            bars.append((status[1], re.findall(r"width: ([\d.]+%)", html)[0], "".join(o["data"]["text/plain"])))
    (s1, w1, t1), (s2, w2, t2), (s3, w3, t3) = bars
    assert (s1, w1) == ("done", "100.0%") and "4/4" in t1
    assert (s2, w2) == ("done", "100.0%") and "2/2" in t2
    assert (s3, w3) == ("failed", "28.6%") and "2/7" in t3 and "failed" in t3
