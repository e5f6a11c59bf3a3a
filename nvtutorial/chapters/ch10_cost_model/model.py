"""The cost model of notebook 10: what a step should take on your machine, from a handful of calibrated numbers.

Three numbers per device, the **roofs** of the roofline model and its **floor**: the matrix-multiply throughput
(FLOP/s), the memory bandwidth (B/s), and the least one call costs whatever its work (s): the CPU issuing it
(Python, PyTorch's dispatcher, the kernel launch), which a small kernel pays in full because the GPU finishes
its work sooner than the CPU issues the next. A whole eager program (an optimizer step, a training step) has a
floor of its own, measured the same way on the same program shrunk to almost no work. Two numbers per collective
on the pair: the fixed cost **α** of one call (s), what one PyTorch collective costs when calls follow one
another (the link's latency, the launch and c10d's bookkeeping together), and the bus bandwidth **β** (B/s),
nccl-tests' ``busbw``, so that a collective of S bytes on n ranks takes ``α + S · factor / β`` with the bus
factor of notebook 01 (2(n−1)/n for an all-reduce, (n−1)/n for an all-gather or a reduce-scatter).
Everything else is counting: FLOPs, bytes, calls. Plain functions of plain numbers, in seconds, bytes and
FLOPs; no torch. What the model leaves out is said where it matters, and the notebook measures how far it is off.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Literal

from nvtutorial.units import bus_factor

# %% the calibrated numbers


@dataclasses.dataclass(frozen=True)
class Roof:
    """One device: its matrix-multiply throughput in FLOP/s (in one dtype), its memory bandwidth in B/s, and the
    floor ``call_s``: the least one call (one multiply) costs in seconds, however little work it does."""

    flops: float
    bandwidth: float
    call_s: float = 0.0

    @property
    def ridge(self) -> float:
        """FLOPs per byte at which compute takes as long as moving the bytes: below it, memory-bound."""
        return self.flops / self.bandwidth

    @property
    def floor_flops(self) -> float:
        """FLOPs at which a call's compute takes as long as its floor: P · α. A call costs its floor while both its
        FLOPs are below P · α and its bytes below :attr:`floor_bytes`."""
        return self.flops * self.call_s

    @property
    def floor_bytes(self) -> float:
        """Bytes at which a call's memory traffic takes as long as its floor: BW · α."""
        return self.bandwidth * self.call_s


@dataclasses.dataclass(frozen=True)
class Link:
    """One collective on one group of ranks: the fixed cost α of a call in seconds (latency and software overhead),
    the bus bandwidth β in B/s."""

    alpha: float
    beta: float


# %% a collective


def collective_time(size_bytes: float, link: Link, kind: str = "all_reduce", ranks: int = 2) -> float:
    """Seconds for one collective of ``size_bytes`` (the whole tensor: the gathered output of an all-gather, the
    input of a reduce-scatter): one fixed cost α, then the bytes each rank must send at the bus bandwidth."""
    return link.alpha + size_bytes * bus_factor(kind, ranks) / link.beta


# %% the roofline, with its floor

Regime = Literal["compute", "memory", "overhead"]


def roofline_time(flops: float, bytes_moved: float, roof: Roof) -> float:
    """Seconds for a kernel that does ``flops`` and moves ``bytes_moved`` to and from memory: whichever limit it
    hits first (the others hide under it): the compute roof, the memory roof, or the floor of one call."""
    return max(roof.call_s, flops / roof.flops, bytes_moved / roof.bandwidth)


def regime(flops: float, bytes_moved: float, roof: Roof) -> Regime:
    """Which limit sets :func:`roofline_time`: ``overhead`` only when the floor is above both roofs' times."""
    compute, memory = flops / roof.flops, bytes_moved / roof.bandwidth
    if roof.call_s > max(compute, memory):
        return "overhead"
    return "compute" if compute >= memory else "memory"


def eager_bounds(cpu_s: float, gpu_s: float) -> tuple[float, float]:
    """``(lower, upper)`` seconds of an eager program whose CPU takes ``cpu_s`` to issue its calls and whose GPU
    takes ``gpu_s`` to run them: the CPU issues ahead while the GPU works, so at best the slower side sets the
    pace (the lower bound, the model's answer), at worst nothing overlaps (the sum)."""
    return max(cpu_s, gpu_s), cpu_s + gpu_s


def matmul_time(tokens: int, d_in: int, d_out: int, roof: Roof, dtype_bytes: int) -> float:
    """A linear layer's forward pass, ``[tokens, d_in] @ [d_in, d_out]``: 2 FLOPs (a multiply and an add) per
    multiply-accumulate; the input, the weight and the output each cross memory once."""
    flops = 2 * tokens * d_in * d_out
    bytes_moved = dtype_bytes * (tokens * d_in + d_in * d_out + tokens * d_out)
    return roofline_time(flops, bytes_moved, roof)


# %% a training step on one device


def forward_flops(tokens: int, seq_len: int, dim: int, hidden: int, layers: int, vocab: int) -> float:
    """FLOPs of the transformer's forward pass over ``tokens`` tokens (sequences of ``seq_len``): per block the
    four attention projections (8·T·d²), the MLP (4·T·d·hidden) and causal attention itself (q·kᵀ and the
    weighted sum of v, half of the s × s scores computed: 2·T·s·d); then the output head (2·T·d·vocab). The
    embeddings are lookups, the norms and activations elementwise: no matrix multiplies."""
    per_block = 8 * tokens * dim * dim + 4 * tokens * dim * hidden + 2 * tokens * seq_len * dim
    return layers * per_block + 2 * tokens * dim * vocab


ADAM_BYTES = 28
"""Bytes fused Adam moves per fp32 parameter: it reads the parameter, its gradient and the two moments (16) and
writes the parameter and the two moments (12)."""


def adam_time(n_params: int, roof: Roof, floor_s: float = 0.0) -> float:
    """Adam's update of ``n_params`` fp32 parameters: a few FLOPs per byte, so memory-bound; an eager step costs
    at least its floor ``floor_s`` (the same step on tensors of one element each: Python's bookkeeping per
    tensor and the launches)."""
    return eager_bounds(floor_s, ADAM_BYTES * n_params / roof.bandwidth)[0]


def train_step_time(forward: float, n_params: int, roof: Roof, floor_s: float = 0.0) -> float:
    """One training step on one device: the backward pass does twice the forward's FLOPs (the gradients of the
    inputs and of the weights), all at the compute roof; then Adam at the memory roof; at least the floor
    ``floor_s`` (the same step at a tiny width: the same ops, almost no work). Left out: the elementwise work
    (norms, activations, the loss), at the memory roof too, small next to the matrix multiplies here."""
    return eager_bounds(floor_s, 3 * forward / roof.flops + adam_time(n_params, roof))[0]


# %% data parallel: what hides under the backward pass

DDP_BUCKET_BYTES = 25 * 2**20
"""DDP's gradient bucket cap (``bucket_cap_mb=25``, the default)."""
DDP_FIRST_BUCKET_BYTES = 2**20
"""The cap of DDP's first bucket with the default caps (``torch.distributed._DEFAULT_FIRST_BUCKET_BYTES``)."""


def ddp_buckets(
    gradients: Sequence[tuple[float, float]],
    bucket_bytes: float = DDP_BUCKET_BYTES,
    first_bucket_bytes: float = DDP_FIRST_BUCKET_BYTES,
) -> list[tuple[float, float]]:
    """DDP's buckets as ``(ready, bytes)`` from ``gradients``, ``(ready, bytes)`` per gradient tensor in the order the
    backward pass produces them (``ready``: the share of the backward pass done when it is produced). The rule of
    DDP's reducer, which rebuilds its buckets in that order after the first step: whole tensors, a bucket closed
    as soon as it holds its cap or more (the first one's cap 1 MiB, then 25 MiB), what is left a last bucket. A
    tensor larger than the cap closes a bucket of its own; a bucket is ready with the last tensor it holds."""
    out: list[tuple[float, float]] = []
    ready, size = 0.0, 0.0
    for when, nbytes in gradients:
        ready, size = max(ready, when), size + nbytes
        if size >= (first_bucket_bytes if not out else bucket_bytes):
            out.append((ready, size))
            ready, size = 0.0, 0.0
    return out + ([(ready, size)] if size else [])


def ddp_backward(
    backward_s: float, buckets: Sequence[tuple[float, float]], link: Link, ranks: int = 2
) -> tuple[float, float]:
    """``(seconds until the last gradient is averaged, the part of it that is exposed)`` for DDP's backward pass of
    ``backward_s`` seconds, with ``buckets`` as :func:`ddp_buckets` gives them.

    Each bucket's all-reduce starts when the bucket is ready and the previous all-reduce has ended. What ends
    after the backward pass is exposed: at least the last bucket's all-reduce (for a transformer, the one holding
    the token embedding's gradient, which the backward pass produces last); all of the communication beyond the
    backward pass's length."""
    done = 0.0
    for ready, size in buckets:
        done = max(done, backward_s * ready) + collective_time(size, link, "all_reduce", ranks)
    return max(backward_s, done), max(0.0, done - backward_s)


# %% FSDP2: one block


@dataclasses.dataclass(frozen=True)
class FsdpBlock:
    """One FSDP2 block's collectives, in seconds."""

    all_gather: float
    reduce_scatter: float


def fsdp_block(block_bytes: float, gather: Link, scatter: Link, ranks: int = 2) -> FsdpBlock:
    """One FSDP2 block's collectives in seconds: the all-gather of its parameters (once in the forward pass and,
    under ZeRO-3, again in the backward pass) and the reduce-scatter of its gradients. FSDP2 prefetches the next
    block's all-gather while this one computes: hidden while a block computes longer than it gathers."""
    return FsdpBlock(
        collective_time(block_bytes, gather, "all_gather", ranks),
        collective_time(block_bytes, scatter, "reduce_scatter", ranks),
    )


# %% tensor parallelism: every block waits

TP_ALL_REDUCES_PER_BLOCK = 4
"""All-reduces of a ``tokens × dim`` activation per block and step under tensor parallelism: notebook 08's count
(``ch08_ladder.report_model.TP_ALL_REDUCES_PER_BLOCK``; a test keeps the two equal)."""


def tp_block(tokens: int, dim: int, link: Link, dtype_bytes: int = 4, ranks: int = 2) -> float:
    """Seconds of all-reduce per block and step under tensor parallelism: four all-reduces of a ``tokens × dim``
    activation, as in Megatron-LM: two in the forward pass (after the row-wise ``wo`` and ``w2``) and two in the
    backward pass (the attention's input gradient, once ``wq``, ``wk`` and ``wv`` have added their parts under
    ``PrepareModuleInput``, and the MLP's, for ``w1``), as notebook 08 counts and records them. Each result is
    needed by the next operation: on the critical path, nothing hides them."""
    return TP_ALL_REDUCES_PER_BLOCK * collective_time(tokens * dim * dtype_bytes, link, "all_reduce", ranks)


# %% pipeline parallelism: the bubble


def bubble(stages: int, microbatches: int) -> float:
    """The idle share of a pipeline step with equal stages and messages that take no time: each stage waits
    ``stages − 1`` micro-batch slots while the pipeline fills and drains, out of ``microbatches + stages − 1``
    (GPipe and 1F1B alike)."""
    return (stages - 1) / (microbatches + stages - 1)


def pipeline_time(stage_s: Sequence[float], microbatches: int) -> float:
    """Seconds for one step of a fill-drain pipeline whose stage ``s`` takes ``stage_s[s]`` per micro-batch
    (forward and backward): the first micro-batch crosses every stage, then the slowest stage sets the pace."""
    return sum(stage_s) + (microbatches - 1) * max(stage_s)


def in_flight(stage: int, stages: int, microbatches: int, schedule: str) -> int:
    """Micro-batches whose activations a stage holds at once: all of them under GPipe (every forward before any
    backward), at most ``stages − stage`` under 1F1B (a backward as soon as one is possible)."""
    if schedule == "gpipe":
        return microbatches
    if schedule == "1f1b":
        return min(microbatches, stages - stage)
    raise ValueError(f"unknown schedule {schedule!r}: gpipe or 1f1b")


# %% the regime map: where one regime hands over to the next


def crossover_bytes(link: Link, kind: str = "all_reduce", ranks: int = 2) -> float:
    """Bytes of the whole tensor at which a collective's bytes take as long as its fixed cost: α · β / factor.
    Below it a call costs mostly α, whatever its size."""
    return link.alpha * link.beta / bus_factor(kind, ranks)


def ddp_critical_tokens(
    roof: Roof, link: Link, ranks: int = 2, grad_bytes: int = 4, n_params: int = 0, buckets: int = 0
) -> float:
    """Tokens per GPU above which DDP's backward pass outlasts its all-reduces: the backward pass does 4 FLOPs per
    parameter and token (two thirds of 6N) at P, the ``buckets`` all-reduces of ``n_params`` gradients cost
    ``k · α + 2(n−1)/n · grad_bytes · N / β``, so ``T = (n−1)/n · grad_bytes / 2 · P / β + k · α · P / (4N)``. Below
    it the all-reduces cannot hide; above it all but the last bucket can (the last is ready only when the backward
    pass ends). Without ``n_params`` and ``buckets``, the bandwidth term alone (α left out)."""
    latency = buckets * link.alpha * roof.flops / (4 * n_params) if n_params and buckets else 0.0
    return (ranks - 1) / ranks * grad_bytes / 2 * roof.flops / link.beta + latency


# %% the speed of light


def ideal_step_time(flops: float, comm_s: float, optimizer_params: int, roof: Roof) -> float:
    """The fastest a rank's step could be: its share of the necessary FLOPs at the compute roof, its bytes at their
    collectives' bus bandwidths (``comm_s``, no α), the two perfectly overlapped; then its share of Adam at the
    memory roof, no floor. Recomputation, latency, overhead, idle time and imperfect kernels all make a real step
    slower."""
    return max(flops / roof.flops, comm_s) + adam_time(optimizer_params, roof)
