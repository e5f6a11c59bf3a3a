"""Tests of nvtutorial/chapters/ch06_pitfalls/exercises*.py."""

from __future__ import annotations

import types

import pytest
import torch

from nvtutorial.chapters.ch06_pitfalls import exercises as pitfalls
from tests.helpers.exercise_cases import outcome
from tests.helpers.ranks import on_ranks


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


# --------------------------------------------------------------------------- chapter 06
def _seg_set():
    """Four 1×2×2 images whose class-1 logit is the image; masks right on 3 of 4 pixels of each."""
    images = [torch.tensor([[[1.0, -1.0], [1.0, -1.0]]]) for _ in range(4)]
    masks = [torch.tensor([[1, 0], [1, 1]]) for _ in range(4)]
    return list(zip(images, masks))


def _logits(x):
    return torch.cat([-x, x], dim=1)


def _mean_of_ranks():
    import torch.distributed as dist

    model = types.SimpleNamespace(module=_logits)
    return pitfalls.mean_of_ranks(model, _seg_set(), dist.get_rank(), dist.get_world_size(), torch.device("cpu"))


def test_mean_of_ranks_counts_the_correct_pixels():
    assert on_ranks(_mean_of_ranks, 2) == [0.75, 0.75]


class _Masks:
    """Masks that match only once moved to the rank's device (as on a GPU, where a CPU mask cannot be compared)."""

    def __init__(self, t, device):
        self.t, self.device = t, device

    def to(self, device):
        return self.t if device == self.device else torch.full_like(self.t, -1)

    def numel(self):
        return self.t.numel()


def test_validate_accuracy_moves_the_masks_to_the_ranks_device(monkeypatch):
    import torch.distributed as dist
    import torch.utils.data

    device = torch.device("cpu")
    images = torch.stack([i for i, _ in _seg_set()])
    masks = torch.stack([m for _, m in _seg_set()])
    monkeypatch.setattr(torch.utils.data, "DataLoader", lambda share, batch_size: [(images, _Masks(masks, device))])
    monkeypatch.setattr(dist, "all_reduce", lambda t, *a, **k: None)
    model = types.SimpleNamespace(module=_logits)
    assert pitfalls.validate_accuracy(model, _seg_set(), 0, 1, device) == 0.75


def test_judge_and_explain_hang_on_recorded_outcomes():
    good = [{"value": 0.5, "read": 4, "reference": 0.5}, {"value": 0.5, "read": 3, "reference": 0.5}]
    assert pitfalls.judge(good)[0]
    assert "returned None" in pitfalls.judge([good[0], {**good[1], "value": None}])[1]
    assert "raised ZeroDivisionError" in pitfalls.judge([{"error": "ZeroDivisionError: x", "read": 0}, good[1]])[1]
    assert "read no validation sample" in pitfalls.judge([{**good[0], "read": 7}, {**good[1], "read": 0}])[1]
    stack0 = (
        f'Stack (most recent call last):\n  File "{pitfalls.__file__}", line 170, in run_candidate\n'
        '    value = candidate(state["model"])\n  File "<your validate_accuracy>", line 9, in validate_accuracy\n'
        f'  File "{pitfalls.__file__}", line 150, in __getitem__\n    time.sleep(SLOW_READ_S)'
    )
    stack1 = (
        f'Traceback (most recent call last):\n  File "{pitfalls.__file__}", line 176, in run_candidate\n'
        "    loss.backward()\nRuntimeError: Timed out waiting 3000ms"
    )
    reason = pitfalls.explain_hang({0: stack0, 1: stack1})
    assert (
        reason.startswith(
            "hung: rank 1 waited in the next training step's gradient all-reduce while rank 0 validated alone"
        )
        and "loss.backward()" in reason
    )
