"""Chapter 10 (notebook ``10_cost_model``): what a step costs on your pair, a cost model you calibrate, worked
problems a run checks, pipeline parallelism, and a capstone scored against the speed of light.

The chapter's files, by role:

- rank side: ``lessons/`` (the taught scripts: ``calibrate.py``, ``pipeline.py``), ``workload.py`` (what runs on
  the ranks, by name ``costmodel``);
- both sides, torch-free: ``schema.py`` (the workload's parameters and typed results), ``model.py`` (the cost model);
- kernel side: ``report.py`` (fits, tables, verdicts), ``problems.py`` (answer keys, graders, the capstone),
  ``plots.py`` (figures), ``lab.py`` (the runs), ``exercises.py`` (the code exercise's checker).

A notebook imports the chapter and reaches each file on first use, so that a rank that imports
``ch10_cost_model.workload`` never loads pandas or matplotlib::

    from nvtutorial.chapters import ch10_cost_model as ch
    ch.model.collective_time(64 << 20, ch.model.Link(alpha=36e-6, beta=338e9))
"""

from __future__ import annotations

from nvtutorial.chapters import facade

FILES, __getattr__, __dir__ = facade(__name__)
