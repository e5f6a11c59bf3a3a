"""Predict, then measure: the grading lives in :mod:`nvtutorial.report.predict` (a grade is a Verdict);
notebooks import it from here, beside the other notebook helpers."""

from nvtutorial.report.predict import PredictionError, grade_choice, grade_number

__all__ = ["PredictionError", "grade_choice", "grade_number"]
