"""Code exercises that check themselves: run the learner's code against a reference, say pass or why not.

An exercise lives in its chapter, ``nvtutorial/chapters/chNN_topic/exercises*.py`` (rank-side code only: it
imports nothing of the notebook side) and declares::

    NOTEBOOK = "03_ddp_training"      # where it is asked
    TASK = "..."                      # one line: what to write
    KIND = "function" | "script"
    SOLUTION                          # the reference answer: a function, or the path of a script
    WRONG = {"name": (candidate, "words the reason must contain"), ...}   # known wrong answers (tests)

and one way to judge a candidate:

- ``check_local(candidate) -> (passed, reason)``: judged in this process (no ranks needed);
- ``check_on_rank(candidate, ctx) -> (passed, reason)``: the candidate function is sent to a real run
  of ``nproc`` ranks (the ``exercise`` workload) and judged on every rank; it passes when every rank
  passes, else the first failing rank's reason is given;
- ``check_run(outcome) -> (passed, reason)`` for ``KIND = "script"``: the learner's script is launched
  on real ranks with the exercise's ``TIMEOUT``, and ``outcome`` (a dict: ``ok``, ``timed_out``,
  ``failed_rank``, ``error``, ``metrics`` per rank) is judged.

:func:`check` does the launching and returns a :class:`CheckResult`, which displays as a verdict.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

from nvtutorial.i18n import N_, _, tr
from nvtutorial.report.verdict import Verdict


class ExerciseError(LookupError):
    """No such exercise, or a candidate of the wrong kind; the message says what is expected."""


@dataclasses.dataclass(frozen=True)
class CheckResult:
    exercise: str
    passed: bool
    reason: str
    where: str = ""
    details: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __bool__(self) -> bool:
        return self.passed

    @property
    def verdict(self) -> Verdict:
        return Verdict(
            N_("exercise {name}", name=self.exercise),
            "pass" if self.passed else "fail",
            self.reason,
            {"passed": self.passed},
            self.where,
        )

    def __str__(self) -> str:
        if self.passed:
            return _("PASS ({exercise}): {reason}", exercise=self.exercise, reason=tr(self.reason))
        return _("FAIL ({exercise}): {reason}", exercise=self.exercise, reason=tr(self.reason))

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        bundle = self.verdict._repr_mimebundle_()
        bundle["text/plain"] = str(self)
        return bundle


def modules() -> dict[str, str]:
    """Every exercise's name and its module: a chapter's ``exercises*.py`` that declares ``NAME``."""
    from nvtutorial.chapters import named

    return dict(sorted(named("exercises").items()))


def names() -> list[str]:
    """Every exercise's name."""
    return list(modules())


def load(name: str) -> ModuleType:
    available = modules()
    if name not in available:
        raise ExerciseError(
            _(
                "unknown exercise {name!r}; the exercises are: {names}",
                name=name,
                names=", ".join(available) or _("none"),
            )
        )
    return importlib.import_module(available[name])


def candidate_source(fn: Any) -> str:
    """The source of a function the learner defined (in a notebook cell or a file), dedented."""
    if isinstance(fn, str):
        return textwrap.dedent(fn)
    if not callable(fn):
        raise ExerciseError(_("expected the function you wrote, got {kind}", kind=type(fn).__name__))
    try:
        return textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError) as exc:
        raise ExerciseError(
            _(
                "cannot read the source of {name!r} ({error}): "
                "define it with `def` in a cell or a file, then pass the function",
                name=getattr(fn, "__name__", fn),
                error=exc,
            )
        ) from None


def check(name: str, candidate: Any = None, *, nproc: int = 2, timeout: float | None = None) -> CheckResult:
    """Judge ``candidate`` (default: the exercise's own solution) for the exercise ``name``."""
    ex = load(name)
    if candidate is None:
        candidate = ex.SOLUTION
    if getattr(ex, "KIND", "function") == "script":
        return _check_script(name, ex, candidate, nproc, timeout)
    if hasattr(ex, "check_local"):
        passed, reason = ex.check_local(candidate)
        return CheckResult(name, bool(passed), reason, N_("this kernel, no ranks"))
    if hasattr(ex, "check_on_rank"):
        return _check_on_ranks(name, ex, candidate, nproc, timeout)
    raise ExerciseError(f"exercise {name} defines no check_local, check_on_rank or check_run")


def _check_on_ranks(name: str, ex: ModuleType, candidate: Any, nproc: int, timeout: float | None) -> CheckResult:
    from nvtutorial import launch, workloads

    source = candidate_source(candidate)
    entry = getattr(candidate, "__name__", None) or getattr(ex, "ENTRY", None)
    if not entry:
        raise ExerciseError(
            _("exercise {name}: pass the function itself (its name tells the checker what to call)", name=name)
        )
    out = launch.run_folder("exercise")  # the candidate is kept in the run's folder, and pruned with it
    out.mkdir(parents=True)
    path = out / f"candidate_{name}.py"
    path.write_text(source)
    try:
        result = launch.run(
            "exercise",
            nproc=nproc,
            timeout=timeout or getattr(ex, "TIMEOUT", 120.0),
            output="none",
            check=False,
            out=out,
            params={"name": name, "candidate": str(path), "entry": entry},
        )
    except launch.RunInterrupted as exc:  # say it was the checker that was stopped, then the run's lines
        first, *rest = str(exc).splitlines()
        if first.startswith("stopped while "):  # English: one sentence
            first = f"stopped while checking {entry} (exercise {name}): the " + first.removeprefix("stopped while ")
        else:
            first = _("stopped while checking {entry} (exercise {name}): {run}", entry=entry, name=name, run=first)
        raise launch.RunInterrupted("\n".join([first, *rest]), exc.result) from None
    if not result.ok:
        error = result.error or {}
        return CheckResult(
            name,
            False,
            _did_not_finish(error),
            result.label,
            {"run_dir": str(result.run_dir)},
        )
    judged = result.ranks_as(workloads.result_type("exercise"))
    for rank, verdict in enumerate(judged):
        if not verdict.passed:
            return CheckResult(
                name,
                False,
                N_("rank {rank}: {reason}", rank=rank, reason=verdict.reason or N_("no reason given")),
                result.label,
                {"run_dir": str(result.run_dir)},
            )
    return CheckResult(
        name,
        bool(judged),
        judged[0].reason if judged else N_("no rank reported its judgement"),
        result.label,
        {"run_dir": str(result.run_dir)},
    )


def _did_not_finish(error: dict[str, Any]) -> str:
    """Why the learner's code did not finish on the ranks: the error's type and message."""
    kind, message = error.get("type", "error"), str(error.get("message", "")).rstrip()
    if not message:
        return N_("your code did not finish on the ranks: {kind}:", kind=kind)
    return N_("your code did not finish on the ranks: {kind}: {message}", kind=kind, message=message)


def _check_script(name: str, ex: ModuleType, candidate: Any, nproc: int, timeout: float | None) -> CheckResult:
    from nvtutorial import launch

    path = Path(candidate)
    if not path.is_file():
        raise ExerciseError(
            _(
                "exercise {name}: pass the path of your script (e.g. the file of %%writefile), {path!r} is not a file",
                name=name,
                path=str(candidate),
            )
        )
    result = launch.run(
        str(path),
        nproc=nproc,
        timeout=timeout or getattr(ex, "TIMEOUT", 60.0),
        output="none",
        check=False,
        args=list(getattr(ex, "ARGS", ())),
    )
    error = result.error or {}
    outcome = {
        "ok": result.ok,
        "timed_out": error.get("type") == "Timeout",
        "failed_rank": error.get("rank"),
        "error": error,
        "metrics": result.ranks,
        "wall_s": result.wall_s,
    }
    passed, reason = ex.check_run(outcome)
    return CheckResult(name, bool(passed), reason, result.label, {"run_dir": str(result.run_dir)})


def check_ranks(name: str, function: str | None = None, *, timeout: float | None = None) -> CheckResult:
    """Judge the function that a ``%%ranks`` cell defined on the running ranks (named ``function``,
    default: the exercise's ``ENTRY``), with the exercise's ``check_on_rank`` on every rank.

    Never raises for the learner's code: an exception, a hang past ``timeout`` (the exercise's
    ``TIMEOUT``, else 60 s) or a failing rank becomes a failed :class:`CheckResult` with the reason.
    """
    from nvtutorial.teach import ranks

    ex = load(name)
    function = function or getattr(ex, "ENTRY", None)
    if not function or not function.isidentifier():
        raise ExerciseError(
            _(
                "exercise {name}: name the function your %%ranks cell defined, e.g. check_ranks({name!r}, "
                "'my_function')",
                name=name,
            )
        )
    if not ranks.status()["running"]:  # new ranks would not hold the learner's function: say what to run
        raise ranks.RanksError(
            _(
                "{function} lives on the ranks of the %%ranks cell that defines it, and no ranks are "
                "running now (they were stopped since): run that cell again, then this check",
                function=function,
            )
        )
    print(
        _(
            "checking {function} on the {nproc} ranks of %%ranks (exercise {name})",
            function=function,
            nproc=ranks.status()["nproc"],
            name=name,
        ),
        flush=True,
    )
    code = f"import {ex.__name__} as _exercise\n_check = _exercise.check_on_rank(globals().get({function!r}), None)\n"
    result = ranks.run_code(code, timeout=timeout or getattr(ex, "TIMEOUT", 60.0))
    where = N_(
        "{ranks} ranks of %%ranks ({backend})", ranks=len(result.outcomes), backend=ranks.status().get("backend", "?")
    )
    if not result.ok:
        if result.reason == "timeout":
            why = N_(
                "did not finish within {timeout:g} s: a rank waits for a message that never comes "
                "(a send without its receive on the other side, or ranks that disagree on the chunk sizes)",
                timeout=result.timeout,
            )
        else:
            bad = [o for o in result.outcomes if not o.ok]
            why = "; ".join(o.summary() for o in bad) or (result.reason or N_("failed"))
        return CheckResult(
            name,
            False,
            N_("your code did not finish on the ranks: {why}", why=why),
            where,
            {"recovery": result.recovery},
        )
    verdicts = ranks.pull("_check")
    for passed, reason in verdicts:
        if not passed:
            return CheckResult(name, False, reason, where)
    return CheckResult(name, True, verdicts[0][1], where)
