"""Gradient compression as DDP communication hooks, with the bytes each one sends counted.

Used in notebook 07 and by the ``compression`` workload. A DDP communication hook replaces the
all-reduce DDP runs for each gradient bucket (``ddp_model.register_comm_hook(state, hook)``);
:func:`register` installs one of:

* ``none``: no hook, DDP's own all-reduce of fp32 gradients (the baseline);
* ``fp16`` / ``bf16``: PyTorch's ``fp16_compress_hook`` / ``bf16_compress_hook``: cast the
  bucket to 16 bits, all-reduce, cast back (half the bytes, rounding error);
* ``powersgd``: PyTorch's ``powerSGD_hook`` (Vogels et al., NeurIPS 2019): each weight matrix
  ``n × m`` is sent as two rank-``r`` factors ``P`` (``n × r``) and ``Q`` (``m × r``), with
  error feedback; plain all-reduce for the first ``start_powerSGD_iter`` steps;
* ``topk``: the course's own hook: each rank sends only its ``k`` largest-magnitude entries
  (indices and values, all-gathered), with error feedback (the entries not sent are kept in a
  per-bucket residual and added to the next step's gradient), the scheme of Deep Gradient
  Compression (Lin et al., ICLR 2018) without its momentum correction.

Bytes are counted per rank with :class:`~nvtutorial.lessons.collectives.ByteCounter`: exactly what each
hook hands to its collectives (PowerSGD's from its own ``compression_stats()``), and the bytes a
ring then sends.

(No ``from __future__ import annotations`` here: DDP checks a hook's annotations at run time and
wants the objects ``dist.GradBucket`` and ``torch.futures.Future[torch.Tensor]``, not strings.)
"""

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

from .collectives import ByteCounter, all_gather_flat

HOOKS = ("none", "fp16", "bf16", "powersgd", "topk")


# --------------------------------------------------------------------------------------------
# The course's top-k hook with error feedback


@dataclasses.dataclass
class TopKState:
    """State of :func:`topk_hook`: the ratio, the residual of every bucket, the byte counter.

    ``start_iter``: plain all-reduce for the first steps, because DDP rebuilds its buckets
    after the first iteration (bucket ``i`` may then hold other parameters, so a residual
    kept from step 0 would be added to the wrong gradients); the same reason PowerSGD needs
    ``start_powerSGD_iter >= 2``.
    """

    process_group: Any = None
    ratio: float = 0.01
    start_iter: int = 2
    error_feedback: bool = True
    counter: ByteCounter | None = None
    iter: int = 0
    residuals: dict[int, Tensor] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0 < self.ratio <= 1:
            raise ValueError(f"ratio={self.ratio}: the fraction of entries to send must be in (0, 1]")
        if self.start_iter < 0:
            raise ValueError(f"start_iter={self.start_iter} must be 0 or more")

    def k(self, numel: int) -> int:
        return max(1, min(numel, int(math.ceil(self.ratio * numel))))

    @property
    def group(self) -> Any:
        return self.process_group if self.process_group is not None else dist.group.WORLD


def topk_payload_bytes(k: int, value_bytes: int, index_bytes: int = 4) -> int:
    """Bytes one rank contributes to the top-k all-gather of a bucket: ``k`` indices and values."""
    return k * (index_bytes + value_bytes)


def topk_select(acc: Tensor, k: int) -> tuple[Tensor, Tensor, Tensor]:
    """``(indices int32, values, residual)``: the ``k`` largest-magnitude entries of ``acc`` and
    what is left when they are removed (``acc`` itself, zeroed there)."""
    idx = torch.topk(acc.abs(), k, sorted=False).indices
    values = acc[idx]
    acc[idx] = 0
    return idx.to(torch.int32), values, acc


def _pack(idx: Tensor, values: Tensor) -> Tensor:
    """Indices and values as one byte tensor, so a single all-gather moves both."""
    return torch.cat([idx.contiguous().view(torch.uint8), values.contiguous().view(torch.uint8)])


def _unpack_into(dense: Tensor, gathered: Tensor, world: int, k: int) -> Tensor:
    """Scatter-add every rank's ``k`` (index, value) pairs from ``gathered`` into ``dense``,
    rank by rank (indices are unique within a rank, so each ``index_add_`` is deterministic)."""
    rows = gathered.view(world, -1)
    for r in range(world):
        idx = rows[r, : 4 * k].clone().view(torch.int32).long()
        values = rows[r, 4 * k:].clone().view(dense.dtype)
        dense.index_add_(0, idx, values)
    return dense


def _allreduce_mean_fut(group: Any, buffer: Tensor) -> torch.futures.Future:
    buffer.div_(group.size())

    def done(fut: torch.futures.Future) -> Tensor:
        fut.value()  # re-raises a communication error
        return buffer

    return dist.all_reduce(buffer, group=group, async_op=True).get_future().then(done)


def topk_compress(state: TopKState, bucket_index: int, buffer: Tensor) -> torch.futures.Future:
    """The top-k exchange of one bucket: returns a future of ``buffer`` holding the average of
    every rank's sparsified gradient. The core of :func:`topk_hook`, callable without DDP."""
    group = state.group
    world = group.size()
    numel = buffer.numel()
    acc = buffer.detach().clone()
    if state.error_feedback:
        residual = state.residuals.get(bucket_index)
        if residual is not None and residual.shape == acc.shape:
            acc.add_(residual)
    k = state.k(numel)
    idx, values, residual = topk_select(acc, k)
    if state.error_feedback:
        state.residuals[bucket_index] = residual
    packed = _pack(idx, values)
    gathered = torch.empty(world * packed.numel(), dtype=torch.uint8, device=buffer.device)
    if state.counter is not None:
        state.counter.all_gather(packed.numel())  # = topk_payload_bytes(k, element size)
    work = all_gather_flat(gathered, packed, group=group, async_op=True)

    def decompress(fut: torch.futures.Future) -> Tensor:
        fut.value()  # re-raises a communication error
        buffer.zero_()
        _unpack_into(buffer, gathered, world, k)
        return buffer.div_(world)

    return work.get_future().then(decompress)


def topk_hook(state: TopKState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook: top-k sparsification with error feedback (see :class:`TopKState`)."""
    buffer = bucket.buffer()
    if state.iter < state.start_iter:
        if state.counter is not None:
            state.counter.all_reduce(buffer.numel() * buffer.element_size())
        fut = _allreduce_mean_fut(state.group, buffer)
    else:
        fut = topk_compress(state, bucket.index(), buffer)
    if bucket.is_last():
        state.iter += 1
    return fut


# --------------------------------------------------------------------------------------------
# Counting wrappers around PyTorch's own hooks


def _counting_cast_hook(hook: Callable, bytes_per_element: int, counter: ByteCounter) -> Callable:
    def counted(state: Any, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        counter.all_reduce(bucket.buffer().numel() * bytes_per_element)
        return hook(state, bucket)

    counted.__name__ = f"counted_{hook.__name__}"
    return counted


def _counting_powersgd(counter: ByteCounter) -> Callable:
    """``powerSGD_hook`` with its payload counted: the bucket during the plain all-reduce phase,
    then the element count its own ``compression_stats()`` adds (P, Q and the tensors it leaves
    uncompressed), times the element size."""

    def counted(state: powerSGD_hook.PowerSGDState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        buffer = bucket.buffer()
        plain = state.iter < state.start_powerSGD_iter
        before = state.compression_stats()[2]
        fut = powerSGD_hook.powerSGD_hook(state, bucket)
        elements = buffer.numel() if plain else state.compression_stats()[2] - before
        counter.all_reduce(elements * buffer.element_size())
        return fut

    return counted


# --------------------------------------------------------------------------------------------
# One entry point


@dataclasses.dataclass
class Registered:
    """What :func:`register` installed: the hook's name, its state and its byte counter."""

    name: str
    state: Any
    counter: ByteCounter
    dense_bytes_per_step: int
    """fp32 gradient bytes of one step: what ``none`` all-reduces, the reference for savings."""

    def note_step(self) -> None:
        """Call once per training step: ``none`` has no hook to count for it, so its all-reduce
        of every gradient is added here (DDP's built-in path moves exactly that)."""
        if self.name == "none":
            self.counter.all_reduce(self.dense_bytes_per_step)


def gradient_bytes(model: torch.nn.Module) -> int:
    """Bytes of the gradients DDP all-reduces: every parameter that requires a gradient."""
    return sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)


def register(ddp_model: Any, name: str, *, process_group: Any = None, topk_ratio: float = 0.01,
             powersgd_rank: int = 1, start_iter: int = 2, topk_error_feedback: bool = True,
             counter: ByteCounter | None = None) -> Registered:
    """Install compression ``name`` (one of :data:`HOOKS`) on a DDP model before its first step.

    ``start_iter`` is the number of plain all-reduce steps before PowerSGD and top-k start
    compressing (at least 2 with error feedback: DDP rebuilds its buckets after step 1).
    """
    if name not in HOOKS:
        raise ValueError(f"unknown compression {name!r}; use one of {', '.join(HOOKS)}")
    group = process_group if process_group is not None else dist.group.WORLD
    counter = counter or ByteCounter(world_size=group.size())
    dense = gradient_bytes(ddp_model.module if hasattr(ddp_model, "module") else ddp_model)
    state: Any = None
    if name in ("fp16", "bf16"):
        hook = default_hooks.fp16_compress_hook if name == "fp16" else default_hooks.bf16_compress_hook
        state = process_group
        ddp_model.register_comm_hook(state, _counting_cast_hook(hook, 2, counter))
    elif name == "powersgd":
        if start_iter < 2:
            raise ValueError(f"start_iter={start_iter}: PowerSGD with error feedback needs at least 2")
        state = powerSGD_hook.PowerSGDState(process_group=process_group, matrix_approximation_rank=powersgd_rank,
                                            start_powerSGD_iter=start_iter, use_error_feedback=True, warm_start=True,
                                            random_seed=0)
        ddp_model.register_comm_hook(state, _counting_powersgd(counter))
    elif name == "topk":
        state = TopKState(process_group=process_group, ratio=topk_ratio, start_iter=start_iter,
                          error_feedback=topk_error_feedback, counter=counter)
        ddp_model.register_comm_hook(state, topk_hook)
    return Registered(name=name, state=state, counter=counter, dense_bytes_per_step=dense)


def in_compressed_phase(reg: Registered) -> bool:
    """Whether the hook has left its plain all-reduce warm-up (always true for none/fp16/bf16)."""
    if reg.name == "powersgd":
        return reg.state.iter >= reg.state.start_powerSGD_iter
    if reg.name == "topk":
        return reg.state.iter >= reg.state.start_iter
    return True


# --------------------------------------------------------------------------------------------
# Gradient density (claim C23)


def density_row(name: str, grad: Tensor, near_zero: float = 1e-3, energy: float = 0.99,
                topk_ratio: float = 0.01) -> dict[str, Any]:
    """How sparse one gradient is: the fraction of entries exactly zero, the fraction below
    ``near_zero × max|g|``, the smallest fraction of entries that holds ``energy`` of its squared
    norm, and the share of the squared norm the top ``topk_ratio`` of entries hold."""
    g = grad.detach().float().reshape(-1)
    n = g.numel()
    mag = g.abs()
    peak = float(mag.max()) if n else 0.0
    sq = torch.sort(mag.square(), descending=True).values
    total = float(sq.sum())
    if total > 0:
        cum = torch.cumsum(sq.double(), 0) / total
        needed = int(torch.searchsorted(cum, torch.tensor([energy], dtype=cum.dtype, device=cum.device)).item()) + 1
        k = max(1, int(math.ceil(topk_ratio * n)))
        topk_share = float(cum[min(k, n) - 1])
    else:
        needed, topk_share = 0, float("nan")
    return {
        "layer": name,
        "numel": n,
        "ndim": grad.dim(),
        "frac_zero": float((g == 0).sum()) / n if n else float("nan"),
        "frac_near_zero": float((mag <= near_zero * peak).sum()) / n if n else float("nan"),
        "frac_for_energy": min(needed, n) / n if n else float("nan"),
        "topk_energy_share": topk_share,
    }


def gradient_density(model: torch.nn.Module, near_zero: float = 1e-3, energy: float = 0.99,
                     topk_ratio: float = 0.01) -> list[dict[str, Any]]:
    """:func:`density_row` for every parameter of ``model`` that has a gradient."""
    return [density_row(n, p.grad, near_zero, energy, topk_ratio)
            for n, p in model.named_parameters() if p.grad is not None]


def density_summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Whole-model figures, weighted by layer size, and what a sparse format would send.

    ``source_format_ratio``: bytes of the source's format (``nonzero()`` gives one int64 per
    dimension per entry, plus the fp32 value) over the dense fp32 bytes; ``index_value_ratio``:
    the same with one int32 flat index per entry (the course's :func:`sparse_allreduce`).
    """
    total = sum(r["numel"] for r in rows)
    if not total:
        return {"params": 0}

    def weighted(key: str) -> float:
        return sum(r[key] * r["numel"] for r in rows if r[key] == r[key]) / total

    nonzero = sum((1 - r["frac_zero"]) * r["numel"] for r in rows)
    source_bytes = sum((1 - r["frac_zero"]) * r["numel"] * (8 * r["ndim"] + 4) for r in rows)
    return {
        "params": total,
        "layers": len(rows),
        "frac_zero": weighted("frac_zero"),
        "frac_near_zero": weighted("frac_near_zero"),
        "frac_for_energy": weighted("frac_for_energy"),
        "max_layer_frac_zero": max(r["frac_zero"] for r in rows),
        "source_format_ratio": source_bytes / (4 * total),
        "index_value_ratio": nonzero * 8 / (4 * total),
    }
