"""Shared by the tests of several files (first written for tests/test_rules_exercises.py)."""

from __future__ import annotations

import importlib
import types

import torch

from nvtutorial.teach import check


def _cases(name: str) -> list[tuple[str, object, str | None]]:
    ex = check.load(name)
    return [("solution", ex.SOLUTION, None), *((key, cand, words) for key, (cand, words) in ex.WRONG.items())]


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


def outcome(value, read, reference=0.5):
    return {"value": value, "read": read, "reference": reference}
