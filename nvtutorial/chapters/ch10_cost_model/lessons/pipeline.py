"""Train the course transformer split into pipeline stages, one per rank: GPipe or 1F1B (notebook 10).

    torchrun --standalone --nproc-per-node 2 nvtutorial/chapters/ch10_cost_model/lessons/pipeline.py --schedule 1f1b
    torchrun --standalone --nproc-per-node 2 nvtutorial/chapters/ch10_cost_model/lessons/pipeline.py \\
        --schedule gpipe --microbatches 8

One process per GPU with NCCL where there are GPUs, gloo on the CPU otherwise (the process group of notebook
08's ``train.py``). Every rank builds the same model from the same seed (notebook 08's transformer), keeps only
its stage, and ``torch.distributed.pipelining`` runs the schedule: each step's global batch is cut into
``microbatches`` micro-batches that flow through the stages, activations sent forward and their gradients sent
back with point-to-point messages. The last stage computes the loss; the gradients are averaged over the
micro-batches, so one step trains exactly what one process trains on the whole batch. The last stage prints
the loss of each step's global batch.
"""

from __future__ import annotations

import argparse

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

from nvtutorial import runtime
from nvtutorial.chapters.ch03_ddp_training.lessons.ddp_train import setup
from nvtutorial.chapters.ch08_ladder.lessons.rungs import LR
from nvtutorial.models import transformer

# %% the stages


class Stage(nn.Module):
    """Blocks ``first`` to ``last - 1`` of the transformer, with the embeddings on the first stage and the final
    norm and the output head on the last. The modules are the model's own (no copy): their weights are the
    seeded ones every rank built."""

    def __init__(self, model: transformer.Transformer, first: int, last: int) -> None:
        super().__init__()
        self.first = first
        is_first, is_last = first == 0, last == len(model.blocks)
        self.tok = model.tok if is_first else None
        self.pos = model.pos if is_first else None
        self.blocks = nn.ModuleList(model.blocks[first:last])
        self.norm = model.norm if is_last else None
        self.head = model.head if is_last else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.tok is not None and self.pos is not None:  # the first stage receives token ids
            x = self.tok(x) + self.pos(torch.arange(x.shape[1], device=x.device))
        for block in self.blocks:
            x = block(x)
        if self.head is not None and self.norm is not None:  # the last stage returns logits
            x = self.head(self.norm(x))
        return x


def split(model: transformer.Transformer, stage: int, stages: int) -> Stage:
    """Stage ``stage`` of ``stages``: an equal share of the blocks each (the first stages take one more when
    they do not divide evenly)."""
    per, extra = divmod(len(model.blocks), stages)
    first = stage * per + min(stage, extra)
    return Stage(model, first, first + per + (stage < extra))


def model_name(stage: Stage, name: str) -> str:
    """The name a stage's parameter has in the whole model (``blocks.0`` of stage 1 is ``blocks.<first>``)."""
    if name.startswith("blocks."):
        index, rest = name.removeprefix("blocks.").split(".", 1)
        return f"blocks.{int(index) + stage.first}.{rest}"
    return name


# %% the schedule

SCHEDULES = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}


def loss_fn(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """One micro-batch's next-token cross-entropy (the mean over its positions, as ``transformer.loss_fn``)."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def pipeline(model: transformer.Transformer, device: torch.device, schedule: str, microbatches: int):
    """This rank's ``(stage module, pipeline stage, schedule, optimizer)``: rank r runs stage r."""
    rank, world = dist.get_rank(), dist.get_world_size()
    module = split(model, rank, world).to(device)
    stage = PipelineStage(module, rank, world, device)
    # scale_grads: each micro-batch's loss is a mean, so the summed gradients are divided by their number
    runner = SCHEDULES[schedule](stage, n_microbatches=microbatches, loss_fn=loss_fn, scale_grads=True)
    optimizer = torch.optim.Adam(module.parameters(), lr=LR, fused=True)
    return module, stage, runner, optimizer


# %% one training step


def forward_backward(runner, stage: PipelineStage, tokens: torch.Tensor) -> torch.Tensor | None:
    """The schedule's forward and backward passes over the whole global batch: the first stage feeds the inputs,
    the last the targets and collects one loss per micro-batch. The batch's loss on the last stage, else None."""
    # contiguous: each micro-batch must have the layout the stage expects (torch 2.11 checks strides too)
    inputs, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    losses: list[torch.Tensor] = []
    if stage.is_first:
        runner.step(inputs)
    elif stage.is_last:
        runner.step(target=targets, losses=losses)
    else:
        runner.step()
    return torch.stack(losses).mean().detach() if losses else None


def train_step(
    runner, stage: PipelineStage, optimizer: torch.optim.Optimizer, tokens: torch.Tensor
) -> torch.Tensor | None:
    """One step: every stage updates its own parameters once the schedule has run."""
    optimizer.zero_grad(set_to_none=True)
    loss = forward_backward(runner, stage, tokens)
    optimizer.step()
    return loss


def global_loss(loss: torch.Tensor | None, device: torch.device) -> float:
    """The step's loss on every rank: the last stage holds it, the others receive it."""
    value = loss.reshape(1).clone() if loss is not None else torch.zeros(1, device=device)
    dist.broadcast(value, src=dist.get_world_size() - 1)
    return value.item()


# %% the run


def train(
    cfg: transformer.Config,
    schedule: str,
    microbatches: int,
    steps: int,
    global_batch: int,
    device: torch.device,
    seed: int = 0,
) -> list[float]:
    """``steps`` steps of the pipeline from the seeded model; the loss of each step's global batch."""
    model = transformer.build(cfg, seed=seed, device=device)  # the same weights on every rank
    _, stage, runner, optimizer = pipeline(model, device, schedule, microbatches)
    del model  # this rank keeps only its stage
    losses = []
    for step in range(steps):
        tokens = transformer.batch(step, global_batch, cfg, seed=seed).to(device)
        losses.append(global_loss(train_step(runner, stage, optimizer, tokens), device))
    return losses


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])
    parser.add_argument("--schedule", default="1f1b", choices=list(SCHEDULES))
    parser.add_argument("--microbatches", type=int, default=4)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--global-batch", type=int, default=8)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--layers", type=int, default=4)
    args = parser.parse_args()
    cfg = transformer.Config(dim=args.dim, layers=args.layers)
    device = setup()
    losses = train(cfg, args.schedule, args.microbatches, args.steps, args.global_batch, device)
    if dist.get_rank() == dist.get_world_size() - 1:
        for step, loss in enumerate(losses):
            print(f"{args.schedule} step {step}: loss {loss:.6f}")
    runtime.save_metrics({"schedule": args.schedule, "losses": losses})  # for `nvtutorial.run(this file)`
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
