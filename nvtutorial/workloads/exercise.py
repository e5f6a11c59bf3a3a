"""exercise: judge a learner's function on every rank (the rank side of ``nvtutorial.teach.check``).

The candidate's source is read from a file, executed in a fresh namespace that has ``torch``,
``dist`` (``torch.distributed``), ``F`` (``torch.nn.functional``) and ``math``, and the function
named ``entry`` is handed to the exercise's ``check_on_rank`` (its chapter's ``exercises*.py``), which compares it with
the reference on this rank. Each rank reports ``passed`` and ``reason``.

    torchrun --standalone --nproc-per-node 2 -m nvtutorial.workloads.exercise \
        --set name=ring_allreduce --set candidate=my_ring.py --set entry=ring_all_reduce
"""

from __future__ import annotations

import dataclasses
import importlib
import math
from pathlib import Path

from nvtutorial import runtime
from nvtutorial.chapters import named
from nvtutorial.params import require


@dataclasses.dataclass(frozen=True)
class Params:
    name: str
    candidate: str
    entry: str

    def __post_init__(self) -> None:
        require(Path(self.candidate).is_file(), f"candidate={self.candidate!r} is not a file")
        require(self.entry.isidentifier(), f"entry={self.entry!r} is not a function name")


def load_candidate(path: str, entry: str):
    """The function ``entry`` defined by the file at ``path``."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    namespace = {"torch": torch, "dist": dist, "F": F, "math": math, "__name__": "candidate"}
    code = compile(Path(path).read_text(), path, "exec")
    exec(code, namespace)  # noqa: S102  (the learner's own code, on the learner's own machine)
    if entry not in namespace or not callable(namespace[entry]):
        raise NameError(f"your code defines no function {entry!r}")
    return namespace[entry]


@dataclasses.dataclass(frozen=True)
class Rank:
    """One rank's judgement of the candidate."""

    passed: bool
    reason: str
    """Why it failed, in the words of the exercise's checker (or what it checked, when it passed)."""


def run(ctx: runtime.Context, p: Params) -> Rank:
    exercise = importlib.import_module(named("exercises")[p.name])
    candidate = load_candidate(p.candidate, p.entry)
    passed, reason = exercise.check_on_rank(candidate, ctx)
    return Rank(passed=bool(passed), reason=str(reason))


if __name__ == "__main__":
    runtime.main(run, Params)
