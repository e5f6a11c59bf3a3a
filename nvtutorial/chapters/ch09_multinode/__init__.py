"""Chapter 09 (notebook ``09_beyond_one_machine``): two emulated nodes, NCCL across the node boundary, Slurm, a rank
and a node killed and resumed.

Its files, by role: rank side: ``lessons``; both sides, torch-free: ``schema``, ``schema_outcome``; kernel side:
``lab``, ``lab_narration``, ``lab_resume``, ``plots``, ``report``; exercises: ``exercises``.
The notebook imports the chapter and reaches each file on first use, so that a rank importing a
rank-side file never loads pandas or matplotlib::

    from nvtutorial.chapters import ch09_multinode as ch
"""

from __future__ import annotations

from nvtutorial.chapters import facade

FILES, __getattr__, __dir__ = facade(__name__)
