"""costmodel: notebook 10's calibration, problems, pipeline and capstone runs (the chapter's workload).

The workload lives in its chapter, ``nvtutorial/chapters/ch10_cost_model/workload.py``; this module gives it its
name among the workloads (``nvtutorial.run("costmodel", ...)``).

    torchrun --standalone --nproc-per-node 2 -m nvtutorial.workloads.costmodel --set part=calibrate
"""

from __future__ import annotations

from nvtutorial import runtime
from nvtutorial.chapters.ch10_cost_model.workload import Params, run

__all__ = ["Params", "run"]

if __name__ == "__main__":
    runtime.main(run, Params)
