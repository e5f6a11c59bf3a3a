"""What starting a run costs: warm ranks against ``torchrun``, side by side, on this machine.

    python benchmarks/launch_overhead.py [--repeats 7] [--backend gloo] [--nproc 2] [--out FILE]

Five ways to start the same small run (``selftest``: the process group, one all-reduce), taking
turns within each round so that a busy moment hurts all of them alike, ``--repeats`` rounds:

- ``torchrun_bare``: a bare ``torchrun`` of a script that does the same (the reference), whole command;
- ``cli_warm``: ``nvtutorial run selftest``, whole command: it starts the warm interpreter (one
  ``import torch``) and forks the ranks from it;
- ``cli_torchrun``: ``nvtutorial run selftest --torchrun``, whole command;
- ``notebook_warm``: ``nvtutorial.run("selftest")`` in this process, which keeps its warm interpreter
  between runs as a notebook kernel does: seconds to the first line from a rank, and to the return;
- ``notebook_torchrun``: the same with ``launcher="torchrun"``.

Medians, their ratios to the bare ``torchrun`` and the issue's targets are printed and written as
JSON with the machine they ran on. A benchmark, not a test: run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import io
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
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

BARE = """\
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
"""
TARGETS = {
    "notebook_warm_first_output_s": {"gloo": 0.5, "nccl": 2.0},
    "notebook_warm_first_output_vs_bare": 0.15,
    "cli_warm_vs_bare": 0.7,
}
"""The warm-start issue's targets: first output of a warm run in a notebook (2 gloo ranks on the 2-core
CPU, 1 NCCL rank on one H200) and as a share of a bare torchrun; a one-shot CLI run against a bare torchrun."""


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
    from nvtutorial import launch
    from nvtutorial.launch import guards
    from nvtutorial.machine import hardware

    try:
        load = os.getloadavg()[0]
    except OSError:
        load = None
    import importlib.metadata as md

    return {
        "host": platform.node(),
        "cpu": cpu,
        "usable_cores": guards.usable_cores(),
        "memory_gib": memory,
        "gpus": [g.name for g in hardware.gpus()],
        "driver": hardware.driver_version(),
        "python": platform.python_version(),
        "torch": md.version("torch"),
        "torch_cuda": launch.torch_cuda(),
        "load_average_1min_at_start": load,
    }


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


def in_process(backend: str, nproc: int, out: Path, launcher: str) -> dict[str, float]:
    """One run through nvtutorial.run in this process; its first-output, ready and wall seconds."""
    import nvtutorial

    sink = io.StringIO()
    with redirect_stdout(sink), redirect_stderr(sink):
        res = nvtutorial.run(
            "selftest", nproc=nproc, backend=backend, params={"steps": 1, "numel": 4}, out=out, launcher=launcher
        )
    assert res.started == ("warm" if launcher == "auto" else "torchrun"), (res.started, res.cold_reason)
    return {"first_output_s": res.first_output_s, "ready_s": res.ready_s, "wall_s": res.wall_s}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7, help="rounds (at least 3)")
    parser.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    parser.add_argument("--nproc", type=int, default=2, help="ranks (1 on a one-GPU machine)")
    parser.add_argument("--out", type=Path, default=Path("build/launch-overhead.json"))
    args = parser.parse_args(argv)
    if args.nproc < 1:
        parser.error("--nproc must be at least 1")
    if args.repeats < 3:
        parser.error("--repeats must be at least 3 (the medians need them)")
    from nvtutorial.launch import warm

    work = Path(tempfile.mkdtemp(prefix="launch-overhead-"))
    bare_script = work / "bare_allreduce.py"
    bare_script.write_text(BARE.format(backend=args.backend))
    cli = [
        *tool("nvtutorial", "nvtutorial.cli"),
        "run",
        "selftest",
        "--nproc",
        str(args.nproc),
        "--backend",
        args.backend,
        "--set",
        "steps=1",
        "--set",
        "numel=4",
        "--output",
        "none",
    ]
    bare = [
        *tool("torchrun", "torch.distributed.run"),
        "--standalone",
        "--nproc-per-node",
        str(args.nproc),
        str(bare_script),
    ]
    commands = {"torchrun_bare": bare, "cli_warm": cli, "cli_torchrun": [*cli, "--torchrun"]}
    wall: dict[str, list[float]] = {name: [] for name in [*commands, "notebook_warm", "notebook_torchrun"]}
    cpu: dict[str, list[float]] = {name: [] for name in commands}
    first: dict[str, list[float]] = {"notebook_warm": [], "notebook_torchrun": []}
    timed(bare)  # the file cache warmed (torch's libraries) before anything is counted
    t0 = time.perf_counter()
    kernel = warm.get()
    assert kernel is not None
    hello = kernel.wait_ready()
    warm_ready_s = time.perf_counter() - t0
    try:
        for i in range(args.repeats):
            names = [*commands, "notebook_warm", "notebook_torchrun"]
            for name in names if i % 2 == 0 else reversed(names):
                if name in commands:
                    cmd = commands[name] + (["--out", str(work / f"{name}{i}")] if name != "torchrun_bare" else [])
                    seconds, used = timed(cmd)
                    wall[name].append(seconds)
                    cpu[name].append(used)
                else:
                    got = in_process(
                        args.backend, args.nproc, work / f"{name}{i}", "auto" if name == "notebook_warm" else "torchrun"
                    )
                    wall[name].append(got["wall_s"])
                    first[name].append(got["first_output_s"])
                    seconds = got["wall_s"]
                print(f"{name:18s} round {i + 1}/{args.repeats}: {seconds:.2f} s", flush=True)
    finally:
        warm.shutdown()
        shutil.rmtree(work, ignore_errors=True)
    median = {name: statistics.median(values) for name, values in wall.items()}
    first_median = {name: statistics.median(values) for name, values in first.items()}
    bare_s = median["torchrun_bare"]
    results = {
        "notebook_warm_first_output_s": first_median["notebook_warm"],
        "notebook_warm_first_output_vs_bare": first_median["notebook_warm"] / bare_s,
        "notebook_torchrun_first_output_vs_bare": first_median["notebook_torchrun"] / bare_s,
        "cli_warm_vs_bare": median["cli_warm"] / bare_s,
        "cli_torchrun_vs_bare": median["cli_torchrun"] / bare_s,
    }
    targets = {
        "notebook_warm_first_output_s": TARGETS["notebook_warm_first_output_s"][args.backend],
        "notebook_warm_first_output_vs_bare": TARGETS["notebook_warm_first_output_vs_bare"],
        "cli_warm_vs_bare": TARGETS["cli_warm_vs_bare"],
    }
    report = {
        "what": __doc__.splitlines()[0],
        "machine": machine(),
        "backend": args.backend,
        "nproc": args.nproc,
        "repeats": args.repeats,
        "commands": {name: " ".join(cmd) for name, cmd in commands.items()},
        "warm_interpreter": {
            "ready_s": warm_ready_s,
            "preload_s": hello.get("preload_s"),
            "threads": hello.get("threads"),
            "cuda": hello.get("cuda"),
        },
        "wall_s": wall,
        "median_wall_s": median,
        "first_output_s": first,
        "median_first_output_s": first_median,
        "cpu_s": cpu,
        "median_cpu_s": {name: statistics.median(values) for name, values in cpu.items()},
        "results": results,
        "targets": targets,
        "within_targets": {k: results[k] <= v for k, v in targets.items()},
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    m = report["machine"]
    where = f"{m['host']} ({', '.join(m['gpus']) or m['cpu']}, {m['usable_cores']} cores, torch {m['torch']})"
    print(f"\n{args.nproc} {args.backend} rank(s) on {where}; medians of {args.repeats}:")
    print(f"  bare torchrun (whole command)       {bare_s:6.2f} s")
    print(
        f"  nvtutorial run, warm (whole)        {median['cli_warm']:6.2f} s  = {results['cli_warm_vs_bare']:.2f}x"
        f"  (target <= {targets['cli_warm_vs_bare']})"
    )
    print(
        f"  nvtutorial run --torchrun (whole)   {median['cli_torchrun']:6.2f} s  = "
        f"{results['cli_torchrun_vs_bare']:.2f}x"
    )
    print(
        f"  notebook, warm: first output        {first_median['notebook_warm']:6.2f} s  = "
        f"{results['notebook_warm_first_output_vs_bare']:.2f}x "
        f"(targets <= {targets['notebook_warm_first_output_s']} s, "
        f"<= {targets['notebook_warm_first_output_vs_bare']}x); return {median['notebook_warm']:.2f} s"
    )
    print(
        f"  notebook, torchrun: first output    {first_median['notebook_torchrun']:6.2f} s  = "
        f"{results['notebook_torchrun_first_output_vs_bare']:.2f}x; return {median['notebook_torchrun']:.2f} s"
    )
    print(f"  the warm interpreter was ready {warm_ready_s:.2f} s after it was started; {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
