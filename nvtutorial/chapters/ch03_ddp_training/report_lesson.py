"""Notebook 03's lesson run, checked: training learns, the ranks' weights stay identical, ``set_epoch`` reshuffles,
validation over the ranks equals one process's (and the source's does not: claim C18, its validation half, with its
prediction graded), a resumed run continues where it stopped. Re-exported by ``report.py``; it imports nothing of it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

from nvtutorial.report.verdict import Verdict
from nvtutorial.results import typed


# --- what the lesson's run and the notebook's %%ranks cells give, typed ---------------------------
@dataclasses.dataclass(frozen=True)
class Epoch:
    """One epoch of the lesson's history (``ddp_train.train``, saved as ``run.metrics["history"]``)."""

    epoch: int
    loss: float
    """Validation loss per pixel over the whole set."""
    iou: float | None = None
    """Validation mean IoU of the shape classes (None: not given)."""
    train_loss: float | None = None
    """Rank 0's mean training loss over the epoch (None: not given)."""
    samples: int | None = None
    """Validation samples counted."""


def epochs_of(history: Sequence[Mapping[str, float]]) -> list[Epoch]:
    """The lesson's history as the run saved it (one mapping per epoch), typed: the one place it is read by name."""
    return [typed(Epoch, h, f"history[{i}]") for i, h in enumerate(history)]


@dataclasses.dataclass(frozen=True)
class Orders:
    """One rank's sampler orders, per epoch: with ``set_epoch`` called, and from a sampler never told the epoch."""

    with_set_epoch: tuple[tuple[int, ...], ...]
    without_set_epoch: tuple[tuple[int, ...], ...]


@dataclasses.dataclass(frozen=True)
class Validation:
    """Notebook 03's validation values (its ``%%ranks`` cell): one process's loss, the sums', the source's."""

    single: float
    """One process over the whole set."""
    source: float
    """The source's code: per-rank mean, all_reduce, no division."""
    world: int
    sums: float | None = None
    """all_reduce of sums and counts, padding skipped."""
    samples_counted: int | None = None
    """Samples the sums counted."""
    samples: int | None = None
    """Samples in the set."""
    mean_of_means: float | None = None
    """The source's value divided by the world size."""
    handed_out: int | None = None
    """Samples DistributedSampler handed out over all ranks (padding included)."""


@dataclasses.dataclass(frozen=True)
class Trained:
    """A run of the lesson's ``train``: the digest of its weights and its history."""

    digest: str
    history: tuple[Epoch, ...]


def _given(value: float | None, what: str) -> float:
    """``value``, or a ValueError naming ``what`` is missing."""
    if value is None:
        raise ValueError(f"{what} is missing")
    return value


# --- the lesson run's checks ---------------------------------------------------------------------
def training_verdict(history: Sequence[Mapping[str, float]], where: str) -> Verdict:
    """Training works: validation loss falls and IoU rises from the first epoch to the last."""
    if len(history) < 2:
        raise ValueError("training_verdict needs at least 2 epochs of history")
    epochs = epochs_of(history)
    a, b = epochs[0], epochs[-1]
    iou_a, iou_b = _given(a.iou, "the first epoch's iou"), _given(b.iou, "the last epoch's iou")
    works = b.loss < a.loss and iou_b > iou_a
    text = (
        f"validation loss {a.loss:.4f} → {b.loss:.4f}, mean IoU {iou_a:.3f} → {iou_b:.3f} from epoch "
        f"{a.epoch} to {b.epoch}: "
        + ("the model learns" if works else "NOT learning: the loss did not fall or the IoU did not rise")
    )
    return Verdict(
        "03.training",
        "pass" if works else "fail",
        text,
        {"loss_first": a.loss, "loss_last": b.loss, "iou_first": iou_a, "iou_last": iou_b},
        where,
    )


def identical_weights_verdict(digests: Sequence[str], where: str) -> Verdict:
    """Every rank ends with bit-identical weights (equal SHA-256 digests of all parameters)."""
    same = len(set(digests)) == 1
    text = (
        f"the weights of all {len(digests)} ranks are bit-identical after training (one SHA-256 of every "
        f"parameter's bits: {digests[0][:12]}…)"
        if same
        else f"the ranks' weights differ ({len(set(digests))} different digests): DDP did not keep them in step"
    )
    return Verdict(
        "03.identical_weights",
        "pass" if same else "fail",
        text,
        {"ranks": len(digests), "distinct_digests": len(set(digests))},
        where,
    )


def sampler_verdict(orders: Sequence[Mapping[str, Sequence[Sequence[int]]]], where: str) -> Verdict:
    """``orders``: per rank ``{"with_set_epoch": [[indices] per epoch], "without_set_epoch": [...]}`` (:class:`Orders`).

    Pass when, within an epoch, the ranks' samples are disjoint; with ``set_epoch`` each epoch is a new
    order; without it every epoch repeats the first."""
    ranks = [typed(Orders, o, f"orders[{i}]") for i, o in enumerate(orders)]
    epochs = len(ranks[0].with_set_epoch)
    disjoint = all(
        not set(a.with_set_epoch[e]) & set(b.with_set_epoch[e])
        for e in range(epochs)
        for i, a in enumerate(ranks)
        for b in ranks[i + 1 :]
    )
    changes = all(len(set(r.with_set_epoch)) == epochs for r in ranks)
    repeats = all(len(set(r.without_set_epoch)) == 1 for r in ranks)
    passed = disjoint and changes and repeats and epochs >= 2
    text = (
        f"over {epochs} epochs: the ranks' samples are {'disjoint' if disjoint else 'NOT disjoint'}; with "
        f"set_epoch every epoch {'has a new order' if changes else 'does NOT get a new order'}; without it "
        f"{'every epoch repeats the first order' if repeats else 'the order changes anyway'}"
    )
    return Verdict(
        "03.set_epoch",
        "pass" if passed else "fail",
        text,
        {"disjoint": disjoint, "new_order_each_epoch": changes, "same_order_without": repeats},
        where,
    )


def validation_verdicts(values: Mapping[str, float], where: str, rtol: float = 1e-5) -> list[Verdict]:
    """The validation comparison of notebook 03 (claim C18, its validation half).

    ``values`` (:class:`Validation`): ``single`` (one process over the whole set), ``sums`` (all_reduce of sums and
    counts, padding skipped), ``source`` (the source's code: per-rank mean, all_reduce, no division), ``world``,
    ``samples_counted`` by the sums and ``samples`` in the set. ``rtol`` covers the different batch
    compositions (a rank's batches are not the single process's), which change the last bits on a GPU.
    """
    v = typed(Validation, values, "values")
    single, source, world = v.single, v.source, int(v.world)
    sums = _given(v.sums, "values' sums")
    equal = abs(sums - single) <= rtol * abs(single) and v.samples_counted == v.samples
    exact = Verdict(
        "03.validation",
        "pass" if equal else "fail",
        (
            f"all_reduce of sums and counts: {sums:.6f} against {single:.6f} from one process over the whole "
            f"set (|Δ| {abs(sums - single):.1e}), {v.samples_counted} samples counted of "
            f"{v.samples}"
        )
        + ("" if equal else ": they must agree"),
        {"sums": sums, "single": single, "rel_diff": abs(sums - single) / abs(single)},
        where,
    )
    ratio = source / single
    off = abs(ratio - 1) > 0.01
    c18 = Verdict(
        "C18",
        "partly" if off else "holds",
        (
            f"the source's `all_reduce(val_loss)` on {world} ranks gives {source:.4f}, {ratio:.2f}× the loss "
            f"({single:.4f}): all_reduce sums and the source never divides. Every rank validating is right; "
            f"the value is the sum of {world} per-rank means"
        )
        if off
        else f"the source's code gives {source:.4f} against {single:.4f} on {world} rank(s)",
        {"source": source, "single": single, "ratio": ratio, "world": world},
        where,
    )
    out = [exact, c18]
    if v.mean_of_means is not None:
        mm = v.mean_of_means
        out.append(
            Verdict(
                "03.mean_of_means",
                "info",
                f"divided by {world} (a mean of per-rank means) it is {mm:.6f}, off by "
                f"{100 * abs(mm / single - 1):.3f} %: DistributedSampler's duplicate counted, and short "
                f"last batches weighted like full ones",
                {"mean_of_means": mm, "single": single},
                where,
            )
        )
    return out


def resume_verdict(
    uninterrupted: Mapping[str, object], resumed: Mapping[str, object], where: str, rtol: float = 1e-3
) -> Verdict:
    """A run resumed from a checkpoint against the uninterrupted run: ``{"digest": ..., "history": [...]}``
    each (:class:`Trained`). Bit-identical weights pass; otherwise the later epochs' validation losses must agree
    within ``rtol`` (a GPU's non-deterministic kernels), or it fails."""
    whole, again = typed(Trained, uninterrupted, "uninterrupted"), typed(Trained, resumed, "resumed")
    later = {h.epoch: h.loss for h in whole.history}
    pairs = [(later[h.epoch], h.loss) for h in again.history if h.epoch in later]
    if not pairs:
        raise ValueError("the resumed run trained no epoch the uninterrupted run has")
    worst = max(abs(a - b) / abs(a) for a, b in pairs)
    first = again.history[0].epoch
    identical = whole.digest == again.digest
    numbers = {"from_epoch": first, "epochs": len(pairs), "max_rel_loss_diff": worst, "identical": identical}
    if identical:
        return Verdict(
            "03.resume",
            "pass",
            f"resumed at epoch {first}: after {len(pairs)} more epoch(s) the weights "
            "are bit-identical to the uninterrupted run's: training continued exactly where it stopped",
            numbers,
            where,
        )
    status = "pass" if worst <= rtol else "fail"
    return Verdict(
        "03.resume",
        status,
        f"resumed at epoch {first}: weights not bit-identical; validation losses within "
        f"{worst:.1e} (relative) of the uninterrupted run's"
        + (" (non-deterministic GPU kernels)" if status == "pass" else ": the checkpoint lost state"),
        numbers,
        where,
    )


SOURCE_VALIDATION_CHOICES = {
    "a": "the loss (×1)",
    "b": "world-size times the loss (×2 on 2 ranks)",
    "c": "half the loss (×0.5 on 2 ranks)",
}
"""Notebook 03's prediction: what the source's ``all_reduce(val_loss)`` returns against one process's loss."""


def grade_source_validation(prediction: str | None, values: Mapping[str, float], where_: str) -> Verdict:
    """Grade the prediction against the run: the choice nearest to the source's value ÷ one process's loss."""
    from nvtutorial.report.predict import grade_choice

    v = typed(Validation, values, "values")
    ratio = v.source / v.single
    world = v.world
    answer = min({"a": 1.0, "b": float(world), "c": 1.0 / world}.items(), key=lambda kv: abs(math.log(ratio / kv[1])))[
        0
    ]
    return grade_choice(
        "03.source validation",
        prediction,
        answer,
        SOURCE_VALIDATION_CHOICES,
        where=where_,
        explanation=f"The source's value is {ratio:.3f}× one process's loss: all_reduce without an op "
        "sums the ranks' means and the source never divides.",
    )
