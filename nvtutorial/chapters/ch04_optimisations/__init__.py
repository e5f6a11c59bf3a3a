"""Chapter 04 (notebook ``04_optimisations``): mixed precision, DDP's bucket options, no_sync, channels_last,
torch.compile: each a diff and an A/B.

Its files, by role: rank side: ``workload_attention``, ``workload_train`` (this notebook's variants of chapter 03's
``train`` workload), ``lessons``; both sides: ``schema`` (what ``workload_attention`` returns); kernel side: ``plots``,
``report``, ``lab`` (the A/Bs' launches, each part where the notebook's plan puts it).
The notebook imports the chapter and reaches each file on first use, so that a rank importing a
rank-side file never loads pandas or matplotlib::

    from nvtutorial.chapters import ch04_optimisations as ch
"""

from __future__ import annotations

from nvtutorial.chapters import facade

FILES, __getattr__, __dir__ = facade(__name__)
