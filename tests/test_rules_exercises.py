"""Every exercise checker on its solution and on each known wrong answer, with the reason it must give; the checkers
that run on ranks at 2, 3 and 4 gloo ranks where the lesson claims any world size.

The rank-side checkers run on ranks forked from this process (``tests/ranks_harness.py``), each candidate loaded from
its source the way the ``exercise`` workload and ``%%ranks`` load a learner's code. The launcher and ``%%ranks`` paths
themselves are tested in tests/test_collectives.py, tests/test_training.py, tests/test_ladder.py and tests/test_pitfalls.py.
"""

from __future__ import annotations

import importlib
import types

import pytest
import torch

from nvtutorial.exercises import ring_allreduce
from nvtutorial.teach import check

from .ranks_harness import on_ranks

LOCAL = ("busbw", "driver_rule", "multinode_resume", "profile_exposed", "profile_waiting")
"""Checkers that judge in the notebook's own process (``check_local``)."""


def _cases(name: str) -> list[tuple[str, object, str | None]]:
    ex = check.load(name)
    return [("solution", ex.SOLUTION, None)] + [(key, cand, words) for key, (cand, words) in ex.WRONG.items()]


def _load(candidate, entry: str):
    """A candidate as the ranks get it: a function's source (or the source given), executed in a fresh namespace."""
    import math

    import torch.distributed as dist
    import torch.nn.functional as F

    source = candidate if isinstance(candidate, str) else check.candidate_source(candidate)
    entry = entry if isinstance(candidate, str) else candidate.__name__
    namespace = {"torch": torch, "dist": dist, "F": F, "math": math, "__name__": "candidate"}
    exec(compile(source, "<candidate>", "exec"), namespace)  # noqa: S102
    return namespace[entry]


# --------------------------------------------------------------------------- checkers in the notebook's process
@pytest.mark.parametrize("name", LOCAL)
def test_local_checkers_pass_the_solution_and_name_each_wrong_answer(name):
    ex = check.load(name)
    for key, candidate, words in _cases(name):
        passed, reason = ex.check_local(candidate)
        if words is None:
            assert passed, (name, reason)
        else:
            assert not passed and words in reason, (name, key, reason)
    outcome = check.check(name)  # the notebook's call, on the solution
    assert outcome.passed and outcome.where == "this kernel, no ranks" and outcome.verdict.status == "pass"


@pytest.mark.parametrize("name", LOCAL)
def test_local_checkers_never_raise_on_broken_code(name):
    ex = check.load(name)

    def boom(*args, **kwargs):
        raise RuntimeError("my bug")

    passed, reason = ex.check_local(boom)
    assert not passed and reason
    passed, reason = ex.check_local(lambda *args, **kwargs: None)
    assert not passed and reason


# --------------------------------------------------------------------------- checkers on the ranks
def _judge(name: str, entry: str, cases, timeout: float | None = None):
    """Rank side: every case judged in turn, as check_ranks judges a %%ranks cell's function."""
    import torch.distributed as dist

    ex = importlib.import_module(f"nvtutorial.exercises.{name}")
    ctx = types.SimpleNamespace(rank=dist.get_rank(), world_size=dist.get_world_size(), device=torch.device("cpu"))
    out = {}
    for key, candidate, _ in cases:
        out[key] = ex.check_on_rank(_load(candidate, entry) if candidate is not None else None, ctx)
        dist.barrier()
    return out


def _assert_judged(name: str, per_rank: list[dict], cases) -> None:
    for rank, judged in enumerate(per_rank):
        for key, _, words in cases:
            passed, reason = judged[key]
            if words is None:
                assert passed, (name, key, rank, reason)
            else:
                assert not passed and words in reason, (name, key, rank, reason)


RING_WORDS_AT_ANY_WORLD = ("reduce_scatter_only", "no_wait")
"""The ring's wrong answers whose reason does not depend on the number of ranks. The others are explained as the
course wrote them for 2 ranks (the lesson's world); on 3 or 4 their chunk indices compound into wrong values, and
the checker says that instead: they must still fail."""


@pytest.mark.parametrize("world", (2, 3, 4))
def test_the_ring_checker_at_every_world_size(world):
    cases = _cases("ring_allreduce")
    per_rank = on_ranks(_judge, world, "ring_allreduce", "ring_all_reduce", cases, timeout=120)
    if world > 2:
        cases = [(k, c, w if k in RING_WORDS_AT_ANY_WORLD or w is None else "") for k, c, w in cases]
    _assert_judged("ring_allreduce", per_rank, cases)
    first = 4096 + (-4096) % world
    assert per_rank[0]["solution"][1].startswith(f"equal to dist.all_reduce for 5 sizes ({first}, 1001, 3, 1, 65537 "
                                                 f"elements) on {world} ranks")
    assert ring_allreduce.sizes(world) == (first, 1001, 3, 1, 65537) and first % world == 0


def _ring_answers():
    """Rank side: the checker's answers for a missing function, one rank, and a ring with its direction reversed."""
    import torch.distributed as dist

    from nvtutorial.exercises.ring_allreduce import SOLUTION, check_on_rank

    reversed_ring = _load(SOLUTION.replace("right, left = peer((rank + 1) % world), peer((rank - 1) % world)",
                                           "right, left = peer((rank - 1) % world), peer((rank + 1) % world)"),
                          "ring_all_reduce")
    return {"none": check_on_rank(None), "reversed": check_on_rank(reversed_ring), "world": dist.get_world_size()}


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


def test_the_ladder_checkers_on_two_ranks():
    for name, entry in (("ladder_fsdp", "shard"), ("ladder_tp", "mlp_plan")):
        cases = _cases(name)
        per_rank = on_ranks(_judge, 2, name, entry, cases, timeout=240)
        _assert_judged(name, per_rank, cases)
