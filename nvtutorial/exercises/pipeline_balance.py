"""Exercise of notebook 10: balance two pipeline stages by their FLOPs (the checker lives in the chapter,
``nvtutorial/chapters/ch10_cost_model/exercises.py``; this module gives it its name among the exercises)."""

from nvtutorial.chapters.ch10_cost_model.exercises import (
    CASES,
    KIND,
    NOTEBOOK,
    SOLUTION,
    TASK,
    WRONG,
    check_local,
    first_stage_blocks,
)

__all__ = ["CASES", "KIND", "NOTEBOOK", "SOLUTION", "TASK", "WRONG", "check_local", "first_stage_blocks"]
