"""Chapter 08 (notebook ``08_strategy_ladder``): one transformer trained DDP, ZeRO-1, FSDP2, checkpointing, CPU
offload, tensor parallel.

Its files, by role: rank side: ``workload``, ``lessons``; kernel side: ``plots``,
``report``, ``report_model``; exercises: ``exercises_check``, ``exercises_fsdp``, ``exercises_tp``.
The notebook imports the chapter and reaches each file on first use, so that a rank importing a
rank-side file never loads pandas or matplotlib::

    from nvtutorial.chapters import ch08_ladder as ch
"""

from __future__ import annotations

from nvtutorial.chapters import facade

FILES, __getattr__, __dir__ = facade(__name__)
