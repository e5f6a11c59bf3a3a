"""What a GPU machine shows of the warm start: run from the repository root there (one GPU is enough).

    python scripts/gpu_warm_checks.py OUT.json

Each check runs the same thing warm and with ``torchrun`` where that applies, and records what
each rank saw:

- ``nccl``: ``selftest`` on one NCCL rank; the results, the first output and the wall time;
- ``alloc_conf``: ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True`` given to a run reaches the
  CUDA caching allocator of a forked rank (its segments are expandable), as it does under torchrun;
- ``nccl_env``: ``NCCL_DEBUG=INFO`` given to a run makes NCCL print its INFO lines in the rank's log;
- ``gloo_hides_gpu``: a gloo run's ranks see no GPU (``CUDA_VISIBLE_DEVICES=""``) though the machine has one;
- ``interpreter``: after those runs the warm interpreter still runs one thread and the CUDA driver is not
  initialised in it (a CUDA build of torch maps libcuda when imported; the driver says whether cuInit ran);
- ``cuda_in_interpreter``: a preloaded module that initialises CUDA makes the next run start with
  torchrun, with one line saying why;
- ``ranks``: ``%%ranks`` on one NCCL rank is forked warm and all-reduces on the GPU.
"""

from __future__ import annotations

import io
import json
import os
import sys
import tempfile
import time
import traceback
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import nvtutorial
from nvtutorial.launch import warm

VIEW = """\
import os, torch, torch.distributed as dist
from nvtutorial.runtime import save_metrics
backend = "nccl" if torch.cuda.is_available() else "gloo"
if backend == "nccl":
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group(backend)
info = {
    "backend": backend,
    "cuda_available": torch.cuda.is_available(),
    "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
}
if backend == "nccl":
    x = torch.ones(1 << 20, device="cuda")
    dist.all_reduce(x)
    segments = torch.cuda.memory_snapshot()
    info["expandable"] = sorted({bool(s.get("is_expandable")) for s in segments})
    info["alloc_conf"] = os.environ.get("PYTORCH_CUDA_ALLOC_CONF")
save_metrics(info)
dist.destroy_process_group()
"""


def quiet(fn, *args, **kwargs):
    sink = io.StringIO()
    with redirect_stdout(sink), redirect_stderr(sink):
        value = fn(*args, **kwargs)
    return value, sink.getvalue()


def both(target, **kwargs) -> dict:
    out = {}
    for launcher in ("auto", "torchrun"):
        t0 = time.perf_counter()
        res, said = quiet(nvtutorial.run, target, launcher=launcher, **kwargs)
        out[launcher] = {
            "ok": res.ok,
            "started": res.started,
            "ranks": res.ranks,
            "first_output_s": res.first_output_s,
            "wall_s": res.wall_s,
            "call_s": time.perf_counter() - t0,
            "label": res.label,
            "cold_reason": res.cold_reason,
            "run_dir": str(res.run_dir),
            "said": said.splitlines()[:3],
        }
    return out


def main() -> int:
    out_path = Path(sys.argv[1])
    work = Path(tempfile.mkdtemp(prefix="gpu-warm-"))
    os.environ["NVTUTORIAL_RUNS_DIR"] = str(work / "runs")
    view = work / "view.py"
    view.write_text(VIEW)
    report: dict = {}

    def check(name, fn):
        t0 = time.perf_counter()
        try:
            report[name] = {"ok": True, **fn()}
        except Exception as exc:  # noqa: BLE001 - recorded, the next check runs
            report[name] = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
        report[name]["seconds"] = time.perf_counter() - t0
        print(
            f"{name}: {'ok' if report[name]['ok'] else report[name]['error']} ({report[name]['seconds']:.1f} s)",
            flush=True,
        )

    def interpreter_ready():
        t0 = time.perf_counter()
        hello = warm.get().wait_ready()
        return {"ready_s": time.perf_counter() - t0, "hello": {k: hello[k] for k in ("preload_s", "threads", "cuda")}}

    check("start", interpreter_ready)
    check("nccl", lambda: both("selftest", nproc=1, backend="nccl", params={"steps": 3}))
    check(
        "alloc_conf",
        lambda: both(view, nproc=1, backend="nccl", env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}),
    )
    check(
        "nccl_env",
        lambda: {
            "info_lines": {
                launcher: sum("NCCL INFO" in line for line in Path(r["run_dir"], "rank0.log").read_text().splitlines())
                for launcher, r in both(view, nproc=1, backend="nccl", env={"NCCL_DEBUG": "INFO"}).items()
            }
        },
    )
    check("gloo_hides_gpu", lambda: both(view, nproc=2, backend="gloo"))

    def interpreter():
        w = warm.get()
        pid = w.proc.pid
        return {
            "threads": len(os.listdir(f"/proc/{pid}/task")),
            "libcuda_loaded": "libcuda" in Path(f"/proc/{pid}/maps").read_text(),
            "health": w.health(),
        }

    check("interpreter", interpreter)

    def ranks():
        from nvtutorial.teach import ranks as r

        pool, said = quiet(r.start, nproc=1, backend="nccl")
        try:
            result = r.run_code("t = torch.ones(4, device=device) * 3\ndist.all_reduce(t)\nv = t.sum().item()")
            return {
                "said": said.strip(),
                "forked": all(isinstance(w.proc, warm.Forked) for w in pool.workers),
                "status": [o.status for o in result.outcomes],
                "value": r.pull("v"),
                "start_s": pool.start_s,
            }
        finally:
            r.stop()

    check("ranks", ranks)

    def cuda_in_interpreter():
        (work / "inits_cuda.py").write_text("import torch\ntorch.cuda.init()\n")
        os.environ["PYTHONPATH"] = f"{work}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"
        os.environ["NVTUTORIAL_WARM_PRELOAD"] = "inits_cuda"
        warm.shutdown()
        try:
            res, said = quiet(nvtutorial.run, "selftest", nproc=1, backend="nccl", params={"steps": 1})
        finally:
            del os.environ["NVTUTORIAL_WARM_PRELOAD"]
            warm.shutdown()
        return {"started": res.started, "cold_reason": res.cold_reason, "said": said.splitlines()[:2], "ok": res.ok}

    check("cuda_in_interpreter", cuda_in_interpreter)
    out_path.write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(
        json.dumps(
            {k: {kk: vv for kk, vv in v.items() if kk != "traceback"} for k, v in report.items()}, indent=1, default=str
        )[:6000]
    )
    return 0 if all(v["ok"] for v in report.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
