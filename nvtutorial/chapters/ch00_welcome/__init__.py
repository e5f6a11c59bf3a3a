"""Chapter 00 (notebook ``00_welcome``): what the course is, the launcher, a first real two-process run, failures
made readable.

Its files, by role: rank side: ``lessons``; kernel side: ``plots``, ``report``.
The notebook imports the chapter and reaches each file on first use, so that a rank importing a
rank-side file never loads pandas or matplotlib::

    from nvtutorial.chapters import ch00_welcome as ch
"""

from __future__ import annotations

from nvtutorial.chapters import facade

FILES, __getattr__, __dir__ = facade(__name__)
