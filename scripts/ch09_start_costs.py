"""Where notebook 09's seconds go on one GPU: the cost of starting a rank, phase by phase, and the notebook's runs.

    python scripts/ch09_start_costs.py OUT_DIR        # about 55 s on one H200; writes OUT_DIR/ch09-start-costs.json

Notebook 09 starts every rank of its emulated nodes with torchrun (its lesson), so its time on a GPU machine is
mostly rank starts. This measures, in fresh processes as torchrun starts them: Python with ``import torch``, the
import of ``torch._dynamo`` that DDP's constructor triggers, the process group's set-up (NCCL on the GPU, and gloo
with the GPU hidden), and the interpreter's exit (and the exit with the heap frozen first, as ``runtime_script``
ends a rank); the host-name look-ups gloo and the launcher make; the warm interpreter (with ``torch._dynamo``
preloaded: its threads, CUDA) and the lesson on one warm NCCL rank; then the
notebook's two-node run of the lesson at its one-GPU sizes (NCCL, both emulated nodes on GPU 0), with the torchrun
agents forked warm (``recovery.run_lesson``) and started cold (``nvtutorial.run``), and its first-line times.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

PROBE = r"""
import json, os, sys, time
t = {"python": time.time()}
import torch
t["import torch"] = time.time()
import torch.distributed as dist
backend = sys.argv[1]
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[2], RANK="0", WORLD_SIZE="1")
if backend == "nccl":
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", device_id=torch.device("cuda", 0))
else:
    dist.init_process_group("gloo")
t["init_process_group"] = time.time()
device = "cuda" if backend == "nccl" else "cpu"
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(64, 64).to(device))  # imports torch._dynamo
t["DDP (torch._dynamo)"] = time.time()
model(torch.randn(8, 64, device=device)).sum().backward()
if backend == "nccl":
    torch.cuda.synchronize()
t["first step"] = time.time()
dist.destroy_process_group()
# as nvtutorial.launch.runtime_script ends a rank: Python's exit skips collecting torch's heap
if sys.argv[3:] == ["freeze"]:
    import gc

    gc.freeze()
print(json.dumps(t), flush=True)
"""


def _phases(backend: str, port: int, *extra: str) -> dict[str, float]:
    """One fresh process: seconds of each phase, from the launch to the end of the process (exit included)."""
    env = dict(
        os.environ, CUDA_VISIBLE_DEVICES="" if backend == "gloo" else os.environ.get("CUDA_VISIBLE_DEVICES", "0")
    )
    t0 = time.time()
    out = subprocess.run(
        [sys.executable, "-c", PROBE, backend, str(port), *extra], env=env, capture_output=True, text=True
    )
    end = time.time()
    if out.returncode:
        return {"error": out.stderr[-2000:]}  # type: ignore[dict-item]
    stamps = json.loads(out.stdout.strip().splitlines()[-1])
    names, times = ["launch", *stamps], [t0, *stamps.values()]
    phases = {f"{a} -> {b}": round(y - x, 3) for a, b, x, y in zip(names, names[1:], times, times[1:])}
    phases["exit (after the last line)"] = round(end - times[-1], 3)
    phases["total"] = round(end - t0, 3)
    return phases


def _lookups() -> dict[str, float]:
    found = {}
    for name, call in (
        ("socket.getfqdn()", socket.getfqdn),
        ("getaddrinfo(gethostname())", lambda: socket.getaddrinfo(socket.gethostname(), None)),
    ):
        t0 = time.perf_counter()
        try:
            call()
        except OSError:
            pass
        found[name] = round(time.perf_counter() - t0, 3)
    return found


def _two_nodes(out: Path) -> dict[str, object]:
    import ast

    import nbformat

    import nvtutorial
    from nvtutorial.chapters.ch09_multinode import lab as recovery
    from nvtutorial.launch import warm

    nb = nbformat.read(Path(__file__).resolve().parent.parent / "notebooks" / "09_beyond_one_machine.ipynb", 4)
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    sizes = next(ast.literal_eval(n.value) for n in ast.parse(cell.source).body if n.targets[0].id == "SIZES")
    train = sizes["full"]["train"]
    os.environ["NVTUTORIAL_RUNS_DIR"] = str(out / "runs")
    interpreter = warm.get()
    assert interpreter is not None
    t0 = time.perf_counter()
    interpreter.wait_ready()  # as in a kernel: the warm interpreter is up before the first run
    hello = interpreter.hello or {}
    found: dict[str, object] = {
        "sizes": train,
        "warm interpreter": {  # torch._dynamo preloaded: still one thread, CUDA never initialised?
            "ready_s": round(time.perf_counter() - t0, 2),
            **{k: hello.get(k) for k in ("preload_s", "threads", "cuda", "problems")},
            "health": {k: v for k, v in interpreter.health().items() if k != "pid"},
        },
    }
    t0 = time.perf_counter()  # the lesson on one warm NCCL rank: DDP's constructor finds torch._dynamo imported
    one = recovery.run_lesson(recovery.lesson_args(train, recovery.checkpoint_dir("costs")), backend="nccl")
    found["warm ranks, 1 node x 1 rank (recovery.run_lesson)"] = {
        "wall_s": round(time.perf_counter() - t0, 2),
        "ok": one.ok,
        "started": one.started,
    }
    for name, start in (
        ("warm agents (recovery.run_lesson)", lambda a: recovery.run_lesson(a, nnodes=2, backend="nccl")),
        (
            "cold agents (nvtutorial.run)",
            lambda a: nvtutorial.run(recovery.LESSON, nproc=1, nnodes=2, backend="nccl", args=a, output="none"),
        ),
    ):
        t0 = time.perf_counter()
        result = start(recovery.lesson_args(train, recovery.checkpoint_dir("costs")))
        found[name] = {
            "wall_s": round(time.perf_counter() - t0, 2),
            "ok": result.ok,
            "label": result.label,
            "first_output_s": result.first_output_s,  # the launcher's (the lab's result does not record it)
        }
    return found


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    import torch

    report: dict[str, object] = {
        "machine": {
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "torch": torch.__version__,
            "nccl": ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else None,
            "cores": os.cpu_count(),
            "host": socket.gethostname(),
        },
        "lookups_s": _lookups(),
        "rank start, nccl (s)": _phases("nccl", 29641),
        "rank start, gloo (s)": _phases("gloo", 29642),
        "rank start, nccl, heap frozen before the exit (s)": _phases("nccl", 29643, "freeze"),
        "notebook 09's two-node run": _two_nodes(out),
    }
    path = out / "ch09-start-costs.json"
    path.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
