"""What chapter 07's ``compression`` workload returns: frozen dataclasses, torch-free, read by both sides.

The workload (``workload_compression.py``, on the ranks) builds one :class:`Rank` per rank: every hook's pooled
rounds (:class:`Hook`) and how sparse the UNet's own gradients are (:class:`DensityRow`, :class:`DensitySummary`,
from ``workload_density.py``); the launcher writes it to ``rank{R}.json``; the kernel side
(``report_compression.py``, ``plots.py``) reads it back typed with ``result.metrics_as(Rank)``, after
:meth:`Rank.upgrade` has brought the older layout of the committed 2× H200 runs
(``reference/h200x2/runs/compression-*``) to today's. Notebook 07's cells pass the run's raw JSON
(``fast.ranks[0]``, ``{link: fast.ranks[0]}``, ``fast.ranks[0]["density"]``: its cells stay as the 2× H200 copy of the
notebook ran them); the report and the plots type it where it comes in, with :func:`rank_typed`, :func:`runs_typed`,
:func:`summary_typed` and ``results.rows_typed``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Literal

from nvtutorial.params import require
from nvtutorial.results import as_typed, typed, with_defaults

NAME = "compression"
"""The workload's name (``nvtutorial.run("compression", ...)``, ``nvtutorial list``), declared here
once: ``workload_compression.py`` imports it."""
HookName = Literal["none", "fp16", "bf16", "powersgd", "topk"]
HOOK_NAMES: tuple[HookName, ...] = ("none", "fp16", "bf16", "powersgd", "topk")
"""The hooks of :mod:`nvtutorial.chapters.ch07_collectives.lessons.compression` (``none``: DDP's own all-reduce)."""


@dataclasses.dataclass(frozen=True)
class Params:
    model: Literal["tiny", "small", "full"] = "full"
    batch_size: int = 8
    """Per GPU."""
    image_size: int = 128
    samples: int = 256
    val_samples: int = 64
    hooks: tuple[str, ...] = HOOK_NAMES
    warmup: int = 5
    steps: int = 20
    """Timed steps per hook and round, after ``warmup``."""
    rounds: int = 2
    """Sweeps over the hooks (forward, reverse, forward...): each round's median step is one repeat."""
    eval_every: int = 0
    """Validate every this many steps too (0: only at the end)."""
    lr: float = 1e-3
    topk_ratio: float = 0.01
    powersgd_rank: int = 2
    start_iter: int = 2
    """Plain all-reduce steps before PowerSGD and top-k compress (DDP rebuilds buckets after step 1)."""
    density_batches: int = 2
    """Batches whose local gradients are measured for density (0: skip)."""
    seed: int = 0

    def __post_init__(self) -> None:
        unknown = [h for h in self.hooks if h not in HOOK_NAMES]
        require(bool(self.hooks) and not unknown, f"hooks={self.hooks}: use some of {', '.join(HOOK_NAMES)}")
        require(
            self.warmup >= self.start_iter + 1,
            f"warmup={self.warmup} must exceed start_iter={self.start_iter}, so that the timed steps are compressed",
        )
        require(
            self.start_iter >= 2, f"start_iter={self.start_iter}: at least 2 (DDP rebuilds its buckets after step 1)"
        )
        require(self.steps >= 1 and self.batch_size >= 1, "steps and batch_size must be at least 1")
        require(self.rounds >= 2, f"rounds={self.rounds}: at least 2, the repeats a comparison needs")
        require(0 < self.topk_ratio <= 1, f"topk_ratio={self.topk_ratio} must be in (0, 1]")
        require(self.powersgd_rank >= 1, f"powersgd_rank={self.powersgd_rank} must be at least 1")
        require(self.eval_every >= 0 and self.density_batches >= 0, "eval_every and density_batches must be 0 or more")


@dataclasses.dataclass(frozen=True)
class Eval:
    """A validation pass: after ``step`` steps (warm-up included), the loss and the IoU."""

    step: int
    loss: float
    iou: float


@dataclasses.dataclass(frozen=True, kw_only=True)
class Hook:
    """One hook's training, every round pooled (rank-local): the first round's curves and accuracy (every round
    trains from the same weights on the same batches), every round's timed steps for the time. Each step is timed
    alone: CUDA events on the current stream on a GPU (the committed runs too), the host clock on the CPU."""

    hook: HookName
    compressed_when_timed: bool
    """The hook had left its plain all-reduce warm-up before the timed steps (always, for none, fp16, bf16)."""
    step_ms_median: float
    """Median of every round's timed steps, milliseconds."""
    step_ms_all: tuple[float, ...]
    """Every round's timed steps, milliseconds, round after round."""
    sent_bytes_per_step: float
    """Bytes this rank sends per timed step were its collectives run as rings (counted as the hook issues them)."""
    payload_bytes_per_step: float
    """Bytes this rank hands to ``torch.distributed`` per timed step."""
    collective_calls_per_step: float | None = None
    """``None``: not recorded (older runs)."""
    warmup_calls: int | None = None
    """Collective calls during the untimed warm-up (``None``: not recorded, older runs)."""
    dense_bytes_per_step: float
    """What a ring all-reduce of every fp32 gradient sends per rank: the uncompressed step's bytes."""
    train_loss: tuple[float, ...]
    """The first round's loss at every step, warm-up included."""
    evals: tuple[Eval, ...]
    final_val_loss: float
    final_iou: float
    nvlink_tx_bytes_per_step: float | None
    """NVML's NVLink TX bytes per timed step, rank 0's GPU, averaged over the rounds (``None``: not available)."""
    nvlink_note: str | None
    """Which links NVML counted, or why it did not (``None`` on other ranks than 0)."""
    params: int
    """The model's parameters."""
    topk_residual_norm: float | None = None
    """Top-k only: the norm of the error-feedback residuals after training."""
    step_ms_round_medians: tuple[float, ...]
    """Each round's median step, milliseconds: the repeats ``compare`` judges."""
    train_loss_rounds_equal: bool | None = None
    """Every round's losses equal the first's (``None``: not recorded, older runs)."""


@dataclasses.dataclass(frozen=True)
class DensityRow:
    """How sparse one parameter's local gradient is (this rank's, before averaging)."""

    layer: str
    numel: int
    ndim: int
    frac_zero: float
    """Fraction of entries exactly zero (NaN for an empty tensor)."""
    frac_near_zero: float
    """Fraction of entries with ``|g| ≤ 1e-3 × max |g|``."""
    frac_for_energy: float
    """Smallest fraction of entries holding 99 % of ``‖g‖²``."""
    topk_energy_share: float
    """Share of ``‖g‖²`` the top ``topk_ratio`` of entries hold (NaN for a zero gradient)."""


@dataclasses.dataclass(frozen=True)
class DensitySummary:
    """Whole-model figures, weighted by layer size, and what a sparse format would send."""

    params: int
    layers: int
    frac_zero: float
    frac_near_zero: float
    frac_for_energy: float
    max_layer_frac_zero: float
    source_format_ratio: float
    """Bytes of the source's format (one int64 per dimension per non-zero, plus its fp32 value) ÷ dense fp32."""
    index_value_ratio: float
    """The same with one int32 flat index per non-zero (the course's ``sparse_allreduce``)."""


@dataclasses.dataclass(frozen=True)
class DensitySummaries:
    """The summaries before training (``initial``) and after it (``trained``); ``None``: not measured."""

    initial: DensitySummary | None = None
    trained: DensitySummary | None = None


@dataclasses.dataclass(frozen=True)
class Rank:
    """What one rank of ``compression`` returns."""

    link: str
    """How the GPUs exchanged gradients: ``NVLink (NV18)``, ``PCIe peer-to-peer``, ``host-staged``, ``gloo (CPU)``."""
    nccl_p2p_disable: str | None
    """``NCCL_P2P_DISABLE`` as the run had it."""
    gpus_hidden_from_cpu_rank: bool | None
    """A CPU rank of a machine with GPUs was told there is none (``None``: not recorded, older runs)."""
    hooks: tuple[Hook, ...]
    """The hooks installed, in the order asked for."""
    skipped_hooks: Mapping[str, str]
    """Hook → why this torch could not install it (older runs recorded none)."""
    density: tuple[DensityRow, ...]
    """Per layer, after training (before it where only that was measured; ``()``: not measured)."""
    density_initial: tuple[DensityRow, ...]
    density_summary: DensitySummaries
    topk_ratio: float
    powersgd_rank: int
    steps: int
    """Timed steps per hook and round."""
    rounds: int
    warmup: int
    """Untimed steps before them."""
    model: Literal["tiny", "small", "full"]

    @staticmethod
    def upgrade(data: dict[str, Any]) -> dict[str, Any]:
        """An older layout as today's. The first runs (``reference/h200x2``) did not record skipped hooks (they
        skipped none: all five hooks are in them), whether a CPU rank's GPUs were hidden, nor, per hook, the calls
        and whether the rounds' losses were equal; they kept two keys per hook no longer written, each dropped here
        (so the typed view, and the no-loss check over it, do not hold them):

        - ``step_ms_spread``: ``(max - min of step_ms_round_medians) / step_ms_median``, derivable from the two fields
          kept (checked on all ten hooks of the two committed runs);
        - ``wall_ms_per_step``: a measurement, not derivable: the host clock from before the first timed step to after
          the device was synchronised at the end of the timed loop (batches and evaluations inside it included),
          per step, the mean over the rounds. Nothing reads it and newer runs do not measure it."""
        data.setdefault("gpus_hidden_from_cpu_rank", None)
        data.setdefault("skipped_hooks", {})
        if "hooks" in data:
            data["hooks"] = [_hook(h) for h in data["hooks"]]
        return data


def _hook(hook: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in hook.items() if k not in ("step_ms_spread", "wall_ms_per_step")}
    return with_defaults(Hook, out)


def rank_typed(metrics: Rank | Mapping[str, Any]) -> Rank:
    """One rank's metrics typed: ``result.metrics_as(Rank)`` as it is, ``result.ranks[0]`` (raw JSON) through
    the schema (:meth:`Rank.upgrade` included)."""
    return as_typed(Rank, metrics)


def runs_typed(results: Mapping[str, Rank | Mapping[str, Any]]) -> dict[str, Rank]:
    """Runs keyed by link (``{rank.link: rank}``), each rank typed by :func:`rank_typed`."""
    return {link: rank_typed(m) for link, m in results.items()}


def summary_typed(summary: DensitySummary | Mapping[str, Any] | None) -> DensitySummary | None:
    """A density summary typed; ``None`` or ``{}`` (what ``density_summary.get("trained", {})`` gives a run that did
    not measure it): ``None``."""
    if summary is None or isinstance(summary, DensitySummary):
        return summary
    return typed(DensitySummary, summary) if summary else None
