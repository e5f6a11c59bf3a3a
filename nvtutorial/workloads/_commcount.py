"""Count what code hands to ``torch.distributed``, without touching the code: its functions are wrapped while it runs.

Used by notebook 07's workloads and by the ring exercise's checker::

    with counting(world_size) as c:
        ring_all_reduce(x)
    c.sent, c.largest_message, c.unwaited

Point-to-point (``send``, ``isend``, ``batch_isend_irecv``...): ``sent`` is exactly the bytes this
rank passed to a send. Collectives (``all_reduce``, the all-gathers): ``payload`` is what this
rank handed to them, and ``sent`` adds what a ring sends for it (all-reduce ``2 (W-1)/W ×``,
all-gather ``(W-1) ×`` the rank's share), which is what NCCL's ring moves for large messages.
Requests that the code got back and never waited on are in ``unwaited`` (and are waited on
when the block ends, so that nothing is left in flight). DDP's own all-reduce runs in C++ and
is not seen: count it yourself.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any

P2P = ("send", "isend", "recv", "irecv")
COLLECTIVES = ("all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_single")


def nbytes(t: Any) -> int:
    return t.numel() * t.element_size()


def ring_sent(op: str, payload: float, world: int) -> float:
    """Bytes one rank sends when a ring runs collective ``op`` on ``payload`` bytes from each rank."""
    if world <= 1:
        return 0.0
    return 2 * (world - 1) / world * payload if op == "all_reduce" else (world - 1) * payload


@dataclasses.dataclass
class Count:
    world_size: int
    sent: float = 0.0
    payload: float = 0.0
    calls: int = 0
    largest_message: int = 0
    by_op: dict[str, float] = dataclasses.field(default_factory=dict)
    unwaited: int = 0
    _open: list[Any] = dataclasses.field(default_factory=list)

    def add(self, op: str, payload: int, sent: float) -> None:
        self.payload += payload
        self.sent += sent
        self.calls += 1
        self.by_op[op] = self.by_op.get(op, 0.0) + sent

    def as_dict(self) -> dict[str, Any]:
        return {
            "sent_bytes": self.sent,
            "payload_bytes": self.payload,
            "calls": self.calls,
            "largest_message_bytes": self.largest_message,
            **{f"sent_{op}_bytes": v for op, v in self.by_op.items()},
        }


class _Request:
    """A request handed back to the code, that notes whether it was waited on."""

    def __init__(self, work: Any, count: Count) -> None:
        self._work, self.waited = work, False
        count._open.append(self)

    def wait(self, *args: Any, **kwargs: Any) -> Any:
        self.waited = True
        return self._work.wait(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._work, name)


def _group_size(group: Any) -> int | None:
    import torch.distributed as dist

    return dist.get_world_size(group) if group is not None else None


@contextlib.contextmanager
def counting(world_size: int) -> Iterator[Count]:
    """Wrap ``torch.distributed``'s point-to-point functions and collectives while the block runs."""
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    count = Count(world_size)
    originals = {
        name: getattr(dist, name) for name in P2P + COLLECTIVES + ("batch_isend_irecv",) if hasattr(dist, name)
    }
    state = {"batch": False}

    def p2p(name: str, fn: Any) -> Any:
        def wrapper(tensor: Any, *args: Any, **kwargs: Any) -> Any:
            if name in ("send", "isend"):
                count.add("send", nbytes(tensor), nbytes(tensor))
                count.largest_message = max(count.largest_message, nbytes(tensor))
            work = fn(tensor, *args, **kwargs)
            return _Request(work, count) if name.startswith("i") and work is not None and not state["batch"] else work

        return wrapper

    def batch(ops: Any) -> Any:
        state["batch"] = True
        try:
            works = originals["batch_isend_irecv"](ops)
        finally:
            state["batch"] = False
        return [_Request(w, count) for w in works]

    def collective(name: str, fn: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            tensor = args[1] if name in ("all_gather", "all_gather_into_tensor", "all_gather_single") else args[0]
            world = _group_size(kwargs.get("group")) or world_size
            op = "all_reduce" if name == "all_reduce" else "all_gather"
            count.add(op, nbytes(tensor), ring_sent(op, nbytes(tensor), world))
            return fn(*args, **kwargs)

        return wrapper

    patched = {name: p2p(name, fn) for name, fn in originals.items() if name in P2P}
    patched.update({name: collective(name, fn) for name, fn in originals.items() if name in COLLECTIVES})
    patched["batch_isend_irecv"] = batch
    # P2POp accepts only c10d's own isend/irecv, so the wrappers take their place there too.
    c10d_names = [n for n in ("isend", "irecv") if getattr(c10d, n, None) is originals.get(n)]
    try:
        for name, fn in patched.items():
            setattr(dist, name, fn)
        for name in c10d_names:
            setattr(c10d, name, patched[name])
        yield count
    finally:
        for name, fn in originals.items():
            setattr(dist, name, fn)
        for name in c10d_names:
            setattr(c10d, name, originals[name])
        count.unwaited = sum(not r.waited for r in count._open)
    for r in count._open:  # after a normal exit, nothing stays in flight
        if not r.waited:
            r._work.wait()
