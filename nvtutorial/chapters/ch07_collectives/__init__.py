"""Chapter 07 (notebook ``07_custom_collectives``): a ring all-reduce from send/recv, a correct sparse all-reduce,
compression hooks.

Its files, by role: rank side: ``workload``, ``workload_compression``, ``workload_density``, ``lessons``; both sides
(what the workloads return, typed): ``schema``, ``schema_compression``; kernel side: ``plots``, ``report``,
``report_compression``; exercises: ``exercises``.
The notebook imports the chapter and reaches each file on first use, so that a rank importing a
rank-side file never loads pandas or matplotlib::

    from nvtutorial.chapters import ch07_collectives as ch
"""

from __future__ import annotations

from nvtutorial.chapters import facade

FILES, __getattr__, __dir__ = facade(__name__)
