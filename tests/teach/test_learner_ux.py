"""What a learner meets, below the browser (issue 20): grades seen at a glance under their question, graders that
still grade after Run All stopped the ranks, cells that say what they do before they go quiet.

The browser side (Run All of every notebook, then every grader again) is ``tests/test_jupyterlab.py``.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys

import nbformat
import pytest

from nvtutorial import runtime
from nvtutorial.launch.progress import RunProgress
from nvtutorial.report import predict
from nvtutorial.report.verdict import GRADE_LOOK, Verdict
from nvtutorial.teach import check, ranks
from tests.helpers.paths import ROOT


# ----- grades ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("status", ["right", "close", "off", "no answer"])
def test_a_grade_shows_its_mark_and_colour_under_its_question(status):
    v = Verdict(
        "ladder.predict.zero1",
        status,
        "You predicted 3 MB: 5 % too high.",
        {"prediction": 3},
        "CPU, gloo",
        title=predict.question_of("ladder.predict.zero1"),
    )
    bundle = v._repr_mimebundle_()
    mark, colour = GRADE_LOOK[status]
    html = bundle["text/html"]
    assert f"{mark} {status}" in html and colour in html
    assert "MB of parameters, gradients and Adam state on rank 0 under ZeRO-1" in html
    assert "ladder.predict.zero1" not in html and "ladder.predict.zero1" not in bundle["text/plain"]
    assert bundle["text/plain"].startswith(f"{mark} {status} · MB of parameters")
    assert bundle["text/markdown"].startswith(f"**{mark} {status}**")
    assert json.loads(json.dumps(bundle["application/vnd.nvtutorial.verdict+json"]))["key"] == "ladder.predict.zero1"
    assert len({GRADE_LOOK[s][1] for s in GRADE_LOOK}) == 4, "each grade has a colour of its own"


def test_other_verdicts_keep_their_look_and_round_trip_with_a_title():
    v = Verdict("C14", "partly", "within the noise", {}, "2× H200")
    assert str(v) == "C14 · partly: within the noise [2× H200]" and "text/html" not in v._repr_mimebundle_()
    graded = predict.grade_number("03.scaling", 1.5, 1.9, unit="×", where="here", explanation="x")
    again = Verdict.from_dict(graded.to_dict())
    assert again == graded and again.title == "The speed-up of 2 GPUs over 1 at a fixed global batch"
    assert "title" not in v.to_dict()  # verdicts without one keep their saved form


def grade_keys() -> set[str]:
    """The key of every grade the course makes: literal first arguments of grade_number / grade_choice in the
    package and the notebooks (keys built at run time, such as 'busbw at SIZE' and ch10's, are named apart)."""
    keys = set()
    sources = [p.read_text() for p in (ROOT / "nvtutorial").rglob("*.py")]
    for nb in (ROOT / "notebooks").glob("*.ipynb"):
        sources += [c.source for c in nbformat.read(nb, as_version=4).cells if c.cell_type == "code"]
    for text in sources:
        keys |= set(re.findall(r"grade_(?:number|choice)\(\s*\"([^\"{]+)\"", text))
        keys |= set(re.findall(r"Verdict\(\"(prediction: [^\"]+)\"", text))
    return keys


def test_every_grade_of_the_course_has_its_question():
    keys = grade_keys()
    assert {"03.scaling", "ladder.predict.zero1", "where ranks wait", "prediction: steps lost"} <= keys
    missing = sorted(k for k in keys if predict.question_of(k) == k)
    assert not missing, f"grades shown under their key, not a question: {missing} (add them to predict.QUESTIONS)"
    assert predict.question_of("busbw at 1 GiB") == "The all-reduce bus bandwidth at 1 GiB"


# ----- graders after Run All -------------------------------------------------------------------------------------
@pytest.fixture
def fresh_ranks():
    ranks.stop()
    ranks._ended.update(cells=0, at=None)
    ranks.configure(nproc=2, backend="gloo", timeout=60)
    yield
    ranks.stop()


def test_a_grader_pulls_what_the_ranks_held_after_they_were_stopped(fresh_ranks, capsys):
    ranks.run_code("values = {'loss': 0.5 * (rank + 1)}\nt = torch.ones(2) * rank")
    assert ranks.pull("values") == [{"loss": 0.5}, {"loss": 1.0}]
    assert ranks.status()["running"]
    ranks.ranks_magic("stop")
    capsys.readouterr()
    assert ranks.pull("values") == [{"loss": 0.5}, {"loss": 1.0}]  # as a grading cell re-run after Run All does
    said = capsys.readouterr().err
    assert "the ranks were stopped" in said and "values is what they held when it was pulled" in said
    with pytest.raises(ranks.RanksError, match="no ranks are running: run a %%ranks cell first"):
        ranks.pull("t")  # never pulled: nothing to give back
    status = ranks.status()
    assert not status["running"] and status["backend"] in ("gloo", "nccl")  # what it resolves to, never "auto"
    # new ranks: the values pulled from the old ones are gone, and the start says the old names are
    ranks.ranks_magic("", "x = rank")
    out = capsys.readouterr().out
    assert "%ranks: starting 2 ranks (CPU, gloo" in out and "2 ranks ready (" in out
    assert "these are new ranks: what the 1 cell(s) run on the earlier ones defined is gone" in out
    ranks.stop()
    with pytest.raises(ranks.RanksError):
        ranks.pull("values")


def test_a_ranks_checker_says_what_to_run_when_the_ranks_were_stopped(fresh_ranks):
    with pytest.raises(
        ranks.RanksError,
        match="ring_all_reduce lives on the ranks of the %%ranks cell that defines it, and no ranks are running now",
    ):
        check.check_ranks("ring_allreduce")
    assert not ranks.status()["running"], "the checker started ranks that cannot hold the learner's function"


# ----- no silent cells -------------------------------------------------------------------------------------------
def test_the_profile_is_decided_without_importing_torch():
    code = (
        "import sys; from nvtutorial import course; course.plan('x', 'auto', {'a': 'one GPU', 'b': 'two GPUs'}); "
        "print('torch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert done.stdout.strip() == "False"


def test_a_kernel_says_when_a_cell_first_imports_torch_pandas_or_matplotlib():
    from tests.helpers.kernel import Kernel

    def said(out: dict) -> list[str]:  # past 1.5 s an import also says it goes on: timing, left out (its form kept)
        still = re.compile(r"\[nvtutorial\] still importing (torch|pandas|matplotlib), \d+ s so far")
        return [line for line in out["stdout"].splitlines() if not still.fullmatch(line)]

    k = Kernel()
    try:
        first = k.execute("import importlib.util, nvtutorial\nimportlib.util.find_spec('torch')\nprint('looked')")
        assert first["stdout"] == "looked\n", first  # a look-up is not an import: nothing said
        out = k.execute("import torch\nprint(torch.ones(1).item())")
        assert said(out) == [
            "[nvtutorial] importing PyTorch in this kernel (once per kernel; it starts no GPU)",
            "1.0",
        ], out
        assert k.execute("import torch.nn")["stdout"] == ""  # once per kernel
        out = k.execute("import pandas\nimport matplotlib.pyplot\nimport pandas, matplotlib")
        assert said(out) == [
            "[nvtutorial] importing pandas (once per kernel)",
            "[nvtutorial] importing matplotlib (once per kernel)",
        ], out
    finally:
        k.close()


def test_a_plain_script_reports_progress_as_a_line_and_as_a_bar_under_the_launcher(capsys, monkeypatch):
    monkeypatch.setattr(runtime, "_metrics", None)  # a plain torchrun
    runtime.progress(2, 3, "epochs", train_loss=0.123456789, iou=0.5)
    assert capsys.readouterr().out == "epochs 2/3: train_loss=0.1235, iou=0.5\n"
    monkeypatch.setattr(runtime, "_metrics", {})  # under the launcher: an event the launcher draws
    runtime.progress(2, 3, "epochs", train_loss=0.123456789)
    line = capsys.readouterr().out.strip()
    assert line.startswith(runtime.PROGRESS_PREFIX)
    event = json.loads(line[len(runtime.PROGRESS_PREFIX) :])
    progress = RunProgress(bar=_Shown)
    progress.update(event)
    assert (progress.phases[0].desc, progress.phases[0].n, progress.phases[0].total) == ("epochs", 2, 3)
    assert progress.phases[0].text() == "train_loss=0.1235"


class _Shown:
    def __init__(self, phase):
        pass

    def show(self, phase):
        pass

    def end(self, phase):
        pass


def test_the_lesson_03_trains_with_a_bar_not_raw_dicts():
    tree = ast.parse((ROOT / "nvtutorial" / "chapters" / "ch03_ddp_training" / "lessons" / "ddp_train.py").read_text())
    calls = [ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.Call)]
    assert any(c.startswith("runtime.progress(epoch + 1, args.epochs, 'epochs'") for c in calls)
    assert not any(c.startswith("print(history") for c in calls)


def test_every_run_says_how_it_started_even_with_no_rank_output(capfd):
    import nvtutorial

    res = nvtutorial.run("selftest", nproc=2, backend="gloo", params={"steps": 1, "numel": 64}, output="none")
    out = capfd.readouterr().out
    assert res.ok and re.search(r"^\[nvtutorial\] (ranks forked warm, as|started with): .*torchrun ", out, re.M), out
    assert "[rank0]" not in out
