"""Chapter 05 (notebook ``05_profiling``): the time split of a DDP step on every rank; waiting against time on the
wire; NVTX; telemetry.

Its files, by role: rank side: ``workload``, ``lessons``; both sides (what the workload returns, typed): ``schema``;
kernel side: ``lab``, ``plots``, ``report``, ``report_monitoring``, ``report_traces``; exercises:
``exercises_exposed``, ``exercises_waiting``.
The notebook imports the chapter and reaches each file on first use, so that a rank importing a
rank-side file never loads pandas or matplotlib::

    from nvtutorial.chapters import ch05_profiling as ch
"""

from __future__ import annotations

from nvtutorial.chapters import facade

FILES, __getattr__, __dir__ = facade(__name__)
