"""Notebook 08's arithmetic: the memory model of each rung, the bytes each rung must send, and the
largest model each rung fits. Pure arithmetic on the model's parameter shapes; no run needed.

**The memory model** (:func:`rank_memory`), per rank and per rung, in bytes, for fp32 training with Adam:

- *model state*, exact: parameters (4 B each), gradients (4 B each) and Adam's state (``exp_avg`` and
  ``exp_avg_sq``, 8 B per parameter, plus a 4-byte ``step`` per parameter tensor), of the part this rank
  holds: everything (DDP), the optimizer state of the whole tensors ZeRO-1 assigns to it (largest first,
  each to the rank with the fewest elements so far: ``ZeroRedundancyOptimizer``'s rule), the
  ``torch.chunk`` share of every tensor's first dimension (FSDP2), or half of each split matrix (tensor
  parallel: column-wise splits dimension 0, row-wise dimension 1; embeddings, norms and head whole);
- *activations*, what autograd saves in the forward pass (exact for this model on the CPU; the GPU's
  attention kernel saves a few bytes more): per block ``T·(8·d + 2·h_mlp + 4 + heads)`` floats for
  ``T`` tokens on the rank (the split ones divided by 2 under tensor parallelism), and for the embedding
  and the head ``T·(2·d + 2 + vocab)`` floats and the token ids; with activation checkpointing each block
  keeps only its input (``T·d``);
- *transient*, estimated: what exists for a moment on top. It counts the logits' gradients
  (``2·T·vocab`` floats); the parameters FSDP2 holds gathered during the backward pass (all of them
  without resharding; with it the root, which the root unit keeps gathered after forward, plus the
  current block and the one prefetched); one block's unsharded gradients and the one reduce-scatter
  input FSDP2 keeps (``reduce_scatter_max_input_buffers = 1``); and, with checkpointing, the activations
  of the block being recomputed. It leaves out: the previous block's all-gather output that FSDP2 keeps
  alive during the *forward* pass (one more block-sized buffer, in a world of more than one rank; the
  forward pass is rarely the peak), FSDP2's padding of a shard to ⌈dim0 / W⌉ rows (zero here: every
  first dimension is even), DDP's and fused Adam's own temporaries, and library workspaces (cuBLAS,
  NCCL).

The peak a GPU shows (``torch.cuda.max_memory_allocated``) is compared with model state + activations +
transient. That counter holds the allocated blocks, each as the allocator cut it (requests rounded up to
512 bytes, and a large block not split when less than 1 MiB of it would remain), not the allocator's
cached or free memory, so a gap is what the estimate leaves out (the list above) or gets wrong; the budget
margin of notebook 08 is about *reserved* memory, where rounding and fragmentation show. The model
state is compared with the counted bytes exactly. The peak has been compared with a GPU's only in a world
of one, at the lesson sizes (one H200, one H100): DDP's 0.5 % above the estimate, ZeRO-3 + checkpointing's
20 % below. There the forward pass added what the model says (activations and the root kept gathered). The
estimate holds all the gradients at the peak, but every rung except DDP and ZeRO-1 frees them before its
forward pass (:data:`GRADS_PERSIST`); for ZeRO-3 + checkpointing that is 2,152 of its 2,521 MB gap, and
the rest of the peak above what the forward pass started with and added is 2,047 MB against the
estimate's 2,416 (the transient less the root kept gathered). Which transient term is too high these
numbers do not say. The two-rank comparison has not run yet.

**Bytes sent per step and rank** (:func:`sent_per_step`), for ``W`` ranks under a ring algorithm:
an all-reduce of ``n`` bytes sends ``2(W−1)/W·n``, an all-gather or reduce-scatter of a tensor of ``n``
bytes ``(W−1)/W·n``, a broadcast ``n`` from the root (chained: every rank but the last forwards it).
DDP all-reduces every gradient (``2(W−1)/W·P`` for ``P`` bytes of parameters); ZeRO-1 adds a broadcast of
each updated tensor from its owner; FSDP2 all-gathers every parameter for the forward pass, every
block's again for the backward pass when it resharded (the root stays gathered), and reduce-scatters
every gradient: ``(W−1)/W·(P + P_blocks + P)`` against DDP's ``2(W−1)/W·P``; tensor parallelism
all-reduces a ``T·d`` activation 4 times per block, as Megatron-LM does (Shoeybi et al. 2019, Fig. 4): 2
in the forward pass, after ``wo`` and ``w2``, and 2 in the backward pass, one for the attention's input
gradient (its ``PrepareModuleInput`` lets ``wq``, ``wk`` and ``wv`` add their parts first) and one for
the MLP's (``w1``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from nvtutorial.chapters.ch08_ladder import schema

RUNGS = ("ddp", "zero1", "fsdp_zero2", "fsdp_zero3", "fsdp_checkpointing", "fsdp_offload", "tensor_parallel")
"""The ladder, bottom to top (``nvtutorial/chapters/ch08_ladder/lessons/rungs.py``; a test keeps the two in step)."""
FSDP = ("fsdp_zero2", "fsdp_zero3", "fsdp_checkpointing", "fsdp_offload")
TP_SPLIT = {"attn.wq": 0, "attn.wk": 0, "attn.wv": 0, "attn.wo": 1, "mlp.w1": 0, "mlp.w2": 1}
"""The dimension of each block matrix that tensor parallelism splits (``nn.Linear`` weights are out × in)."""
TP_ALL_REDUCES_PER_BLOCK = 4
"""Tensor parallelism's all-reduces of a ``tokens × dim`` activation per block and step: 2 forward, 2 backward."""
FLOAT, INDEX, STEP = 4, 8, 4
"""Bytes of an fp32 value, of a token id (int64), of Adam's ``step`` counter (one per parameter tensor)."""

Shapes = Sequence[tuple[str, tuple[int, ...]]]


@dataclasses.dataclass(frozen=True)
class Setup:
    """What the memory model needs: the model's sizes (``models.transformer.Config`` fields), the global
    batch and the number of ranks."""

    vocab: int
    seq_len: int
    dim: int
    heads: int
    layers: int
    mlp_ratio: int
    global_batch: int
    world: int = 2

    @classmethod
    def from_result(cls, rank: schema.Rank) -> Setup:
        """The setup a run of the ladder trained (one rank's typed result)."""
        return cls(**dataclasses.asdict(rank.config), global_batch=rank.global_batch, world=rank.world_size)

    def config(self) -> schema.ModelConfig:
        """The model's sizes (``models.transformer.Config``)."""
        return schema.ModelConfig(**schema.sizes(self))

    def shapes(self) -> list[tuple[str, tuple[int, ...]]]:
        from nvtutorial.models import transformer

        return transformer.parameter_shapes(self.config())

    def tokens(self, rung: str) -> int:
        """Tokens one rank trains on per step: its share of the batch, or all of it (tensor parallel)."""
        batch = self.global_batch if rung == "tensor_parallel" else self.global_batch // self.world
        return batch * self.seq_len


def _numel(shape: Sequence[int]) -> int:
    return math.prod(shape)


def chunk_rows(rows: int, world: int, rank: int) -> int:
    """Rows of a dimension of ``rows`` that ``torch.chunk`` gives ``rank`` (FSDP2's and DTensor's split)."""
    size = -(-rows // world)
    return max(0, min(size, rows - rank * size))


def local_numel(shape: Sequence[int], dim: int | None, world: int, rank: int) -> int:
    """Elements of ``rank``'s shard of a tensor split along ``dim`` (``None``: not split)."""
    if dim is None or not shape:
        return _numel(shape)
    return chunk_rows(shape[dim], world, rank) * _numel(shape) // shape[dim]


def tp_dim(name: str) -> int | None:
    """The dimension tensor parallelism splits for parameter ``name`` (None: kept whole)."""
    parts = name.split(".")
    key = ".".join(parts[2:4]) if parts[0] == "blocks" and len(parts) >= 5 else ""
    return TP_SPLIT.get(key)


def zero1_owners(shapes: Shapes, world: int) -> list[int]:
    """The rank ``ZeroRedundancyOptimizer`` gives each parameter (in ``shapes`` order)."""
    sizes = [0] * world
    owners = [0] * len(shapes)
    for i in sorted(range(len(shapes)), key=lambda i: _numel(shapes[i][1]), reverse=True):  # stable, like sorted()
        rank = sizes.index(min(sizes))
        owners[i] = rank
        sizes[rank] += _numel(shapes[i][1])
    return owners


def model_state(rung: str, shapes: Shapes, world: int, rank: int) -> dict[str, int]:
    """Bytes of parameters, gradients and optimizer state ``rank`` holds (exact)."""
    if rung not in RUNGS:
        raise ValueError(f"unknown rung {rung!r}; the rungs are {', '.join(RUNGS)}")
    if rung in ("ddp", "zero1"):
        local = [_numel(s) for _, s in shapes]
    elif rung in FSDP:
        local = [local_numel(s, 0, world, rank) for _, s in shapes]
    else:
        local = [local_numel(s, tp_dim(n), world, rank) for n, s in shapes]
    params = FLOAT * sum(local)
    if rung == "zero1":
        owned = [n for n, owner in zip(local, zero1_owners(shapes, world)) if owner == rank]
        optimizer = 2 * FLOAT * sum(owned) + STEP * len(owned)
    else:
        optimizer = 2 * FLOAT * sum(local) + STEP * len(local)
    return {"params": params, "grads": params, "optimizer": optimizer}


def block_activations(s: Setup, rung: str) -> int:
    """Bytes one block saves for its backward pass on one rank (no checkpointing)."""
    t, d, hidden = s.tokens(rung), s.dim, s.mlp_ratio * s.dim
    k = s.world if rung == "tensor_parallel" else 1  # q, k, v, attention output and MLP hidden are split
    return FLOAT * t * (4 * d + 4 * d // k + 2 * hidden // k + 4 + s.heads // k)


def activations(s: Setup, rung: str) -> int:
    """Bytes autograd holds for the backward pass at the end of the forward pass on one rank."""
    t = s.tokens(rung)
    top = FLOAT * t * (2 * s.dim + 2 + s.vocab) + INDEX * t + FLOAT  # final norm, head, loss (targets, weight)
    ids = INDEX * (s.global_batch * (s.seq_len + 1) + s.seq_len)  # the batch's token ids, the positions
    per_block = FLOAT * t * s.dim if rung in ("fsdp_checkpointing", "fsdp_offload") else block_activations(s, rung)
    return s.layers * per_block + top + ids


def _group_bytes(shapes: Shapes) -> tuple[int, int]:
    """(bytes of the root's parameters, bytes of the largest block's)."""
    root = sum(FLOAT * _numel(sh) for n, sh in shapes if not n.startswith("blocks."))
    blocks: dict[str, int] = {}
    for n, sh in shapes:
        if n.startswith("blocks."):
            key = n.split(".")[1]
            blocks[key] = blocks.get(key, 0) + FLOAT * _numel(sh)
    return root, max(blocks.values(), default=0)


def kept_gathered(rung: str, shapes: Shapes) -> int:
    """Bytes of parameters FSDP2 keeps gathered from the forward to the backward pass: all of them (no
    resharding), the root's (resharding), none (not FSDP2). Part of :func:`transient`; the measured
    ``forward_added`` includes them (in a world of one too: one H200 and one H100 measured the root's 541 MB)."""
    if rung not in FSDP:
        return 0
    return sum(FLOAT * _numel(sh) for _, sh in shapes) if rung == "fsdp_zero2" else _group_bytes(shapes)[0]


GRADS_PERSIST = ("ddp", "zero1")
"""The rungs whose gradients outlive the step's ``zero_grad(set_to_none=True)``: views of DDP's buckets
(``gradient_as_bucket_view=True``), which persist. Every other rung's step frees them before its forward pass."""


def transient(s: Setup, rung: str, shapes: Shapes) -> int:
    """An estimate of the largest temporary memory on top of model state and activations (see the module)."""
    t = s.tokens(rung)
    logits_grads = 2 * FLOAT * t * s.vocab
    if rung not in FSDP:
        return logits_grads
    block = _group_bytes(shapes)[1]
    gathered = kept_gathered(rung, shapes) + (0 if rung == "fsdp_zero2" else 2 * block)  # and the two blocks
    extra = 2 * block  # a block's gradients, unsharded, and the reduce-scatter's input
    if rung in ("fsdp_checkpointing", "fsdp_offload"):
        extra += block_activations(s, rung)  # the block being recomputed
    return logits_grads + gathered + extra


@dataclasses.dataclass(frozen=True)
class RankMemory:
    """The memory model of one rung on one rank, in bytes."""

    rung: str
    rank: int
    params: int
    grads: int
    optimizer: int
    activations: int
    transient: int
    on_host: bool

    @property
    def model_state(self) -> int:
        return self.params + self.grads + self.optimizer

    @property
    def device_peak(self) -> int:
        """The predicted peak on the device: model state (unless offloaded to the host) + activations + transient."""
        return (0 if self.on_host else self.model_state) + self.activations + self.transient


def rank_memory(s: Setup, rung: str, rank: int, shapes: Shapes | None = None) -> RankMemory:
    shapes = shapes if shapes is not None else s.shapes()
    state = model_state(rung, shapes, s.world, rank)
    return RankMemory(
        rung,
        rank,
        **state,
        activations=activations(s, rung),
        transient=transient(s, rung, shapes),
        on_host=rung == "fsdp_offload",
    )


def freed_grads(m: RankMemory) -> int:
    """Bytes of gradients the estimate holds on the device at the peak but the step frees before its forward
    pass (``zero_grad(set_to_none=True)``): all of them, except under :data:`GRADS_PERSIST` and offload."""
    return 0 if m.on_host or m.rung in GRADS_PERSIST else m.grads


def _padded(shape: Sequence[int], world: int) -> int:
    """Elements FSDP2 moves for a tensor: its first dimension padded to a multiple of ``world``."""
    if not shape:
        return 1
    return world * chunk_rows(shape[0], world, 0) * _numel(shape) // shape[0]


def sent_per_step(s: Setup, rung: str, rank: int, shapes: Shapes | None = None) -> dict[str, float]:
    """Bytes ``rank`` sends in one training step, per kind of collective (see the module docstring)."""
    shapes = shapes if shapes is not None else s.shapes()
    w = s.world
    ring = (w - 1) / w
    total = FLOAT * sum(_numel(sh) for _, sh in shapes)
    if rung == "ddp":
        return {"all_reduce": 2 * ring * total}
    if rung == "zero1":
        owners = zero1_owners(shapes, w)
        sent = sum(FLOAT * _numel(sh) for (_, sh), owner in zip(shapes, owners) if rank != (owner - 1) % w)
        return {"all_reduce": 2 * ring * total, "broadcast": float(sent)}
    if rung in FSDP:
        padded = FLOAT * sum(_padded(sh, w) for _, sh in shapes)
        blocks = FLOAT * sum(_padded(sh, w) for n, sh in shapes if n.startswith("blocks."))
        gathered = padded if rung == "fsdp_zero2" else padded + blocks
        return {"all_gather": ring * gathered, "reduce_scatter": ring * padded}
    if rung == "tensor_parallel":
        return {"all_reduce": 2 * ring * TP_ALL_REDUCES_PER_BLOCK * s.layers * FLOAT * s.tokens(rung) * s.dim}
    raise ValueError(f"unknown rung {rung!r}; the rungs are {', '.join(RUNGS)}")


def with_layers(shapes_one: Shapes, layers: int) -> list[tuple[str, tuple[int, ...]]]:
    """The parameter shapes of the model with ``layers`` blocks, from those of the one-block model."""
    head = [(n, sh) for n, sh in shapes_one if not n.startswith("blocks.") and n.split(".")[0] in ("tok", "pos")]
    block = [(n.split(".", 2)[2], sh) for n, sh in shapes_one if n.startswith("blocks.0.")]
    tail = [(n, sh) for n, sh in shapes_one if not n.startswith("blocks.") and (n, sh) not in head]
    return head + [(f"blocks.{i}.{n}", sh) for i in range(layers) for n, sh in block] + tail


LAYER_LIMIT = 4096
"""The search for the largest model stops here (a result of this many blocks means "at least")."""


def largest(s: Setup, rung: str, device_budget: float, host_budget: float, limit: int = LAYER_LIMIT) -> int:
    """The most blocks with which ``rung`` fits ``device_budget`` bytes on every rank (and its model
    state ``host_budget`` bytes of host memory, when offloaded); 0 when not even one block fits."""
    one = dataclasses.replace(s, layers=1).shapes()

    def fits(layers: int) -> bool:
        t = dataclasses.replace(s, layers=layers)
        shapes = with_layers(one, layers)
        for rank in range(s.world):
            m = rank_memory(t, rung, rank, shapes)
            if m.device_peak > device_budget or (m.on_host and m.model_state > host_budget):
                return False
        return True

    lo, hi = 0, 1
    while hi <= limit and fits(hi):
        lo, hi = hi, hi * 2
    hi = min(hi, limit + 1)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo
