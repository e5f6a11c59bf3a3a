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

Bytes are counted per rank with :class:`~nvtutorial.collectives.ByteCounter`: exactly what each
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


# --------------------------------------------------------------------------------------------
# Reading the results (notebook 07): tables and verdicts computed from the measurements

TIME_TOLERANCE = 0.03
"""Step-time changes smaller than this fraction of the baseline, or than the measurement's noise
on that link (``step_noise``, see :func:`hooks_frame`), are called "no change"."""
TWINS = ("fp16", "bf16")
"""Two hooks that do the same work (a cast, half the bytes): their gap is an A/A comparison."""
IOU_TOLERANCE = 0.02
"""IoU differences smaller than this (absolute) are called "no visible cost" in a short run."""


def hooks_frame(results: dict[str, dict[str, Any]]):  # -> pandas.DataFrame
    """One row per (link, hook) from the ``compression`` workload's metrics, keyed by link name.

    Adds the step time and IoU relative to ``none`` on the same link, the bytes saved, and
    ``step_noise``, the size of a step-time difference that is noise, relative to ``none``: the
    largest of the spread of the rounds' medians of the hook, that of ``none``, and the gap
    between the ``fp16`` and ``bf16`` hooks on the same link (they do the same work, so whatever
    separates them is the machine, not the method).
    """
    import pandas as pd

    rows = []
    for link, metrics in results.items():
        hooks = {h["hook"]: h for h in metrics["hooks"]}
        base = hooks.get("none")
        twin_gap = (abs(hooks[TWINS[0]]["step_ms_median"] - hooks[TWINS[1]]["step_ms_median"]) / base["step_ms_median"]
                    if base and all(t in hooks for t in TWINS) else 0.0)
        for name, h in hooks.items():
            rows.append({
                "link": link,
                "hook": name,
                "step_ms": h["step_ms_median"],
                "step_vs_none": h["step_ms_median"] / base["step_ms_median"] if base else float("nan"),
                "step_noise": max(h.get("step_ms_spread", 0.0), base.get("step_ms_spread", 0.0) if base else 0.0,
                                  twin_gap),
                "sent_MB_per_step": h["sent_bytes_per_step"] / 1e6,
                "bytes_saved": 1 - h["sent_bytes_per_step"] / h["dense_bytes_per_step"],
                "nvlink_tx_MB_per_step": (h["nvlink_tx_bytes_per_step"] / 1e6
                                          if h.get("nvlink_tx_bytes_per_step") is not None else None),
                "nvml_over_counted": (h["nvlink_tx_bytes_per_step"] / h["sent_bytes_per_step"]
                                      if h.get("nvlink_tx_bytes_per_step") is not None and h["sent_bytes_per_step"]
                                      else None),
                "nvml_note": h.get("nvlink_note"),
                "final_val_loss": h["final_val_loss"],
                "final_iou": h["final_iou"],
                "iou_vs_none": h["final_iou"] - base["final_iou"] if base else float("nan"),
                "compressed_when_timed": h.get("compressed_when_timed", True),
            })
    return pd.DataFrame(rows)


def _time_word(ratio: float, tolerance: float) -> str:
    if ratio != ratio:
        return "not measured"
    change = ratio - 1
    if abs(change) < tolerance:
        return f"no change ({change:+.0%})"
    return f"{change:+.0%} ({'slower' if change > 0 else 'faster'})"


def verdict_table(frame, time_tolerance: float = TIME_TOLERANCE, iou_tolerance: float = IOU_TOLERANCE):
    """Per hook: bytes saved, step-time change on each link, accuracy change, where it pays.

    "Pays" on a link means its median step is faster than ``none`` by more than
    ``time_tolerance`` and more than ``step_noise``; the accuracy cost is the final IoU
    difference after the same steps.
    """
    import pandas as pd

    rows = []
    links = list(dict.fromkeys(frame["link"]))
    for hook in dict.fromkeys(frame["hook"]):
        if hook == "none":
            continue
        sub = frame[frame["hook"] == hook].set_index("link")
        row: dict[str, Any] = {"hook": hook, "bytes_saved": f"{sub['bytes_saved'].iloc[0]:.1%}"}
        pays = []
        for link in links:
            if link in sub.index:
                ratio = float(sub.loc[link, "step_vs_none"])
                tolerance = max(time_tolerance, float(sub.loc[link, "step_noise"]))
                row[f"step time, {link}"] = _time_word(ratio, tolerance)
                if ratio < 1 - tolerance:
                    pays.append(link)
        d_iou = float(sub["iou_vs_none"].mean())
        row["IoU vs none"] = (f"{d_iou:+.3f} (within {iou_tolerance})" if abs(d_iou) < iou_tolerance
                              else f"{d_iou:+.3f}")
        row["pays on"] = ", ".join(pays) if pays else "none of the links measured"
        rows.append(row)
    return pd.DataFrame(rows).set_index("hook") if rows else pd.DataFrame()


def nvml_statements(frame) -> list[str]:
    """What NVML's NVLink data counter of GPU 0 saw per step against the bytes counted in the hooks."""
    def present(x: Any) -> bool:
        return x is not None and x == x  # not None, not NaN

    out = []
    for _, r in frame.iterrows():
        if not present(r["nvlink_tx_MB_per_step"]):
            out.append(f"{r['link']}, {r['hook']}: NVLink counter {r['nvml_note'] or 'not available'}")
            continue
        ratio = f" (NVML ÷ counted = {r['nvml_over_counted']:.2f})" if present(r["nvml_over_counted"]) else ""
        out.append(f"{r['link']}, {r['hook']}: NVML saw {r['nvlink_tx_MB_per_step']:.3g} MB leave GPU 0 over NVLink "
                   f"per step; the hook counted {r['sent_MB_per_step']:.3g} MB sent{ratio}")
    return out


def slower_statements(frame, time_tolerance: float = TIME_TOLERANCE) -> list[str]:
    """Plain sentences for every (link, hook) where compression made the training step slower."""
    out = []
    for _, r in frame.iterrows():
        if r["hook"] != "none" and r["step_vs_none"] > 1 + max(time_tolerance, r["step_noise"]):
            base = r["step_ms"] / r["step_vs_none"]
            out.append(f"On {r['link']}, {r['hook']} made each training step {r['step_vs_none'] - 1:.0%} slower "
                       f"({r['step_ms']:.2f} ms against {base:.2f} ms without compression), "
                       f"although it sent {r['bytes_saved']:.0%} fewer bytes.")
    return out


def link_statement(frame, time_tolerance: float = TIME_TOLERANCE) -> str:
    """What the link did to the step without compression, where more than one link was measured."""
    base = frame[frame["hook"] == "none"].set_index("link")["step_ms"]
    if len(base) < 2:
        return "One link measured: nothing to compare the uncompressed step with."
    fastest, slowest = base.idxmin(), base.idxmax()
    times = ", ".join(f"{ms:.2f} ms on {link}" for link, ms in base.items())
    if base[slowest] / base[fastest] - 1 < time_tolerance:
        return (f"Without compression the step took {times}: the link's speed did not show in the step time, "
                f"since the gradient exchange is hidden behind the backward pass on every link measured.")
    return (f"Without compression the step took {times}: fastest on {fastest}. Where the exchange is hidden "
            f"behind the backward pass, the link's bandwidth hardly matters; what can differ between the links "
            f"is how much the communication kernels, which share the GPU with that pass, slow it down (a likely "
            f"cause, not measured here: notebook 05's profile shows the overlap).")


def density_verdict(summary: dict[str, Any], claimed_saving: float = 0.85) -> str:
    """Claim C23 (the source's sparse all-reduce "cuts communication by 85 %") against the
    measured density of the gradients."""
    if not summary or not summary.get("params"):
        return "no gradient density was measured"
    zero = summary["frac_zero"]
    source_ratio = summary["source_format_ratio"]
    ours = summary["index_value_ratio"]
    saving = 1 - source_ratio
    verdict = "refuted" if saving < claimed_saving else "supported"
    return (f"C23 {verdict}: {zero:.1%} of the UNet's gradient entries are exactly zero "
            f"({summary['frac_near_zero']:.1%} below 1e-3 of their layer's largest); "
            f"99 % of the squared gradient norm needs {summary['frac_for_energy']:.0%} of the entries. "
            f"Sending only the non-zeros in the source's format (int64 coordinates per dimension + value) "
            f"would move {source_ratio:.1f}× the dense bytes ({saving:+.0%} 'saved', claim: {claimed_saving:.0%}); "
            f"with one int32 index per value {ours:.2f}×. Conv-net gradients are dense: sparsity must be made "
            f"(top-k), and then needs error feedback.")
