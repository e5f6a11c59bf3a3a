"""Checkpoints in a DDP run: save from rank 0, barrier, load everywhere with ``weights_only=True``.

Used in notebook 03. Every rank holds the same weights, so one rank (0) writes the file; the
others wait at a barrier so nobody reads a half-written file or races ahead. Loading maps the
tensors straight onto this rank's device (``map_location``) and refuses anything but tensors
and plain containers (``weights_only=True``: a checkpoint cannot run code when loaded).
What is saved is the model *without* its DDP wrapper (``model.module``), so the file loads
into a plain model too, plus the optimizer and scaler states and where training stopped.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from .training import TrainSetup


def _barrier(device: torch.device) -> None:
    if dist.is_initialized():
        if device.type == "cuda":
            dist.barrier(device_ids=[device.index])
        else:
            dist.barrier()


def save_checkpoint(path: str | os.PathLike[str], s: TrainSetup, *, epoch: int, step: int,
                    extra: dict[str, Any] | None = None) -> Path:
    """Rank 0 writes ``path`` (through a temporary file); then every rank waits at a barrier.

    ``epoch`` is the last epoch completed and ``step`` the optimizer steps taken so far.
    Every rank must call this (the barrier is a collective).
    """
    path = Path(path)
    rank = dist.get_rank() if dist.is_initialized() else 0
    if rank == 0:
        state = {
            "model": s.module.state_dict(),
            "optimizer": s.optimizer.state_dict(),
            "scaler": s.scaler.state_dict() if s.scaler is not None else None,
            "epoch": int(epoch),
            "step": int(step),
            "amp": s.amp,
            "extra": dict(extra or {}),
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        torch.save(state, tmp)
        os.replace(tmp, path)
    _barrier(s.device)
    return path


def load_checkpoint(path: str | os.PathLike[str], s: TrainSetup) -> dict[str, Any]:
    """Load ``path`` into ``s`` (model, optimizer, scaler) on every rank; returns
    ``{"epoch": ..., "step": ..., "extra": ...}`` so training resumes at ``epoch + 1``."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}: save one first (save_checkpoint, or the train workload's checkpoint=PATH)")
    state = torch.load(path, map_location=s.device, weights_only=True)
    s.module.load_state_dict(state["model"])
    s.optimizer.load_state_dict(state["optimizer"])
    if s.scaler is not None and state.get("scaler") is not None:
        s.scaler.load_state_dict(state["scaler"])
    return {"epoch": int(state["epoch"]), "step": int(state["step"]), "extra": state.get("extra", {})}
