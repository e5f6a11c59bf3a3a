"""What notebooks 05 and 06 run on one GPU, timed, with the verdicts the notebooks draw from it (issue 28, review N5).

    python scripts/one_gpu_05_06.py OUT        # about 40 s on one H200 or H100; OUT/05.json and OUT/06.json

``06``: the out-of-memory demo and the input pipeline as notebook 06 launches them on one GPU (``lab.measure_parts``
on its plan's parts: one NCCL process on the GPU runs both, the loader with the parameters cell's ``one_gpu`` worker
counts and windows) at the lesson's sizes and at the small ones (``profile="ci"`` on a GPU: the step must still be
large enough for the cap to bite), with C17, C19, C20, the fixes, checkpointing's cost, the allocator's settings after
the fragmentation case (review S1), and the launch's wall time (review S4: notebook 06 must stay within 32 s on one
H100). ``05``: notebook 05's run on one GPU (one rank of the lesson's step at the lesson's sizes, ``lab.ONE_GPU``)
under ``lab.watch``: its wall time, phases, memory snapshot, the samples the telemetry took and C13. The sizes are
read from each notebook's ``parameters`` cell and placed by its ``course.plan`` on this machine, as the notebook does.
Each part writes its file when it ends.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import sys
import time
from pathlib import Path

import nbformat

import nvtutorial
from nvtutorial import course

ROOT = Path(__file__).resolve().parent.parent


def sizes(notebook: str) -> dict:
    """The ``SIZES`` literal of a notebook's parameters cell."""
    nb = nbformat.read(ROOT / "notebooks" / f"{notebook}.ipynb", as_version=4)
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    tree = ast.parse(cell.source)
    return next(ast.literal_eval(n.value) for n in tree.body if n.targets[0].id == "SIZES")  # type: ignore[attr-defined]


def verdict(v) -> dict:
    return {"key": v.key, "status": v.status, "text": v.text, "where": v.where}


def part_06(profile: str) -> dict:
    from nvtutorial.chapters.ch06_pitfalls import lab
    from nvtutorial.chapters.ch06_pitfalls import report_measured as rm

    plan = course.plan("06_pitfalls", profile, {"data loading": "one GPU", "out of memory": "one GPU"})
    loader, oom = plan["data loading"], plan["out of memory"]
    p_loader, p_oom = sizes("06_pitfalls")[loader.profile], sizes("06_pitfalls")[oom.profile]
    p_loader = {**p_loader, **p_loader.get("one_gpu", {})}  # as the notebook's plan cell does on one GPU
    t0 = time.perf_counter()
    measured, run = lab.measure_parts(loader, oom, p_loader, p_oom)
    wall = time.perf_counter() - t0
    out = {"parts": [dataclasses.asdict(loader), dataclasses.asdict(oom)], "label": run.label, "wall_s": wall}
    out["rank_wall_s"] = run.ranks[0].get("wall_s") if isinstance(run.ranks[0], dict) else None
    out["skipped"] = rm.oom_skipped(run)
    if out["skipped"] is None:
        frames = rm.oom_frames(run)
        out["tables"] = {name: frame.to_dict("records") for name, frame in frames.items()}
        out["oom_message"] = rm.oom_message(run)
        out["allocator"] = rm.allocator_line(run)
    out["loader"] = rm.loader_frame(measured).to_dict("records")
    out["verdicts"] = [
        verdict(f(run))
        for f in (rm.verdict_c17, rm.verdict_c19, rm.verdict_c20, rm.oom_fixes_verdict, rm.checkpointing_cost)
    ]
    return out


def part_05() -> dict:
    from nvtutorial.chapters.ch05_profiling import lab
    from nvtutorial.chapters.ch05_profiling import report as profiling
    from nvtutorial.chapters.ch05_profiling import report_monitoring as monitoring

    watch = course.plan("05_profiling", "auto", {"telemetry and the memory snapshot": "one GPU"})[
        "telemetry and the memory snapshot"
    ]
    p = sizes("05_profiling")[watch.profile]
    t0 = time.perf_counter()
    with lab.watch(watch, interval=p["interval"]) as tel:
        run = nvtutorial.run(
            "profile_step",
            nproc=1,
            backend=watch.backend,
            params=lab.params_from(p, **lab.ONE_GPU),
            timeout=p["timeout"],
        )
    wall = time.perf_counter() - t0
    m = run.ranks[0]
    return {
        "label": run.label,
        "wall_s": wall,
        "rank_wall_s": m.get("wall_s") if isinstance(m, dict) else None,
        "phases": [(ph["name"], ph["end"] - ph["start"]) for ph in m["phases"]],
        "step_ms": m["step_ms"],
        "memory_snapshot": m["memory_snapshot"],
        "memory": profiling.memory_frame(run).to_dict("records"),
        "telemetry": tel.summary(),
        "telemetry_samples": len(tel.frame()),
        "dmon_lines": len(tel.dmon_text.splitlines()),
        "c13": verdict(monitoring.verdict_c13_from(tel, run, profiling.probe_traffic(tel, run))),
    }


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    machine = course.Machine.here()
    print(f"machine: {machine}", flush=True)
    record = {"machine": vars(machine)}
    for profile in ("auto", "ci"):
        record[profile] = part_06(profile)
        (out / "06.json").write_text(json.dumps(record, indent=1, default=str))
        print(f"06 {profile}: {record[profile]['wall_s']:.1f} s", flush=True)
    five = {"machine": vars(machine), **part_05()}
    (out / "05.json").write_text(json.dumps(five, indent=1, default=str))
    print(f"05: {five['wall_s']:.1f} s", flush=True)


if __name__ == "__main__":
    main()
