"""Notebook 06's GPU-only conclusions, recomputed from the committed run on 2× H200 (``reference/h200x2/runs``).

Where each rank waited in the NCCL hang, how the run ended at the process-group timeout, the
flight recorder, and claims C17, C19 and C20: a code change that flips one of them fails here.
The conclusions that hold on the CPU too are asserted on real runs in ``tests/test_pitfalls.py``.
"""

from __future__ import annotations

import json
import types
from pathlib import Path
from typing import Any

import pytest

from nvtutorial.chapters.ch06_pitfalls import report as rp
from nvtutorial.chapters.ch06_pitfalls import report_measured as rm
from nvtutorial.report import claims
from nvtutorial.results import RunResult
from tests.helpers import pitfalls_results as made
from tests.helpers.paths import ROOT

REFERENCE = ROOT / "reference" / "h200x2"
RUNS = REFERENCE / "runs"

OLD_WORKLOAD_LINES = {
    # nvtutorial/chapters/ch06_pitfalls/workload.py at 15fcf4b, the commit the committed 06 reference ran from
    (
        "pitfalls.py",
        135,
    ): "loss = training.train_step(s, images, masks).item()  # .item(): the usual logging, and a sync",
}
"""The one source line the committed reference's stacks point at whose file has changed since."""


def _result(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "result.json").read_text())


def _as_result(run_dir: Path) -> Any:
    """The parts of a committed run the readers use, with its log files found in its folder."""
    data = _result(run_dir)
    ranks = [m.get("metrics", m) for m in data.get("ranks", [])]
    env = data.get("env") or {}
    label = (
        "2× H200 reference run"
        if not env
        else f"{env.get('world_size')}× {env.get('device_names', ['?'])[0]} · {env.get('link')} · "
        f"NCCL {env.get('nccl')}"
    )
    return types.SimpleNamespace(
        run_dir=run_dir,
        ranks=ranks,
        error=data.get("error"),
        ok=data.get("error") is None,
        wall_s=data["wall_s"],
        label=label,
        params=data.get("params", {}),
        log_files={int(r): run_dir / f"rank{r}.log" for r in data.get("log_files", {})},
    )


def _runs(predicate) -> list[Path]:
    """Committed runs whose ``(result.json, folder)`` satisfy ``predicate``, newest first."""
    found = [p.parent for p in RUNS.glob("*/result.json") if predicate(_result(p.parent), p.parent)]
    return sorted(found, key=lambda p: p.name.split("-", 1)[-1], reverse=True)


def _is_trap_script(data: dict[str, Any]) -> bool:
    return str(data.get("workload", "")).endswith("validation.py") and "--pg-timeout" in (
        (data.get("params") or {}).get("args") or []
    )


def _is_hang(data: dict[str, Any], folder: Path) -> bool:
    """Stacks taken while the validation trap hung: the lesson script's run (its ``trap.json``), or
    the old workload's run left to hang until the launcher's deadline."""
    if _is_trap_script(data):
        return (folder / "trap.json").is_file()
    params = data.get("params") or {}
    return (
        data.get("workload") == "pitfalls"
        and params.get("trap") == ["rank0_validation"]
        and params.get("validation_s", 0) >= 600
        and (data.get("error") or {}).get("type") == "Timeout"
    )


def _is_pg_timeout(data: dict[str, Any], folder: Path) -> bool:
    """The validation trap ended by a short process-group timeout."""
    if _is_trap_script(data):
        return True
    params = data.get("params") or {}
    return (
        data.get("workload") == "pitfalls"
        and params.get("trap") == ["rank0_validation"]
        and params.get("validation_s", 1e9) < 600
    )


def _line_of(frame: dict[str, Any]) -> str:
    """Source lines for the committed stacks: the old workload's from its commit, the lessons' from this checkout."""
    name = Path(frame["file"]).name
    if (name, frame["line"]) in OLD_WORKLOAD_LINES:
        return OLD_WORKLOAD_LINES[(name, frame["line"])]
    parts = Path(frame["file"]).parts
    if "nvtutorial" in parts:
        here = ROOT.joinpath(*parts[parts.index("nvtutorial") :])
        if here.is_file() and "lessons" in here.parts:
            lines = here.read_text().splitlines()
            return lines[frame["line"] - 1].strip() if frame["line"] <= len(lines) else ""
    return ""


def test_the_reference_holds_the_runs_these_tests_read():
    assert _runs(_is_hang), "no committed run of the validation trap left to hang"
    assert _runs(_is_pg_timeout), "no committed run of the validation trap with a short process-group timeout"


def test_on_nccl_the_waiting_rank_blocks_at_item_not_inside_backward():
    run = _runs(_is_hang)[0]
    stacks = rp.rank_stacks(_as_result(run))
    assert set(stacks) == {0, 1} and all(stacks.values()), "every rank's main-thread stack must be in its log"
    waiting = rp.waiting_point(stacks[1], _line_of)
    assert waiting["point"] == "item", waiting
    assert not any(f["func"] in ("backward", "_engine_run_backward") for f in stacks[1]), (
        "no frame of backward may be on the waiting rank's stack: NCCL only queued the all-reduce"
    )
    assert rp.waiting_point(stacks[0], _line_of)["point"] == "validating"
    verdict = rp.hang_verdict(stacks, "nccl", "2× H200", _line_of)
    assert verdict.status == "pass" and verdict.numbers["rank1"] == "item" and verdict.numbers["rank0"] == "validating"
    assert rp.hang_answer(verdict) == "b"


def test_on_nccl_the_short_timeout_ends_the_run_through_the_watchdog():
    result = _as_result(_runs(_is_pg_timeout)[0])
    verdict = rp.timeout_verdict(result, "nccl", 3, result.label)
    assert verdict.status == "pass", verdict.text
    assert verdict.numbers["failed_rank"] == 1 and verdict.numbers["error_type"] == "SIGABRT"
    lines = [line for lines in rp.signature_lines(result, limit=20).values() for line in lines]
    assert any("Watchdog caught collective operation timeout" in line and "OpType=ALLREDUCE" in line for line in lines)


def test_the_flight_recorder_shows_the_waiting_ranks_all_reduces_queued_never_started():
    run = _runs(_is_pg_timeout)[0]
    fr = rp.flight_recorder(run)
    assert set(fr) == {0, 1}
    pending = fr[1]["pending"]
    assert pending and all(e["state"] == "scheduled" and "all_reduce" in e["op"] for e in pending)
    assert fr[0]["last_completed_seq"] == fr[1]["last_completed_seq"], "both ranks completed the same collectives"
    lines = rp.describe_flight_recorder(_as_result(run), "nccl")
    assert "not completed: none" in lines[0] and "(scheduled)" in lines[1]


def _measured_runs() -> list[Path]:
    return _runs(lambda d, _: d.get("workload") == "pitfalls" and d.get("error") is None and bool(d.get("ranks")))


def _measured(part: str) -> RunResult:
    """The newest committed ``pitfalls`` run that measured ``part``, through the project's reader (typed by
    ``report_measured.ranks``)."""
    runs = [r for r in _measured_runs() if part in _result(r)["ranks"][0]]
    assert runs, f"no committed pitfalls run measured {part}"
    return RunResult.load(runs[0] / "result.json")


def test_c19_and_c20_from_2x_h200_agree_with_the_registry():
    result = _measured("oom")
    for decide, claim_id in ((rm.verdict_c19, "C19"), (rm.verdict_c20, "C20")):
        verdict = decide(result)
        assert verdict.status == claims.claim(claim_id).status, verdict.text
    fixes = rm.oom_fixes_verdict(result)
    assert fixes.status == "pass", fixes.text


def test_c17_from_2x_h200_is_not_decided_by_a_run_that_timed_the_loader_alone():
    """The committed sweep timed the DataLoader alone, before the course timed the loop: C17 stays pending a 2× H200
    run, and the verdict says how many workers fed the step instead (tests/test_rules_pitfalls.py pins its numbers)."""
    verdict = rm.verdict_c17(_measured("dataloader"))
    assert verdict.status == "unverifiable", verdict.text
    assert claims.claim("C17").evidence == "pending a 2× H200 run"
    assert verdict.numbers["feed"] == {"0": 4, "1": 4}, "C17 is read on every rank"


@pytest.mark.parametrize("claim_id", ["C17", "C19", "C20", "C21"])
def test_the_registry_names_the_function_that_decides_each_claim(claim_id):
    claim = claims.claim(claim_id)
    assert claim.notebook == "06_pitfalls"
    assert callable(claim.decider())


# --- C20 and the OOM step times: every branch, on results shaped like the GPU run's ----------------------------


def _oom_result(fragmentation: dict[str, str] | None = None, training: list[Any] | None = None) -> Any:
    return made.oom_run(fragmentation or {}, training or [], label="1× test GPU")


SPLIT = "expandable_segments:False,max_split_size_mb:256"


@pytest.mark.parametrize(
    "outcomes, status",
    [
        ({"default": "OOM", "expandable_segments:True": "fits", SPLIT: "fits"}, "holds"),  # the reference's case
        ({"default": "OOM", "expandable_segments:True": "OOM", SPLIT: "fits"}, "holds"),
        ({"default": "OOM", "expandable_segments:True": "fits", SPLIT: "OOM"}, "wrong"),
        ({"default": "fits", "expandable_segments:True": "fits", SPLIT: "fits"}, "unverifiable"),  # nothing to fix
        ({"default": "OOM", "expandable_segments:True": "fits"}, "unverifiable"),  # max_split_size_mb not measured
    ],
)
def test_c20_holds_when_max_split_size_mb_fixes_the_fragmentation(outcomes, status):
    verdict = rm.verdict_c20(_oom_result(outcomes))
    assert verdict.status == status, verdict.text
    assert verdict.numbers["max_split_size_mb"] == outcomes.get(SPLIT)
    assert verdict.numbers["expandable_segments"] == outcomes["expandable_segments:True"]


def test_c20_on_the_reference_is_holds_with_both_remedies():
    result = _measured("oom")
    verdict = rm.verdict_c20(result)
    assert verdict.status == claims.claim("C20").status == "holds"
    assert verdict.numbers == {
        "outcomes": {"default": "OOM", "expandable_segments:True": "fits", SPLIT: "fits"},
        "default": "OOM",
        "max_split_size_mb": "fits",
        "expandable_segments": "fits",
    }


def _step(variant: str, capped: bool, times: list[float] | None, outcome: str = "fits") -> Any:
    return made.training_row(variant, capped, outcome, times)


@pytest.mark.parametrize("ckpt_ms, status", [([51.0, 51.2, 51.1], "slower"), ([50.3, 50.2, 50.4], "no change")])
def test_checkpointing_cost_compares_repeated_steps_without_the_cap(ckpt_ms, status):
    """Both sides of the noise: the plain step's repeats spread 1 % (50.0-50.5 ms), so +2 % is slower, +0.4 % is not."""
    rows = [
        _step("batch 16, no cap", False, [50.0, 50.5, 50.2]),
        _step("batch 16 under the cap (the OOM)", True, None, "OOM"),
        _step("2 × batch 8, gradients accumulated", True, [60.0, 60.1, 60.2]),
        _step("batch 16, activation checkpointing", True, [90.0, 91.0, 90.5]),  # under the cap: not compared
        _step("batch 16, activation checkpointing, no cap", False, ckpt_ms),
    ]
    result = _oom_result({"default": "OOM"}, rows)
    verdict = rm.checkpointing_cost(result)
    assert verdict.status == status, verdict.text
    assert verdict.numbers["baseline"] == 50.2 and verdict.numbers["candidate"] == sorted(ckpt_ms)[1]
    assert rm.oom_fixes_verdict(result).status == "pass"  # the capped rows: OOM, then both fixes fit


def test_checkpointing_cost_is_not_read_from_one_step_after_installing_it():
    """The committed reference timed one capped step right after installing checkpointing: no conclusion from it."""
    result = _measured("oom")
    assert rm.checkpointing_cost(result).status == "info"
    assert (
        rm.oom_fixes_verdict(result).status == "pass"
    )  # older rows without the `capped` flag: every row after the first (TrapsRank.upgrade)
    skipped = made.skipped_run()
    assert rm.checkpointing_cost(skipped).status == "info" and rm.verdict_c20(skipped).status == "unverifiable"


# --------------------------------------------------------------------------- what notebook 06's cells pass
# Notebook 06's cells (the text of the committed 2x H200 copy, which the site shows only while every cell is unchanged)
# pass the plots and readers sections and rows as the run wrote them (``measured.ranks[r]["dataloader"]``, ...): each
# function types them through the schema and gives what it gives from the typed result.
def _pixels(fig):
    """What a figure shows, pixel for pixel (Agg), to tell two drawings apart."""
    import numpy as np

    fig.canvas.draw()
    return np.asarray(fig.canvas.buffer_rgba()).copy()


def _same_figures(a, b) -> bool:
    import matplotlib.pyplot as plt

    try:
        return bool((_pixels(a) == _pixels(b)).all())
    finally:
        plt.close(a)
        plt.close(b)


def test_the_oom_figure_takes_the_training_rows_as_the_run_wrote_them():
    """Cell 4dd5d80e: ``t = oom_run.ranks[0]["oom"]["training"]``, ``ch.plots.oom_fixes(t["rows"], t["cap_mib"],
    oom_run)``. The committed run's rows carry no ``capped`` flag: read as ``TrapsRank.upgrade`` reads them."""
    import matplotlib

    matplotlib.use("Agg")
    from nvtutorial.chapters.ch06_pitfalls import plots as pp
    from nvtutorial.chapters.ch06_pitfalls import schema

    measured = _measured("oom")
    t = measured.ranks[0]["oom"]["training"]
    typed_training = rm.oom(measured).training
    assert typed_training is not None and all("capped" not in row for row in t["rows"])
    assert schema.training_rows_typed(t["rows"]) == typed_training.rows
    assert [r.capped for r in typed_training.rows] == [False, True, True, True]
    assert schema.training_rows_typed(typed_training.rows) == typed_training.rows  # typed rows as they are
    raw_fig, raw_ax = pp.oom_fixes(t["rows"], t["cap_mib"], measured)
    typed_fig, typed_ax = pp.oom_fixes(typed_training.rows, typed_training.cap_mib, measured)
    assert [x.get_text() for x in raw_ax.get_yticklabels()] == [r["variant"] for r in t["rows"]]
    assert [x.get_text() for x in raw_ax.get_yticklabels()] == [x.get_text() for x in typed_ax.get_yticklabels()]
    assert _same_figures(raw_fig, typed_fig)


def test_the_loader_figure_and_enough_workers_take_the_sections_as_the_run_wrote_them():
    """Cell 487a5d83: ``loader_rows = [measured.ranks[r]["dataloader"] ...]``, ``rule=loader_rows[0]
    ["rule_of_thumb_workers"]``, ``knees=[ch.report_measured.enough_workers(d["rows"])["knee"] ...]``,
    ``ch.plots.loader_sweep(loader_rows, ...)``. The committed 2x H200 run timed the loader alone (another layout,
    which these functions refuse, raw as typed); today's layout is a made-up run written as a run writes it
    (``tests/pitfalls_results.py``)."""
    import matplotlib

    matplotlib.use("Agg")
    from nvtutorial.chapters.ch06_pitfalls import plots as pp
    from nvtutorial.chapters.ch06_pitfalls import schema

    old = _measured("dataloader")
    with pytest.raises(ValueError, match="unknown field .*for Loader"):
        schema.loader_typed(old.ranks[0]["dataloader"])
    with pytest.raises(ValueError, match="no rank timed the training loop"):
        rm.loaders(old)

    rows0 = made.rows({0: (100, 102), 4: (400, 404), 8: (402, 398)}, {4: (401, 405), 8: (400, 401)})
    rows1 = made.rows({0: (90, 92), 4: (300, 304), 8: (405, 401)}, {4: (301, 305), 8: (400, 406)})
    measured = made.loader_run(rows0, rows1, step=(410, 412))
    loader_rows = [measured.ranks[r]["dataloader"] for r in range(len(measured.ranks))]
    typed_loaders = rm.loaders(measured)
    assert [schema.loader_typed(d) for d in loader_rows] == typed_loaders
    raw_workers = [rm.enough_workers(d["rows"]) for d in loader_rows]
    assert raw_workers == [rm.enough_workers(d.rows) for d in typed_loaders]
    assert [w["knee"] for w in raw_workers] == [4, 8]
    pin_same = rm.pin_within_noise(measured)
    raw_fig, raw_ax = pp.loader_sweep(
        loader_rows,
        measured,
        rule=loader_rows[0]["rule_of_thumb_workers"],
        knees=[rm.enough_workers(d["rows"])["knee"] for d in loader_rows],
        pin_same=pin_same,
    )
    typed_fig, typed_ax = pp.loader_sweep(
        typed_loaders,
        measured,
        rule=typed_loaders[0].rule_of_thumb_workers,
        knees=[rm.enough_workers(d.rows)["knee"] for d in typed_loaders],
        pin_same=pin_same,
    )
    assert [t.get_text() for t in raw_ax.texts] == [t.get_text() for t in typed_ax.texts]
    assert _same_figures(raw_fig, typed_fig)
