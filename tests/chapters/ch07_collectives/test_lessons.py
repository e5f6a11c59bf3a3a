"""Notebook 07's collectives at 2, 3 and 4 gloo ranks: the lesson says "any world size", so they are tested at more than
two.

With two ranks many index and direction bugs vanish: each rank's left and right neighbour is the same rank,
and ``a + b`` is ``b + a``. A ring with its direction reversed still sums correctly on 2 ranks and is off on
3 (shown below); an off-by-one chunk index can land on the right chunk by luck. Each function runs on real
ranks forked from this process (``tests/ranks_harness.py``) against ``dist.all_reduce``, with the bytes it
sends counted and compared with the ring's formula, computed here independently of the lesson.
"""

from __future__ import annotations

import inspect
import textwrap
import types
from typing import Any, cast

import pytest
import torch

from nvtutorial.chapters.ch07_collectives.lessons import collectives, compression, sparse_allreduce
from nvtutorial.chapters.ch07_collectives.workload import ring_bytes
from tests.helpers.collectives_ranks import WORLD, on_pool
from tests.helpers.ranks import RanksHung, on_ranks

WORLDS = (2, 3, 4)
DETAIL = {"TORCH_DISTRIBUTED_DEBUG": "DETAIL"}
"""torch then compares every collective's shapes across the ranks first: the source's all_gather of unequal
sizes raises instead of aborting the process."""


def chunk_sizes(numel: int, world: int) -> list[int]:
    """How ``tensor_split`` cuts ``numel`` elements into ``world`` chunks (computed with torch, not the lesson)."""
    return [c.numel() for c in torch.empty(numel).tensor_split(world)]


def ring_bytes_expected(numel: int, world: int, rank: int) -> int:
    """Bytes rank ``rank`` must send: in the reduce-scatter chunk r-s at step s, in the all-gather chunk r+1-s."""
    sizes = chunk_sizes(numel, world)
    sends = [(rank - s) % world for s in range(world - 1)] + [(rank + 1 - s) % world for s in range(world - 1)]
    return 4 * sum(sizes[c] for c in sends)


# --------------------------------------------------------------------------- the ring, on the ranks
def _ring(sizes, slices_list, subgroup):
    import torch.distributed as dist

    from nvtutorial.chapters.ch07_collectives.lessons.collectives import ring_all_reduce
    from nvtutorial.workloads._commcount import counting

    rank, world = dist.get_rank(), dist.get_world_size()
    groups: dict[str, Any] = {"world": None}  # a subgroup: a ProcessGroup, or torch's non-member sentinel on rank 0
    if subgroup:  # every rank but 0, in the order 1..W-1: global and group ranks differ
        members = list(range(1, world))
        groups["subgroup"] = dist.new_group(members)
    out = []
    for name, group in groups.items():
        if group is not None and rank == 0:
            continue
        gworld = dist.get_world_size(group)
        for numel in sizes:
            for slices in slices_list:
                x = torch.randn(numel, generator=torch.Generator().manual_seed(100 * numel + 7 * slices + rank))
                mine, ref = x.clone(), x.clone()
                with counting(gworld) as count:
                    returned = ring_all_reduce(mine, group=group, slices=slices)
                dist.all_reduce(ref, group=group)
                out.append(
                    {
                        "group": name,
                        "world": gworld,
                        "rank": dist.get_rank(group),
                        "numel": numel,
                        "slices": slices,
                        "equal": torch.equal(mine, ref),
                        "close": torch.allclose(mine, ref, rtol=1e-5, atol=1e-5),
                        "error": float((mine - ref).abs().max()) if numel else 0.0,
                        "sent": count.sent,
                        "returned": returned,
                        "unwaited": count.unwaited,
                        "largest": count.largest_message,
                    }
                )
    return out


@pytest.mark.parametrize("world", WORLDS)
def test_the_ring_equals_all_reduce_and_sends_2_w_minus_1_over_w(world):
    sizes = sorted({1, world - 1, world, world + 1, 3 * world - 1, 1001, 4096})
    rows = [row for rank_rows in on_ranks(_ring, world, sizes, (1, 2, 3), world >= 3) for row in rank_rows]
    assert len(rows) == world * len(sizes) * 3 + (world - 1) * len(sizes) * 3 * (world >= 3)
    for row in rows:
        assert row["close"], row
        if row["world"] == 2:
            assert row["equal"], row  # 2 ranks: every element is a + b in both, bit for bit
        expected = ring_bytes_expected(row["numel"], row["world"], row["rank"])
        assert row["sent"] == row["returned"] == expected, row
        assert row["unwaited"] == 0
        assert row["largest"] <= 4 * max(chunk_sizes(row["numel"], row["world"]))  # a chunk at most, never the tensor
    # the ring's total: 2 (W-1) × the tensor over all ranks, whatever W (tensor_split's chunks add up exactly)
    for numel in sizes:
        total = sum(r["sent"] for r in rows if r["numel"] == numel and r["slices"] == 1 and r["group"] == "world")
        assert total == 2 * (world - 1) * 4 * numel


def test_the_ring_on_one_rank_and_on_a_view():
    def one():
        import torch.distributed as dist

        from nvtutorial.chapters.ch07_collectives.lessons.collectives import ring_all_reduce

        x = torch.arange(5.0)
        sent = ring_all_reduce(x)
        try:
            ring_all_reduce(torch.arange(10.0)[::2])
        except ValueError as exc:
            return sent, x.tolist(), str(exc), dist.get_world_size()
        return "no error for a view"

    ((sent, values, error, world),) = on_ranks(one, 1)
    assert (sent, values, world) == (0, [0.0, 1.0, 2.0, 3.0, 4.0], 1)
    assert "contiguous" in error
    with pytest.raises(AssertionError, match="contiguous"):
        on_ranks(lambda: collectives.ring_all_reduce(torch.arange(10.0)[::2]), 2)


def _reversed_ring_source() -> str:
    """The lesson's ring with its direction reversed: send left, receive from the right."""
    source = textwrap.dedent(inspect.getsource(collectives.ring_all_reduce))
    source = "".join(line for line in source.splitlines(True) if not line.startswith("@"))  # its own lines only
    swapped = source.replace(
        "right, left = peer((rank + 1) % world), peer((rank - 1) % world)",
        "right, left = peer((rank - 1) % world), peer((rank + 1) % world)",
    )
    assert swapped != source
    return swapped


def _reversed_ring(numel):
    import torch.distributed as dist

    namespace: dict[str, Any] = {"torch": torch, "dist": dist}
    exec(_reversed_ring_source(), namespace)
    x = torch.randn(numel, generator=torch.Generator().manual_seed(dist.get_rank()))
    mine, ref = x.clone(), x.clone()
    namespace["ring_all_reduce"](mine)
    dist.all_reduce(ref)
    return float((mine - ref).abs().max())


def test_a_reversed_ring_passes_on_two_ranks_and_is_caught_on_three():
    """Why the tests run at 3 and 4 ranks: on 2 the bug is invisible."""
    assert on_ranks(_reversed_ring, 2, 1002) == [0.0, 0.0]
    assert max(on_ranks(_reversed_ring, 3, 1002)) > 0.5  # equal chunks: it runs, and sums the wrong chunks


def test_the_lessons_own_check_at_three_ranks():
    found = on_ranks(collectives.check, 3, 1001, 2, torch.device("cpu"))
    for rank, f in enumerate(found):
        assert f["max_abs_error"] < 1e-5 and f["size_bytes"] == 4004
        assert f["sent_bytes"] == ring_bytes_expected(1001, 3, rank)


# --------------------------------------------------------------------------- the sparse all-reduce
def _sparse(cases):
    import torch.distributed as dist

    from nvtutorial.chapters.ch07_collectives.lessons.sparse_allreduce import sparse_allreduce

    rank, world = dist.get_rank(), dist.get_world_size()
    out = []
    for name, numel, density in cases:
        g = torch.Generator().manual_seed(1000 * rank + numel)
        mask = torch.rand(numel, generator=g) < density * (rank + 1) / world
        if name == "rank 0 empty" and rank == 0:
            mask[:] = False
        x = torch.randn(numel, generator=g) * mask
        ref = x.clone()
        dist.all_reduce(ref)
        ref /= world
        mine = x.clone().view(-1, 2) if numel % 2 == 0 else x.clone()
        sent = sparse_allreduce(mine)
        counts: list[Any] = [None] * world
        dist.all_gather_object(counts, int(mask.sum()))
        out.append(
            {
                "case": name,
                "close": torch.allclose(mine.view(-1), ref, rtol=1e-6, atol=1e-7),
                "equal": torch.equal(mine.view(-1), ref),
                "sent": sent,
                "count": int(mask.sum()),
                "largest": max(counts),
            }
        )
    return out


@pytest.mark.parametrize("world", WORLDS)
def test_the_correct_sparse_all_reduce_averages_whatever_the_positions(world):
    cases = [
        ("sparse", 4096, 0.05),
        ("dense", 64, 1.0),
        ("all zero", 100, 0.0),
        ("rank 0 empty", 256, 0.3),
        ("2-D", 512, 0.2),
    ]
    for rank, rows in enumerate(on_ranks(_sparse, world, cases)):
        for row in rows:
            assert row["close"], (rank, row)
            if world == 2:
                assert row["equal"], (rank, row)
            # bytes handed to the all-gathers: the count (int64), then int32 indices and fp32 values at the largest
            # count
            assert row["sent"] == 8 + 8 * row["largest"], (rank, row)


def _source_version(positions):
    import torch.distributed as dist

    from nvtutorial.chapters.ch07_collectives.lessons import sparse_allreduce as lesson

    rank, world = dist.get_rank(), dist.get_world_size()
    lesson.world_size = world
    x = torch.zeros(8)
    where = positions[rank % len(positions)]
    x[list(where)] = torch.tensor([float(rank + 1 + i) for i in range(len(where))])
    ref = x.clone()
    dist.all_reduce(ref)
    ref /= world
    try:
        lesson.source_sparse_allreduce(x)
    except Exception as exc:
        return {"ran": False, "error": f"{type(exc).__name__}: {exc}"}
    return {"ran": True, "exact": torch.equal(x, ref), "result": x.tolist()}


@pytest.mark.parametrize("world", (2, 3))
def test_the_sources_version_is_right_only_when_every_rank_has_the_same_positions(world):
    same = on_ranks(_source_version, world, [(1, 5)], env=DETAIL)
    assert all(r["ran"] and r["exact"] for r in same), same
    shifted = on_ranks(_source_version, world, [(1, 5), (2, 6), (3, 7)], env=DETAIL)  # same count, other positions
    assert all(r["ran"] and not r["exact"] for r in shifted), shifted
    uneven = on_ranks(_source_version, world, [(1,), (2, 6), (3, 4, 7)], env=DETAIL)  # counts differ: sizes differ
    assert all(not r["ran"] and "mismatch" in r["error"] for r in uneven), uneven


def test_the_lessons_sparse_check_at_three_ranks():
    for found in on_ranks(sparse_allreduce.check, 3, torch.device("cpu"), env=DETAIL):
        assert found["the source's"].startswith("failed: RuntimeError: Detected mismatch"), found
        assert (
            found["the correct"] == "equal to all_reduce / W: False"
            or found["the correct"] == "equal to all_reduce / W: True"
        ), found  # 3 ranks: another order of additions
    assert sparse_allreduce.world_size == 2  # check() set the global in the ranks, not here


# --------------------------------------------------------------------------- compression hooks
def _hooked_gradients(hook, ratio, steps, start_iter):
    """A linear model under DDP with ``hook``; per step the gradient DDP applied and the exact average."""
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from nvtutorial.chapters.ch07_collectives.lessons.compression import TopKState, register

    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 8, bias=False)
    ddp = DDP(model)
    state = register(ddp, hook, topk_ratio=ratio, start_iter=start_iter)
    g = torch.Generator().manual_seed(rank)
    out = []
    for _ in range(steps):
        x = torch.randn(4, 16, generator=g)
        ddp.zero_grad()
        ddp(x).pow(2).sum().backward()
        applied = model.weight.grad.clone()
        # the exact average of the local gradients, computed apart from DDP
        local = torch.autograd.grad(model(x).pow(2).sum(), model.weight)[0]
        exact = local.clone()
        dist.all_reduce(exact)
        exact /= world
        residual = None
        if hook == "topk":
            assert isinstance(state, TopKState)
            if state.residuals:
                residual = state.residuals[0].clone()
        out.append(
            {
                "applied": applied,
                "exact": exact,
                "local": local,
                "residual": residual,
                "iter": getattr(state, "iter", None),
            }
        )
    return out


@pytest.mark.parametrize("world", WORLDS)
def test_topk_with_every_entry_is_the_exact_average(world):
    for rank_steps in on_ranks(_hooked_gradients, world, "topk", 1.0, 4, 2):
        for step, s in enumerate(rank_steps):
            assert torch.allclose(s["applied"], s["exact"], atol=1e-6), (world, step)
            assert s["iter"] == step + 1
            if step >= 2:  # past start_iter: the top-k path ran, and sent everything
                assert s["residual"] is not None and torch.count_nonzero(s["residual"]) == 0


@pytest.mark.parametrize("world", (2, 3))
def test_topk_sends_the_k_largest_and_keeps_the_rest(world):
    ranks = on_ranks(_hooked_gradients, world, "topk", 0.1, 3, 2)
    steps = list(zip(*ranks))  # per step, every rank's record
    plain = steps[0]
    assert all(torch.allclose(s["applied"], s["exact"], atol=1e-6) for s in plain)  # before start_iter: all-reduce
    topk = steps[2]
    k = max(1, int(0.1 * 128))
    sent_sum = torch.zeros(128)
    for s in topk:
        acc = s["local"].reshape(-1)  # no residual yet at the first top-k step
        idx = acc.abs().topk(k).indices
        sent = torch.zeros(128)
        sent[idx] = acc[idx]
        sent_sum += sent
        assert torch.equal(s["residual"], acc - sent), "what is not sent waits in the residual"
        assert torch.count_nonzero(s["residual"]) == 128 - k
    for s in topk:
        assert torch.allclose(s["applied"].reshape(-1), sent_sum / world, atol=1e-6)


@pytest.mark.parametrize("hook", ("fp16", "powersgd", "topk"))
def test_the_compression_lesson_trains_identical_replicas_on_three_ranks(hook):
    for found in on_ranks(compression.train, 3, hook, 30, torch.device("cpu"), timeout=120):
        assert found["identical"] and found["last_loss"] < found["first_loss"], (hook, found)


def test_register_installs_each_hook_and_refuses_others():
    def install():
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP

        from nvtutorial.chapters.ch07_collectives.lessons.compression import TopKState, register

        out = {}
        for name in ("none", "fp16", "powersgd", "topk"):
            ddp = DDP(torch.nn.Linear(4, 4))
            state = register(ddp, name, process_group=None, topk_ratio=0.25, powersgd_rank=2, start_iter=3)
            out[name] = state
        try:  # torch's bf16 hook refuses a CPU build: the refusal shows that bf16 chose it (fp16's would not)
            register(DDP(torch.nn.Linear(4, 4)), "bf16")
            out["bf16"] = "registered"
        except TypeError as exc:
            out["bf16"] = str(exc)
        try:
            register(DDP(torch.nn.Linear(4, 4)), "gzip")
        except ValueError as exc:
            out["error"] = str(exc)
        default = TopKState()
        return {
            "none": out["none"],
            "fp16": out["fp16"],
            "bf16": out["bf16"],
            "powersgd": (out["powersgd"].matrix_approximation_rank, out["powersgd"].start_powerSGD_iter),
            "topk": (
                out["topk"].ratio,
                out["topk"].start_iter,
                out["topk"].iter,
                out["topk"].group is dist.group.WORLD,
            ),
            "default": (default.ratio, default.start_iter, default.residuals),
            "error": out.get("error"),
        }

    (found,) = on_ranks(install, 1)
    assert found["none"] is None and found["fp16"] is None
    assert found["bf16"] == "registered" if torch.version.cuda else found["bf16"].startswith("BF16 all reduce")
    assert found["powersgd"] == (2, 3) and found["topk"] == (0.25, 3, 0, True)
    assert found["default"] == (0.01, 2, {})
    assert found["error"] == "unknown compression 'gzip': use one of none, fp16, bf16, powersgd, topk"
    assert compression.HOOKS == ("none", "fp16", "bf16", "powersgd", "topk")


def test_a_hung_rank_is_reported_and_killed():
    """The harness itself: a send without its receive ends as RanksHung, not a hung test."""

    def lonely():
        import time

        import torch.distributed as dist

        if dist.get_rank() == 0:
            dist.recv(torch.empty(1), src=1)  # rank 1 never sends
        if dist.get_rank() == 1:
            time.sleep(30)
        return dist.get_rank()

    with pytest.raises(RanksHung, match=r"ranks \[0, 1\] of 2 did not finish within 3 s") as caught:
        on_ranks(lonely, 2, timeout=3)
    assert caught.value.finished == {}


# --------------------------------------------------------------------------- the lessons' entry points
# torchrun runs each lesson file's main(). Here main() runs in this process with torch.distributed's set-up and
# the lesson's work replaced by recorders: what it asks for (backend, device, arguments) on a machine with enough
# GPUs, with too few and with none. Nothing touches a GPU: a CUDA device object is only a name.
def _entry(monkeypatch, module, argv, gpus, env, **work):
    import sys

    import torch.distributed as dist

    asked = {"init": [], "destroyed": 0, "set_device": [], "work": []}
    monkeypatch.setattr(dist, "init_process_group", lambda *a, **k: asked["init"].append((a, k)))
    monkeypatch.setattr(dist, "destroy_process_group", lambda: asked.__setitem__("destroyed", asked["destroyed"] + 1))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus is not None)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus or 0)
    monkeypatch.setattr(torch.cuda, "set_device", lambda device: asked["set_device"].append(device))
    for name in ("LOCAL_RANK", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(sys, "argv", [module.__file__, *argv])
    for name, result in work.items():
        monkeypatch.setattr(module, name, lambda *a, result=result: asked["work"].append(a) or result)
    module.main()
    return asked


MACHINES = [
    # (GPUs, environment, the device main() must pick, backend)
    (2, {"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}, torch.device("cuda", 1), "nccl"),
    (1, {}, torch.device("cuda", 0), "nccl"),  # torchrun's variables unset: one rank, GPU 0
    (1, {"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}, torch.device("cpu"), "gloo"),  # too few GPUs: all on the CPU
    (None, {"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2"}, torch.device("cpu"), "gloo"),
]


def _asked_for(asked, device, backend):
    gpu = device.type == "cuda"
    # the course's one set-up (notebook 03's ddp_train.setup): NCCL bound to its device, gloo without one
    assert asked["init"] == [((backend,), {"device_id": device, "timeout": None} if gpu else {"timeout": None})]
    assert asked["set_device"] == ([device] if gpu else []) and asked["destroyed"] == 1


@pytest.mark.parametrize(("gpus", "env", "device", "backend"), MACHINES)
def test_the_ring_lessons_entry_point(monkeypatch, gpus, env, device, backend):
    import sys
    import types

    saved = []
    runtime = types.ModuleType("nvtutorial.runtime")
    runtime.save_metrics = saved.append  # pyright: ignore[reportAttributeAccessIssue] - a stand-in module
    monkeypatch.setitem(sys.modules, "nvtutorial.runtime", runtime)
    asked = _entry(monkeypatch, collectives, [], gpus, env, check={"equal": True})
    _asked_for(asked, device, backend)
    assert asked["work"] == [((1 << 20) + 3, 1, device)] and saved == [{"equal": True}]
    if gpus is None:
        asked = _entry(monkeypatch, collectives, ["--numel", "1000003", "--slices", "4"], None, {}, check={"n": 2})
        assert asked["work"] == [(1000003, 4, torch.device("cpu"))] and saved[-1] == {"n": 2}
        monkeypatch.setitem(sys.modules, "nvtutorial.runtime", None)  # outside the course: nothing to report to
        asked = _entry(monkeypatch, collectives, [], None, {}, check={"n": 3})
        assert asked["destroyed"] == 1 and len(saved) == 2


@pytest.mark.parametrize(("gpus", "env", "device", "backend"), MACHINES)
def test_the_sparse_lessons_entry_point(monkeypatch, gpus, env, device, backend):
    asked = _entry(monkeypatch, sparse_allreduce, [], gpus, env, check=None)
    _asked_for(asked, device, backend)
    assert asked["work"] == [(device,)]


@pytest.mark.parametrize(("gpus", "env", "device", "backend"), MACHINES)
def test_the_compression_lessons_entry_point(monkeypatch, gpus, env, device, backend):
    asked = _entry(monkeypatch, compression, [], gpus, env, train=None)
    _asked_for(asked, device, backend)
    assert asked["work"] == [("topk", 30, device)]
    if gpus is None:
        asked = _entry(monkeypatch, compression, ["--hook", "powersgd", "--steps", "3"], None, {}, train=None)
        assert asked["work"] == [("powersgd", 3, torch.device("cpu"))]
        with pytest.raises(SystemExit):
            _entry(monkeypatch, compression, ["--hook", "gzip"], None, {}, train=None)


def ring_cases():
    import torch.distributed as dist

    from nvtutorial.chapters.ch07_collectives.lessons.collectives import ring_all_reduce
    from nvtutorial.chapters.ch07_collectives.workload import plain_group
    from nvtutorial.workloads._commcount import counting

    group, out = plain_group("gloo"), []
    rank, world_size = dist.get_rank(), dist.get_world_size()
    for numel in (1, 3, 1001, 4096):
        for slices in (1, 3):
            x = torch.randn(numel, generator=torch.Generator().manual_seed(numel + rank))
            mine, ref = x.clone(), x.clone()
            with counting(world_size) as count:
                returned = ring_all_reduce(mine, group=group, slices=slices)
            dist.all_reduce(ref, group=group)
            out.append(
                {
                    "numel": numel,
                    "slices": slices,
                    "equal": bool(torch.equal(mine, ref)),
                    "sent": count.sent,
                    "returned": returned,
                    "unwaited": count.unwaited,
                }
            )
    dist.destroy_process_group(group)
    return out


def test_ring_equals_all_reduce_and_sends_the_formula(pool):
    for rank, rows in enumerate(on_pool(ring_cases)):
        for row in rows:
            assert row["equal"], row
            assert row["sent"] == row["returned"] == ring_bytes(row["numel"], 4, WORLD, rank), row
            assert row["unwaited"] == 0
    # 2 ranks: each sends exactly the tensor's size (2 (W-1)/W = 1)
    assert [r["sent"] for r in on_pool(ring_cases)[0] if r["numel"] == 4096] == [4096 * 4] * 2


def lesson_check(module, *args):
    import importlib

    lesson = importlib.import_module(f"nvtutorial.chapters.ch07_collectives.lessons.{module}")
    device = torch.device("cpu")
    return lesson.train(*args, device) if module == "compression" else lesson.check(*args, device)


def test_the_lessons_own_checks_hold_on_the_ranks(pool):
    """What each lesson file's main() runs after init_process_group (its `check`), on 2 gloo ranks with DETAIL."""
    assert all(
        r["equal"] and r["sent_bytes"] == ring_bytes(1001, 4, WORLD, i)
        for i, r in enumerate(on_pool(lesson_check, "collectives", 1001, 2))
    )
    for found in on_pool(lesson_check, "sparse_allreduce"):
        assert found["the source's"].startswith("failed: RuntimeError: Detected mismatch"), found
        assert found["the correct"] == "equal to all_reduce / W: True"


def test_the_compression_lesson_trains_identical_replicas(plain_pool):
    for hook in ("fp16", "powersgd", "topk"):
        for found in on_pool(lesson_check, "compression", hook, 4):
            assert found["identical"] and found["last_loss"] < found["first_loss"] + 0.5, (hook, found)


def test_source_function_is_the_published_code():
    from nvtutorial.chapters.ch07_collectives.lessons import sparse_allreduce

    text = inspect.getsource(sparse_allreduce.source_sparse_allreduce)
    for line in (
        "indices = tensor.nonzero()",
        "values = tensor[indices]",
        "gathered = [torch.zeros_like(values) for _ in range(world_size)]",
        "torch.distributed.all_gather(gathered, values)",
        "stacked = torch.stack(gathered)",
        "mean = stacked.mean(dim=0)",
        "tensor.zero_()",
        "tensor[indices] = mean",
    ):
        assert line in text


def _topk_plain_step_in_a_group_of_one():
    import torch.distributed as dist

    from nvtutorial.chapters.ch07_collectives.lessons.compression import TopKState, topk_hook

    rank = dist.get_rank()
    groups = [dist.new_group([0]), dist.new_group([1])]
    state = TopKState(groups[rank], start_iter=2)
    buf = torch.full((4,), float(rank + 1))
    fake = types.SimpleNamespace(buffer=lambda: buf, is_last=lambda: True, index=lambda: 0)
    bucket = cast(dist.GradBucket, fake)  # pyright: ignore[reportPrivateImportUsage] - public; torch's stubs don't re-export it
    return topk_hook(state, bucket).wait().tolist()


def test_the_topk_hooks_plain_steps_all_reduce_over_its_own_group():
    # each rank alone in its group: the plain all-reduce leaves its gradient as it is (the world's would average)
    assert on_ranks(_topk_plain_step_in_a_group_of_one, 2) == [[1.0] * 4, [2.0] * 4]


BIG = 2**24 + 2  # float32 holds every integer up to 2**24 only


def _sparse_far_index():
    from nvtutorial.chapters.ch07_collectives.lessons.sparse_allreduce import sparse_allreduce

    x = torch.zeros(BIG)
    x[BIG - 1] = 3.0
    sent = sparse_allreduce(x)
    return x.nonzero().view(-1).tolist(), x[BIG - 1].item(), sent


def test_sparse_all_reduce_keeps_indices_beyond_float32s_integers_exact():
    assert on_ranks(_sparse_far_index, 1) == [([BIG - 1], 3.0, 8 + 4 + 4)]


def _sparse_with_another_default_device():
    import torch.distributed as dist

    from nvtutorial.chapters.ch07_collectives.lessons.sparse_allreduce import sparse_allreduce

    rank = dist.get_rank()
    x = torch.zeros(8)
    x[rank] = float(rank + 1)
    torch.set_default_device("meta")  # as on a GPU: the tensor is not where new tensors go by default
    try:
        sparse_allreduce(x)
    finally:
        torch.set_default_device("cpu")
    return x.tolist()


def test_sparse_all_reduce_keeps_its_buffers_on_the_tensors_device():
    assert on_ranks(_sparse_with_another_default_device, 2) == [[0.5, 1.0] + [0.0] * 6] * 2
