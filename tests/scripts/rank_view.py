"""What a rank sees of how it was started: a plain torchrun script for tests/test_warm.py.

Its environment, working folder, numpy's OpenBLAS thread count, ``sys.argv`` and ``sys.path[0]``, ``__name__``, torch's
thread count and default random stream, the debug level torch.distributed took from ``TORCH_DISTRIBUTED_DEBUG`` (read
when it is imported), the buffering of its output, and an all-reduce, saved with
``save_metrics`` so that a warm start and a ``torchrun`` start can be compared rank by rank.

    torchrun --standalone --nproc-per-node 2 tests/scripts/rank_view.py
"""

import ctypes
import os
import sys

import torch
import torch.distributed as dist

from nvtutorial.runtime import save_metrics


def openblas_threads() -> int | None:
    """numpy's OpenBLAS thread count (its getter, found in the libraries this process mapped)."""
    for line in open("/proc/self/maps"):
        if "openblas" in line.lower() and "/" in line:
            lib = ctypes.CDLL(line.split()[-1])
            for name in (
                "scipy_openblas_get_num_threads64_",
                "scipy_openblas_get_num_threads",
                "openblas_get_num_threads64_",
                "openblas_get_num_threads",
            ):
                if hasattr(lib, name):
                    return getattr(lib, name)()
    return None


import numpy  # noqa: E402, F401  (loads OpenBLAS in a cold rank as in a warm one)

dist.init_process_group("gloo")
rank = dist.get_rank()
x = torch.tensor([float(rank + 1)])
dist.all_reduce(x)
save_metrics(
    {
        "env": dict(os.environ),
        "cwd": os.getcwd(),
        "argv": sys.argv,
        "path0": sys.path[0],
        "main": __name__,
        "threads": torch.get_num_threads(),
        "openblas_threads": openblas_threads(),
        "rand": torch.rand(3).tolist(),
        "initial_seed": torch.initial_seed(),
        "sum": x.item(),
        "store": type(dist.distributed_c10d._get_default_store()).__name__,
        "debug_level": str(dist.get_debug_level()),  # pyright: ignore[reportPrivateImportUsage] - public, not re-exported
        "stdout_tty": sys.stdout.isatty(),
    }
)
print(f"rank {rank}: sum {x.item()}", flush=True)
dist.destroy_process_group()
