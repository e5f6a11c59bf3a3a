"""Chapter 03 (notebook ``03_ddp_training``): a complete DDP training script, read and run; validation across ranks;
checkpoints; scaling.

Its files, by role: rank side: ``workload``, ``lessons``; both sides: ``schema`` (what ``workload`` returns); kernel
side: ``plots``, ``report``; exercises: ``exercises_accumulation``, ``exercises_validation``.
The notebook imports the chapter and reaches each file on first use, so that a rank importing a
rank-side file never loads pandas or matplotlib::

    from nvtutorial.chapters import ch03_ddp_training as ch
"""

from __future__ import annotations

from nvtutorial.chapters import facade

FILES, __getattr__, __dir__ = facade(__name__)
