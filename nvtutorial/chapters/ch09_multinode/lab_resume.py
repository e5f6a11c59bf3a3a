"""The judging of exercise ``multinode_resume`` on real ranks: :func:`judge` reads the run in which
:func:`nvtutorial.chapters.ch09_multinode.lab.check_resume` killed a rank of the lesson running the learner's
``resume``, and gives the verdict.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nvtutorial.chapters.ch09_multinode.schema_outcome import ElasticOutcome


def judge(name: str, outcome: ElasticOutcome, reference_checkpoint: Callable[[], Path], every: int) -> Any:
    """The verdict on the run with the learner's ``resume`` (a :class:`~nvtutorial.teach.check.CheckResult`): it
    finished, the killed rank started again, fewer steps than the checkpoint interval ``every`` were done again, and
    the final weights are those of the uninterrupted run's checkpoint (``reference_checkpoint()``, read only then)."""
    from nvtutorial.chapters.ch09_multinode import report
    from nvtutorial.teach import check as teach_check

    where = outcome.where
    details: dict[str, Any] = {
        "run_dir": str(outcome.result.run_dir),
        "resumed_from": outcome.resumed_from,
        "last_step_before_kill": outcome.last_step_before_kill,
        "steps_lost": outcome.steps_lost,
        "every": every,
        "killed_pids": list(outcome.killed_pids),
        "identical": None,
    }
    judged = functools.partial(teach_check.CheckResult, name, where=where, details=details)
    if not outcome.ok:
        error = outcome.result.error or {}
        said = (str(error.get("message", "")).splitlines() or [""])[0][:300]
        return judged(False, f"the run with your resume did not finish: {error.get('type', 'error')}: {said}")
    lost, resumed = outcome.steps_lost, outcome.resumed_from
    if resumed is None:
        return judged(False, "the killed rank was never restarted (no second start in the log)")
    same = report.same_weights(reference_checkpoint(), outcome.checkpoint, "uninterrupted", "killed and resumed", where)
    details["identical"] = bool(same.numbers.get("identical"))
    killed = outcome.last_step_before_kill
    if lost is not None and lost >= every:
        return judged(
            False,
            f"it resumed at step {resumed} after the kill at step {killed}: {lost} steps were done again, more than "
            f"the {every} between checkpoints; the checkpoint was ignored",
        )
    if same.status != "pass":
        return judged(
            False,
            f"it recovered (resumed at step {resumed}, {lost} steps done again) but the final weights differ from the "
            f"uninterrupted run's: {same.text}",
        )
    return judged(
        True,
        f"rank 1 killed after step {killed}, resumed at step {resumed} ({lost} steps done again), final weights "
        "identical to the uninterrupted run's",
    )
