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


def grade_number(key: str, prediction: float | None, measured: float, *, unit: str, where: str, explanation: str,
                 right_within: float = 0.25, close_within: float = 1.0, limit: float | None = None,
                 limit_name: str = "physical limit", measured_name: str = "Measured") -> Verdict:
    """Grade a numeric prediction: ``right`` within ``right_within`` (relative), ``close`` within a
    factor of ``1 + close_within``, else ``off``. ``limit`` (optional) is a bound no answer can pass;
    ``measured_name`` introduces the measured value (say whose measurement it is when not this run's)."""
    if not (isinstance(measured, (int, float)) and math.isfinite(measured) and measured > 0):
        raise ValueError(f"{key}: the measured value must be a positive number, got {measured!r}")
    numbers: dict[str, Any] = {"prediction": prediction, "measured": measured, "unit": unit}
    answer = f"{measured_name}: {measured:.4g} {unit}. {explanation}"
    if prediction is None:
        return Verdict(key, "no answer", f"No prediction written (set it in the cell above and re-run). {answer}",
                       numbers, where)
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
    return Verdict(key, status, text, numbers, where)


def grade_choice(key: str, prediction: str | None, answer: str, choices: Mapping[str, str], *, where: str,
                 explanation: str) -> Verdict:
    """Grade a multiple-choice prediction (``choices``: letter → statement) against the measured ``answer``."""
    if answer not in choices:
        raise ValueError(f"{key}: the answer {answer!r} is not among the choices {', '.join(choices)}")
    numbers = {"prediction": prediction, "answer": answer}
    right = f"The run says ({answer}) {choices[answer]}. {explanation}"
    if prediction is None:
        return Verdict(key, "no answer", f"No prediction picked (set it in the cell above and re-run). {right}",
                       numbers, where)
    pick = str(prediction).strip().strip("()").lower()
    keys = {str(k).lower(): k for k in choices}
    if pick not in keys:
        raise PredictionError(f"{key}: pick one of {', '.join(map(str, choices))}, not {prediction!r}")
    chosen = keys[pick]
    if chosen == answer:
        return Verdict(key, "right", f"You picked ({chosen}): right. {right}", numbers, where)
    return Verdict(key, "off", f"You picked ({chosen}) {choices[chosen]}. {right}", numbers, where)
