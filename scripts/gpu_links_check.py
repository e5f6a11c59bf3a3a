"""Notebook 01's part "one GPU's links" on this machine's GPU 0, at the lesson's sizes (under 30 s on one H200).

    python scripts/gpu_links_check.py OUT

Runs ``gpu_links`` (one rank, NCCL, GPU 0: pinned and pageable copies both ways over PCIe, and a copy inside the
GPU's memory; 16 MiB, 256 MiB and 1 GiB; the run records the GPU's L2 size), writes the run's folder under ``OUT/``
(``gpu_links-<id>/``, which ``reference/h100x1/runs/`` or ``reference/h200x1/runs/`` takes as it is, by the GPU it ran
on: the notebook shows the newest one there on machines without a GPU) and ``OUT/gpu_links.json``: the machine, what
NVML predicts, every row, the L2 size, the verdict and the wall time.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from pathlib import Path


def main(out: str) -> int:
    folder = Path(out).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    os.environ["NVTUTORIAL_RUNS_DIR"] = str(folder)
    from nvtutorial import course
    from nvtutorial.chapters.ch01_hardware import lab, report_gpu

    t0 = time.monotonic()
    plan = course.plan("01_hardware", "auto", {"one GPU's links": "one GPU"})
    part = plan["one GPU's links"]
    limits = lab.gpu_limits(part)
    run = lab.gpu_links({"sizes": (16 << 20, 256 << 20, 1 << 30)}, part)
    verdict = report_gpu.verdict(run, limits)
    report = {
        "machine": course.where(),
        "part": dataclasses.asdict(part),
        "limits": dataclasses.asdict(limits),
        "label": run.label,
        "run_dir": str(run.result.run_dir) if run.result else None,
        "rows": [dataclasses.asdict(r) for r in run.rows],
        "l2_bytes": run.l2_bytes,
        "verdict": verdict.to_dict(),
        "wall_s": round(time.monotonic() - t0, 2),
    }
    (folder / "gpu_links.json").write_text(json.dumps(report, indent=1))
    print(limits.describe(), verdict, f"{report['wall_s']} s", sep="\n")
    return 0 if run.here else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
