"""Tests of nvtutorial/chapters/ch07_collectives/exercises*.py."""

from __future__ import annotations

import pytest
import torch

from nvtutorial.chapters.ch07_collectives import exercises as ring_allreduce
from nvtutorial.teach import check, ranks
from tests.helpers.exercise_cases import _assert_judged, _cases, _judge, _load
from tests.helpers.ranks import on_ranks

RING_WORDS_AT_ANY_WORLD = ("reduce_scatter_only", "no_wait")
"""The ring's wrong answers whose reason does not depend on the number of ranks. The others are explained as the
course wrote them for 2 ranks (the lesson's world); on 3 or 4 their chunk indices compound into wrong values, and
the checker says that instead: they must still fail."""


def _ring_answers():
    """Rank side: the checker's answers for a missing function, one rank, and a ring with its direction reversed."""
    import torch.distributed as dist

    from nvtutorial.chapters.ch07_collectives.exercises import SOLUTION, check_on_rank

    reversed_ring = _load(
        SOLUTION.replace(
            "right, left = peer((rank + 1) % world), peer((rank - 1) % world)",
            "right, left = peer((rank - 1) % world), peer((rank + 1) % world)",
        ),
        "ring_all_reduce",
    )
    return {"none": check_on_rank(None), "reversed": check_on_rank(reversed_ring), "world": dist.get_world_size()}


@pytest.mark.parametrize("world", (2, 3, 4))
def test_the_ring_checker_at_every_world_size(world):
    cases = _cases("ring_allreduce")
    per_rank = on_ranks(_judge, world, "ring_allreduce", "ring_all_reduce", cases, timeout=120)
    if world > 2:
        cases = [(k, c, w if k in RING_WORDS_AT_ANY_WORLD or w is None else "") for k, c, w in cases]
    _assert_judged("ring_allreduce", per_rank, cases)
    first = 4096 + (-4096) % world
    assert per_rank[0]["solution"][1].startswith(
        f"equal to dist.all_reduce for 5 sizes ({first}, 1001, 3, 1, 65537 elements) on {world} ranks"
    )
    assert ring_allreduce.sizes(world) == (first, 1001, 3, 1, 65537) and first % world == 0


def test_the_ring_checker_catches_a_reversed_ring_on_three_ranks_not_on_two():
    two = on_ranks(_ring_answers, 2)
    assert two[0]["none"] == (False, "no function ring_all_reduce is defined on the ranks: run your %%ranks cell first")
    assert two[0]["reversed"][0]  # with two ranks the left and the right neighbour are the same rank
    three = on_ranks(_ring_answers, 3)
    assert three[0]["reversed"] == (False, three[0]["reversed"][1]) and "wrong values" in three[0]["reversed"][1]
    (alone,) = on_ranks(lambda: ring_allreduce.check_on_rank(lambda t: None), 1)
    assert alone == (False, "a ring needs at least 2 ranks")


def test_the_ring_diagnosis_in_words():
    x = torch.arange(6.0)
    ref = x * 2
    assert "unchanged" in ring_allreduce.diagnose(x, x.clone(), ref, 3, 0)
    one = torch.cat([ref[:2], x[2:]])
    assert "only one chunk summed (chunk 0)" in ring_allreduce.diagnose(x, one, ref, 3, 1)
    moved = torch.cat([ref[2:4], ref[2:4], x[4:]])
    assert "chunk 0 holds the sum of chunk 1" in ring_allreduce.diagnose(x, moved, ref, 3, 0)
    wrong = ref.clone()
    wrong[5] += 1.0
    text = ring_allreduce.diagnose(x, wrong, ref, 3, 2)
    assert "wrong values in chunk(s) [2]" in text and "largest error 1" in text and "correct chunk(s): [0, 1]" in text


def test_exercise_checker_passes_the_solution_and_names_each_wrong_answer(pool):
    def define(source: str) -> None:
        result = ranks.run_code(source)
        assert result.ok, result.report()

    define(check.candidate_source(ring_allreduce.SOLUTION))
    verdict = check.check_ranks("ring_allreduce")
    assert verdict.passed, verdict.reason
    for name, (source, words) in ring_allreduce.WRONG.items():
        define(source)
        verdict = check.check_ranks("ring_allreduce")
        assert not verdict.passed and words in verdict.reason, (name, verdict.reason)
    define("def ring_all_reduce(tensor):\n    pass\n")  # an unfinished starting point fails, never raises
    assert "unchanged" in check.check_ranks("ring_allreduce").reason
    define("del ring_all_reduce\n")
    assert "no function ring_all_reduce" in check.check_ranks("ring_allreduce").reason


# --------------------------------------------------------------------------- chapter 07
def _raises(tensor):
    raise ValueError("chunk 7 is out of range\nsecond line")


def _check_raising():
    from nvtutorial.chapters.ch07_collectives.exercises import check_on_rank

    return check_on_rank(_raises)


def test_the_ring_checker_reports_the_first_line_of_the_learners_exception():
    for ok, message in on_ranks(_check_raising, 2):
        assert ok is False and "ValueError: chunk 7 is out of range" in message and "second line" not in message
