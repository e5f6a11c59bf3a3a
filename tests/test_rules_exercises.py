"""Every exercise checker on its solution and on each known wrong answer, with the reason it must give; the checkers
that run on ranks at 2, 3 and 4 gloo ranks where the lesson claims any world size.

The rank-side checkers run on ranks forked from this process (``tests/ranks_harness.py``), each candidate loaded from
its source the way the ``exercise`` workload and ``%%ranks`` load a learner's code. The launcher and ``%%ranks`` paths
themselves are tested in tests/test_collectives.py, tests/test_training.py, tests/test_ladder.py and
tests/test_pitfalls.py.
"""

from __future__ import annotations

import importlib
import types

import pytest
import torch

from nvtutorial.chapters.ch07_collectives import exercises as ring_allreduce
from nvtutorial.teach import check
from tests.helpers.ranks import on_ranks

LOCAL = ("busbw", "driver_rule", "multinode_resume", "profile_exposed", "profile_waiting")
"""Checkers that judge in the notebook's own process (``check_local``)."""


def _cases(name: str) -> list[tuple[str, object, str | None]]:
    ex = check.load(name)
    return [("solution", ex.SOLUTION, None)] + [(key, cand, words) for key, (cand, words) in ex.WRONG.items()]


def _load(candidate, entry: str):
    """A candidate given as source, executed in a fresh namespace as the ranks do with a learner's code; a function
    as it is (the exercise workload's loading of sources is tested in tests/test_training.py and tests/test_ladder.py;
    called directly, a mutation of the exercise's own solution reaches the checker)."""
    import math

    import torch.distributed as dist
    import torch.nn.functional as F

    if not isinstance(candidate, str):
        return candidate
    source = candidate
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


@pytest.mark.parametrize("name", LOCAL)
def test_local_checkers_through_the_notebooks_call(name):
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


def test_the_resume_exercise_as_the_script_recovery_launches(monkeypatch, tmp_path):
    """multinode_resume run as a script: the learner's resume loaded from their file into the lesson, the lesson's
    own arguments after ``--`` (the run on ranks is tested with the launcher, in tests/test_faults.py)."""
    import sys

    from nvtutorial.chapters.ch09_multinode import exercises as multinode_resume
    from nvtutorial.chapters.ch09_multinode.lessons import elastic_train

    mine = tmp_path / "mine.py"
    mine.write_text(
        "def my_resume(path, model, optimizer):\n    return 7 if os.path.exists(path) else torch.zeros(1).numel() - 1\n"
    )
    loaded = multinode_resume.load_candidate(str(mine), "my_resume")
    assert loaded(str(mine), None, None) == 7 and loaded(str(tmp_path / "none"), None, None) == 0
    with pytest.raises(NameError, match="your code defines no function 'resume'"):
        multinode_resume.load_candidate(str(mine), "resume")
    (tmp_path / "value.py").write_text("resume = 3\n")
    with pytest.raises(NameError):
        multinode_resume.load_candidate(str(tmp_path / "value.py"), "resume")

    ran = []
    monkeypatch.setattr(elastic_train, "main", lambda: ran.append((list(sys.argv), elastic_train.resume)))
    monkeypatch.setattr(elastic_train, "resume", elastic_train.resume)  # put back afterwards
    monkeypatch.setattr(sys, "argv", sys.argv)
    multinode_resume.main(["--candidate", str(mine), "--entry", "my_resume", "--", "--steps", "9", "--every", "2"])
    ((argv, resume),) = ran
    assert argv == [elastic_train.__file__, "--steps", "9", "--every", "2"]
    assert resume.__name__ == "my_resume" and resume(str(mine), None, None) == 7


def test_the_resume_checkers_own_model():
    """The stand-in for DDP keeps the model in .module (the slip "loaded into the wrapper" depends on it)."""
    from nvtutorial.chapters.ch09_multinode import exercises as multinode_resume

    model, optimizer = multinode_resume._setup()
    assert isinstance(model.module, torch.nn.Sequential) and list(model.state_dict())[0].startswith("module.")
    x = torch.randn(2, 8)
    assert torch.equal(model(x), model.module(x))
    assert multinode_resume.SAVED_AFTER == 3


@pytest.mark.parametrize(
    "compute, comm, step, exposed",
    [
        ([], [(0, 5), (20, 30)], (10, 40), 10.0),  # a kernel wholly before the step: dropped, the next still counted
        ([(0, 5)], [(12, 14)], (10, 40), 2.0),  # compute before the step hides nothing
        ([(10, 20), (20, 25)], [(12, 30)], (10, 40), 5.0),  # touching compute is one stretch
        ([], [(15, 15), (15, 18)], (10, 40), 3.0),  # an empty interval adds nothing
    ],
)
def test_the_exposed_time_solution_clips_to_the_step(compute, comm, step, exposed):
    from nvtutorial.chapters.ch05_profiling import exercises_exposed as profile_exposed

    assert profile_exposed.exposed_ms(compute, comm, step) == pytest.approx(exposed)


# --------------------------------------------------------------------------- checkers on the ranks
def _judge(name: str, entry: str, cases, timeout: float | None = None):
    """Rank side: every case judged in turn, as check_ranks judges a %%ranks cell's function."""
    import torch.distributed as dist

    from nvtutorial.chapters import named

    ex = importlib.import_module(named("exercises")[name])
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
    assert per_rank[0]["solution"][1].startswith(
        f"equal to dist.all_reduce for 5 sizes ({first}, 1001, 3, 1, 65537 elements) on {world} ranks"
    )
    assert ring_allreduce.sizes(world) == (first, 1001, 3, 1, 65537) and first % world == 0


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


# --------------------------------------------------------------------------- notebook 06's validation exercise
def _pv_judge(keys):
    """Rank side: pitfall_validation's check_on_rank on each candidate named in ``keys`` (a fresh group each)."""
    from nvtutorial.chapters.ch06_pitfalls import exercises as ex

    ctx = types.SimpleNamespace(
        rank=__import__("torch.distributed").distributed.get_rank(),
        world_size=__import__("torch.distributed").distributed.get_world_size(),
        device=torch.device("cpu"),
    )
    cases = {"solution": ex.SOLUTION, **{k: c for k, (c, _) in ex.WRONG.items()}}
    return {k: ex.check_on_rank(cases[k], ctx) for k in keys}


@pytest.mark.parametrize("world", (2, 3))
def test_the_validation_exercise_on_the_ranks(world):
    from nvtutorial.chapters.ch06_pitfalls import exercises as ex

    keys = ["solution"] + [k for k, (_, words) in ex.WRONG.items() if words != "hung"]
    judged = on_ranks(_pv_judge, world, keys, timeout=120)
    for rank, found in enumerate(judged):
        assert found["solution"][0], (rank, found["solution"])
        shares = " + ".join(str(len(range(r, ex.VAL_SAMPLES, world))) for r in range(world))
        assert f"each rank read its own share ({shares} samples)" in found["solution"][1]
        for key in keys[1:]:
            passed, reason = found[key]
            assert not passed and ex.WRONG[key][1] in reason, (world, key, reason)


def test_the_starting_point_leaves_the_other_ranks_waiting_past_the_deadline():
    from nvtutorial.chapters.ch06_pitfalls import exercises as ex

    with pytest.raises(AssertionError, match=r"rank 1 of 2 failed:(.|\n)*Timed out"):
        on_ranks(_pv_judge, 2, ["rank 0 alone (the starting point)"], timeout=60)
    assert ex.DEADLINE_S == 2.0 and ex.SLOW_READ_S == 60.0


def outcome(value, read, reference=0.5):
    return {"value": value, "read": read, "reference": reference}


def test_the_validation_judge_in_its_order():
    from nvtutorial.chapters.ch06_pitfalls import exercises as ex

    t = ex.TOLERANCE
    assert t == 0.5 / (7 * 16 * 16)
    assert ex.judge([outcome(0.5, 4), outcome(0.5, 3)]) == (
        True,
        "every rank returns 0.500000, the accuracy of the whole set, and each rank read its own share (4 + 3 samples)",
    )
    assert (
        ex.judge([{"error": "ValueError: x", "read": 0}, outcome(0.5, 3)])[1]
        == "rank 0: your function raised ValueError: x"
    )
    for bad in (None, True, float("nan"), "0.5"):
        passed, reason = ex.judge([outcome(0.5, 4), outcome(bad, 3)])
        assert not passed and reason.startswith(f"rank 1 returned {bad!r}, not a number")
    assert "disagree" in ex.judge([outcome(0.5, 4), outcome(0.5 + 1.01 * t, 3)])[1]
    assert ex.judge([outcome(0.5, 4), outcome(0.5 + 0.99 * t, 3)])[0]
    assert "pads the shares" in ex.judge([outcome(0.5, 4), outcome(0.5, 4)])[1]  # 8 reads of 7 samples
    assert "one process over the whole set gives" in ex.judge([outcome(0.52, 4, 0.5), outcome(0.52, 3, 0.5)])[1]
    assert ex.judge([outcome(0.5 + 0.99 * t, 4), outcome(0.5 + 0.99 * t, 3)])[0]
    assert ex.judge([outcome(0.5, 7), outcome(0.5, 0)])[1].startswith("rank 1 read no validation sample")
    assert ex.judge([outcome(1, 4, 1.0), outcome(1, 3, 1.0)])[0]  # an int is a number


STACK = """\
  File "/x/nvtutorial/chapters/ch06_pitfalls/exercises.py", line 200, in run_candidate
    value = candidate(state["model"], state["val_set"], state["rank"], state["world_size"], state["device"])
  File "<candidate>", line 9, in validate_accuracy
    for images, masks in DataLoader(val_set, batch_size=8):
  File "/x/nvtutorial/chapters/ch06_pitfalls/exercises.py", line 160, in __getitem__
    time.sleep(SLOW_READ_S)
"""
TRAINING = """\
  File "/x/nvtutorial/chapters/ch06_pitfalls/exercises.py", line 206, in run_candidate
    loss.backward()  # the next training step
  File "/x/torch/_tensor.py", line 581, in backward
"""


def test_reading_the_ranks_stacks(monkeypatch):
    from nvtutorial.chapters.ch06_pitfalls import exercises as ex

    monkeypatch.setattr(ex, "__file__", "/x/nvtutorial/chapters/ch06_pitfalls/exercises.py")
    frames = ex.stack_frames(STACK)
    assert frames[0] == ("/x/nvtutorial/chapters/ch06_pitfalls/exercises.py", "__getitem__", "time.sleep(SLOW_READ_S)")
    assert [f[1] for f in frames] == ["__getitem__", "validate_accuracy", "run_candidate"]
    assert ex._doing(frames) == ("validating", "reading a validation sample")
    inner = ex.stack_frames(STACK.rsplit('  File "/x/nvtutorial/chapters/ch06_pitfalls/exercises.py", line 160', 1)[0])
    assert ex._doing(inner) == (
        "validating",
        "your function, at validate_accuracy: for images, masks in DataLoader(val_set, batch_size=8):",
    )
    assert ex._doing(ex.stack_frames(TRAINING)) == ("training", "loss.backward()  # the next training step")
    assert ex._doing(ex.stack_frames('  File "/y/other.py", line 1, in f\n    g()\n')) == ("elsewhere", "f: g()")
    assert ex._doing([]) == ("elsewhere", "?")
    assert ex.stack_frames('  File "a.py", line 1, in f\n  File "b.py", line 2, in g\n') == [
        ("b.py", "g", ""),
        ("a.py", "f", ""),
    ]
    text = ex.explain_hang({0: STACK, 1: TRAINING})
    assert text.startswith(
        "hung: rank 1 waited in the next training step's gradient all-reduce while rank 0 validated "
        "alone, past the 2 s deadline (rank 0: reading a validation sample; rank 1: loss.backward()"
    )
    assert ex.explain_hang({0: STACK, 1: STACK}, 5).startswith("hung: still running 5 s after your function was called")
    assert ex.timed_out("RuntimeError: [..] Timed out waiting 3000ms") and ex.timed_out("Watchdog caught collective")
    assert not ex.timed_out("RuntimeError: connection reset")


def test_the_slow_set_counts_its_reads(monkeypatch):
    from nvtutorial.chapters.ch06_pitfalls import exercises as ex

    slept = []
    monkeypatch.setattr(ex.time, "sleep", slept.append)
    s = ex.SlowSet(list(range(7)), 2)
    assert len(s) == 7 and s.fair == 4
    assert [s[i] for i in range(5)] == [0, 1, 2, 3, 4] and s.read == 5 and slept == [ex.SLOW_READ_S]
    assert ex.SlowSet(list(range(7)), 3).fair == 3
