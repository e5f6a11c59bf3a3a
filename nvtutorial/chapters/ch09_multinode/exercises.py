"""Exercise of notebook 09: write the resume of a training that torchrun restarts after a lost rank.

The learner writes ``resume(path, model, optimizer) -> int`` for
``nvtutorial/chapters/ch09_multinode/lessons/elastic_train.py``:
load the last checkpoint (if there is one) into the DDP model and the optimizer, and return the number
of steps it holds, so that training goes on from the step after it (the lesson derives the epoch and
the position in it from that number, and calls ``sampler.set_epoch``).

Two checks:

- :func:`check_local` (here, in the notebook's process, in a second): a checkpoint is written after 3
  steps of a small model; the candidate loads it into a fresh model and optimizer; both then take 2
  more steps, which must give exactly the weights of 5 uninterrupted steps; and with no checkpoint the
  candidate must return 0 and change nothing. Its reasons name the usual slips (:data:`WRONG`).
- ``nvtutorial.chapters.ch09_multinode.lab.check_resume`` (on real ranks): the lesson runs with the candidate
  in place of its own ``resume``, a rank is killed with SIGKILL in the middle, torchrun restarts the
  ranks, and the final weights must equal those of the uninterrupted run, with fewer steps lost than
  the checkpoint interval.

Run as a script (``python nvtutorial/chapters/ch09_multinode/exercises.py --candidate FILE --entry NAME --
LESSON ARGS``), it is the lesson with the candidate's ``resume``: what ``check_resume`` launches.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Callable
from typing import Any

import torch

NAME = "multinode_resume"
"""The exercise's name (``teach.check.check("multinode_resume", ...)``)."""

NOTEBOOK = "09_beyond_one_machine"
TASK = (
    "Write resume(path, model, optimizer) for the elastic lesson: load the last checkpoint into the DDP model "
    "and the optimizer, return the steps it holds (0 when there is no checkpoint)."
)
KIND = "function"


def resume(path, model, optimizer):
    """Load the last checkpoint, if there is one, into the model and the optimizer; the steps already done."""
    if not os.path.exists(path):
        return 0  # the first attempt: nothing saved yet
    state = torch.load(path, map_location="cpu", weights_only=True)
    model.module.load_state_dict(state["model"])  # the model inside DDP: its keys have no "module." prefix
    optimizer.load_state_dict(state["optimizer"])  # Adam's moments and step count: without them the next steps differ
    return state["step"]


SOLUTION = resume


def _from_step_zero(path, model, optimizer):
    if os.path.exists(path):
        state = torch.load(path, map_location="cpu", weights_only=True)
        model.module.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
    return 0


def _no_optimizer(path, model, optimizer):
    if not os.path.exists(path):
        return 0
    state = torch.load(path, map_location="cpu", weights_only=True)
    model.module.load_state_dict(state["model"])
    return state["step"]


def _into_the_wrapper(path, model, optimizer):
    if not os.path.exists(path):
        return 0
    state = torch.load(path, map_location="cpu", weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    return state["step"]


def _from_scratch(path, model, optimizer):
    return 0


def _one_step_ahead(path, model, optimizer):
    if not os.path.exists(path):
        return 0
    state = torch.load(path, map_location="cpu", weights_only=True)
    model.module.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    return state["step"] + 1


WRONG = {
    "resume from step 0 (weights loaded, steps counted again)": (_from_step_zero, "done again"),
    "the optimizer state forgotten": (_no_optimizer, "optimizer"),
    "loaded into the DDP wrapper": (_into_the_wrapper, "model.module"),
    "a restart from scratch (the checkpoint ignored)": (_from_scratch, "ignored"),
    "the step after the checkpoint returned": (_one_step_ahead, "skipped"),
}
"""Known wrong answers and a word their reason must contain (tests run every one)."""

SAVED_AFTER = 3
"""Steps in the checkpoint :func:`check_local` writes; two more follow."""


class _Wrapped(torch.nn.Module):
    """Stands in for DistributedDataParallel here: the model is ``.module``, the keys get ``module.``."""

    def __init__(self, module: torch.nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.module(x)


def _setup() -> tuple[_Wrapped, torch.optim.Optimizer]:
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    model = _Wrapped(net)
    return model, torch.optim.AdamW(model.parameters(), lr=0.05)


def _step(model: _Wrapped, optimizer: torch.optim.Optimizer, step: int) -> None:
    g = torch.Generator().manual_seed(100 + step)
    x = torch.randn(16, 8, generator=g)
    loss = torch.nn.functional.mse_loss(model(x), x[:, :1].sin())
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def _weights(model: _Wrapped) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.module.parameters()])


def check_local(candidate: Callable[..., Any]) -> tuple[bool, str]:
    """Pass when ``candidate`` resumes exactly (see the module docstring), else the first slip and why."""
    total = SAVED_AFTER + 2
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "last.pt")
        model, optimizer = _setup()
        slip = _first_attempt(candidate, path, model, optimizer)
        if slip is not None:
            return False, slip
        for step in range(SAVED_AFTER):
            _step(model, optimizer, step)
        torch.save(
            {
                "model": model.module.state_dict(),
                "optimizer": optimizer.state_dict(),
                "step": SAVED_AFTER,
                "world_size": 1,
            },
            path,
        )
        for step in range(SAVED_AFTER, total):
            _step(model, optimizer, step)
        want = _weights(model)

        fresh, fresh_opt = _setup()
        try:
            got = candidate(path, fresh, fresh_opt)
        except Exception as exc:  # noqa: BLE001
            return False, _loading_raised(exc)
        slip = _resumed_slip(got, path, fresh, fresh_opt)
        if slip is not None:
            return False, slip
        for step in range(SAVED_AFTER, total):
            _step(fresh, fresh_opt, step)
        if not torch.equal(_weights(fresh), want):
            return (
                False,
                f"after resuming, {total - SAVED_AFTER} more steps do not give the uninterrupted run's weights",
            )
    return True, (
        f"resumed exactly: {total - SAVED_AFTER} steps after the checkpoint give the weights of "
        f"{total} uninterrupted steps, and a first attempt without a checkpoint starts at 0"
    )


def _first_attempt(
    candidate: Callable[..., Any], path: str, model: _Wrapped, optimizer: torch.optim.Optimizer
) -> str | None:
    """The slip of ``candidate`` with no checkpoint yet (it must return 0 and change nothing), or None."""
    before = _weights(model).clone()
    try:
        got = candidate(path, model, optimizer)
    except Exception as exc:  # noqa: BLE001 - the learner's code: say what it raised
        return f"with no checkpoint yet (the first attempt) your resume raised {type(exc).__name__}: {exc}"
    if got != 0 or not torch.equal(_weights(model), before):
        return (
            f"with no checkpoint yet (the first attempt) resume must change nothing and return 0; it returned {got!r}"
        )
    return None


def _loading_raised(exc: Exception) -> str:
    """Why loading the checkpoint raised ``exc``: into the DDP wrapper, where the keys say so."""
    text = f"{type(exc).__name__}: {str(exc).splitlines()[0].rstrip(':') if str(exc) else ''}"
    if "module." in str(exc):
        return (
            f"loading raised {text}: the checkpoint holds model.module's weights (no 'module.' in "
            f"the keys); load them into model.module, not into the DDP wrapper"
        )
    return f"loading the checkpoint raised {text}"


def _resumed_slip(got: Any, path: str, fresh: _Wrapped, fresh_opt: torch.optim.Optimizer) -> str | None:
    """The slip of a resume from the checkpoint at ``path`` that returned ``got``: the steps it returned, the weights
    and the optimizer state it loaded; None when all three are the checkpoint's."""
    if isinstance(got, bool) or not isinstance(got, int):
        return f"resume must return the number of steps already done (an int), not {got!r}"
    saved = torch.load(path, weights_only=True)["model"]
    loaded = all(torch.equal(p, saved[k]) for k, p in fresh.module.state_dict().items())
    if not loaded:
        if got == 0:
            return (
                "the weights were not loaded and it returned 0: training starts again from scratch, so "
                f"the {SAVED_AFTER} steps before the checkpoint are done again and the checkpoint is "
                "ignored"
            )
        return "the model's weights are not the checkpoint's: load state['model'] into model.module"
    if got == 0:
        return (
            f"it returned 0 after loading a checkpoint of {SAVED_AFTER} steps: the loop then runs every "
            f"step again from the start, so {SAVED_AFTER} steps are done again on top of the loaded "
            "weights and the run trains too long"
        )
    if got > SAVED_AFTER:
        return (
            f"it returned {got} for a checkpoint of {SAVED_AFTER} steps: step {SAVED_AFTER + 1} is "
            "skipped; return state['step'] itself (steps done, not the next one)"
        )
    if got != SAVED_AFTER:
        return f"it returned {got}; the checkpoint holds {SAVED_AFTER} steps: return state['step']"
    saved_state = torch.load(path, weights_only=True)["optimizer"]["state"]
    state = fresh_opt.state_dict()["state"]
    if set(state) != set(saved_state) or not all(
        torch.equal(state[k]["exp_avg"], saved_state[k]["exp_avg"]) for k in saved_state
    ):
        return (
            "the weights were loaded but not the optimizer state: AdamW's moments and step count start "
            "from zero again, so every later step differs from the uninterrupted run; load "
            "state['optimizer'] into the optimizer too"
        )
    return None


def load_candidate(path: str, entry: str) -> Callable[..., Any]:
    """The function ``entry`` of the learner's file, run with ``os`` and ``torch`` at hand."""
    namespace: dict[str, Any] = {"os": os, "torch": torch, "__name__": "candidate"}
    with open(path) as fh:
        exec(compile(fh.read(), path, "exec"), namespace)  # noqa: S102 - the learner's own code, on their machine
    if not callable(namespace.get(entry)):
        raise NameError(f"your code defines no function {entry!r}")
    return namespace[entry]


def main(argv: list[str]) -> None:
    """The lesson with the candidate's ``resume``: ``--candidate FILE --entry NAME -- LESSON ARGS``."""
    from nvtutorial.chapters.ch09_multinode.lessons import elastic_train

    split = argv.index("--")
    own = dict(zip(argv[:split:2], argv[1:split:2]))
    elastic_train.resume = load_candidate(own["--candidate"], own["--entry"])
    sys.argv = [elastic_train.__file__, *argv[split + 1 :]]
    elastic_train.main()


if __name__ == "__main__":
    main(sys.argv[1:])
