"""What the launcher costs: ``nvtutorial run selftest --nproc 2`` against a bare ``torchrun``.

    python benchmarks/launch_overhead.py [--repeats 7] [--backend gloo] [--out build/launch-overhead.json]

Both are timed as whole commands from a shell's point of view (process start to exit), taking
turns (ABBA order), ``--repeats`` times each; the medians and their ratio are printed and written
as JSON with the machine they ran on, with the CPU time of each command's whole process tree
(less moved by other work on the machine than the wall time). The bare run is two ranks that initialise the same backend
and do one all-reduce; the target is a ratio of at most 1.15. A benchmark, not a test: run it on
a quiet machine (other work on it moves both numbers).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_RATIO = 1.15

BARE = '''\
import os

import torch
import torch.distributed as dist

backend = "{backend}"
if backend == "nccl":
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group(backend)
x = torch.ones(4, device="cuda" if backend == "nccl" else "cpu")
dist.all_reduce(x)
dist.destroy_process_group()
'''


def machine() -> dict:
    """Where the numbers were measured: host, CPU, cores, memory, GPUs, versions."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory = round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    from nvtutorial import guards, launch
    from nvtutorial.machine import hardware

    try:
        load = os.getloadavg()[0]
    except OSError:
        load = None
    return {"host": platform.node(), "cpu": cpu, "usable_cores": guards.usable_cores(), "memory_gib": memory,
            "gpus": [g.name for g in hardware.gpus()], "python": platform.python_version(),
            "torch_cuda": launch.torch_cuda(), "load_average_1min_at_start": load}


def tool(name: str, module: str) -> list[str]:
    """The console script beside this Python (what a user types), else ``python -m module``."""
    path = Path(sys.executable).parent / name
    return [str(path)] if path.exists() else [sys.executable, "-m", module]


def timed(cmd: list[str]) -> tuple[float, float]:
    """Wall seconds of ``cmd``, and the CPU seconds (user + system) of its whole process tree."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False)
    elapsed = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return elapsed, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7, help="runs of each command (at least 5)")
    parser.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    parser.add_argument("--nproc", type=int, default=2, help="ranks of both commands (1 on a one-GPU machine)")
    parser.add_argument("--out", type=Path, default=Path("build/launch-overhead.json"))
    args = parser.parse_args(argv)
    if args.nproc < 1:
        parser.error("--nproc must be at least 1")
    if args.repeats < 5:
        parser.error("--repeats must be at least 5 (the medians need them)")
    work = Path(tempfile.mkdtemp(prefix="launch-overhead-"))
    bare_script = work / "bare_allreduce.py"
    bare_script.write_text(BARE.format(backend=args.backend))
    ours = [*tool("nvtutorial", "nvtutorial.cli"), "run", "selftest", "--nproc", str(args.nproc), "--backend", args.backend]
    bare = [*tool("torchrun", "torch.distributed.run"), "--standalone", "--nproc-per-node", str(args.nproc), str(bare_script)]
    times: dict[str, list[float]] = {"nvtutorial": [], "torchrun": []}
    cpu: dict[str, list[float]] = {"nvtutorial": [], "torchrun": []}
    timed([*bare])  # warm the file cache for both (torch's libraries) before anything is counted
    try:
        for i in range(args.repeats):
            order = ["nvtutorial", "torchrun"] if i % 2 == 0 else ["torchrun", "nvtutorial"]
            for name in order:
                cmd = [*ours, "--out", str(work / f"run{i}")] if name == "nvtutorial" else bare
                wall, used = timed(cmd)
                times[name].append(wall)
                cpu[name].append(used)
                print(f"{name:10s} run {i + 1}/{args.repeats}: {wall:.2f} s ({used:.2f} CPU s)", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    medians = {name: statistics.median(values) for name, values in times.items()}
    cpu_medians = {name: statistics.median(values) for name, values in cpu.items()}
    ratio = medians["nvtutorial"] / medians["torchrun"]
    report = {
        "machine": machine(),
        "commands": {"nvtutorial": " ".join(ours), "torchrun": " ".join(bare)},
        "backend": args.backend,
        "nproc": args.nproc,
        "seconds": times,
        "median_s": medians,
        "ratio": ratio,
        "cpu_seconds": cpu,
        "median_cpu_s": cpu_medians,
        "cpu_ratio": cpu_medians["nvtutorial"] / cpu_medians["torchrun"],
        "target_ratio": TARGET_RATIO,
        "within_target": ratio <= TARGET_RATIO,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"median: nvtutorial {medians['nvtutorial']:.2f} s, bare torchrun {medians['torchrun']:.2f} s, "
          f"ratio {ratio:.2f} (target <= {TARGET_RATIO}; CPU time ratio {report['cpu_ratio']:.2f}) on {report['machine']['host']} "
          f"({report['machine']['cpu']}, {report['machine']['usable_cores']} cores); {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
