"""Made-up results of the ``pitfalls`` workload (chapter 06), typed as the workload returns them
(:class:`nvtutorial.chapters.ch06_pitfalls.schema.Rank`; the 2026-11-30 layout: ``TrapsRank``), for the readers'
tests."""

from __future__ import annotations

from typing import Literal, cast

from nvtutorial.chapters.ch06_pitfalls import schema
from tests.helpers.typed_runs import run_of


def rows(rates: dict, pinned: dict | None = None) -> list[schema.LoaderRow]:
    """Loader rows: ``{num_workers: (rate of each window, ...)}``, unpinned then pinned."""
    out = [schema.LoaderRow(w, False, 2 + 2 * w, tuple(float(x) for x in r)) for w, r in rates.items()]
    out += [schema.LoaderRow(w, True, 2 + 2 * w, tuple(float(x) for x in r)) for w, r in (pinned or {}).items()]
    return out


def loader(rows_, gpus=2, rule=8, step=(1000.0, 1010.0), shards=None, ranks=2) -> schema.Loader:
    return schema.Loader(
        rows=tuple(rows_),
        step_only_samples_per_s=tuple(step),
        cpu_cores=32,
        ranks=ranks,
        gpus=gpus,
        rule_of_thumb_workers=rule,
        batch=8,
        image_size=32,
        model="tiny",
        steps=2,
        shards=shards,
    )


def loader_run(rows0, rows1=None, gpus=2, rule=8, step=(1000.0, 1010.0), label="2× test GPU", env_gpu=None, **kw):
    """A run of both ranks' loaders (``env_gpu=None``: a run without an environment block); ``rows1=()``: one rank."""
    each = (rows0,) if rows1 == () else (rows0, rows1 if rows1 is not None else rows0)
    ranks = [
        schema.Rank(parts=("dataloader",), dataloader=loader(r, gpus, rule, step, ranks=len(each), **kw)) for r in each
    ]
    return run_of(*ranks, label=label, gpu=env_gpu, workload="pitfalls", params={"parts": ["dataloader"]})


def old_loader_run(rates0: dict, rates1: dict | None = None, consumes=(1000.0, 1000.0), pinned=None, shards=None):
    """A run of the 2026-11-30 workload: one loader-alone rate per configuration and what the step alone consumes."""

    def block(rates: dict, step: float) -> schema.TrapsRank:
        rows_ = [(w, False, r) for w, r in rates.items()] + [(w, True, r) for w, r in (pinned or {}).items()]
        alone = schema.LoaderAlone(
            rows=tuple(schema.LoaderAloneRow(w, pin, 0.1, float(r), float(r)) for w, pin, r in rows_),
            cpu_cores=32,
            ranks=2,
            step_consumes_samples_per_s=step,
            knee_workers=None,
            shards=shards,
            rule_of_thumb_workers=8,
        )
        return schema.TrapsRank(traps=("dataloader",), fixed=False, debug="OFF", seconds={}, dataloader=alone)

    ranks = [block(rates0, consumes[0]), block(rates1 if rates1 is not None else rates0, consumes[1])]
    return run_of(*ranks, label="2× test GPU", workload="pitfalls", params={"trap": ["dataloader"]})


def training_row(variant: str, capped: bool, outcome: str = "fits", times=None, message=None) -> schema.TrainingRow:
    times = tuple(times) if times else None
    assert outcome in ("fits", "OOM"), outcome  # a training row's outcomes
    return schema.TrainingRow(
        variant=variant,
        capped=capped,
        outcome=outcome,
        step_ms=sorted(times)[len(times) // 2] if times else None,
        step_ms_repeats=times,
        message=message,
        peak_allocated_mib=1000.0,
        peak_reserved_mib=1200.0,
    )


def training_rows() -> list[schema.TrainingRow]:
    """The four variants of the demo: no cap, the OOM under the cap, and both fixes under it."""
    return [
        training_row("no cap", False),
        training_row("capped", True, "OOM", message="m1"),
        training_row("2 parts", True),
        training_row("checkpointed", True),
    ]


def states(
    created=600.0,
    alive=600.0,
    alive_reserved=602.0,
    deleted_reserved=602.0,
    after_reserved=2.0,
    deleted_free=1000.0,
    after_free=1600.0,
) -> schema.EmptyCache:
    """The ``empty_cache()`` demo's table, MiB after each step."""
    return schema.EmptyCache(
        rows=(
            schema.MemoryState("start", 0.0, 2.0, 1600.0),
            schema.MemoryState("x = 600 MiB tensor", created, 602.0, 1000.0),
            schema.MemoryState("empty_cache() while x is alive", alive, alive_reserved, 1000.0),
            schema.MemoryState("del x", 0.0, deleted_reserved, deleted_free),
            schema.MemoryState("empty_cache() after del x", 0.0, after_reserved, after_free),
        )
    )


def oom_run(
    fragmentation: dict[str, str] | None = None,
    training=None,
    empty_cache: schema.EmptyCache | None = None,
    label: str = "GPU",
):
    """One rank's out-of-memory demo: ``{config: outcome}`` of the fragmentation case, the training rows."""
    frag = tuple(
        schema.Fragmentation(
            config=k, outcome=cast(Literal["fits", "OOM", "not measured"], v), message="m2" if v == "OOM" else None
        )
        for k, v in (fragmentation if fragmentation is not None else {"default": "OOM"}).items()
    )
    oom = schema.Oom(
        fragmentation=frag,
        empty_cache=empty_cache or states(),
        training=schema.Training(
            cap_mib=4096.0,
            model="full",
            batch=16,
            image_size=256,
            rows=tuple(training if training is not None else training_rows()),
        ),
    )
    return run_of(schema.Rank(parts=("oom",), oom=oom), label=label, workload="pitfalls", params={"parts": ["oom"]})


def skipped_run(label: str = "CPU", message: str = "skipped: needs a GPU"):
    oom = schema.Oom(skipped=message)
    return run_of(schema.Rank(parts=("oom",), oom=oom), label=label, gpu=False, workload="pitfalls")
