"""A rank that dies once: torchrun (``--max-restarts 1``) starts both ranks again and the run succeeds.

Attempt 0: both ranks all-reduce, then rank 1 kills itself with SIGKILL and rank 0 waits for torchrun
to stop it. Attempt 1: both all-reduce and end. Used by tests/test_multinode.py.
"""

import os
import signal
import time

import torch
import torch.distributed as dist

attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
rank = int(os.environ["RANK"])
dist.init_process_group("gloo")
x = torch.ones(1)
dist.all_reduce(x)
print(f"attempt {attempt}: rank {rank} all-reduced {x.item():g}", flush=True)
if attempt == 0:
    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)  # rank 0: until torchrun stops it to restart the group
dist.destroy_process_group()
