"""What the ladder exercises share: the one-process reference, and training a candidate against it."""

from __future__ import annotations

from typing import Any

STEPS = 3
GLOBAL_BATCH = 8
TOLERANCE = 1e-4
"""Largest loss difference from the one-process reference that still passes (fp32; reduction order differs)."""


def device_of(ctx: Any) -> Any:
    """The rank's device: the workload's context, or (under ``%%ranks``, which passes no context) the
    current CUDA device with NCCL and the CPU with gloo."""
    import torch
    import torch.distributed as dist

    if ctx is not None:
        return ctx.device
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def reference_losses(device: Any) -> list[float]:
    from nvtutorial.chapters.ch08_ladder.lessons.train import train
    from nvtutorial.models import transformer

    return train("single", transformer.Config(), STEPS, GLOBAL_BATCH, device)


def train_against_reference(model: Any, optimizer: Any, rung: str, device: Any, count_last: bool = False):
    """``(largest loss difference from the reference, collective records of the last step or None)``.
    Raises what the candidate's model raises (the checkers turn it into a reason)."""
    import contextlib

    from nvtutorial.chapters.ch08_ladder.lessons.train import global_loss, local_batch, train_step
    from nvtutorial.chapters.ch08_ladder.workload import collective_counter
    from nvtutorial.models import transformer

    cfg = transformer.Config()
    reference = reference_losses(device)
    losses, counter = [], None
    for step in range(STEPS):
        tokens = transformer.batch(step, GLOBAL_BATCH, cfg).to(device)
        if count_last and step == STEPS - 1:
            counter = collective_counter()
        with counter if counter is not None else contextlib.nullcontext():
            losses.append(global_loss(train_step(model, optimizer, local_batch(tokens, rung)), rung))
    diff = max(abs(a - b) for a, b in zip(losses, reference))
    return diff, (counter.records if counter is not None else None)


def local_shape(shape: tuple[int, ...], dim: int, world: int, rank: int) -> tuple[int, ...]:
    """The shape of ``rank``'s ``torch.chunk`` share of ``shape`` along ``dim``."""
    size = -(-shape[dim] // world)
    out = list(shape)
    out[dim] = max(0, min(size, shape[dim] - rank * size))
    return tuple(out)
