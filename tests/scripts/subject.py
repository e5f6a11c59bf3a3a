"""The launcher's test subject as a plain torchrun script: the ranks all-reduce, one may misbehave first.

    torchrun --standalone --nproc-per-node 2 tests/scripts/subject.py ok
    nvtutorial run tests/scripts/subject.py -- crash --rank 1

Modes (done by rank ``--rank``, default 1): ok; crash (raises); exit3 (sys.exit(3)); exit0
(leaves before the all-reduce); hang (sleeps instead of joining it); kill (SIGKILL, as the
out-of-memory killer sends); stop (SIGSTOP: frozen); flood (prints ``--mb`` MB); fill (fills
the disk holding ``--fill`` before the results are written). Every rank that finishes saves
its all-reduce sum, whether it sees a GPU, and its arguments.
"""

import argparse
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

MODES = ("ok", "crash", "exit3", "exit0", "hang", "kill", "stop", "flood", "fill")


def fill(path: str) -> None:
    """Write zeros to ``path`` until the disk is full."""
    block = b"\0" * (1 << 20)
    with open(path, "wb", buffering=0) as fh:
        try:
            while True:
                fh.write(block)
        except OSError:
            pass


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=MODES)
    parser.add_argument("--rank", type=int, default=1, help="the rank that misbehaves")
    parser.add_argument("--mb", type=int, default=100, help="MB printed in mode flood")
    parser.add_argument("--fill", default=None, help="a file to grow until the disk is full (mode fill)")
    args = parser.parse_args()

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    print(f"rank {rank}/{world} up: {args.mode}", flush=True)
    if rank == args.rank:
        if args.mode == "crash":
            raise RuntimeError(f"subject: rank {rank} crashed on purpose")
        if args.mode == "exit3":
            sys.exit(3)
        if args.mode == "exit0":
            print(f"rank {rank}: leaving early", flush=True)
            sys.exit(0)
        if args.mode == "hang":
            print(f"rank {rank}: sleeping instead of joining the all-reduce", flush=True)
            while True:
                time.sleep(1)
        if args.mode == "kill":
            print(f"rank {rank}: SIGKILL", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        if args.mode == "stop":
            print(f"rank {rank}: SIGSTOP", flush=True)
            os.kill(os.getpid(), signal.SIGSTOP)
        if args.mode == "flood":
            line = "x" * 99
            for _ in range(args.mb * 10_000):
                print(line)
    x = torch.full((4,), float(rank + 1))
    dist.all_reduce(x)
    if args.mode == "fill" and rank == args.rank:
        fill(args.fill)
    try:
        from nvtutorial.runtime import save_metrics
    except ImportError:  # run without the course

        def save_metrics(metrics):
            pass

    save_metrics(
        {
            "allreduce_sum": x[0].item(),
            "cuda_available": torch.cuda.is_available(),
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "args": sys.argv[1:],
        }
    )
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
