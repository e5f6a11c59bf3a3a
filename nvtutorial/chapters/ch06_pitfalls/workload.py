"""pitfalls: the measurements of notebook 06, on the code of its lessons
(``nvtutorial/chapters/ch06_pitfalls/lessons/``).

Used in notebook 06; the traps themselves run as lesson scripts (``nvtutorial.chapters.ch06_pitfalls.lab``).
``parts`` picks what to measure:

* ``dataloader`` (claim C17): the training loop of ``input_pipeline.py`` (a DDP UNet fed by a
  ``DataLoader`` over data drawn on the CPU), its steady rate in samples/s on every rank, for each
  ``num_workers`` in ``workers`` (past the source's ``4 × GPUs``) and, on GPUs, with and without
  ``pin_memory`` (pinned at the counts in ``pin_workers`` only, where it names some); ``windows``
  repeated windows of ``steps`` steps each, after a warm-up that
  consumes the batches the workers prepared before the first step; and the same loop fed from
  a batch already on the device (what the step alone can take). Also one file per sample
  against shard files (rank 0).
* ``oom`` (claims C19, C20; GPU only): see :mod:`nvtutorial.chapters.ch06_pitfalls.workload_oom`.

Each rank returns a :class:`~nvtutorial.chapters.ch06_pitfalls.schema.Rank`, one section per part.

    torchrun --standalone --nproc-per-node 2 -m nvtutorial.chapters.ch06_pitfalls.workload --set parts=dataloader
    nvtutorial run pitfalls --set parts=dataloader,oom --set workers=0,2,4,8,12,16
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from pathlib import Path

from nvtutorial import runtime
from nvtutorial.chapters.ch06_pitfalls.schema import NAME as NAME  # the workload's name, declared by its schema
from nvtutorial.chapters.ch06_pitfalls.schema import Loader, LoaderRow, Params, Rank, Shards


def run(ctx: runtime.Context, p: Params) -> Rank:
    from nvtutorial.chapters.ch06_pitfalls import workload_oom as _oom

    result = Rank(parts=p.parts)
    for name in p.parts:  # each part drives its own progress bar, from 0 to its total
        ctx.barrier()
        if name == "dataloader":
            result = dataclasses.replace(result, dataloader=_dataloader(ctx, p))
        else:
            result = dataclasses.replace(result, oom=_oom.oom(ctx, p))
    return result


# --------------------------------------------------------------------------- the input pipeline


def warmup_steps(workers: int) -> int:
    """Steps before the measured windows: past what the workers prepared before the first step
    (``prefetch_factor``, 2, batches each) and their start-up."""
    return 2 + 2 * workers


def loader_configs(p: Params, gpu: bool) -> list[tuple[int, bool]]:
    """``(num_workers, pin_memory)`` measured, in order: each count of ``workers``, and on a GPU each again pinned
    where ``pin_workers`` names it (every count where it names none)."""
    pins = (False, True) if gpu else (False,)
    return [(w, pin) for w in p.workers for pin in pins if not pin or not p.pin_workers or w in p.pin_workers]


def _dataloader(ctx: runtime.Context, p: Params) -> Loader:
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DistributedSampler

    from nvtutorial.chapters.ch06_pitfalls.lessons import input_pipeline as lesson
    from nvtutorial.models import segdata
    from nvtutorial.models.unet import build_unet

    torch.manual_seed(p.seed)
    model = DDP(build_unet(p.model).to(ctx.device), device_ids=[ctx.device.index] if ctx.is_gpu else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    rows = []
    configs = loader_configs(p, ctx.is_gpu)
    for k, (workers, pin) in enumerate(configs):
        ctx.progress(k, len(configs), "dataloader", now=f"{workers} workers, pin_memory={pin}")
        warmup = warmup_steps(workers)
        samples = p.loader_batch * (warmup + p.steps * p.windows) * ctx.world_size
        dataset = segdata.make_dataset(samples, p.loader_image_size, seed=p.seed)
        sampler = DistributedSampler(dataset, num_replicas=ctx.world_size, rank=ctx.rank, shuffle=True, seed=p.seed)
        if workers == 0 and not pin:
            loader = lesson.make_loader_broken(dataset, sampler, p.loader_batch)
        else:
            loader = lesson.make_loader_fixed(dataset, sampler, p.loader_batch, workers, pin)
        ctx.barrier()  # both ranks start together, as in training
        batches = iter(loader)
        rates = lesson.steady_rates(model, optimizer, batches, ctx.device, warmup, p.steps, p.windows)
        del batches, loader  # ends the workers
        rows.append(LoaderRow(num_workers=workers, pin_memory=pin, warmup_steps=warmup, samples_per_s=tuple(rates)))
    images, masks = segdata.render(range(p.loader_batch), p.loader_image_size, seed=p.seed, device=ctx.device)
    ctx.barrier()
    step_only = lesson.steady_rates(
        model, optimizer, itertools.repeat((images, masks)), ctx.device, 2, p.steps, p.windows
    )
    shards = _shards(ctx, p) if ctx.is_main else None
    ctx.progress(len(configs), len(configs), "dataloader")
    return Loader(
        rows=tuple(rows),
        step_only_samples_per_s=tuple(step_only),
        cpu_cores=os.cpu_count(),
        ranks=ctx.world_size,
        gpus=ctx.world_size if ctx.is_gpu else 0,
        rule_of_thumb_workers=4 * ctx.world_size,
        batch=p.loader_batch,
        image_size=p.loader_image_size,
        model=p.model,
        steps=p.steps,
        shards=shards,
    )


def _shards(ctx: runtime.Context, p: Params) -> Shards:
    """Read the same samples from one file each and from a few shard files (rank 0's disk, warm cache)."""
    import numpy as np

    from nvtutorial.models import segdata

    root = ctx.run_dir / f"files_rank{ctx.rank}"
    (root / "single").mkdir(parents=True, exist_ok=True)
    (root / "shards").mkdir(parents=True, exist_ok=True)
    images, masks = segdata.render(range(p.shard_samples), p.loader_image_size)
    arr = np.concatenate(
        [
            (images.numpy() * 255).astype(np.uint8).reshape(p.shard_samples, -1),
            masks.numpy().astype(np.uint8).reshape(p.shard_samples, -1),
        ],
        axis=1,
    )
    per_shard = 64
    for i in range(p.shard_samples):
        np.save(root / "single" / f"{i:06d}.npy", arr[i])
    for k in range(0, p.shard_samples, per_shard):
        np.save(root / "shards" / f"shard-{k // per_shard:04d}.npy", arr[k : k + per_shard])

    def read(folder: Path) -> float:
        timer = runtime.Timer(host=True)  # the host clock: file reads, no device
        with timer:
            for f in sorted(folder.iterdir()):
                np.load(f)
        return timer.seconds()[0]

    single = [read(root / "single") for _ in range(3)]
    shards = [read(root / "shards") for _ in range(3)]
    for f in list((root / "single").iterdir()) + list((root / "shards").iterdir()):
        f.unlink()
    return Shards(
        samples=p.shard_samples,
        bytes_per_sample=int(arr.shape[1]),
        per_shard=per_shard,
        one_file_per_sample_us=tuple(1e6 * s / p.shard_samples for s in single),
        shards_us=tuple(1e6 * s / p.shard_samples for s in shards),
    )


if __name__ == "__main__":
    runtime.main(run, Params)
