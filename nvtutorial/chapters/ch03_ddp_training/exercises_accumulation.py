"""Exercise (notebook 04): gradient accumulation over micro-batches of unequal sizes, one all-reduce per step.

The learner writes ``train_step_uneven(model, optimizer, micro_batches, device)``: one optimizer step
over this rank's micro-batches (a list of ``(images, masks)`` whose sizes differ) that leaves the
weights exactly where one step on all of them at once would, and exchanges gradients once, not once
per micro-batch. ``ddp_optimised.train_step_accumulated`` divides every micro-batch's loss by their
number: right for equal sizes only. The checker runs two steps on 2 real ranks with SGD (whose update
scales with the gradient, unlike Adam's) and compares the update with one process's step on the whole
global batch; it counts the all-reduces with a communication hook and the optimizer steps with a hook.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

NAME = "ddp_accumulation"
"""The exercise's name (``teach.check.check("ddp_accumulation", ...)``)."""

NOTEBOOK = "04_optimisations"
TASK = (
    "write train_step_uneven(model, optimizer, micro_batches, device): one optimizer step over micro-batches of "
    "unequal sizes, equal to one step on all of them, with one all-reduce per step (no_sync)"
)
KIND = "function"
TIMEOUT = 120.0
SIZES = (3, 1, 2)
"""Each rank's micro-batch sizes: 6 samples per rank and step."""
IMAGE, STEPS, LR, RTOL = 16, 2, 0.5, 1e-4


def train_step_uneven(model, optimizer, micro_batches, device):
    import contextlib

    total = sum(len(images) for images, _ in micro_batches)
    for i, (images, masks) in enumerate(micro_batches):
        last = i == len(micro_batches) - 1
        with contextlib.nullcontext() if last else model.no_sync():
            logits = model(images.to(device))
            loss = F.cross_entropy(logits, masks.to(device))
            (loss * len(images) / total).backward()  # this micro-batch's share of the samples
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def as_in_the_lesson(model, optimizer, micro_batches, device):
    import contextlib

    for i, (images, masks) in enumerate(micro_batches):
        last = i == len(micro_batches) - 1
        with contextlib.nullcontext() if last else model.no_sync():
            loss = F.cross_entropy(model(images.to(device)), masks.to(device))
            (loss / len(micro_batches)).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def without_no_sync(model, optimizer, micro_batches, device):
    total = sum(len(images) for images, _ in micro_batches)
    for images, masks in micro_batches:
        loss = F.cross_entropy(model(images.to(device)), masks.to(device))
        (loss * len(images) / total).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def everything_under_no_sync(model, optimizer, micro_batches, device):
    total = sum(len(images) for images, _ in micro_batches)
    with model.no_sync():
        for images, masks in micro_batches:
            loss = F.cross_entropy(model(images.to(device)), masks.to(device))
            (loss * len(images) / total).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def without_dividing(model, optimizer, micro_batches, device):
    import contextlib

    for i, (images, masks) in enumerate(micro_batches):
        with contextlib.nullcontext() if i == len(micro_batches) - 1 else model.no_sync():
            F.cross_entropy(model(images.to(device)), masks.to(device)).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def stepping_every_micro_batch(model, optimizer, micro_batches, device):
    total = sum(len(images) for images, _ in micro_batches)
    for images, masks in micro_batches:
        loss = F.cross_entropy(model(images.to(device)), masks.to(device))
        (loss * len(images) / total).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


SOLUTION = train_step_uneven
WRONG = {
    "the lesson's division by the number of micro-batches": (as_in_the_lesson, "weighted every micro-batch the same"),
    "no no_sync": (without_no_sync, "all-reduced 3 times"),
    "every micro-batch under no_sync": (everything_under_no_sync, "never averaged"),
    "no division": (without_dividing, "summed"),
    "a step per micro-batch": (stepping_every_micro_batch, "stepped the optimizer 3 times"),
}


def make_model(device: Any) -> torch.nn.Module:
    """A small segmentation network (two convolutions): the same weights on every rank."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 1)).to(
        device
    )


def _batch(step: int, rank: int, world: int, device: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """This rank's micro-batches at ``step``: its own samples of the global batch, split by :data:`SIZES`."""
    from nvtutorial.models.segdata import render

    per_rank = sum(SIZES)
    first = (step * world + rank) * per_rank
    images, masks = render(range(first, first + per_rank), IMAGE, seed=11, device=device)
    return list(zip(images.split(list(SIZES)), masks.split(list(SIZES))))


def _simulate(device: Any, world: int, weighting: str) -> list[torch.Tensor]:
    """One process doing what every rank's step does, then DDP's average: the weights after :data:`STEPS` steps.

    ``weighting``: ``share`` (each micro-batch's mean × its share of the samples: the right answer, equal to
    one step on the whole global batch), ``equal`` (÷ the number of micro-batches), ``none`` (no division)."""
    model = make_model(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    for step in range(STEPS):
        for rank in range(world):
            micro = _batch(step, rank, world, device)
            total = sum(len(im) for im, _ in micro)
            for images, masks in micro:
                loss = F.cross_entropy(model(images), masks)
                factor = {"share": len(images) / total, "equal": 1 / len(micro), "none": 1.0}[weighting]
                (loss * factor / world).backward()  # DDP averages the ranks' gradients
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return [p.detach().clone() for p in model.parameters()]


def _distance(a: list[torch.Tensor], b: list[torch.Tensor], start: list[torch.Tensor]) -> float:
    """How far update ``a`` is from update ``b`` (both from ``start``), relative to ``b``."""
    da = torch.cat([(x - s).flatten() for x, s in zip(a, start)])
    db = torch.cat([(y - s).flatten() for y, s in zip(b, start)])
    return float((da - db).norm() / db.norm())


def check_on_rank(candidate: Any, ctx: Any) -> tuple[bool, str]:
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank, world, device = dist.get_rank(), dist.get_world_size(), ctx.device
    tf32 = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False  # the comparison is to 1e-4: no TF32 rounding in the convolutions
    try:
        start = [p.detach().clone() for p in make_model(device).parameters()]
        model = DDP(make_model(device), device_ids=[device.index] if device.type == "cuda" else None)
        optimizer = torch.optim.SGD(model.parameters(), lr=LR)
        reduces, steps = [0], [0]

        def count(state, bucket):  # no annotations: DDP checks them
            reduces[0] += 1
            return default_hooks.allreduce_hook(state, bucket)

        model.register_comm_hook(None, count)
        optimizer.register_step_pre_hook(lambda *_: steps.__setitem__(0, steps[0] + 1))
        buckets = 1  # this model's gradients fit in one DDP bucket: one all-reduce per synchronised backward
        try:
            for step in range(STEPS):
                candidate(model, optimizer, _batch(step, rank, world, device), device)
        except Exception as exc:  # noqa: BLE001 - the learner's code: any failure is the reason
            return False, f"train_step_uneven raised {type(exc).__name__}: {exc}"
        got = [p.detach().clone() for p in model.parameters()]
        if steps[0] != STEPS:
            return False, (
                f"stepped the optimizer {steps[0] // STEPS} times per call ({steps[0]} in {STEPS} calls): "
                "accumulate the gradients of all micro-batches, then call optimizer.step() once"
            )
        mine = torch.cat([p.flatten() for p in got])
        other = mine.clone()
        dist.broadcast(other, src=0)
        differ = bool((mine - other).abs().max() > 0)
        flags = torch.tensor([float(differ)], device=device)
        dist.all_reduce(flags)
        if flags.item() > 0:
            return False, (
                "the ranks' weights differ: their gradients were never averaged. The last micro-batch's "
                "backward must run outside model.no_sync(): that is when DDP all-reduces the sum"
            )
        right = _simulate(device, world, "share")
        off = _distance(got, right, start)
        if off > RTOL:
            for weighting, reason in (
                (
                    "equal",
                    "weighted every micro-batch the same (÷ their number): with sizes "
                    f"{list(SIZES)} a sample of the small micro-batch counts more than one of the large; "
                    "weight each micro-batch's mean loss by its share of the samples",
                ),
                (
                    "none",
                    "summed the micro-batches' gradients without dividing: the step is as large as "
                    f"{len(SIZES)} steps; weight each micro-batch's mean loss by its share of the samples",
                ),
            ):
                if _distance(got, _simulate(device, world, weighting), start) <= RTOL:
                    return False, reason
            return False, (
                f"the update differs from one step on the whole global batch by {off:.1e} (relative): "
                "weight each micro-batch's mean loss by its share of the samples"
            )
        per_step = reduces[0] / STEPS
        if per_step > buckets:
            return False, (
                f"all-reduced {per_step:.0f} times per optimizer step, once per micro-batch: run the "
                "backward of all but the last micro-batch under model.no_sync()"
            )
        return True, (
            f"the update equals one step on the whole global batch (within {off:.1e}), with {per_step:.0f} "
            f"all-reduce per optimizer step over micro-batches of {list(SIZES)} samples"
        )
    finally:
        torch.backends.cudnn.allow_tf32 = tf32
