"""Exercise (notebook 06): fix the rank-0 validation hang, for the validation's pixel accuracy.

The learner rewrites ``validate_accuracy(model, val_set, rank, world_size, device)``, whose
starting point validates on rank 0 alone (the trap of ``lessons/pitfalls/validation.py``), so
that every rank validates its own share and every rank returns the accuracy of the whole set.

The checker, on 2 real ranks (``nvtutorial.chapters.ch06_pitfalls.lab.check_validation`` through
``%%ranks``, or :func:`check_on_rank` through ``teach.check``): a DDP model and a validation set
that stands for a large one (a fair share reads at once; see ``SLOW_READ_S``), so that one rank
alone cannot finish before the deadline. After the candidate returns, every rank runs the next training step, whose
backward all-reduces the gradients, as a training loop would. The verdict, in this order: hung (with each rank's
stack), an exception, ranks that disagree, more samples read than the set holds (padding counted twice), a value
that differs from one process over the whole set, else pass.
"""

from __future__ import annotations

import math
import re
import time
from typing import Any

NAME = "pitfall_validation"
"""The exercise's name (``teach.check.check("pitfall_validation", ...)``)."""

NOTEBOOK = "06_pitfalls"
TASK = (
    "rewrite validate_accuracy so that every rank validates its own share and every rank returns the pixel "
    "accuracy of the whole validation set"
)
KIND = "function"
ENTRY = "validate_accuracy"
TIMEOUT = 120.0
VAL_SAMPLES = 7
"""Odd and small: the ranks' shares (4 and 3 samples) weigh differently, so an average of the
ranks' accuracies is off by more than a pixel."""
IMAGE_SIZE = 16
SLOW_READ_S = 60.0
"""The check's validation set stands for a large one: a rank reads its fair share (``ceil(7 / 2)``
= 4 samples) at once, and each sample beyond it takes a minute, so one rank that validates the
whole set alone cannot finish before the deadline, whatever the machine's load."""
DEADLINE_S = 2.0
"""The timeout of the process group the check's DDP model uses: how long the training step's
gradient all-reduce waits for a rank that is still validating, counted from when it starts waiting (a right answer
keeps the ranks within milliseconds of each other: 3 or 4 samples of 16×16 each; the starting point waits it out)."""
TOLERANCE = 0.5 / (VAL_SAMPLES * IMAGE_SIZE * IMAGE_SIZE)
"""Half a pixel of the whole set: what batches of another size may change in the last bits."""


# --------------------------------------------------------------------------- candidates


def validate_accuracy(model, val_set, rank, world_size, device):
    """The solution: each rank counts its share's correct pixels; one all_reduce adds the counts."""
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, Subset

    share = Subset(val_set, range(rank, len(val_set), world_size))
    counts = torch.zeros(2, dtype=torch.float64, device=device)  # correct pixels, pixels
    with torch.no_grad():
        for images, masks in DataLoader(share, batch_size=8):
            predicted = model.module(images.to(device)).argmax(dim=1)
            counts[0] += (predicted == masks.to(device)).sum()
            counts[1] += masks.numel()
    dist.all_reduce(counts)
    return (counts[0] / counts[1]).item()


def rank0_only(model, val_set, rank, world_size, device):
    """The starting point: rank 0 validates the whole set alone; rank 1 goes on training."""
    import torch
    from torch.utils.data import DataLoader

    if rank != 0:
        return None
    correct = total = 0
    with torch.no_grad():
        for images, masks in DataLoader(val_set, batch_size=8):
            predicted = model.module(images.to(device)).argmax(dim=1)
            correct += (predicted == masks.to(device)).sum().item()
            total += masks.numel()
    return correct / total


def own_share_only(model, val_set, rank, world_size, device):
    """Each rank validates its share and returns that share's accuracy: no communication."""
    import torch
    from torch.utils.data import DataLoader, Subset

    correct = total = 0
    with torch.no_grad():
        for images, masks in DataLoader(Subset(val_set, range(rank, len(val_set), world_size)), batch_size=8):
            predicted = model.module(images.to(device)).argmax(dim=1)
            correct += (predicted == masks.to(device)).sum().item()
            total += masks.numel()
    return correct / total


def mean_of_ranks(model, val_set, rank, world_size, device):
    """Each rank's accuracy, averaged over the ranks: a short share weighs as much as a long one."""
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, Subset

    correct = total = 0
    with torch.no_grad():
        for images, masks in DataLoader(Subset(val_set, range(rank, len(val_set), world_size)), batch_size=8):
            predicted = model.module(images.to(device)).argmax(dim=1)
            correct += (predicted == masks.to(device)).sum().item()
            total += masks.numel()
    accuracy = torch.tensor([correct / total], dtype=torch.float64, device=device)
    dist.all_reduce(accuracy)
    return (accuracy / world_size).item()


def padded_sampler(model, val_set, rank, world_size, device):
    """Shares from DistributedSampler, whose padding (repeated samples) then counts twice."""
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, DistributedSampler

    counts = torch.zeros(2, dtype=torch.float64, device=device)
    sampler = DistributedSampler(val_set, num_replicas=world_size, rank=rank, shuffle=False)
    with torch.no_grad():
        for images, masks in DataLoader(val_set, batch_size=8, sampler=sampler):
            predicted = model.module(images.to(device)).argmax(dim=1)
            counts[0] += (predicted == masks.to(device)).sum()
            counts[1] += masks.numel()
    dist.all_reduce(counts)
    return (counts[0] / counts[1]).item()


SOLUTION = validate_accuracy
WRONG = {
    "rank 0 alone (the starting point)": (rank0_only, "hung"),
    "each rank its own share": (own_share_only, "disagree"),
    "the mean of the ranks' accuracies": (mean_of_ranks, "one process over the whole set"),
    "DistributedSampler's padded shares": (padded_sampler, "pads"),
}


# --------------------------------------------------------------------------- the check, on each rank


class SlowSet:
    """The validation set of the check: counts the samples this rank read; past a fair share
    (``ceil(len / world_size)``) each read takes ``SLOW_READ_S`` (see there)."""

    def __init__(self, base: Any, world_size: int) -> None:
        self.base, self.read, self.fair = base, 0, math.ceil(len(base) / world_size)

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, i: int) -> Any:
        self.read += 1
        if self.read > self.fair:
            time.sleep(SLOW_READ_S)
        return self.base[i]


def prepare(rank: int, world_size: int, device: Any) -> dict[str, Any]:
    """What every rank holds before the candidate runs: a DDP model, the slow set, the reference."""
    import datetime

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from nvtutorial.models.segdata import make_dataset, render
    from nvtutorial.models.unet import build_unet

    torch.manual_seed(0)
    net = build_unet("tiny").to(device)
    # A group of its own, with a short timeout: a rank left waiting for a lone validator raises
    # after DEADLINE_S instead of hanging, and the default group stays usable for the next check.
    group = dist.new_group(timeout=datetime.timedelta(seconds=DEADLINE_S))
    model = DDP(net, device_ids=[device.index] if device.type == "cuda" else None, process_group=group)
    base = make_dataset(VAL_SAMPLES, IMAGE_SIZE, seed=1)
    images, masks = render(range(VAL_SAMPLES), IMAGE_SIZE, seed=1, device=device)
    with torch.no_grad():
        reference = (net(images).argmax(dim=1) == masks).double().mean().item()  # one process, the whole set
    batch = render(range(4 * rank, 4 * rank + 4), IMAGE_SIZE, device=device)
    return {
        "model": model,
        "group": group,
        "val_set": SlowSet(base, world_size),
        "reference": reference,
        "batch": batch,
        "optimizer": torch.optim.SGD(model.parameters(), lr=0.0),
        "rank": rank,
        "world_size": world_size,
        "device": device,
    }


def release(state: dict[str, Any] | None) -> None:
    """Destroy the process group of a previous check that ended normally (a hung one is left alone)."""
    import torch.distributed as dist

    if state and state.get("done"):
        dist.destroy_process_group(state["group"])
        state["done"] = False


def run_candidate(candidate: Any, state: dict[str, Any]) -> dict[str, Any]:
    """Call the candidate, then the next training step (DDP all-reduces its gradients); this rank's outcome."""
    import torch.nn.functional as F

    try:
        value = candidate(state["model"], state["val_set"], state["rank"], state["world_size"], state["device"])
    except Exception as exc:  # noqa: BLE001 - the learner's code: any failure becomes the reason
        return {"error": f"{type(exc).__name__}: {exc}", "read": state["val_set"].read}
    images, masks = state["batch"]
    loss = F.cross_entropy(state["model"](images), masks)
    loss.backward()  # the next training step: its gradient all-reduce needs every rank
    state["optimizer"].step()
    loss.item()
    state["done"] = True  # every rank got through the training step: the group is free to destroy
    if hasattr(value, "item"):
        value = value.item()
    return {
        "value": value if isinstance(value, (int, float)) else repr(value),
        "read": state["val_set"].read,
        "reference": state["reference"],
    }


def judge(outcomes: list[dict[str, Any]]) -> tuple[bool, str]:
    """Pass or the reason, from every rank's outcome of :func:`run_candidate`."""
    for rank, o in enumerate(outcomes):
        if "error" in o:
            return False, f"rank {rank}: your function raised {o['error']}"
    values = [o["value"] for o in outcomes]
    for rank, v in enumerate(values):
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v):
            return False, (
                f"rank {rank} returned {v!r}, not a number: every rank needs the accuracy of the whole set "
                "(a training loop uses it on every rank, for early stopping or the learning rate)"
            )
    shown = ", ".join(f"{v:.6f} on rank {r}" for r, v in enumerate(values))
    if max(values) - min(values) > TOLERANCE:
        return False, (
            f"the ranks disagree on the validation accuracy: {shown}. Each rank measured only its own "
            "share: add the ranks' counts with dist.all_reduce, then divide"
        )
    reads = [o["read"] for o in outcomes]
    reference = outcomes[0]["reference"]
    if sum(reads) > VAL_SAMPLES:
        return False, (
            f"the ranks read {' + '.join(map(str, reads))} = {sum(reads)} samples of a set of {VAL_SAMPLES}: "
            "DistributedSampler pads the shares with repeats so that they have the same length, and the "
            "repeats count twice (split the indices yourself: range(rank, len(val_set), world_size))"
        )
    if abs(values[0] - reference) > TOLERANCE:
        return False, (
            f"every rank returns {values[0]:.6f}, but one process over the whole set gives {reference:.6f}: "
            "an average of the ranks' accuracies weighs a short share like a long one; add the counts "
            "(correct pixels, pixels) with dist.all_reduce, then divide once"
        )
    idle = [r for r, n in enumerate(reads) if n == 0]
    if idle:
        return False, (
            f"rank {', '.join(map(str, idle))} read no validation sample: the other ranks did all the work "
            "(correct, but no faster than one GPU)"
        )
    return True, (
        f"every rank returns {values[0]:.6f}, the accuracy of the whole set, and each rank read its own "
        f"share ({' + '.join(map(str, reads))} samples)"
    )


_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<func>.+)$')


def stack_frames(stack: str) -> list[tuple[str, str, str]]:
    """``(file, function, source line)`` of a ``traceback.format_list`` stack, innermost first."""
    lines, out = stack.splitlines(), []
    for i, line in enumerate(lines):
        m = _FRAME.match(line)
        if m:
            code = lines[i + 1].strip() if i + 1 < len(lines) and not _FRAME.match(lines[i + 1]) else ""
            out.append((m.group("file"), m.group("func").strip(), code))
    return out[::-1]


def _doing(frames: list[tuple[str, str, str]]) -> tuple[str, str]:
    """``("validating" | "training" | "elsewhere", where)`` from the innermost frame of this checker."""
    here = __file__.removesuffix("c")
    for file, func, code in frames:
        if file.removesuffix("c") != here:
            continue
        if func == "__getitem__":
            return "validating", "reading a validation sample"
        if func == "run_candidate" and "candidate(" in code:
            inner = frames[0]
            return "validating", f"your function, at {inner[1]}" + (f": {inner[2]}" if inner[2] else "")
        if func == "run_candidate":
            return "training", code or func
    return "elsewhere", (
        f"{frames[0][1]}: {frames[0][2]}" if frames and frames[0][2] else frames[0][1] if frames else "?"
    )


def timed_out(message: str) -> bool:
    """Whether an error is a collective's timeout (gloo: "Timed out waiting ..."; NCCL's watchdog)."""
    return "timed out" in message.lower() or "Watchdog caught" in message


def explain_hang(stacks: dict[int, str], deadline_s: float = DEADLINE_S) -> str:
    """The reason for a candidate that left a rank waiting past the deadline, from each rank's
    stack (a rank still running) or traceback (a rank whose all-reduce timed out)."""
    doing = {rank: _doing(stack_frames(text)) for rank, text in sorted(stacks.items())}
    validating = [r for r, (what, _) in doing.items() if what == "validating"]
    waiting = [r for r, (what, _) in doing.items() if what == "training"]
    stacks_text = "; ".join(f"rank {r}: {where}" for r, (_, where) in doing.items())
    if validating and waiting:
        return (
            f"hung: rank {', '.join(map(str, waiting))} waited in the next training step's gradient all-reduce "
            f"while rank {', '.join(map(str, validating))} validated alone, past the {deadline_s:g} s deadline "
            f"({stacks_text})"
        )
    return f"hung: still running {deadline_s:g} s after your function was called ({stacks_text})"


def check_on_rank(candidate: Any, ctx: Any) -> tuple[bool, str]:
    """The ``teach.check`` protocol: every rank runs the check and judges every rank's outcome."""
    import torch.distributed as dist

    state = prepare(ctx.rank, ctx.world_size, ctx.device)
    outcome = run_candidate(candidate, state)
    gathered: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(gathered, outcome)
    return judge(gathered)
