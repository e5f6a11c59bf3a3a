"""Chapter 5's workload (profile_step): its rounds, its parameters, and runs on gloo ranks."""

from __future__ import annotations

import dataclasses

import pytest

import nvtutorial
from nvtutorial import tracesplit
from nvtutorial.chapters.ch05_profiling import lab as profiling
from nvtutorial.chapters.ch05_profiling import report as profreport
from nvtutorial.chapters.ch05_profiling import report_traces as traces
from nvtutorial.chapters.ch05_profiling import report_wire as wire
from nvtutorial.chapters.ch05_profiling import schema
from tests.helpers.trace_files import notebook_sizes


@pytest.mark.parametrize(
    ("params", "words"), [({"sweep": (0,)}, "sweep"), ({"rounds": 1}, "2 repeats"), ({"amp": "fp16"}, "amp")]
)
def test_bad_parameters_fail_before_launch(params, words):
    with pytest.raises(nvtutorial.LaunchError, match=words):
        nvtutorial.launch.prepare("profile_step", params=params)


def test_profile_step_run_reports_every_rank_consistently(runs_dir):
    res = nvtutorial.run(
        "profile_step",
        nproc=2,
        output="none",
        timeout=180,
        params={
            "model": "tiny",
            "batch_size": 2,
            "image_size": 16,
            "warmup": 1,
            "rounds": 2,
            "round_steps": 1,
            "steps": 2,
            "wire_repeats": 2,
            "sweep": (2,),
            "sweep_rounds": 2,
            "sweep_steps": 1,
            "probe_mb": 1,
            "probe_s": 0.05,
        },
    )
    assert [p.name for p in traces.rank_traces(res.run_dir)] == ["trace_rank0.json", "trace_rank1.json"]
    assert not list(res.run_dir.glob("sweep_*.json")), "the sweep's traces are removed"
    ranks = res.ranks_as(schema.Rank)  # what each rank wrote, read back through the workload's schema
    assert [list(m) for m in res.ranks] == [[f.name for f in dataclasses.fields(schema.Rank)]] * 2  # its layout
    links = []
    for rank, m in enumerate(ranks):
        s = m.split
        assert s is not None and s.link is not None and s.link.wait_ms is not None, s
        assert s.source == ("gpu" if res.env.is_gpu else "cpu") and s.steps == 2 and s.rank == rank
        assert s.comm_ms > 0, f"rank {rank}: no communication found in its trace"
        assert len(s.per_step) == 2
        assert set(s.phase_ms) == {"forward", "backward", "optimizer"}
        assert m.step_ms_repeats is not None and set(m.step_ms_repeats.measured()) == {"ddp", "no_sync", "local"}
        assert all(len(v) == 2 for v in m.step_ms_repeats.measured().values()) and len(m.profiled_ms) == 2
        assert m.wire is not None and len(m.wire.ms) == 2 and m.wire.bytes == 4 * m.parameters
        assert [r.batch for r in m.sweep] == [2]
        assert m.sweep[0].link is not None and m.sweep[0].link.wait_ms is not None
        assert m.probe is not None and m.probe.count >= 1
        assert [p.name for p in m.phases][:3] == [
            "setup + warm-up",
            "A/B rounds: DDP, no_sync, 1-GPU",
            "profiled steps",
        ]
        links.append(s.link)
    # Both ranks saw the same collectives; the split the workload computed is the one the parent computes.
    assert links[0].collectives == links[1].collectives and (links[0].collectives or 0) >= 1
    again = tracesplit.pair(traces.rank_traces(res.run_dir))
    assert [w.wait_ms for w in again] == pytest.approx([link.wait_ms for link in links])
    # The CPU-valid verdicts, on their values.
    assert profreport.check_split(res).status == "pass"
    split = profreport.verdict_split(res)
    assert split.numbers["source"] == "paired traces" and len(split.numbers["comm_ms"]) == 2
    # Timings on shared cores decide nothing here: each verdict must follow its rule from this run's repeats.
    overhead = profreport.verdict_overhead(res)
    comps = profreport._overhead_comparisons(res)
    assert len(comps) == 2 and all(comps) and overhead.status == wire.joint_status([c.status for c in comps])
    assert overhead.numbers["ratio"] == [c.ratio for c in comps]
    assert overhead.numbers["overhead_ms"] == [m["step_ms_profiled"] - m["step_ms"] for m in res.ranks]
    trust = profreport.verdict_trust(res)
    t = trust.numbers
    assert t["trustworthy"] is (False if t["ranks_failing"] else None if t["ranks_undecided"] else True)
    assert trust.status == ("undecided" if t["trustworthy"] is None else "info")
    for v, baseline in ((profreport.verdict_exchange(res), "no_sync"), (profreport.verdict_second_gpu(res), "local")):
        cs = wire.comparisons([m.step_ms_repeats for m in ranks], baseline)
        assert v.numbers["rank_status"] == [c.status for c in cs] and v.status == wire.joint_status(
            v.numbers["rank_status"]
        )
        assert v.numbers["extra_ms"] == [c.candidate - c.baseline for c in cs]
    c12 = traces.verdict_c12(res)
    if not res.env.is_gpu:
        assert c12.status == "unverifiable"
    assert len(c12.numbers["waiting_share"]) == 2


def test_rounds_run_the_step_not_counted_to_its_end():
    """Each round runs one step of each kind that is not counted, through the same timer as the counted ones: on a
    GPU an unsynchronised step's kernels ran into the first timed step (70 ms instead of 42 on one H100)."""
    from nvtutorial.chapters.ch05_profiling import workload

    calls: list[str] = []

    def timed(fn):
        fn()
        calls.append("synced")
        return len(calls) / 1e3  # seconds: each call to the timer 2 ms more than the one before

    steps = {"ddp": lambda: calls.append("ddp"), "no_sync": lambda: calls.append("no_sync")}
    ends: list[float] = []
    out = workload.rounds(steps, 2, 2, timed, ends)
    kinds = [c for c in calls if c != "synced"]
    assert calls == [x for k in kinds for x in (k, "synced")]  # every step ends on the device before the next
    assert kinds == ["ddp"] * 3 + ["no_sync"] * 3 + ["no_sync"] * 3 + ["ddp"] * 3  # the order rotates by round
    assert out["ddp"]["all"] == [4.0, 6.0, 22.0, 24.0] and out["no_sync"]["all"] == [10.0, 12.0, 16.0, 18.0]
    assert out["ddp"]["repeats"] == [5.0, 23.0] and len(ends) == 8  # a round's median; an end per counted step


def test_one_rank_of_profile_step_has_no_wire_and_keeps_what_the_telemetry_needs(runs_dir):
    """The world of one that notebook 05 watches on one GPU (here gloo on the CPU): no all-reduce of the gradients
    to time, so no wire and no phase named after it; the steps, their phases and ends, the memory stay."""
    sizes = {**notebook_sizes("05_profiling.ipynb")["ci"], "steps": 1}  # ONE_GPU: 2 rounds of 3 steps a kind
    res = nvtutorial.run(
        "profile_step", nproc=1, output="none", timeout=180, params=profiling.params_from(sizes, **profiling.ONE_GPU)
    )
    (m,) = res.ranks_as(schema.Rank)
    assert m.wire is None and m.split is None and m.trace is None and m.sweep == () and m.probe is None
    assert [p.name for p in m.phases] == ["setup + warm-up", "timed rounds (one rank)", "NVTX-marked steps"]
    assert len(m.step_ends) == 2 * 2 * 3 and m.step_ms_repeats is not None and m.step_ms_repeats.local is None
    assert len(m.step_ms_repeats.ddp) == len(m.step_ms_repeats.no_sync) == 2  # one median per round
    assert m.memory_snapshot.written is res.env.is_gpu
    assert profreport.wire_frame(res).empty
