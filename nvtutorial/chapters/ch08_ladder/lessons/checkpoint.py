"""Save a sharded FSDP2 model with torch.distributed.checkpoint (DCP), resume it, load it into one process.

    torchrun --standalone --nproc-per-node 2 nvtutorial/chapters/ch08_ladder/lessons/checkpoint.py \\
        --dir runs/ladder-ckpt

Each rank writes only its own shards (parameters and Adam's state) into one checkpoint folder; a
resumed run of the same shape reads them back in place. ``dcp_to_torch_save`` turns the folder
into an ordinary ``torch.save`` file that a single process loads with ``load_state_dict``. The
script checks all three: the reloaded weights equal the saved ones bit for bit, the resumed run's losses
follow the uninterrupted one's (bit for bit on the CPU; on a GPU the attention backward may add in another
order), and the single-process model holds the same weights.
"""

# torch.distributed.checkpoint re-exports its documented API without __all__, which pyright reads as private:
# pyright: reportPrivateImportUsage=false

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_state_dict,
    set_state_dict,
)

from nvtutorial.chapters.ch08_ladder.lessons.rungs import fsdp_zero3
from nvtutorial.chapters.ch08_ladder.lessons.train import local_batch, setup, train_step
from nvtutorial.models import transformer

# %% save


def save(model: torch.nn.Module, optimizer: torch.optim.Optimizer, folder: str | Path) -> None:
    """Every rank writes its shards of the model and of Adam's state into ``folder``."""
    model_state, optim_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optim": optim_state}, checkpoint_id=str(folder))


# %% resume


def load(model: torch.nn.Module, optimizer: torch.optim.Optimizer, folder: str | Path) -> None:
    """Read ``folder`` back into a model and optimizer sharded the same way (in place, shard by shard)."""
    model_state, optim_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optim": optim_state}
    dcp.load(state, checkpoint_id=str(folder))
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])


# %% one process


def load_single_process(folder: str | Path, cfg: transformer.Config) -> torch.nn.Module:
    """A plain one-process model from the sharded checkpoint (needs no process group)."""
    full = Path(folder).with_name(Path(folder).name + ".pt")  # next to the checkpoint folder, not inside it
    dcp_to_torch_save(str(folder), str(full))  # gathers every rank's shards into one file
    model = transformer.build(cfg, device="cpu")
    model.load_state_dict(torch.load(full, weights_only=True)["model"])
    return model


# %% the check


def _tensors(state: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """A module's state dict, typed as what it holds: tensors (DCP's type also allows an optimizer's values)."""
    return cast("dict[str, torch.Tensor]", dict(state))


def resume_check(
    cfg: transformer.Config,
    folder: str | Path,
    device: torch.device,
    global_batch: int = 8,
    before: int = 3,
    after: int = 3,
) -> dict:
    """Train ``before`` steps and save; train ``after`` more; resume a fresh model from the save and
    train the same ``after`` steps; load the save into one process. What matched, as numbers."""

    def run(model, optimizer, steps):
        losses = []
        for step in steps:
            tokens = transformer.batch(step, global_batch, cfg).to(device)
            losses.append(train_step(model, optimizer, local_batch(tokens, "fsdp_zero3")).item())
        return losses

    model, optimizer = fsdp_zero3(transformer.build(cfg, seed=0, device=device), device)
    run(model, optimizer, range(before))
    whole = StateDictOptions(full_state_dict=True)  # every rank gets every tensor, gathered from the shards
    saved = {k: v.detach().cpu().clone() for k, v in _tensors(get_model_state_dict(model, options=whole)).items()}
    save(model, optimizer, folder)
    continued = run(model, optimizer, range(before, before + after))

    fresh, fresh_optimizer = fsdp_zero3(transformer.build(cfg, seed=1, device=device), device)  # other weights
    load(fresh, fresh_optimizer, folder)
    loaded = {k: v.detach().cpu() for k, v in _tensors(get_model_state_dict(fresh, options=whole)).items()}
    resumed = run(fresh, fresh_optimizer, range(before, before + after))

    out = {
        "continued": continued,
        "resumed": resumed,
        "resume_max_weight_diff": max((loaded[k] - v).abs().max().item() for k, v in saved.items()),
        "single_process_max_weight_diff": None,
    }
    dist.barrier()
    if dist.get_rank() == 0:
        single = load_single_process(folder, cfg).state_dict()
        out["single_process_max_weight_diff"] = max((single[k] - v).abs().max().item() for k, v in saved.items())
    dist.barrier()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").partition("\n")[0])  # None under python -OO
    parser.add_argument("--dir", default="runs/ladder-checkpoint", help="the checkpoint folder")
    args = parser.parse_args()
    device = setup()
    result = resume_check(transformer.Config(), args.dir, device)
    if dist.get_rank() == 0:
        print("uninterrupted:", result["continued"])
        print("resumed:      ", result["resumed"])
        print("largest weight difference after loading:", result["resume_max_weight_diff"])
        print("largest weight difference, one process:  ", result["single_process_max_weight_diff"])
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
