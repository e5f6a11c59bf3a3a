"""Chapter 06 (notebook ``06_pitfalls``): rank-0-only validation, mismatched collectives, seeds, data loading, OOM:
reproduced safely, fixed.

Its files, by role: rank side: ``workload``, ``workload_oom``, ``lessons``; both sides (what the workload returns,
typed): ``schema``; kernel side: ``lab``, ``plots``, ``report``, ``report_measured``; exercises: ``exercises``.
The notebook imports the chapter and reaches each file on first use, so that a rank importing a
rank-side file never loads pandas or matplotlib::

    from nvtutorial.chapters import ch06_pitfalls as ch
"""

from __future__ import annotations

from nvtutorial.chapters import facade

FILES, __getattr__, __dir__ = facade(__name__)
