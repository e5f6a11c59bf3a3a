"""Exercise (notebook 07): write a ring all-reduce from point-to-point messages.

The checker runs your ``ring_all_reduce(tensor)`` on every rank, on random fp32 tensors of several
sizes (some not divisible by the number of ranks, one smaller than it), compares the result with
``dist.all_reduce`` and says what went wrong: the sums (chunk by chunk, so that a missing phase or
a chunk in the wrong place is named), the requests you never waited on, and the bytes you sent
(counted by wrapping ``torch.distributed`` while your function runs).
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

NAME = "ring_allreduce"
"""The exercise's name (``teach.check.check("ring_allreduce", ...)``)."""

NOTEBOOK = "07_custom_collectives"
TASK = (
    "Write ring_all_reduce(tensor): sum it over the ranks in place with a reduce-scatter then an all-gather, "
    "sending only to the right neighbour"
)
KIND = "function"
ENTRY = "ring_all_reduce"
SIZES = (4096, 1001, 3, 1, 65537)
"""Elements of the inputs, in the order they are tried; the first failing size is reported. The first is rounded up
to a multiple of the number of ranks (:func:`sizes`)."""


def sizes(world: int) -> tuple[int, ...]:
    """:data:`SIZES` for ``world`` ranks: the first one divisible by ``world``, so that equal chunks come first. A
    wrong chunk index then gives a wrong answer the checker can explain; with unequal chunks its send and its
    receive disagree in size, and gloo ends the process (before any reason can be given)."""
    return (SIZES[0] + (-SIZES[0]) % world, *SIZES[1:])


def _function_source(path: Path, name: str) -> str:
    """The source of function ``name`` in ``path``, read without importing it (the notebook kernel never
    imports torch for a checker)."""
    text = path.read_text()
    node = next(n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == name)
    return ast.get_source_segment(text, node) or ""


SOLUTION = _function_source(Path(__file__).resolve().parent / "lessons" / "collectives.py", ENTRY)
"""The course's ring (``nvtutorial/chapters/ch07_collectives/lessons/collectives.py``), as source."""

_HEAD = """\
def ring_all_reduce(tensor, group=None):
    world, rank = dist.get_world_size(), dist.get_rank()
    right, left = (rank + 1) % world, (rank - 1) % world
    chunks = tensor.view(-1).tensor_split(world)
    inbox = torch.empty_like(chunks[0])

    def exchange(send, recv):
        ops = [dist.P2POp(dist.isend, send, right), dist.P2POp(dist.irecv, recv, left)]
        for request in dist.batch_isend_irecv(ops):
            request.wait()

"""
_REDUCE_SCATTER = """\
    for s in range(world - 1):
        target = chunks[(rank - s - 1) % world]
        exchange(chunks[(rank - s) % world], inbox[: target.numel()])
        target.add_(inbox[: target.numel()])
"""
WRONG = {
    "reduce_scatter_only": (_HEAD + _REDUCE_SCATTER, "only one chunk summed"),
    "off_by_one_chunk": (
        _HEAD
        + _REDUCE_SCATTER
        + """\
    for s in range(world - 1):
        send = chunks[(rank + 1 - s) % world]
        exchange(send, inbox[: send.numel()])
        chunks[(rank + 1 - s) % world].copy_(inbox[: send.numel()])  # should be chunk (rank - s)
""",
        "wrong place",
    ),
    "no_wait": (
        _HEAD.replace("            request.wait()\n", "            pass\n")
        + _REDUCE_SCATTER
        + """\
    for s in range(world - 1):
        exchange(chunks[(rank + 1 - s) % world], chunks[(rank - s) % world])
""",
        "never waited",
    ),
    "whole_tensor_swap": (
        """\
def ring_all_reduce(tensor, group=None):
    rank, world = dist.get_rank(), dist.get_world_size()
    for step in range(1, world):
        inbox = torch.empty_like(tensor)
        ops = [dist.P2POp(dist.isend, tensor.clone(), (rank + step) % world),
               dist.P2POp(dist.irecv, inbox, (rank - step) % world)]
        for request in dist.batch_isend_irecv(ops):
            request.wait()
        tensor.add_(inbox)
""",
        "whole tensor",
    ),
}
"""Known wrong answers: (source, words the checker's reason must contain). ``whole_tensor_swap`` is
right for two ranks but not a ring: it sends the whole tensor to every other rank."""


def _device() -> Any:
    import torch
    import torch.distributed as dist

    return torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")


def diagnose(x: Any, mine: Any, reference: Any, world: int, rank: int) -> str:
    """What is wrong with this rank's result, chunk by chunk (chunks as ``tensor_split`` cuts them)."""
    import torch

    ref = reference.tensor_split(world)
    got, own = mine.tensor_split(world), x.tensor_split(world)
    summed = [c for c in range(world) if torch.allclose(got[c], ref[c])]
    unchanged = [c for c in range(world) if torch.equal(got[c], own[c]) and not torch.equal(own[c], ref[c])]
    moved = [
        (c, d)
        for c in range(world)
        for d in range(world)
        if c != d and c not in summed and got[c].shape == ref[d].shape and torch.allclose(got[c], ref[d])
    ]
    if moved:
        c, d = moved[0]
        return (
            f"rank {rank}: chunk {c} holds the sum of chunk {d}: a chunk index is off by one, so a summed chunk "
            "lands in the wrong place (check which chunk you send and which you receive at each step)"
        )
    if len(unchanged) == world:
        return f"rank {rank}: the tensor is unchanged: nothing was summed yet"
    if len(summed) == 1:
        return (
            f"rank {rank}: only one chunk summed (chunk {summed[0]}), the others are not: each rank holds only "
            "its own chunk summed after the reduce-scatter; the all-gather that passes the sums on is missing"
        )
    bad = [c for c in range(world) if c not in summed]
    error = float((mine - reference).abs().max())
    return f"rank {rank}: wrong values in chunk(s) {bad} (largest error {error:.3g}); correct chunk(s): {summed}"


def check_on_rank(candidate: Any, ctx: Any = None) -> tuple[bool, str]:
    """Judge ``candidate`` on this rank (every rank calls it: the checker's collectives must match)."""
    import torch
    import torch.distributed as dist

    from nvtutorial.workloads._commcount import counting

    if candidate is None:
        return False, f"no function {ENTRY} is defined on the ranks: run your %%ranks cell first"
    world, rank = dist.get_world_size(), dist.get_rank()
    device = ctx.device if ctx is not None else _device()
    if world < 2:
        return False, "a ring needs at least 2 ranks"
    tried = sizes(world)
    for numel in tried:
        x = torch.randn(numel, generator=torch.Generator().manual_seed(1000 * numel + rank)).to(device)
        reference = x.clone()
        dist.all_reduce(reference)
        mine, problem = x.clone(), None
        try:
            with counting(world) as count:
                candidate(mine)
        except Exception as exc:
            first = (str(exc).strip().splitlines() or [""])[0][:200]
            problem = f"rank {rank}: your function raised {type(exc).__name__}: {first}"
        else:
            exact = (
                torch.equal(mine, reference) if world == 2 else torch.allclose(mine, reference, rtol=1e-5, atol=1e-5)
            )
            if count.unwaited:
                problem = (
                    f"rank {rank}: you never waited on {count.unwaited} request(s) that isend/irecv/"
                    "batch_isend_irecv returned: a received chunk may not have arrived when you used it "
                    "(call .wait() on every request)"
                )
            elif not exact:
                problem = diagnose(x, mine, reference, world, rank)
        # Every rank learns every rank's problem and bytes (the checker's own collective, not counted).
        mine_stats = (problem, count.sent if problem is None else 0, count.largest_message if problem is None else 0)
        stats: list[Any] = [None] * world
        dist.all_gather_object(stats, mine_stats)
        problems = [s[0] for s in stats if s[0]]
        if problems:
            return False, f"with {numel} elements: {problems[0]}"
        size, share = numel * x.element_size(), -(-numel // world) * x.element_size()
        total = sum(s[1] for s in stats)
        largest = max(s[2] for s in stats)
        if numel >= world and largest > share:
            return False, (
                f"with {numel} elements: the sums are right, but a rank sent a message of {largest:.0f} bytes, "
                f"more than a chunk (1/{world} of the tensor, {share} bytes): you send the whole tensor, "
                f"which with W ranks costs (W-1) × its size per rank; a ring sends 2 (W-1)/W × its size"
            )
        if total != 2 * (world - 1) * size:
            return False, (
                f"with {numel} elements: the sums are right, but the ranks sent {total:.0f} bytes together; "
                f"a ring sends 2 (W-1) × the tensor's {size} bytes = {2 * (world - 1) * size}"
            )
    return True, (
        f"equal to dist.all_reduce for {len(tried)} sizes ({', '.join(map(str, tried))} elements) on "
        f"{world} ranks, every request waited on, and each rank sent 2 (W-1)/W of the tensor"
    )
