"""Chapter 5's lesson script (profile_ddp.py) on real ranks."""

from __future__ import annotations

from pathlib import Path

import nvtutorial
from nvtutorial import tracesplit
from nvtutorial.chapters.ch05_profiling import report_traces as traces


def test_the_lesson_script_runs_on_real_ranks_and_its_traces_pair(runs_dir):
    out = runs_dir / "lesson"
    res = nvtutorial.run(
        str(LESSON),
        nproc=2,
        output="none",
        timeout=180,
        out=out,
        args=["--model", "tiny", "--batch", "2", "--image", "16", "--steps", "2", "--out", str(out)],
    )
    paths = traces.rank_traces(out)
    assert [p.name for p in paths] == ["trace_rank0.json", "trace_rank1.json"]
    assert [Path(m["trace"]).name for m in res.ranks] == ["trace_rank0.json", "trace_rank1.json"]
    assert all(len(m["step_ms"]) == 2 for m in res.ranks)
    acts = [tracesplit.classify(p) for p in paths]
    assert [len(a.steps) for a in acts] == [2, 2]  # the schedule kept the 2 active steps, each in its range
    assert all(all(a.phases[p] for p in tracesplit.PHASES) for a in acts)  # forward, backward, optimizer marked
    waits = tracesplit.pair(acts)
    assert waits[0].collectives == waits[1].collectives >= 1


LESSON = Path(nvtutorial.__file__).resolve().parent / "chapters" / "ch05_profiling" / "lessons" / "profile_ddp.py"
