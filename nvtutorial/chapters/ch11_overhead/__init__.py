"""Chapter 11 (notebook ``11_overhead``): when the GPU waits for Python. What one call costs, the batch-doubling
test, one training step eager, captured in a CUDA graph and compiled with ``mode="reduce-overhead"``, an
all-reduce's fixed cost split into the host's part and the wire's, and the crossovers between the regimes.

The chapter's files, by role:

- rank side: ``lessons/overhead.py`` (the taught code: the clock, the tiny op, the three steps, the GPU's own time,
  the all-reduce), ``workload.py`` (what runs on the ranks, by name ``overhead``);
- both sides, torch-free: ``schema.py`` (the workload's parameters and typed results), ``model.py`` (the step's
  two sides and the crossovers, on notebook 10's model);
- kernel side: ``report.py`` (tables, verdicts, the committed one-GPU run; with ``report_floor.py``, one call and
  the doubling test, and ``report_step.py``, the step three ways), ``plots.py`` (figures), ``lab.py``
  (the runs), ``exercises.py`` (the code exercise's checker).

::

    from nvtutorial.chapters import ch11_overhead as ch
"""

from __future__ import annotations

from nvtutorial.chapters import facade

FILES, __getattr__, __dir__ = facade(__name__)
