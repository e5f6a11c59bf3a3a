"""Collectives from primitives: a ring all-reduce, the source's ``sparse_allreduce``, a correct one.

Used in notebook 07 (and by the ``collectives_bench`` workload and ``tests/test_collectives.py``).

* :func:`ring_all_reduce` does by hand what NCCL does for you: a reduce-scatter then an
  all-gather around a ring of ranks, ``2 (W-1)`` point-to-point exchanges of ``1/W`` of the
  tensor each, written with ``batch_isend_irecv``.
* :func:`source_sparse_allreduce` is the source tutorial's function exactly as published, only
  the punctuation that its text extraction lost put back (claim C22). It is wrong: see
  :func:`source_indexing_shapes` and the notebook.
* :func:`sparse_allreduce` is a correct sparse all-reduce: exchange the counts, all-gather the
  indices and values padded to the largest count, scatter-add into a dense tensor, divide by the
  world size. Bit-exact against ``all_reduce`` then ``/ W`` for two ranks (a sum of two numbers
  does not depend on the order); for more ranks equal up to floating-point reassociation.

Every function takes an optional :class:`ByteCounter` that records what this rank sends.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

all_gather_flat = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
"""Every rank's input concatenated into one output tensor: ``dist.all_gather_single`` where this
torch has it (newer versions deprecate the old name), else ``dist.all_gather_into_tensor``."""

# --------------------------------------------------------------------------------------------
# Byte accounting


def ring_allreduce_bytes(nbytes: float, world_size: int) -> float:
    """Bytes one rank sends in a ring all-reduce of ``nbytes``: ``2 (W-1) / W × nbytes``."""
    return 2 * (world_size - 1) / world_size * nbytes if world_size > 1 else 0.0


def ring_allgather_bytes(nbytes_per_rank: float, world_size: int) -> float:
    """Bytes one rank sends in a ring all-gather of ``nbytes_per_rank`` from each rank: ``(W-1) ×``."""
    return (world_size - 1) * nbytes_per_rank if world_size > 1 else 0.0


@dataclasses.dataclass
class ByteCounter:
    """What this rank hands to collectives (``payload``) and sends on the wire (``sent``).

    ``sent`` is exact for the point-to-point code here and uses the ring formulas for
    collectives (``all_reduce``: ``2 (W-1)/W × payload``; ``all_gather``: ``(W-1) × payload``),
    which is what NCCL's ring moves for large messages. Used in notebook 07.
    """

    world_size: int
    payload: float = 0.0
    sent: float = 0.0
    calls: int = 0
    by_op: dict[str, float] = dataclasses.field(default_factory=dict)

    def _add(self, op: str, payload: float, sent: float) -> None:
        self.payload += payload
        self.sent += sent
        self.calls += 1
        self.by_op[op] = self.by_op.get(op, 0.0) + sent

    def all_reduce(self, nbytes: float) -> None:
        self._add("all_reduce", nbytes, ring_allreduce_bytes(nbytes, self.world_size))

    def all_gather(self, nbytes_per_rank: float) -> None:
        self._add("all_gather", nbytes_per_rank, ring_allgather_bytes(nbytes_per_rank, self.world_size))

    def send(self, nbytes: float) -> None:
        self._add("send", nbytes, nbytes)

    def reset(self) -> None:
        self.payload = self.sent = 0.0
        self.calls = 0
        self.by_op.clear()

    def as_dict(self) -> dict[str, Any]:
        return {"payload_bytes": self.payload, "sent_bytes": self.sent, "calls": self.calls, **{
            f"sent_{k}_bytes": v for k, v in self.by_op.items()}}


def nbytes(t: Tensor) -> int:
    return t.numel() * t.element_size()


# --------------------------------------------------------------------------------------------
# A ring all-reduce from send/recv


def _peer(group: Any, group_rank: int) -> int:
    """Global rank of ``group_rank`` in ``group`` (P2POp wants global ranks)."""
    return group_rank if group is None else dist.get_global_rank(group, group_rank)


def _exchange(send: Tensor, recv: Tensor, right: int, left: int, group: Any, counter: ByteCounter | None) -> None:
    """Send ``send`` to ``right`` while receiving ``recv`` from ``left``; empty tensors are skipped
    (every rank knows every chunk's size, so both ends skip the same message)."""
    ops = []
    if send.numel():
        ops.append(dist.P2POp(dist.isend, send, right, group))
        if counter is not None:
            counter.send(nbytes(send))
    if recv.numel():
        ops.append(dist.P2POp(dist.irecv, recv, left, group))
    if ops:
        for req in dist.batch_isend_irecv(ops):
            req.wait()


def ring_all_reduce(tensor: Tensor, group: Any = None, counter: ByteCounter | None = None) -> Tensor:
    """Sum ``tensor`` over the ranks of ``group``, in place, with a ring of point-to-point messages.

    The tensor is cut into ``W`` chunks. Reduce-scatter: in step ``s`` rank ``r`` sends chunk
    ``r - s`` to its right neighbour and adds the chunk ``r - s - 1`` it receives from its left
    one; after ``W - 1`` steps it holds the full sum of chunk ``r + 1``. All-gather: ``W - 1``
    more steps pass the finished chunks around. Each rank sends ``2 (W-1)/W`` of the tensor,
    whatever ``W`` is: why the ring is bandwidth-optimal. Returns ``tensor``.
    """
    world = dist.get_world_size(group)
    if world == 1:
        return tensor
    if not tensor.is_contiguous():
        raise ValueError("ring_all_reduce needs a contiguous tensor (call .contiguous() first)")
    rank = dist.get_rank(group)
    right, left = _peer(group, (rank + 1) % world), _peer(group, (rank - 1) % world)
    chunks = list(tensor.view(-1).tensor_split(world))
    scratch = torch.empty(max(c.numel() for c in chunks), dtype=tensor.dtype, device=tensor.device)
    for s in range(world - 1):  # reduce-scatter
        send_i, recv_i = (rank - s) % world, (rank - s - 1) % world
        incoming = scratch[: chunks[recv_i].numel()]
        _exchange(chunks[send_i], incoming, right, left, group, counter)
        chunks[recv_i].add_(incoming)
    for s in range(world - 1):  # all-gather: receive straight into place
        send_i, recv_i = (rank + 1 - s) % world, (rank - s) % world
        _exchange(chunks[send_i], chunks[recv_i], right, left, group, counter)
    return tensor


def ring_bytes_exact(numel: int, element_size: int, world_size: int, rank: int) -> int:
    """Bytes rank ``rank`` sends in :func:`ring_all_reduce` of ``numel`` elements (uneven chunks included)."""
    if world_size == 1:
        return 0
    sizes = [len(c) for c in torch.arange(numel).tensor_split(world_size)]
    sent = sum(sizes[(rank - s) % world_size] for s in range(world_size - 1))
    sent += sum(sizes[(rank + 1 - s) % world_size] for s in range(world_size - 1))
    return sent * element_size


# --------------------------------------------------------------------------------------------
# The source tutorial's sparse_allreduce, as published (punctuation restored, nothing else)

world_size = 2
"""The source's function reads a global ``world_size`` that its text never defines;
:func:`run_source_sparse_allreduce` sets it from the process group before calling it."""


# 自定义allreduce
def source_sparse_allreduce(tensor):
    # 只同步非零梯度
    indices = tensor.nonzero()
    values = tensor[indices]
    # 收集所有rank的稀疏梯度
    gathered = [torch.zeros_like(values) for _ in range(world_size)]
    torch.distributed.all_gather(gathered, values)
    # 计算均值
    stacked = torch.stack(gathered)
    mean = stacked.mean(dim=0)
    # 写回原tensor
    tensor.zero_()
    tensor[indices] = mean


def run_source_sparse_allreduce(tensor: Tensor) -> Tensor:
    """Call :func:`source_sparse_allreduce` on ``tensor`` (in place) with ``world_size`` bound.

    It uses the default process group, as written. Where the ranks' non-zero counts differ its
    ``all_gather`` gets tensors of different sizes: gloo then aborts the process and NCCL may hang
    or corrupt memory, so run it under ``TORCH_DISTRIBUTED_DEBUG=DETAIL``, which checks every
    collective's shapes across ranks first and raises a ``RuntimeError`` instead.
    """
    global world_size
    world_size = dist.get_world_size()
    source_sparse_allreduce(tensor)
    return tensor


def source_indexing_shapes(shape: tuple[int, ...], nnz: int = 3) -> dict[str, Any]:
    """What the source's first two lines produce for a tensor of ``shape`` (no communication).

    ``tensor.nonzero()`` returns an ``[nnz, ndim]`` matrix of coordinates, not flat positions, and
    ``tensor[indices]`` then indexes dimension 0 only with every coordinate: for a 1-D tensor that
    gives ``[nnz, 1]`` (the right values, in an odd shape); for a 2-D tensor it picks whole rows,
    by row *and* column numbers, and fails as soon as a column number exceeds the row count.
    """
    t = torch.zeros(shape)
    flat = t.view(-1)
    positions = torch.linspace(0, flat.numel() - 1, steps=min(nnz, flat.numel())).long()
    flat[positions] = 1.0
    indices = t.nonzero()
    out: dict[str, Any] = {"shape": tuple(shape), "nonzero_entries": int(positions.numel()),
                           "indices_shape": tuple(indices.shape)}
    try:
        values = t[indices]
        out["values_shape"] = tuple(values.shape)
        out["values_numel"] = values.numel()
        out["error"] = None
    except IndexError as exc:
        out["values_shape"] = None
        out["values_numel"] = None
        out["error"] = f"IndexError: {exc}"
    return out


# --------------------------------------------------------------------------------------------
# A correct sparse all-reduce


def _index_dtype(numel: int) -> torch.dtype:
    return torch.int32 if numel < 2**31 else torch.int64


def sparse_payload_bytes(max_count: int, index_bytes: int, value_bytes: int) -> int:
    """Bytes each rank contributes to :func:`sparse_allreduce`'s all-gathers: the count (8 bytes)
    plus ``max_count`` padded indices and values."""
    return 8 + max_count * (index_bytes + value_bytes)


def sparse_allreduce(tensor: Tensor, group: Any = None, counter: ByteCounter | None = None) -> Tensor:
    """Average ``tensor`` over the ranks (in place), sending only its non-zero entries.

    1. every rank finds its non-zero flat positions and all-gathers its count;
    2. indices and values are padded to the largest count (``all_gather`` needs equal sizes on
       every rank) and all-gathered into one flat tensor each;
    3. each rank scatter-adds every rank's valid entries into a dense zero tensor, rank by rank
       (indices are unique within a rank, so each ``index_add_`` is deterministic), then divides
       by ``W``.

    Sends ``8 + max_count × (4 + element size)`` bytes per rank per all-gather round: it pays
    only below about 50 % density for fp32 with int32 indices. Returns ``tensor``.
    """
    world = dist.get_world_size(group)
    flat = tensor.reshape(-1)
    positions = torch.nonzero(flat, as_tuple=True)[0]
    count = torch.tensor([positions.numel()], dtype=torch.int64, device=tensor.device)
    counts = torch.empty(world, dtype=torch.int64, device=tensor.device)
    all_gather_flat(counts, count, group=group)
    if counter is not None:
        counter.all_gather(8)
    sizes = counts.tolist()  # the host needs the sizes to allocate: one device-to-host sync
    largest = max(sizes)
    dense = torch.zeros_like(flat)
    if largest:
        idx_dtype = _index_dtype(flat.numel())
        idx = torch.zeros(largest, dtype=idx_dtype, device=tensor.device)
        val = torch.zeros(largest, dtype=tensor.dtype, device=tensor.device)
        idx[: positions.numel()] = positions.to(idx_dtype)
        val[: positions.numel()] = flat[positions]
        all_idx = torch.empty(world * largest, dtype=idx_dtype, device=tensor.device)
        all_val = torch.empty(world * largest, dtype=tensor.dtype, device=tensor.device)
        all_gather_flat(all_idx, idx, group=group)
        all_gather_flat(all_val, val, group=group)
        if counter is not None:
            counter.all_gather(nbytes(idx))
            counter.all_gather(nbytes(val))
        for r, n in enumerate(sizes):
            lo = r * largest
            dense.index_add_(0, all_idx[lo: lo + n].long(), all_val[lo: lo + n])
    dense.div_(world)
    tensor.copy_(dense.view_as(tensor))
    return tensor


def dense_allreduce_mean(tensor: Tensor, group: Any = None, counter: ByteCounter | None = None) -> Tensor:
    """The reference: ``all_reduce(SUM)`` then ``/ W``, in place."""
    dist.all_reduce(tensor, group=group)
    if counter is not None:
        counter.all_reduce(nbytes(tensor))
    tensor.div_(dist.get_world_size(group))
    return tensor


def random_sparse(shape: tuple[int, ...], density: float, seed: int, device: Any = "cpu",
                  dtype: torch.dtype = torch.float32) -> Tensor:
    """A tensor of ``shape`` with about ``density`` of its entries non-zero (normal values),
    the pattern drawn from ``seed``: give each rank its own seed and density."""
    g = torch.Generator().manual_seed(seed)
    numel = 1
    for s in shape:
        numel *= s
    keep = torch.rand(numel, generator=g) < density
    values = torch.randn(numel, generator=g)
    values[values == 0] = 1.0  # a drawn zero would make the pattern smaller than asked
    return (values * keep).view(shape).to(device=device, dtype=dtype)


def sparse_with_count(numel: int, count: int, pattern_seed: int, value_seed: int, device: Any = "cpu",
                      dtype: torch.dtype = torch.float32) -> Tensor:
    """A 1-D tensor with exactly ``count`` non-zero entries: positions drawn from ``pattern_seed``,
    values from ``value_seed`` (same pattern seed on every rank = same non-zero positions)."""
    positions = torch.randperm(numel, generator=torch.Generator().manual_seed(pattern_seed))[:count]
    values = torch.randn(count, generator=torch.Generator().manual_seed(value_seed))
    values[values == 0] = 1.0
    out = torch.zeros(numel)
    out[positions] = values
    return out.to(device=device, dtype=dtype)


def position_checksum(t: Tensor) -> float:
    """A number that changes when values move between positions: compares results across ranks."""
    flat = t.detach().reshape(-1).double()
    return float((flat * torch.arange(1, flat.numel() + 1, dtype=torch.float64, device=flat.device)).sum())


def compare_with_allreduce(x: Tensor, implementation: str = "course", group: Any = None) -> dict[str, Any]:
    """Run one sparse all-reduce on this rank's input ``x`` and compare with
    :func:`dense_allreduce_mean`. Returns this rank's findings.

    ``implementation``: ``"course"`` (:func:`sparse_allreduce` on ``group``) or ``"source"`` (the
    source's, via :func:`run_source_sparse_allreduce`, always on the default group; its
    exceptions are caught and reported). The reference runs first, so a failing ``"source"``
    call cannot leave a peer waiting in it.
    """
    if implementation not in ("course", "source"):
        raise ValueError(f"implementation={implementation!r}: use course or source")
    reference = dense_allreduce_mean(x.clone(), group=None if implementation == "source" else group)
    out: dict[str, Any] = {"implementation": implementation, "numel": x.numel(), "nonzero": int((x != 0).sum())}
    y = x.clone()
    try:
        if implementation == "source":
            run_source_sparse_allreduce(y)
        else:
            sparse_allreduce(y, group=group)
    except Exception as exc:  # the source's failures are part of the lesson
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        out.update(ran=False, exact=False, error=f"{type(exc).__name__}: {first[:300]}",
                   max_abs_error=None, checksum=None)
        return out
    out.update(ran=True, error=None, exact=bool(torch.equal(y, reference)),
               max_abs_error=float((y - reference).abs().max()) if y.numel() else 0.0,
               checksum=position_checksum(y))
    return out
