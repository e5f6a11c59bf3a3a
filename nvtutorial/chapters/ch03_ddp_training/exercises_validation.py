"""Exercise (notebook 03): validation across ranks with sums and counts, DistributedSampler's padding skipped.

The learner writes ``pixel_accuracy(model, loader, device)``: the fraction of the validation pixels the
model predicts right, over the WHOLE set, the same number on every rank. ``loader`` is this rank's
``DataLoader`` with ``DistributedSampler(shuffle=False)`` over a set whose size does not divide by the
number of ranks, so the sampler pads it with a duplicate. The checker runs it on 2 real ranks and
compares it with one process's accuracy over the whole set; when it differs, it recomputes the usual
mistakes and names the one that gives the candidate's number.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

NAME = "ddp_validation"
"""The exercise's name (``teach.check.check("ddp_validation", ...)``)."""

NOTEBOOK = "03_ddp_training"
TASK = (
    "write pixel_accuracy(model, loader, device): the fraction of validation pixels predicted right over the "
    "whole set, the same on every rank (sums and counts, DistributedSampler's padding skipped)"
)
KIND = "function"
TIMEOUT = 120.0
SAMPLES, BATCH, IMAGE = 13, 4, 16
"""13 samples over 2 ranks: DistributedSampler hands out 14, sample 0 twice."""
RTOL = 1e-9


def pixel_accuracy(model, loader, device):
    sampler = loader.sampler
    rank, world = sampler.rank, sampler.num_replicas
    sums = torch.zeros(2, dtype=torch.float64, device=device)  # pixels right, pixels
    seen = 0
    model.eval()
    with torch.no_grad():
        for images, masks in loader:
            images, masks = images.to(device), masks.to(device)
            keep = rank + world * torch.arange(seen, seen + len(images), device=device) < len(loader.dataset)
            seen += len(images)
            pred, masks = model(images).argmax(dim=1)[keep], masks[keep]
            sums[0] += (pred == masks).sum()
            sums[1] += masks.numel()
    model.train()
    dist.all_reduce(sums)
    return (sums[0] / sums[1]).item()


def accuracy_of_my_share(model, loader, device):
    right = pixels = 0
    with torch.no_grad():
        for images, masks in loader:
            pred = model(images.to(device)).argmax(dim=1)
            right += (pred == masks.to(device)).sum().item()
            pixels += masks.numel()
    return right / pixels


def mean_of_rank_means(model, loader, device):
    batch_accuracies = []
    with torch.no_grad():
        for images, masks in loader:
            pred = model(images.to(device)).argmax(dim=1)
            batch_accuracies.append((pred == masks.to(device)).double().mean())
    acc = torch.stack(batch_accuracies).mean()  # this rank's mean of its batch means
    dist.all_reduce(acc)
    return (acc / dist.get_world_size()).item()


def sums_with_the_padding(model, loader, device):
    sums = torch.zeros(2, dtype=torch.float64, device=device)
    with torch.no_grad():
        for images, masks in loader:
            pred = model(images.to(device)).argmax(dim=1)
            sums[0] += (pred == masks.to(device)).sum()
            sums[1] += masks.numel()
    dist.all_reduce(sums)
    return (sums[0] / sums[1]).item()


def all_reduce_without_dividing(model, loader, device):
    right = pixels = 0
    with torch.no_grad():
        for images, masks in loader:
            pred = model(images.to(device)).argmax(dim=1)
            right += (pred == masks.to(device)).sum().item()
            pixels += masks.numel()
    acc = torch.tensor(right / pixels, dtype=torch.float64, device=device)
    dist.all_reduce(acc)  # the source's pattern: a SUM, never divided
    return acc.item()


SOLUTION = pixel_accuracy
WRONG = {
    "this rank's share only": (accuracy_of_my_share, "ranks returned different values"),
    "mean of the ranks' means": (mean_of_rank_means, "averaged per-rank means"),
    "padding counted": (sums_with_the_padding, "counted DistributedSampler's padding"),
    "all_reduce without dividing": (all_reduce_without_dividing, "without dividing"),
}


def _counts(model: Any, loader: Any, device: Any, rank: int, world: int, skip_padding: bool) -> list[list[float]]:
    """Per batch of this rank: [pixels right, pixels] (padding skipped or kept)."""
    out, seen = [], 0
    with torch.no_grad():
        for images, masks in loader:
            images, masks = images.to(device), masks.to(device)
            keep = rank + world * torch.arange(seen, seen + len(images), device=device) < len(loader.dataset)
            seen += len(images)
            if not skip_padding:
                keep = torch.ones_like(keep)
            pred, m = model(images).argmax(dim=1)[keep], masks[keep]
            out.append([float((pred == m).sum()), float(m.numel())])
    return out


def check_on_rank(candidate: Any, ctx: Any) -> tuple[bool, str]:
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, DistributedSampler

    from nvtutorial.models.segdata import make_dataset
    from nvtutorial.models.unet import build_unet

    rank, world, device = dist.get_rank(), dist.get_world_size(), ctx.device
    data = make_dataset(SAMPLES, IMAGE, seed=5)
    torch.manual_seed(0)
    model = DDP(build_unet("tiny").to(device), device_ids=[device.index] if device.type == "cuda" else None)
    model.eval()
    loader = DataLoader(data, batch_size=BATCH, sampler=DistributedSampler(data, shuffle=False))
    try:
        got = candidate(model, loader, device)
        got = float(got.item() if hasattr(got, "item") else got)
    except Exception as exc:  # noqa: BLE001 - the learner's code: any failure is the reason
        return False, f"pixel_accuracy raised {type(exc).__name__}: {exc}"
    # What one process computes over the whole set, in order: the reference.
    whole = _counts(model.module, DataLoader(data, batch_size=BATCH), device, 0, 1, True)
    right = sum(r for r, _ in whole) / sum(p for _, p in whole)
    every: list[Any] = [None] * world  # all_gather_object puts every rank's float in its slot
    dist.all_gather_object(every, got)
    if any(abs(v - every[0]) > RTOL * abs(every[0]) for v in every):
        return False, (
            f"ranks returned different values ({', '.join(f'{v:.6f}' for v in every)}): each rank sees only "
            "its share of the set; add every rank's sums with dist.all_reduce before dividing"
        )
    if abs(got - right) <= RTOL * right:
        return True, f"{got:.6f} on every rank, equal to one process's accuracy over all {SAMPLES} samples"
    # The usual mistakes, recomputed from every rank's counts.
    mine_kept = _counts(model, loader, device, rank, world, True)
    mine_all = _counts(model, loader, device, rank, world, False)
    per_rank: list[Any] = [None] * world
    dist.all_gather_object(per_rank, {"kept": mine_kept, "all": mine_all})
    acc = lambda batches: sum(r for r, _ in batches) / sum(p for _, p in batches)  # noqa: E731
    flat = lambda key: [b for r in per_rank for b in r[key]]  # noqa: E731
    means = {key: [acc(r[key]) for r in per_rank] for key in ("kept", "all")}
    batch_means = [sum(r / p for r, p in rk["all"]) / len(rk["all"]) for rk in per_rank]
    samples_all = len(DistributedSampler(data, num_replicas=world, rank=0, shuffle=False)) * world
    mistakes = [
        (
            [sum(means["all"]), sum(means["kept"]), sum(batch_means), sum(r for r, _ in flat("all"))],
            f"all_reduce adds the ranks' values without dividing: {got:.4f} is a sum over {world} ranks, "
            "not an accuracy; "
            "all_reduce the sums (pixels right, pixels), then divide one by the other",
        ),
        (
            [sum(means["kept"]) / world, sum(batch_means) / world],
            "averaged per-rank means: wrong when ranks hold different numbers of samples / padding counted twice; "
            "all_reduce the sums and counts, then divide once",
        ),
        (
            [acc(flat("all"))],  # (with the padding, the ranks' accuracies averaged give this number too)
            f"counted DistributedSampler's padding: {samples_all} samples for {SAMPLES} "
            "(the duplicates at positions >= "
            "len(dataset)); skip them: rank r's k-th sample is position r + k × world",
        ),
    ]
    for values, reason in mistakes:
        if any(abs(got - v) <= 1e-7 * max(1.0, abs(v)) for v in values):
            return False, f"{got:.6f} instead of {right:.6f}: {reason}"
    return False, (
        f"{got:.6f} on every rank, but one process over the whole set gets {right:.6f}: count the pixels "
        "predicted right and all pixels, skip the padding, all_reduce both sums, divide once"
    )
