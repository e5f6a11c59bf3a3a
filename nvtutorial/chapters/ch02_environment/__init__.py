"""Chapter 02 (notebook ``02_environment``): versions and the doctor; what each NCCL variable does; the source's
troubleshooting table.

Its files, by role: rank side: ``lessons``; kernel side: ``report``; exercises: ``exercises``.
The notebook imports the chapter and reaches each file on first use, so that a rank importing a
rank-side file never loads pandas or matplotlib::

    from nvtutorial.chapters import ch02_environment as ch
"""

from __future__ import annotations

from nvtutorial.chapters import facade

FILES, __getattr__, __dir__ = facade(__name__)
