"""What one rank of notebook 09's lesson returns (torch-free): ``lessons/elastic_train.py`` saves it with
``runtime.save_metrics`` as a plain dict (the lesson stays a plain script a learner reads); the kernel reads it back
typed, ``result.ranks_as(Rank)``. A run of the lesson is named by the script's path, and
:func:`nvtutorial.chapters.result_type` finds this schema by the script's name."""

from __future__ import annotations

import dataclasses

NAME = "elastic_train"
"""The lesson script whose results this schema types (``lessons/elastic_train.py``)."""


@dataclasses.dataclass(frozen=True)
class Rank:
    """What one rank of the lesson returns, from its last attempt (a rank started again by torchrun reports anew)."""

    group_rank: int
    """The node it ran on (torchrun's ``GROUP_RANK``)."""
    restarts: int
    """Restarts of its node's torchrun agent when this attempt started (``TORCHELASTIC_RESTART_COUNT``)."""
    start_step: int
    """The step this attempt started at: the last checkpoint's (0: none found)."""
    steps: int
    """Steps of the whole training (``--steps``)."""
    step_times_s: tuple[float, ...]
    """Seconds of each step this attempt trained (the host's clock, the GPU synchronised at the end)."""
    final_loss: float
    """This rank's loss at the last step it trained (0.0 when it trained none)."""
    weights_sha256: str
    """SHA-256 of this rank's final weights' bytes: equal on every rank when the gradients are all-reduced (DDP's
    default), each rank's own with ``--no-sync`` (no all-reduce: the ranks' weights drift apart); equal between runs
    that end with the same weights."""
