"""Tests of nvtutorial/chapters/ch03_ddp_training/exercises*.py."""

from __future__ import annotations

import pytest

from tests.helpers.exercise_cases import _assert_judged, _cases, _judge
from tests.helpers.ranks import on_ranks


@pytest.mark.parametrize("world", (2, 3))
def test_the_validation_checker(world):
    cases = _cases("ddp_validation")
    per_rank = on_ranks(_judge, world, "ddp_validation", "pixel_accuracy", cases, timeout=180)
    _assert_judged("ddp_validation", per_rank, cases)


@pytest.mark.parametrize("world", (2, 3))
def test_the_accumulation_checker(world):
    cases = _cases("ddp_accumulation")
    per_rank = on_ranks(_judge, world, "ddp_accumulation", "train_step_uneven", cases, timeout=240)
    _assert_judged("ddp_accumulation", per_rank, cases)
