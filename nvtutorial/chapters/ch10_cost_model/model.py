"""The cost model of notebook 10: what a step should take on your pair, from four calibrated numbers.

Two numbers per device, the **roofs** of the roofline model: the matrix-multiply throughput (FLOP/s) and the
memory bandwidth (B/s). Two per collective on the pair: the latency **α** of one call (s) and the bus bandwidth
**β** (B/s), nccl-tests' ``busbw``, so that a collective of S bytes on n ranks takes ``α + S · factor / β`` with
the bus factor of notebook 01 (2(n−1)/n for an all-reduce, (n−1)/n for an all-gather or a reduce-scatter).
Everything else is counting: FLOPs, bytes, calls. Plain functions of plain numbers, in seconds, bytes and
FLOPs; no torch. What the model leaves out is said where it matters, and the notebook measures how far it is off.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from nvtutorial.units import bus_factor

# %% the four numbers


@dataclasses.dataclass(frozen=True)
class Roof:
    """One device: its matrix-multiply throughput in FLOP/s (in one dtype) and its memory bandwidth in B/s."""

    flops: float
    bandwidth: float

    @property
    def ridge(self) -> float:
        """FLOPs per byte at which compute takes as long as moving the bytes: below it, memory-bound."""
        return self.flops / self.bandwidth


@dataclasses.dataclass(frozen=True)
class Link:
    """One collective on one group of ranks: latency α in seconds, bus bandwidth β in B/s."""

    alpha: float
    beta: float


# %% a collective


def collective_time(size_bytes: float, link: Link, kind: str = "all_reduce", ranks: int = 2) -> float:
    """Seconds for one collective of ``size_bytes`` (the whole tensor: the gathered output of an all-gather, the
    input of a reduce-scatter): one latency, then the bytes each rank must send at the bus bandwidth."""
    return link.alpha + size_bytes * bus_factor(kind, ranks) / link.beta


# %% the roofline


def roofline_time(flops: float, bytes_moved: float, roof: Roof) -> float:
    """Seconds for a kernel that does ``flops`` and moves ``bytes_moved`` to and from memory: whichever roof
    it hits first (the other work hides under it)."""
    return max(flops / roof.flops, bytes_moved / roof.bandwidth)


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


def adam_time(n_params: int, roof: Roof) -> float:
    """Adam's update of ``n_params`` fp32 parameters: a few FLOPs per byte, so memory-bound."""
    return ADAM_BYTES * n_params / roof.bandwidth


def train_step_time(forward: float, n_params: int, roof: Roof) -> float:
    """One training step on one device: the backward pass does twice the forward's FLOPs (the gradients of the
    inputs and of the weights), all at the compute roof; then Adam at the memory roof. Left out: the elementwise
    work (norms, activations, the loss), at the memory roof too, small next to the matrix multiplies here."""
    return 3 * forward / roof.flops + adam_time(n_params, roof)


# %% data parallel: what hides under the backward pass


def ddp_backward(
    backward_s: float, grad_bytes: float, bucket_bytes: float, link: Link, ranks: int = 2
) -> tuple[float, float]:
    """``(seconds until the last gradient is averaged, the part of it that is exposed)`` for DDP's backward pass.

    The backward pass fills the gradient buckets one after another at a steady rate; each bucket's all-reduce
    starts when the bucket is full and the previous all-reduce has ended. What ends after the backward pass is
    exposed: at least the last bucket's all-reduce; all of the communication beyond the backward pass's length."""
    buckets = max(1, math.ceil(grad_bytes / bucket_bytes))
    done = 0.0
    for i in range(1, buckets + 1):
        ready = backward_s * i / buckets
        size = min(bucket_bytes, grad_bytes - (i - 1) * bucket_bytes)
        done = max(done, ready) + collective_time(size, link, "all_reduce", ranks)
    return max(backward_s, done), max(0.0, done - backward_s)


# %% FSDP2: one block


def fsdp_block(block_bytes: float, gather: Link, scatter: Link, ranks: int = 2) -> dict[str, float]:
    """One FSDP2 block's collectives in seconds: the all-gather of its parameters (once in the forward pass and,
    under ZeRO-3, again in the backward pass) and the reduce-scatter of its gradients. FSDP2 prefetches the next
    block's all-gather while this one computes: hidden while a block computes longer than it gathers."""
    return {
        "all_gather": collective_time(block_bytes, gather, "all_gather", ranks),
        "reduce_scatter": collective_time(block_bytes, scatter, "reduce_scatter", ranks),
    }


# %% tensor parallelism: every block waits


def tp_block(tokens: int, dim: int, link: Link, dtype_bytes: int = 4, ranks: int = 2) -> float:
    """Seconds of all-reduce per block and step under tensor parallelism: six all-reduces of a ``tokens × dim``
    activation (two in the forward pass, after the row-wise ``wo`` and ``w2``; four in the backward pass, one per
    column-wise layer's input gradient: notebook 08 recorded them). Each result is needed by the next operation:
    on the critical path, nothing hides them."""
    return 6 * collective_time(tokens * dim * dtype_bytes, link, "all_reduce", ranks)


# %% pipeline parallelism: the bubble


def bubble(stages: int, microbatches: int) -> float:
    """The idle share of a pipeline step with equal stages: each stage waits ``stages − 1`` micro-batch slots
    while the pipeline fills and drains, out of ``microbatches + stages − 1`` (GPipe and 1F1B alike)."""
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


# %% the speed of light


def ideal_step_time(flops: float, bytes_sent: float, optimizer_params: int, roof: Roof, beta: float) -> float:
    """The fastest a rank's step could be: its share of the necessary FLOPs at the compute roof, its bytes at the
    bus bandwidth, the two perfectly overlapped; then its share of Adam at the memory roof. Recomputation,
    latency, idle time and imperfect kernels all make a real step slower."""
    return max(flops / roof.flops, bytes_sent / beta) + adam_time(optimizer_params, roof)
