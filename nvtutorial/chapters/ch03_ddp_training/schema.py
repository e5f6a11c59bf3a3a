"""What the ``train`` workload returns: frozen dataclasses, torch-free, read by both sides.

The workload (``workload.py``, on the ranks) returns one :class:`Rank` per rank: the run's set-up and a
:class:`Row` per configuration timed (a variant at one per-GPU batch). The launcher writes it to
``rank{R}.json``; the kernel side reads it back typed (``result.ranks_as(Rank)``, ``report.py``).

The committed 2× H200 reference runs (``reference/h200x2/runs/train-*``) were written by an earlier ``train``
workload, in another layout: :meth:`Rank.upgrade` reads them in today's layout (one place for every rename). The
names are mapped, not the configurations: every committed variant ran with ``torch.backends.cudnn.benchmark = True``
and passed DDP's ``bucket_cap_mb`` explicitly (25.0 unless the variant set another), so its first bucket was as large
as the cap (25 MiB for ``base``), while today's ``baseline`` (``lessons/ddp_train.py``'s ``wrap_ddp``) leaves both at
their defaults: ``cudnn.benchmark`` False, and DDP's ``bucket_cap_mb=None`` (a 25 MiB cap with a 1 MiB first
bucket). A committed ``base`` row read as ``baseline`` is therefore not a measurement of today's ``baseline`` code.

Step times (``step_ms``, ``step_ms_rounds``, ``nosync_step_ms``) are each step timed alone with CUDA events on the
current stream on a GPU and on the host clock on the CPU, in today's runs and in the committed ones;
``first_step_s`` is the host clock, the device synchronised at both ends.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Literal

from nvtutorial.params import require

NAME = "train"
"""The workload's name (``nvtutorial.run("train", ...)``, ``nvtutorial list``), declared here
once: ``workload.py`` imports it."""
SOLO = "1 GPU, no DDP"
"""The 1-GPU configuration's variant name (rank 0 alone, the model without DDP; ``one_gpu_batch``)."""

COMMITTED_NAMES = {
    "base": "baseline",
    "amp=fp32": "fp32",
    "amp=fp16": "fp16",
    "gradient_as_bucket_view=true": "gradient_as_bucket_view=True",
    "static_graph=true": "static_graph=True",
    "batch_size=8+accumulation=4": "no_sync accumulation",
    "batch_size=8+accumulation=4+no_sync=false": "accumulation without no_sync",
    "channels_last=true": "channels_last",
    "checkpointing=true": "activation checkpointing",
    "compile=true": "torch.compile",
    "flash_sdp=false": "flash_sdp=False",
    "data=device+batch_size=32": "baseline",
    "data=device+batch_size=16": "baseline",
}
"""Variant names of the committed reference runs -> the names of today's train workload. Only the names: the
committed variants all ran with ``cudnn.benchmark = True`` and ``bucket_cap_mb`` passed explicitly (25.0 for these:
a 25 MiB first bucket), neither of which today's ``baseline`` does (see the module docstring)."""
EARLIER = ("per_gpu_batch", "global_batch", "shuffle", "lesson")
"""What the earlier workload wrote beside its rows (its one batch size; in one run the lesson trained for epochs and
the samplers' orders checked): kept in :attr:`Rank.earlier`, as written."""


@dataclasses.dataclass(frozen=True)
class Params:
    """What a ``train`` run is asked for (``--set KEY=VALUE``). Checked here where the check needs nothing but the
    values; the workload's ``Params`` (a subclass) adds what needs the rank side: the UNet's depth, the variants."""

    model: Literal["tiny", "small", "full"] = "small"
    image_size: int = 64
    batch_sizes: tuple[int, ...] = (8,)  # per GPU; every variant is measured at each
    variants: tuple[str, ...] = ("baseline",)
    one_gpu_batch: int = 0  # > 0: also time one GPU alone (rank 0, no DDP) at this batch: the scaling reference
    accumulation: int = 4  # micro-batches per optimizer step in the accumulation variants (same samples per step)
    samples: int = 256  # training set size (on the device)
    seed: int = 0
    lr: float = 1e-3
    warmup: int = 3
    steps: int = 10  # timed steps per round
    repeats: int = 3  # rounds: the spread of their medians is the noise of one configuration
    comm_share: bool = True
    count: bool = True  # all-reduce bytes and saved activations, on a copy of the model
    aa: bool = True  # the first configuration measured again at the end
    prime: bool = True  # on GPUs: run the first configuration once, unrecorded, first (clocks, cuDNN, allocator)

    def __post_init__(self) -> None:
        require(bool(self.variants), "variants is empty: name at least one (baseline is the lesson's code)")
        require(bool(self.batch_sizes) and min(self.batch_sizes) >= 1, "batch_sizes must be at least 1 each")
        require(self.one_gpu_batch >= 0, f"one_gpu_batch={self.one_gpu_batch} must be 0 (none) or a batch size")
        require(self.samples >= 1 and self.lr > 0, "samples must be at least 1 and lr positive")
        require(self.warmup >= 1, f"warmup={self.warmup} must be at least 1 (the first step builds buckets)")
        require(self.steps >= 1, f"steps={self.steps} must be at least 1")
        require(self.repeats >= 2, f"repeats={self.repeats}: at least 2 rounds, or the noise is unknown")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Row:
    """One configuration: a variant at one per-GPU batch, as one rank measured it. A field the configuration did not
    measure (a failed or idle row, the 1-GPU row's exchange, the CPU's memory) is None or empty."""

    variant: str
    """The variant's name (``baseline``, ``fp16``, ``bucket_cap_mb=5``, ``1 GPU, no DDP``...)."""
    code: str | None = None
    """What the variant runs: the lesson's code with the function named here swapped in. None: a committed row."""
    per_gpu_batch: int
    """Samples per GPU per optimizer step (all its micro-batches together)."""
    accumulation: int = 1
    """Micro-batches per optimizer step (1: one batch)."""
    world_size: int
    """Ranks taking part in the configuration (1 for the 1-GPU row)."""
    global_batch: int
    """Samples per optimizer step over all ranks: per-GPU batch × world size."""
    count_note: str | None = None
    """Why the bytes were not counted (torch.compile); None: counted, or not asked for."""
    allreduce_bytes_per_step: int | None = None
    """Bytes DDP handed to all-reduce in one optimizer step (counted with a comm hook on a copy of the model)."""
    allreduce_calls_per_step: int | None = None
    """All-reduce calls (buckets) in one optimizer step."""
    saved_activation_bytes: int | None = None
    """Bytes autograd saved for backward in one step (activations; parameters left out)."""
    param_bytes: int | None = None
    """Bytes of the model's parameters (every rank holds them whole)."""
    grad_bytes: int | None = None
    """Bytes of the gradients when the optimizer stepped."""
    optimizer_bytes: int | None = None
    """Bytes of the optimizer's state (AdamW: two moments per parameter)."""
    first_step_s: float | None = None
    """Seconds of the first step (with torch.compile: the compilation, inductor's compile workers started when the run
    began); the host clock, the device synchronised at both ends."""
    loss_curve: tuple[float, ...] = ()
    """The loss of every step, warm-up and timed, in order."""
    step_ms_rounds: tuple[float, ...] = ()
    """Each timed round's median step time (ms): the repeats a comparison takes. Empty in the committed layout."""
    step_ms: float | None = None
    """Median of every timed step (ms; each step timed alone: CUDA events on a GPU, the host clock on the CPU)."""
    step_ms_min: float | None = None
    step_ms_max: float | None = None
    samples_per_s: float | None = None
    """Global batch ÷ median step time."""
    comm_share_note: str | None = None
    """Why the communication share was not measured (1-GPU row, torch.compile)."""
    nosync_step_ms: float | None = None
    """Median step under ``model.no_sync()``, without the gradient exchange (ms; timed like ``step_ms``)."""
    comm_share: float | None = None
    """1 − no_sync step ÷ step: the share of a step the exchange exposes."""
    status: str
    """``ok``, ``failed: <error>``, or ``idle: ...`` (a rank that waited while rank 0 measured alone)."""
    step_ms_per_rank: tuple[float | None, ...] = ()
    """Every rank's median round (ms), gathered: the same list on every rank."""
    peak_mem_gb_per_rank: tuple[float | None, ...] = ()
    """Every rank's peak allocated memory above what existed before the model (GB; None on the CPU)."""
    peak_mem_gb: float | None = None
    """Rank 0's peak (GB)."""
    optimizer_mem_gb_per_rank: tuple[float | None, ...] = ()
    """Every rank's memory allocated when the optimizer is about to step (a step pre-hook: every gradient exists),
    above what was allocated before the model was built; the largest over the timed steps (GB, 10⁹ bytes; None on
    the CPU)."""
    optimizer_mem_gb: float | None = None
    aa_repeat: bool = False
    """The first configuration measured again at the end: the run's A/A pair."""
    amp: str | None = None
    """The committed layout's precision of the row (``bf16``, ``fp32``, ``fp16``); None in today's."""

    @property
    def committed(self) -> bool:
        """A row of the committed reference's layout (one timed round per configuration)."""
        return self.code is None

    @property
    def repeats(self) -> tuple[float, ...]:
        """The step-time repeats a comparison takes (ms): the rounds' medians; for a committed row, which timed one
        round, its minimum, median and maximum step. Those are not repeats: their spread is the step-to-step spread,
        not that of round medians, so a committed run's noise is mostly its A/A gap or the 1 % floor."""
        if self.step_ms_rounds:
            return self.step_ms_rounds
        measured = (self.step_ms_min, self.step_ms, self.step_ms_max)
        if self.committed and self.status == "ok" and all(x is not None for x in measured):
            return tuple(x for x in measured if x is not None)
        return ()


@dataclasses.dataclass(frozen=True)
class Rank:
    """One rank's result: the set-up and every configuration it timed."""

    device: str
    """``cuda:N`` or ``cpu``."""
    world_size: int
    model: Literal["tiny", "small", "full"]
    """The UNet's size."""
    model_params: int
    image_size: int
    tf32_convolutions: bool | None
    """Whether fp32 convolutions ran on TF32 tensor cores: cuDNN's TF32 switch (``torch.backends.cudnn.allow_tf32``,
    on by default) on a GPU that has them (compute capability 8.0 or later; the committed runs record the switch, on
    H200s); None on the CPU."""
    precision: Literal["bf16 autocast", "fp32"] | None = None
    """The lesson's step precision (bf16 autocast on GPUs, fp32 on the CPU); None in the committed layout."""
    rows: tuple[Row, ...] = ()
    earlier: Mapping[str, Any] | None = None
    """The committed layout only: what the earlier workload wrote beside its rows (:data:`EARLIER`), as written."""
    cpu_threads: int | None = None
    """The rank's torch threads (``torch.get_num_threads()``; the workload sets 1 on the CPU); None: not recorded."""
    cpu_cores: int | None = None
    """The cores of the rank's machine (``os.cpu_count()``); None: not recorded (the committed layout)."""

    @staticmethod
    def upgrade(data: dict) -> dict:
        """The committed reference's layout as today's: its fields beside the rows into :attr:`earlier`; each row's
        variant under today's name (:data:`COMMITTED_NAMES`), its per-GPU batch with every micro-batch (the earlier
        workload named the micro-batch's), and every field it lacks at its default. A row of today's layout (it
        names its ``code``) is only filled in. The committed name itself is not kept (``base`` and both
        ``data=device+batch_size=*`` become ``baseline``; ``per_gpu_batch`` still tells the batches apart), and the
        rename maps names, not configurations: the committed rows ran with ``cudnn.benchmark = True`` and an explicit
        ``bucket_cap_mb`` (25.0 for the renamed ones: a 25 MiB first bucket), today's ``baseline`` with neither (see
        the module docstring)."""
        earlier = {key: data.pop(key) for key in EARLIER if key in data}
        if earlier:
            data["earlier"] = earlier
        defaults = {f.name: f.default for f in dataclasses.fields(Row) if f.default is not dataclasses.MISSING}
        rows = []
        for row in data.get("rows", ()):
            row = dict(row)
            if "code" not in row:
                row["variant"] = COMMITTED_NAMES.get(row["variant"], row["variant"])
                if row.get("accumulation", 1) > 1:
                    row["per_gpu_batch"] = row["per_gpu_batch"] * row["accumulation"]
            rows.append({**defaults, **row})
        data["rows"] = rows
        return data

    def row(self, variant: str, batch: int | None = None, aa_repeat: bool = False) -> Row | None:
        """The row of ``variant`` (at per-GPU ``batch`` if given); the A/A repeat only if asked."""
        for r in self.rows:
            if r.variant == variant and (batch is None or r.per_gpu_batch == batch) and r.aa_repeat == aa_repeat:
                return r
        return None
