"""Chapter 01 (notebook ``01_hardware``): GPUs, topology and link through NVML; expected against measured bandwidth;
NVLink, host-staged, sockets.

Its files, by role: rank side: ``workload_allreduce``, ``workload_bench``, ``workload_gpu_links``, ``workload_p2p``,
``workload_sendrecv``, ``lessons``; both sides, torch-free: ``schema_allreduce``, ``schema_gpu_links``, ``schema_p2p``,
``schema_sendrecv`` (what each workload returns, typed); kernel side: ``lab``, ``plots``, ``report``, ``report_gpu``,
``report_lab``, ``report_links``, ``report_reference``; exercises: ``exercises``.
The notebook imports the chapter and reaches each file on first use, so that a rank importing a
rank-side file never loads pandas or matplotlib::

    from nvtutorial.chapters import ch01_hardware as ch
"""

from __future__ import annotations

from nvtutorial.chapters import facade

FILES, __getattr__, __dir__ = facade(__name__)
