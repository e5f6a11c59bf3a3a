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

from nvtutorial.report.verdict import Verdict


class PredictionError(ValueError):
    """The prediction is not of the kind asked for (a number, or one of the choices)."""


QUESTIONS = {
    "all_reduce": "What rank 0's tensor holds after dist.all_reduce",
    "where rank 0 waits": "Where rank 0 waits when rank 1 never calls the all-reduce",
    "NVLink ÷ host-staged": (
        "How many times the all-reduce's busbw over NVLink is that staged through host memory (NCCL_P2P_DISABLE=1)"
    ),
    "C7 prediction": "What the source's NCCL settings do to the all-reduce",
    "pinned host to device": "Host to device over PCIe from pinned memory, at the largest size",
    "03.source validation": "What the source's all_reduce(val_loss) reports",
    "03.scaling": "The speed-up of 2 GPUs over 1 at a fixed global batch",
    "03.C14 prediction": "DDP's step time over NVLink against host-staged transfers",
    "04.largest": "Which change moves the step time most on one GPU",
    "exposed communication": "The share of the step that is exposed communication",
    "where ranks wait": "Where each rank's main thread is while rank 0 validates alone",
    "bytes per rank": "MiB each rank sends in a ring all-reduce of the largest tensor",
    "ring's share of all_reduce": (
        "The plain ring's bus bandwidth as a share of dist.all_reduce's at the largest sizes, on the slower rank"
    ),
    "faster hooks": "Which communication hooks make the step faster",
    "ladder.predict.zero1": "MB of parameters, gradients and Adam state on rank 0 under ZeRO-1",
    "ladder.predict.link": "Which rung loses the most step time without the direct link",
    "prediction: steps lost": "Steps done again after a rank is killed",
}
"""Each grade's question, by the grade's key: a grade is shown under the question, not under its key."""


def question_of(key: str) -> str:
    """The question a grade answers (``key`` itself where none is written down; busbw's names its size)."""
    if key.startswith("busbw at "):
        return f"The all-reduce bus bandwidth at {key.removeprefix('busbw at ')}"
    return QUESTIONS.get(key, key)


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
    limit_name: str = "physical limit",
    measured_name: str = "Measured",
    question: str = "",
) -> Verdict:
    """Grade a numeric prediction: ``right`` within ``right_within`` (relative), ``close`` within a
    factor of ``1 + close_within``, else ``off``. ``limit`` (optional) is a bound no answer can pass;
    ``measured_name`` introduces the measured value (say whose measurement it is when not this run's);
    ``question`` is what the grade is shown under (default: :data:`QUESTIONS` by ``key``)."""
    title = question or question_of(key)
    if not (isinstance(measured, (int, float)) and math.isfinite(measured) and measured > 0):
        raise ValueError(f"{key}: the measured value must be a positive number, got {measured!r}")
    numbers: dict[str, Any] = {"prediction": prediction, "measured": measured, "unit": unit}
    answer = f"{measured_name}: {measured:.4g} {unit}. {explanation}"
    if prediction is None:
        return Verdict(
            key,
            "no answer",
            f"No prediction written (set it in the cell above and re-run). {answer}",
            numbers,
            where,
            title,
        )
    if isinstance(prediction, bool) or not isinstance(prediction, (int, float)) or not math.isfinite(prediction):
        raise PredictionError(f"{key}: write a number (in {unit}) as your prediction, not {prediction!r}")
    if prediction <= 0:
        raise PredictionError(f"{key}: a prediction of {prediction} {unit} cannot be right: it must be positive")
    ratio = prediction / measured
    numbers["ratio"] = ratio
    if abs(ratio - 1) <= right_within:
        status = "right"
    elif 1 / (1 + close_within) <= ratio <= 1 + close_within:
        status = "close"
    else:
        status = "off"
    off_by = f"{abs(ratio - 1):.0%} too {'high' if ratio > 1 else 'low'}" if abs(ratio - 1) > 0.005 else "spot on"
    text = f"You predicted {prediction:.4g} {unit}: {off_by}. {answer}"
    if limit is not None and prediction > limit:
        text += f" No run can pass the {limit_name} of {limit:.4g} {unit}."
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
        raise ValueError(f"{key}: the answer {answer!r} is not among the choices {', '.join(choices)}")
    numbers = {"prediction": prediction, "answer": answer}
    right = f"The run says ({answer}) {choices[answer]}. {explanation}"
    if prediction is None:
        return Verdict(
            key,
            "no answer",
            f"No prediction picked (set it in the cell above and re-run). {right}",
            numbers,
            where,
            title,
        )
    pick = str(prediction).strip().strip("()").lower()
    keys = {str(k).lower(): k for k in choices}
    if pick not in keys:
        raise PredictionError(f"{key}: pick one of {', '.join(map(str, choices))}, not {prediction!r}")
    chosen = keys[pick]
    if chosen == answer:
        return Verdict(key, "right", f"You picked ({chosen}): right. {right}", numbers, where, title)
    return Verdict(key, "off", f"You picked ({chosen}) {choices[chosen]}. {right}", numbers, where, title)
