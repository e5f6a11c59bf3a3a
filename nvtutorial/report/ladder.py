"""Notebook 08's arithmetic and conclusions: the memory model of each rung, the bytes each rung must
send, and the run's results as tables and verdicts.

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
- *transient*, estimated: what exists for a moment on top: the logits' gradients (``2·T·vocab`` floats),
  parameters FSDP has gathered (all of them at the end of the forward pass without resharding; the root
  and two blocks with it), a block's gradients before their reduce-scatter, a recomputed block's
  activations.

The peak a GPU shows (``torch.cuda.max_memory_allocated``) is compared with model state + activations +
transient; the allocator's rounding and library workspaces are not modelled, so that comparison has a
stated gap, while the model state is compared with the counted bytes exactly.

**Bytes sent per step and rank** (:func:`sent_per_step`), for ``W`` ranks under a ring algorithm:
an all-reduce of ``n`` bytes sends ``2(W−1)/W·n``, an all-gather or reduce-scatter of a tensor of ``n``
bytes ``(W−1)/W·n``, a broadcast ``n`` from the root (chained: every rank but the last forwards it).
DDP all-reduces every gradient (``2(W−1)/W·P`` for ``P`` bytes of parameters); ZeRO-1 adds a broadcast of
each updated tensor from its owner; FSDP2 all-gathers every parameter for the forward pass, every
block's again for the backward pass when it resharded (the root stays gathered), and reduce-scatters
every gradient: ``(W−1)/W·(P + P_blocks + P)`` against DDP's ``2(W−1)/W·P``; tensor parallelism
all-reduces a ``T·d`` activation 6 times per block (2 in the forward pass, after ``wo`` and ``w2``;
4 in the backward pass, one per column-wise layer).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .verdict import Verdict, compare, comparison_verdict

RUNGS = ("ddp", "zero1", "fsdp_zero2", "fsdp_zero3", "fsdp_checkpointing", "fsdp_offload", "tensor_parallel")
"""The ladder, bottom to top (``nvtutorial/lessons/ladder/rungs.py``; a test keeps the two in step)."""
LABELS = {"ddp": "DDP", "zero1": "ZeRO-1", "fsdp_zero2": "FSDP2, no reshard (ZeRO-2-like)",
          "fsdp_zero3": "FSDP2 (ZeRO-3)", "fsdp_checkpointing": "ZeRO-3 + act. checkpointing",
          "fsdp_offload": "ZeRO-3 + ckpt + CPU offload", "tensor_parallel": "tensor parallel"}
FSDP = ("fsdp_zero2", "fsdp_zero3", "fsdp_checkpointing", "fsdp_offload")
TP_SPLIT = {"attn.wq": 0, "attn.wk": 0, "attn.wv": 0, "attn.wo": 1, "mlp.w1": 0, "mlp.w2": 1}
"""The dimension of each block matrix that tensor parallelism splits (``nn.Linear`` weights are out × in)."""
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
    def from_result(cls, metrics: Mapping[str, Any]) -> Setup:
        return cls(**metrics["config"], global_batch=metrics["global_batch"], world=metrics["world_size"])

    def config(self):  # -> models.transformer.Config
        from ..models import transformer

        return transformer.Config(vocab=self.vocab, seq_len=self.seq_len, dim=self.dim, heads=self.heads,
                                  layers=self.layers, mlp_ratio=self.mlp_ratio)

    def shapes(self) -> list[tuple[str, tuple[int, ...]]]:
        from ..models import transformer

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


def transient(s: Setup, rung: str, shapes: Shapes) -> int:
    """An estimate of the largest temporary memory on top of model state and activations (see the module)."""
    t = s.tokens(rung)
    logits_grads = 2 * FLOAT * t * s.vocab
    if rung not in FSDP:
        return logits_grads
    total = sum(FLOAT * _numel(sh) for _, sh in shapes)
    root, block = _group_bytes(shapes)
    gathered = total if rung == "fsdp_zero2" else root + 2 * block  # all of them, or the root and two blocks
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
    return RankMemory(rung, rank, **state, activations=activations(s, rung), transient=transient(s, rung, shapes),
                      on_host=rung == "fsdp_offload")


def memory_table(s: Setup, rungs: Sequence[str] = RUNGS):  # -> pandas.DataFrame
    """The model for every rung and rank, in MB (10^6 bytes)."""
    import pandas as pd

    shapes = s.shapes()
    rows = []
    for rung in rungs:
        for rank in range(s.world):
            m = rank_memory(s, rung, rank, shapes)
            rows.append({"rung": LABELS[rung], "rank": rank, "params": m.params / 1e6, "grads": m.grads / 1e6,
                         "optimizer": m.optimizer / 1e6, "model state": m.model_state / 1e6,
                         "activations": m.activations / 1e6, "transient (est.)": m.transient / 1e6,
                         "device peak (est.)": m.device_peak / 1e6, "state on": "host" if m.on_host else "device"})
    return pd.DataFrame(rows).set_index(["rung", "rank"]).round(3)


# --------------------------------------------------------------------------------------------
# Bytes each rank sends per step


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
        return {"all_reduce": 2 * ring * 6 * s.layers * FLOAT * s.tokens(rung) * s.dim}
    raise ValueError(f"unknown rung {rung!r}; the rungs are {', '.join(RUNGS)}")


# --------------------------------------------------------------------------------------------
# The run's results


def _where(result: Any) -> str:
    return getattr(result, "label", str(result))


def _rungs(result: Any) -> list[str]:
    return [g["rung"] for g in result.ranks[0]["rungs"]]


def _rung(result: Any, rank: int, rung: str) -> dict[str, Any]:
    for g in result.ranks[rank]["rungs"]:
        if g["rung"] == rung:
            return g
    raise KeyError(f"the run has no rung {rung!r}; it ran {', '.join(_rungs(result))}")


def counted_state(result: Any, rung: str, rank: int) -> int:
    """Bytes of parameters, gradients and optimizer state ``rank`` held under ``rung``, as the run counted them."""
    held = _rung(result, rank, rung)["held"]
    return held["params"] + held["grads"] + held["optimizer"]


def loss_table(result: Any):  # -> pandas.DataFrame
    """The loss of the global batch at every step: the one-process reference and every rung (rank 0's view)."""
    import pandas as pd

    m = result.ranks[0]
    table = {"one process": m["reference"]} if "reference" in m else {}
    table |= {LABELS[g["rung"]]: g["losses"] for g in m["rungs"]}
    frame = pd.DataFrame(table)
    frame.index.name = "step"
    return frame


def loss_verdict(result: Any, tolerance: float) -> Verdict:
    """Pass when every rung's loss, at every step and on every rank, is within ``tolerance`` of the reference."""
    diffs = {}
    for rung in _rungs(result):
        diffs[rung] = max(abs(a - b) for r in range(len(result.ranks))
                          for a, b in zip(_rung(result, r, rung)["losses"], result.ranks[r]["reference"]))
    worst = max(diffs, key=diffs.get)
    steps = len(result.ranks[0]["reference"])
    ok = all(v <= tolerance for v in diffs.values())
    text = (f"Every rung trained like the one-process reference: over {steps} steps the largest loss difference "
            f"was {diffs[worst]:.2g} ({LABELS[worst]}), within the tolerance of {tolerance:g}." if ok else
            f"{', '.join(LABELS[r] for r, v in diffs.items() if v > tolerance)} left the reference by more than "
            f"{tolerance:g} (largest: {diffs[worst]:.2g}, {LABELS[worst]}): that rung computes something else.")
    return Verdict("ladder.loss", "pass" if ok else "fail", text, {"max_abs_diff": diffs, "tolerance": tolerance},
                   _where(result))


def memory_check_table(result: Any):  # -> pandas.DataFrame
    """Per rung and rank: the counted bytes of parameters, gradients and optimizer state next to the model's
    (MB); on a GPU also the memory allocated after a step, what the forward pass added, the peak of the
    timed steps and the model's estimate of that peak."""
    import pandas as pd

    s = Setup.from_result(result.ranks[0])
    shapes = s.shapes()
    rows = []
    for rung in _rungs(result):
        for rank in range(len(result.ranks)):
            g, m = _rung(result, rank, rung), rank_memory(s, rung, rank, shapes)
            held = g["held"]
            row = {"rung": LABELS[rung], "rank": rank,
                   "counted state": (held["params"] + held["grads"] + held["optimizer"]) / 1e6,
                   "model state": m.model_state / 1e6,
                   "counted − model (bytes)": held["params"] + held["grads"] + held["optimizer"] - m.model_state}
            if "peak_allocated" in g:
                row |= {"allocated after a step": g["allocated_after_step"] / 1e6,
                        "forward added": g["forward_added"] / 1e6, "peak": g["peak_allocated"] / 1e6,
                        "peak (model)": m.device_peak / 1e6, "peak gap": g["peak_allocated"] / m.device_peak - 1}
            rows.append(row)
    return pd.DataFrame(rows).set_index(["rung", "rank"])


def memory_verdict(result: Any) -> Verdict:
    """Pass when the counted parameters, gradients and optimizer state equal the model's, byte for byte,
    for every rung and rank."""
    s = Setup.from_result(result.ranks[0])
    shapes = s.shapes()
    wrong = []
    for rung in _rungs(result):
        for rank in range(len(result.ranks)):
            held, m = _rung(result, rank, rung)["held"], model_state(rung, shapes, s.world, rank)
            wrong += [f"{LABELS[rung]} rank {rank} {k}: counted {held[k]}, model {m[k]}" for k in m if held[k] != m[k]]
    n = len(_rungs(result)) * len(result.ranks)
    if wrong:
        return Verdict("ladder.memory", "fail", "The memory model is wrong: " + "; ".join(wrong[:4]),
                       {"mismatches": len(wrong), "checked": n}, _where(result))
    return Verdict("ladder.memory", "pass", f"For all {n} rung × rank pairs the bytes of parameters, gradients and "
                   "optimizer state the rank holds, counted tensor by tensor, equal the memory model exactly.",
                   {"mismatches": 0, "checked": n}, _where(result))


def peak_verdict(result: Any) -> Verdict:
    """How far the GPU's measured peak is from the model's estimate, per rung (information: the estimate
    leaves out the allocator's rounding and library workspaces)."""
    s = Setup.from_result(result.ranks[0])
    shapes = s.shapes()
    gaps = {}
    for rung in _rungs(result):
        peaks = [_rung(result, r, rung).get("peak_allocated") for r in range(len(result.ranks))]
        if None in peaks:
            return Verdict("ladder.peak", "info", "No peak to compare: on the CPU there is no device allocator to "
                           "read; the model state above is the part counted exactly.", {}, _where(result))
        model = max(rank_memory(s, rung, r, shapes).device_peak for r in range(len(result.ranks)))
        gaps[rung] = max(peaks) / model - 1
    worst = max(gaps, key=lambda r: abs(gaps[r]))
    text = (f"Measured peaks were between {min(gaps.values()):+.0%} and {max(gaps.values()):+.0%} of the model's "
            f"estimate (largest gap: {LABELS[worst]}).")
    return Verdict("ladder.peak", "info", text, {"gap": gaps}, _where(result))


def bytes_table(result: Any):  # -> pandas.DataFrame
    """Per rung and rank: bytes sent per step counted from the collectives, from the formula, relative to DDP,
    and (GPU) NVML's NVLink TX bytes per step with their ratio to the counted bytes. MB."""
    import pandas as pd

    s = Setup.from_result(result.ranks[0])
    shapes = s.shapes()
    ddp = sum(sent_per_step(s, "ddp", 0, shapes).values())
    rows = []
    for rung in _rungs(result):
        for rank in range(len(result.ranks)):
            g = _rung(result, rank, rung)
            formula = sum(sent_per_step(s, rung, rank, shapes).values())
            tx = g.get("nvlink_tx_bytes_per_step")
            rows.append({"rung": LABELS[rung], "rank": rank,
                         "collectives": ", ".join(f"{k} ×{int(v['calls'])}" for k, v in g["collectives"].items()),
                         "counted": g["sent_per_step"] / 1e6, "formula": formula / 1e6, "× DDP": formula / ddp,
                         "NVLink TX (NVML)": tx / 1e6 if tx is not None else None,
                         "NVML ÷ counted": tx / g["sent_per_step"] if tx is not None and g["sent_per_step"] else None})
    return pd.DataFrame(rows).set_index(["rung", "rank"])


def bytes_verdict(result: Any) -> Verdict:
    """Pass when the bytes counted from the collectives of a step equal the formula for every rung and rank."""
    s = Setup.from_result(result.ranks[0])
    shapes = s.shapes()
    off = []
    for rung in _rungs(result):
        for rank in range(len(result.ranks)):
            counted, formula = _rung(result, rank, rung)["sent_per_step"], sum(sent_per_step(s, rung, rank, shapes).values())
            if not math.isclose(counted, formula, rel_tol=1e-9, abs_tol=0.5):
                off.append(f"{LABELS[rung]} rank {rank}: counted {counted:.0f}, formula {formula:.0f}")
    factors = {r: sum(sent_per_step(s, r, 0, shapes).values()) / sum(sent_per_step(s, "ddp", 0, shapes).values())
               for r in _rungs(result)}
    if off:
        return Verdict("ladder.bytes", "fail", "The formula misses collectives: " + "; ".join(off[:4]),
                       {"factors": factors}, _where(result))
    text = ("The collectives of one step sent exactly the bytes the formula gives, on every rank; relative to DDP: "
            + ", ".join(f"{LABELS[r]} {f:.2f}×" for r, f in factors.items()) + ".")
    return Verdict("ladder.bytes", "pass", text, {"factors": factors}, _where(result))


def step_times(result: Any, rung: str) -> list[float]:
    """Seconds per step of each timed repeat, the slower rank's (a synchronous step waits for it)."""
    per_rank = [_rung(result, r, rung)["step_s"] for r in range(len(result.ranks))]
    return [max(values) for values in zip(*per_rank)]


def time_table(result: Any, traces_of: Any = None):  # -> pandas.DataFrame
    """Per rung: the median step time and its spread; with ``traces_of`` (a function from a trace file to a
    ``traces.Split``), the communication time, and the part of it no compute hid, per step."""
    import pandas as pd

    rows = []
    for rung in _rungs(result):
        times = step_times(result, rung)
        row = {"rung": LABELS[rung], "step (ms)": 1e3 * statistics.median(times),
               "spread": (max(times) - min(times)) / statistics.median(times)}
        if traces_of is not None and _rung(result, 0, rung).get("trace"):
            splits = [traces_of(Path(result.run_dir) / _rung(result, r, rung)["trace"]) for r in range(len(result.ranks))]
            row |= {"traced step (ms)": max(x.step_ms for x in splits), "communication (ms)": max(x.comm_ms for x in splits),
                    "exposed (ms)": max(x.exposed_ms for x in splits),
                    "exposed share": max(x.exposed_share for x in splits)}
        rows.append(row)
    return pd.DataFrame(rows).set_index("rung")


def link_comparisons(direct: Any, staged: Any) -> dict[str, Any]:
    """Per rung: step times over the direct link against host-staged (``NCCL_P2P_DISABLE=1``), by
    :func:`~nvtutorial.report.verdict.compare`."""
    return {rung: compare(step_times(direct, rung), step_times(staged, rung)) for rung in _rungs(direct)
            if rung in _rungs(staged)}


def link_verdicts(direct: Any, staged: Any) -> list[Verdict]:
    """One verdict per rung: how much slower its step became without the direct GPU-to-GPU path."""
    out = []
    where = f"{_where(direct)}; host-staged: NCCL_P2P_DISABLE=1"
    for rung, c in link_comparisons(direct, staged).items():
        text = c.describe("s", f"{LABELS[rung]}, direct link → host-staged")
        out.append(comparison_verdict(f"ladder.link.{rung}", c, text, where, rung=rung))
    return out


def needs_link_verdict(direct: Any, staged: Any) -> Verdict:
    """Which rung lost the most when the direct link was taken away (information for the summary)."""
    comps = link_comparisons(direct, staged)
    worst = max(comps, key=lambda r: comps[r].ratio)
    least = min(comps, key=lambda r: comps[r].ratio)
    text = (f"Without the direct link {LABELS[worst]} slowed down most ({comps[worst].ratio:.2f}× its step time, "
            f"{comps[worst].status}), {LABELS[least]} least ({comps[least].ratio:.2f}×, {comps[least].status}).")
    return Verdict("ladder.link", "info", text, {"ratio": {r: c.ratio for r, c in comps.items()},
                                                 "status": {r: c.status for r, c in comps.items()}},
                   f"{_where(direct)}; host-staged: NCCL_P2P_DISABLE=1")


def checkpoint_verdict(result: Any) -> Verdict:
    """Pass when the resumed run repeats the uninterrupted one and both loads give the saved weights exactly."""
    c = result.ranks[0]["checkpoint"]
    same = c["continued"] == c["resumed"]
    exact = c["resume_max_weight_diff"] == 0 and c["single_process_max_weight_diff"] == 0
    numbers = {k: c[k] for k in ("resume_max_weight_diff", "single_process_max_weight_diff")}
    numbers["max_loss_diff"] = max(abs(a - b) for a, b in zip(c["continued"], c["resumed"]))
    if same and exact:
        return Verdict("ladder.checkpoint", "pass", "The sharded checkpoint resumed exactly: the reloaded shards equal "
                       "the saved weights bit for bit, the resumed steps repeat the uninterrupted losses exactly, and "
                       "the single-process model loaded from it holds the same weights.", numbers, _where(result))
    return Verdict("ladder.checkpoint", "fail", "The checkpoint did not round-trip: "
                   f"largest weight difference {numbers['resume_max_weight_diff']} after resuming, "
                   f"{numbers['single_process_max_weight_diff']} in one process; largest loss difference "
                   f"{numbers['max_loss_diff']}.", numbers, _where(result))


# --------------------------------------------------------------------------------------------
# How big can it get


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


def fit_table(s: Setup, device_budget: float, host_budget: float, rungs: Sequence[str] = RUNGS):
    """Per rung: the most blocks that fit (at most :data:`LAYER_LIMIT`), the parameters that makes
    (millions), the predicted device peak and the model state per rank (MB), and where that state lives."""
    import pandas as pd

    one = dataclasses.replace(s, layers=1).shapes()
    rows = []
    for rung in rungs:
        layers = largest(s, rung, device_budget, host_budget)
        t = dataclasses.replace(s, layers=layers)
        shapes = with_layers(one, layers)
        peak = max(rank_memory(t, rung, r, shapes).device_peak for r in range(s.world)) if layers else None
        rows.append({"rung": rung, "label": LABELS[rung], "layers": layers,
                     "parameters (M)": sum(_numel(sh) for _, sh in shapes) / 1e6 if layers else 0.0,
                     "device peak (MB, model)": peak / 1e6 if peak else None,
                     "model state per rank (MB)": max(sum(model_state(rung, shapes, s.world, r).values())
                                                      for r in range(s.world)) / 1e6 if layers else None,
                     "state in": "host" if rung == "fsdp_offload" else "device"})
    return pd.DataFrame(rows).set_index("rung")


def fit_verdict(result: Any, device_budget: float) -> Verdict:
    """Did the largest model of the fit table (the run's ``fit`` record) run, and did its memory stay within
    the budget?"""
    records = [m["fit"] for m in result.ranks]
    rung, layers = records[0]["rung"], records[0]["layers"]
    s = dataclasses.replace(Setup.from_result(result.ranks[0]), layers=layers)
    shapes = s.shapes()
    model = max(rank_memory(s, rung, r, shapes).device_peak for r in range(s.world))
    counted = [sum(g["held"][k] for k in ("params", "grads", "optimizer")) for g in records]
    exact = counted == [rank_memory(s, rung, r, shapes).model_state for r in range(s.world)]
    numbers = {"rung": rung, "layers": layers, "parameters": sum(_numel(sh) for _, sh in shapes),
               "budget": device_budget, "model_peak": model, "state_exact": exact}
    peaks = [g.get("peak_allocated") for g in records]
    if None in peaks:
        return Verdict("ladder.fit", "pass" if exact else "fail",
                       f"{LABELS[rung]} with {layers} blocks ({numbers['parameters'] / 1e6:.2f} M parameters) ran; "
                       f"its counted model state {'equals' if exact else 'differs from'} the model. On the CPU there is "
                       f"no device memory to run out of: that it fits the budget of {device_budget / 1e6:.0f} MB "
                       f"per rank is the model's arithmetic ({model / 1e6:.1f} MB predicted).", numbers, _where(result))
    peak = max(peaks)
    numbers |= {"peak": peak, "gap": peak / model - 1}
    ok = peak <= device_budget and exact
    return Verdict("ladder.fit", "pass" if ok else "fail",
                   f"{LABELS[rung]} with {layers} blocks ({numbers['parameters'] / 1e9:.2f} B parameters) ran with a "
                   f"peak of {peak / 1e9:.1f} GB per rank ({numbers['gap']:+.0%} against the model's "
                   f"{model / 1e9:.1f} GB), {'within' if peak <= device_budget else 'over'} the budget of "
                   f"{device_budget / 1e9:.1f} GB; counted model state {'equals' if exact else 'differs from'} the model.",
                   numbers, _where(result))
