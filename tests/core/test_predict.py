"""Tests of nvtutorial/report/predict.py."""

from __future__ import annotations

from nvtutorial.report import predict


def test_an_unanswered_prediction_keeps_its_question():
    v = predict.grade_number(
        "my.key", None, 5.0, unit="GB/s", where="here", explanation="why.", question="How fast is the copy?"
    )
    assert v.status == "no answer" and v.title == "How fast is the copy?" and v.numbers["measured"] == 5.0
