"""What both sides of chapter 08 name alike (torch-free): each rung's label, as the progress bars, tables and figures
show it, and what one rank of the ``ladder`` workload returns (:class:`Rank`, read back with
``result.ranks_as(Rank)``)."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from nvtutorial.params import require
from nvtutorial.results import typed

NAME = "ladder"
"""The workload's name (``nvtutorial.run("ladder", ...)``, ``nvtutorial list``), declared here
once: ``workload.py`` imports it."""

LABELS = {
    "ddp": "DDP",
    "zero1": "ZeRO-1",
    "fsdp_zero2": "FSDP2, no reshard (ZeRO-2-like)",
    "fsdp_zero3": "FSDP2 (ZeRO-3)",
    "fsdp_checkpointing": "ZeRO-3 + act. checkpointing",
    "fsdp_offload": "ZeRO-3 + ckpt + CPU offload",
    "tensor_parallel": "tensor parallel",
}


RUNG_NAMES = ("ddp", "zero1", "fsdp_zero2", "fsdp_zero3", "fsdp_checkpointing", "fsdp_offload", "tensor_parallel")
META_RUNGS = ("fsdp_zero2", "fsdp_zero3", "fsdp_checkpointing")
"""Rungs that can start from a model on the meta device (shard first, then allocate and initialise the shards)."""


@dataclasses.dataclass(frozen=True)
class Params:
    vocab: int = 32768
    seq_len: int = 512
    dim: int = 2048
    heads: int = 16
    layers: int = 8
    mlp_ratio: int = 4
    global_batch: int = 8
    """Sequences per step, all ranks together (each data-parallel rank trains on its share)."""
    rungs: tuple[str, ...] = RUNG_NAMES
    steps: int = 6
    """Steps whose losses are compared with the one-process reference."""
    warmup: int = 1
    timed: int = 3
    """Steps per timed repeat."""
    repeats: int = 3
    reference: bool = True
    profile_steps: int = 2
    """Steps traced with torch.profiler per rung (0: none)."""
    checkpoint: bool = False
    init: Literal["full", "meta"] = "full"
    fit_rung: str = "fsdp_zero3"
    fit_layers: int = 0
    """After the ladder, train ``fit_rung`` once more with this many blocks (0: don't), built on the meta
    device where the rung allows it: the run that confirms the largest model of notebook 08."""
    seed: int = 0

    def __post_init__(self) -> None:
        unknown = [r for r in self.rungs if r not in RUNG_NAMES]
        require(bool(self.rungs) and not unknown, f"rungs={self.rungs}: use some of {', '.join(RUNG_NAMES)}")
        require(
            self.steps >= 1 and self.timed >= 1 and self.repeats >= 2 and self.warmup >= 0,
            "steps and timed must be at least 1, repeats at least 2 (a spread needs two), warmup 0 or more",
        )
        require(self.dim % self.heads == 0, f"dim={self.dim} must be a multiple of heads={self.heads}")
        require(self.global_batch >= 1 and self.profile_steps >= 0, "global_batch at least 1, profile_steps 0 or more")
        require(self.fit_rung in RUNG_NAMES, f"fit_rung={self.fit_rung!r}: use one of {', '.join(RUNG_NAMES)}")
        require(self.fit_layers >= 0, f"fit_layers={self.fit_layers} must be 0 (no fit run) or more")
        bad = [r for r in self.rungs if r not in META_RUNGS]
        require(self.init == "full" or not bad, f"init=meta works for {', '.join(META_RUNGS)}, not {', '.join(bad)}")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """The transformer's sizes, declared once, torch-free (``models.transformer.Config`` is this class; the
    schemas, reports and parameters read their sizes with :func:`sizes`). Every size that is sharded over 2 ranks
    (vocab, dim, the MLP width, heads) is even, so that each rank's shard holds exactly half of it."""

    vocab: int = 256
    seq_len: int = 32
    dim: int = 64
    heads: int = 4
    layers: int = 2
    mlp_ratio: int = 4

    def __post_init__(self) -> None:
        if self.dim % self.heads:
            raise ValueError(f"dim={self.dim} must be a multiple of heads={self.heads}")
        if min(self.vocab, self.seq_len, self.dim, self.heads, self.layers, self.mlp_ratio) < 1:
            raise ValueError(f"every size must be at least 1: {self}")

    @property
    def hidden(self) -> int:
        return self.mlp_ratio * self.dim


def sizes(source: Any, **given: int) -> dict[str, int]:
    """The transformer's sizes that ``source`` holds under :class:`ModelConfig`'s names (a workload's ``Params``, a
    ``Setup``), in its order; ``given`` instead where named (``dim=width``)."""
    return {
        f.name: given[f.name] if f.name in given else getattr(source, f.name) for f in dataclasses.fields(ModelConfig)
    }


@dataclasses.dataclass(frozen=True)
class Gradients:
    """A rung's whole gradients of step 0 (before any update) against the one-process reference's."""

    max_rel_diff: float
    """The largest difference, relative to the largest reference value of its tensor."""
    worst: str | None
    """The parameter of that largest difference (None: no gradient compared)."""
    norm_ratio: float | None
    """The gradients' global norm ÷ the reference's (W for summed instead of averaged gradients over W ranks: 2.0 on
    two; None: the reference's norm is 0)."""
    missing: tuple[str, ...]
    """Parameters that had no gradient."""


@dataclasses.dataclass(frozen=True)
class Held:
    """Bytes this rank holds after a step, counted tensor by tensor (a DTensor's local shard, ZeRO's local
    optimizer)."""

    params: int
    grads: int
    optimizer: int
    """Adam's state: ``exp_avg``, ``exp_avg_sq`` and ``step`` of the parameters this rank updates."""
    param_tensors: int
    """Parameter tensors of the model (whole or sharded)."""


@dataclasses.dataclass(frozen=True)
class Collective:
    """One kind of collective, over the calls of one step, recorded as issued."""

    calls: int
    bytes: int
    """Bytes of the full tensors (an all-gather's output, a reduce-scatter's input)."""
    sent: float
    """Bytes this rank would send were the calls run as rings (a cost model of the recorded sizes)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Rung:
    """One rung trained from a freshly built model on one rank (or the largest model, :attr:`Rank.fit`)."""

    rung: str
    """The rung's name (a key of :data:`LABELS`)."""
    layers: int
    """Blocks of the model it trained."""
    gradients: Gradients | None = None
    """None: the run trained no one-process reference (``reference=false``), or this is the largest model."""
    losses: tuple[float, ...]
    """The loss of the global batch at every step."""
    held: Held
    allocated_after_step: int | None = None
    """GPU only: bytes allocated after a step."""
    collectives: dict[str, Collective]
    """Per kind of collective (``all_reduce``, ``all_gather``, ...), one step's calls."""
    sent_per_step: float
    """Bytes this rank would send per step, every recorded collective costed as a ring."""
    forward_added: int | None = None
    """GPU only: bytes the forward pass added (activations, parameters kept gathered)."""
    step_s: tuple[float, ...]
    """Seconds per step of each timed repeat."""
    step_s_median: float
    peak_allocated: int | None = None
    """GPU only: the peak bytes allocated over the warm-up and timed steps (the peak is reset before the warm-up)."""
    nvlink_tx_bytes_per_step: float | None
    """NVML's NVLink TX counter of this rank's GPU per timed step (None: not available, see ``nvlink_note``)."""
    nvlink_note: str
    trace: str | None = None
    """The ``torch.profiler`` trace's file name in the run folder (None: ``profile_steps=0``)."""

    def __post_init__(self) -> None:
        # typed() passes a dict field through as JSON gave it: each kind's totals become a Collective here
        totals = {k: v if isinstance(v, Collective) else typed(Collective, v) for k, v in self.collectives.items()}
        object.__setattr__(self, "collectives", totals)

    @property
    def state(self) -> int:
        """Bytes of parameters, gradients and optimizer state this rank held."""
        return self.held.params + self.held.grads + self.held.optimizer


@dataclasses.dataclass(frozen=True)
class FitError:
    """The largest model did not fit: what stopped it."""

    rung: str
    layers: int
    error: str
    """E.g. ``OutOfMemoryError: CUDA out of memory. ...`` (its first line)."""


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """The sharded checkpoint's round trip (``lessons/checkpoint.py``'s ``resume_check``), on a small model."""

    continued: tuple[float, ...]
    """The losses of the steps after the save, uninterrupted."""
    resumed: tuple[float, ...]
    """The same steps' losses, from a fresh model loaded from the save."""
    resume_max_weight_diff: float
    """The largest difference between the saved and the reloaded weights (0: bit for bit)."""
    single_process_max_weight_diff: float | None
    """The same for the save loaded into one process (rank 0 only; None on the other ranks)."""
    config: ModelConfig
    """The small model's sizes."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Rank:
    """What one rank of the ``ladder`` workload returns (``result.ranks_as(Rank)``)."""

    config: ModelConfig
    global_batch: int
    """Sequences per step, all ranks together."""
    world_size: int
    rank: int
    device: str
    reference: tuple[float, ...] | None = None
    """The one-process reference's loss at every step (None: ``reference=false``)."""
    rungs: tuple[Rung, ...]
    checkpoint: Checkpoint | None = None
    """With ``checkpoint=true``."""
    fit: Rung | None = None
    """With ``fit_layers``: the largest model, trained once more (None: not asked for, or see ``fit_error``)."""
    fit_error: FitError | None = None
    """The largest model did not fit (its ``fit`` is None)."""

    @staticmethod
    def upgrade(data: dict) -> dict:
        """Older layouts (the committed runs): a rung left out what it did not measure (the GPU's memory on the
        CPU, the trace without ``profile_steps``, the gradients without a reference), where it now writes None;
        a largest model that did not fit was a ``fit`` of only ``rung``, ``layers`` and ``error``."""
        unmeasured = {f.name: None for f in dataclasses.fields(Rung) if f.default is None}
        if isinstance(data.get("rungs"), list):
            data["rungs"] = [unmeasured | g for g in data["rungs"]]
        fit = data.get("fit")
        if isinstance(fit, dict) and "error" in fit:
            data["fit"], data["fit_error"] = None, fit
        elif isinstance(fit, dict):
            data["fit"] = unmeasured | fit
        return data

    def rung(self, name: str) -> Rung:
        """This rank's record of rung ``name``."""
        for g in self.rungs:
            if g.rung == name:
                return g
        raise KeyError(f"the run has no rung {name!r}; it ran {', '.join(g.rung for g in self.rungs)}")
