"""Predict, then measure: grade a learner's prediction against the run and explain the answer.

Before a headline run the notebook has a cell such as ``my_prediction = None  # GB/s``; the
learner writes a number (or picks a choice), the run measures, and one of these functions grades
the prediction and explains the gap. Without a prediction the answer is still shown and explained.
The grade is a :class:`~nvtutorial.report.verdict.Verdict` (status ``right``, ``close``, ``off`` or
``no answer``) so it prints like every other conclusion of the course.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from nvtutorial.i18n import N_, _
from nvtutorial.report.verdict import Verdict


class PredictionError(ValueError):
    """The prediction is not of the kind asked for (a number, or one of the choices)."""


QUESTIONS = {
    "all_reduce": N_("What rank 0's tensor holds after dist.all_reduce"),
    "where rank 0 waits": N_("Where rank 0 waits when rank 1 never calls the all-reduce"),
    "NVLink ÷ host-staged": N_(
        "How many times the all-reduce's busbw over NVLink is that staged through host memory (NCCL_P2P_DISABLE=1)"
    ),
    "C7 prediction": N_("What the source's NCCL settings do to the all-reduce"),
    "pinned host to device": N_("Host to device over PCIe from pinned memory, at the largest size"),
    "03.source validation": N_("What the source's all_reduce(val_loss) reports"),
    "03.scaling": N_("The speed-up of 2 GPUs over 1 at a fixed global batch"),
    "03.C14 prediction": N_("DDP's step time over NVLink against host-staged transfers"),
    "04.largest": N_("Which change moves the step time most on one GPU"),
    "exposed communication": N_("The share of the step that is exposed communication"),
    "where ranks wait": N_("Where each rank's main thread is while rank 0 validates alone"),
    "bytes per rank": N_("MiB each rank sends in a ring all-reduce of the largest tensor"),
    "ring's share of all_reduce": N_(
        "The plain ring's bus bandwidth as a share of dist.all_reduce's at the largest sizes, on the slower rank"
    ),
    "faster hooks": N_("Which communication hooks make the step faster"),
    "ladder.predict.zero1": N_("MB of parameters, gradients and Adam state on rank 0 under ZeRO-1"),
    "ladder.predict.link": N_("Which rung loses the most step time without the direct link"),
    "prediction: steps lost": N_("Steps done again after a rank is killed"),
}
"""Each grade's question, by the grade's key: a grade is shown under the question, not under its key."""


def question_of(key: str) -> str:
    """The question a grade answers (``key`` itself where none is written down; busbw's names its size)."""
    if key.startswith("busbw at "):
        return N_("The all-reduce bus bandwidth at {size}", size=key.removeprefix("busbw at "))
    return QUESTIONS.get(key, key)


def _check_number(key: str, prediction: object, unit: str) -> None:
    """A learner's numeric prediction is a positive finite number, or a :class:`PredictionError` says what to write."""
    if isinstance(prediction, bool) or not isinstance(prediction, (int, float)) or not math.isfinite(prediction):
        raise PredictionError(
            _(
                "{key}: write a number (in {unit}) as your prediction, not {prediction!r}",
                key=key,
                unit=unit,
                prediction=prediction,
            )
        )
    if prediction <= 0:
        raise PredictionError(
            _(
                "{key}: a prediction of {prediction} {unit} cannot be right: it must be positive",
                key=key,
                prediction=prediction,
                unit=unit,
            )
        )


def _closeness(ratio: float, right_within: float, close_within: float) -> tuple[str, str]:
    """The grade of ``prediction / measured`` (``right``, ``close`` or ``off``) and how far off it was, in words."""
    if abs(ratio - 1) <= right_within:
        status = "right"
    elif 1 / (1 + close_within) <= ratio <= 1 + close_within:
        status = "close"
    else:
        status = "off"
    if abs(ratio - 1) <= 0.005:
        return status, N_("spot on")
    if ratio > 1:
        return status, N_("{off:.0%} too high", off=abs(ratio - 1))
    return status, N_("{off:.0%} too low", off=abs(ratio - 1))


def grade_number(
    key: str,
    prediction: float | None,
    measured: float,
    *,
    unit: str,
    where: str,
    explanation: str,
    right_within: float = 0.25,
    close_within: float = 1.0,
    limit: float | None = None,
    limit_name: str = N_("physical limit"),
    measured_name: str = N_("Measured"),
    question: str = "",
) -> Verdict:
    """Grade a numeric prediction: ``right`` within ``right_within`` (relative), ``close`` within a
    factor of ``1 + close_within``, else ``off``. ``limit`` (optional) is a bound no answer can pass;
    ``measured_name`` introduces the measured value (say whose measurement it is when not this run's);
    ``question`` is what the grade is shown under (default: :data:`QUESTIONS` by ``key``)."""
    title = question or question_of(key)
    if not (isinstance(measured, (int, float)) and math.isfinite(measured) and measured > 0):
        raise ValueError(
            _("{key}: the measured value must be a positive number, got {measured!r}", key=key, measured=measured)
        )
    numbers: dict[str, Any] = {"prediction": prediction, "measured": measured, "unit": unit}
    answer = N_(
        "{measured_name}: {measured:.4g} {unit}. {explanation}",
        measured_name=measured_name,
        measured=measured,
        unit=unit,
        explanation=explanation,
    )
    if prediction is None:
        return Verdict(
            key,
            "no answer",
            N_("No prediction written (set it in the cell above and re-run). {answer}", answer=answer),
            numbers,
            where,
            title,
        )
    _check_number(key, prediction, unit)
    ratio = prediction / measured
    numbers["ratio"] = ratio
    status, off_by = _closeness(ratio, right_within, close_within)
    fields = {"prediction": prediction, "unit": unit, "off_by": off_by, "answer": answer}
    if limit is not None and prediction > limit:
        text = N_(
            "You predicted {prediction:.4g} {unit}: {off_by}. {answer} No run can pass the {limit_name} of "
            "{limit:.4g} {unit}.",
            **fields,
            limit_name=limit_name,
            limit=limit,
        )
    else:
        text = N_("You predicted {prediction:.4g} {unit}: {off_by}. {answer}", **fields)
    return Verdict(key, status, text, numbers, where, title)


def grade_choice(
    key: str,
    prediction: str | None,
    answer: str,
    choices: Mapping[str, str],
    *,
    where: str,
    explanation: str,
    question: str = "",
) -> Verdict:
    """Grade a multiple-choice prediction (``choices``: letter → statement) against the measured ``answer``;
    ``question`` as for :func:`grade_number`."""
    title = question or question_of(key)
    if answer not in choices:
        raise ValueError(
            _(
                "{key}: the answer {answer!r} is not among the choices {choices}",
                key=key,
                answer=answer,
                choices=", ".join(choices),
            )
        )
    numbers = {"prediction": prediction, "answer": answer}
    right = N_(
        "The run says ({answer}) {choice}. {explanation}",
        answer=answer,
        choice=choices[answer],
        explanation=explanation,
    )
    if prediction is None:
        return Verdict(
            key,
            "no answer",
            N_("No prediction picked (set it in the cell above and re-run). {right}", right=right),
            numbers,
            where,
            title,
        )
    pick = str(prediction).strip().strip("()").lower()
    keys = {str(k).lower(): k for k in choices}
    if pick not in keys:
        raise PredictionError(
            _(
                "{key}: pick one of {choices}, not {prediction!r}",
                key=key,
                choices=", ".join(map(str, choices)),
                prediction=prediction,
            )
        )
    chosen = keys[pick]
    if chosen == answer:
        return Verdict(
            key, "right", N_("You picked ({chosen}): right. {right}", chosen=chosen, right=right), numbers, where, title
        )
    text = N_("You picked ({chosen}) {choice}. {right}", chosen=chosen, choice=choices[chosen], right=right)
    return Verdict(key, "off", text, numbers, where, title)
