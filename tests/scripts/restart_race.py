"""A rank that dies once and whose successor comes late: the rendezvous store shared across restarts.

Attempt 0: both ranks join a gloo group and all-reduce, then rank 1 kills itself with SIGKILL and
rank 0 waits for torchrun to stop it. torchrun (``--max-restarts 1``) starts both again. Attempt 1:
rank 1 waits ``DELAY`` seconds (the first argument) before ``init_process_group``, so rank 0 reads
rank 1's address from the store before the new rank 1 has written it. With the store shared across
attempts (torch's default since 2.4) rank 0 finds the dead process's address there and cannot
connect; with ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1`` each attempt has its own store and rank 0
waits for the new address. ``init_process_group`` gives up after 10 s (a stale address can make
gloo wait rather than refuse). Used by tests/test_multinode.py.
"""

import datetime
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
rank = int(os.environ["RANK"])
delay = float(sys.argv[1]) if len(sys.argv) > 1 else 2.0
if attempt > 0 and rank == 1:
    time.sleep(delay)
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
x = torch.ones(1)
dist.all_reduce(x)
print(f"attempt {attempt}: rank {rank} all-reduced {x.item():g}", flush=True)
if attempt == 0:
    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(60)  # rank 0: until torchrun stops it to restart the group
dist.destroy_process_group()
