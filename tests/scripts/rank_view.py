"""What a rank sees of how it was started: a plain torchrun script for tests/test_warm.py.

Its environment, working folder, ``sys.argv`` and ``sys.path[0]``, ``__name__``, torch's thread count
and default random stream, the debug level torch.distributed took from ``TORCH_DISTRIBUTED_DEBUG`` (read
when it is imported), the buffering of its output, and an all-reduce, saved with
``save_metrics`` so that a warm start and a ``torchrun`` start can be compared rank by rank.

    torchrun --standalone --nproc-per-node 2 tests/scripts/rank_view.py
"""

import os
import sys

import torch
import torch.distributed as dist

from nvtutorial.runtime import save_metrics

dist.init_process_group("gloo")
rank = dist.get_rank()
x = torch.tensor([float(rank + 1)])
dist.all_reduce(x)
save_metrics({
    "env": dict(os.environ),
    "cwd": os.getcwd(),
    "argv": sys.argv,
    "path0": sys.path[0],
    "main": __name__,
    "threads": torch.get_num_threads(),
    "rand": torch.rand(3).tolist(),
    "initial_seed": torch.initial_seed(),
    "sum": x.item(),
    "store": type(dist.distributed_c10d._get_default_store()).__name__,
    "debug_level": str(dist.get_debug_level()),
    "stdout_tty": sys.stdout.isatty(),
})
print(f"rank {rank}: sum {x.item()}", flush=True)
dist.destroy_process_group()
