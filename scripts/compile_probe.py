#!/usr/bin/env python
"""Where torch.compile's first step goes on one GPU: notebook 04's compiled variant, cold caches, with inductor's
compile workers started ahead (as the ``train`` workload now does) or at the first call (torch's default).

    python scripts/compile_probe.py OUT ahead           # about 50 s on one H100
    python scripts/compile_probe.py OUT at-first-call   # the same without the head start

Writes OUT/compile_probe-<mode>.json: the import times (triton, torch._dynamo, inductor), how long the workers took
to be ready (ahead), the first step (the compilation) and the steps after, and inductor's counters (kernels compiled
in the workers or in this process). Each run uses empty inductor and Triton caches of its own, as a first run on a
fresh machine does. One process, one GPU, NCCL in a world of one (the lesson's DDP wrapper), the lesson's sizes.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path


def main(out: Path, mode: str) -> dict:
    cache = tempfile.mkdtemp(prefix="compile-probe-")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = f"{cache}/inductor"  # cold: nothing compiled before
    os.environ["TRITON_CACHE_DIR"] = f"{cache}/triton"
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29531")
    seconds: dict[str, float] = {}

    def timed(name: str, t0: float) -> None:
        seconds[name] = round(time.perf_counter() - t0, 3)

    t = time.perf_counter()
    import torch
    import torch.distributed as dist

    timed("import torch", t)
    t = time.perf_counter()
    try:
        import triton  # noqa: F401
    except ImportError:
        pass
    timed("import triton", t)
    t = time.perf_counter()
    import torch._dynamo  # noqa: F401

    timed("import torch._dynamo", t)
    t = time.perf_counter()
    from torch._inductor import async_compile, compile_fx  # noqa: F401

    timed("import inductor", t)

    from nvtutorial.chapters.ch03_ddp_training.lessons import ddp_train, training
    from nvtutorial.chapters.ch04_optimisations.lessons import ddp_optimised
    from nvtutorial.models.segdata import make_dataset

    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    t = time.perf_counter()
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=device)
    timed("process group", t)
    warm_started = time.perf_counter()
    if mode == "ahead":
        async_compile.maybe_warm_pool()
    t = time.perf_counter()
    data = training.device_dataset(make_dataset(256, 256, seed=0), device)
    batch = data[list(range(32))]
    torch.cuda.synchronize()
    timed("data on the GPU", t)
    if mode == "ahead":
        async_compile.AsyncCompile.wait_pool_ready()
        timed("workers ready, from their start", warm_started)

    model = ddp_optimised.build_model_compiled("full", device, 0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    step = lambda: ddp_train.train_step(model, optimizer, *batch, device, torch.bfloat16)  # noqa: E731
    torch.cuda.synchronize()
    t = time.perf_counter()
    step()
    torch.cuda.synchronize()
    timed("first step (the compilation)", t)
    times = []
    for _ in range(8):
        t = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append(1e3 * (time.perf_counter() - t))
    counters = {k: dict(v) for k, v in torch._dynamo.utils.counters.items() if k in ("inductor", "stats")}
    result = {
        "mode": mode,
        "device": torch.cuda.get_device_name(device),
        "torch": torch.__version__,
        "cores": os.cpu_count(),
        "compile_threads": torch._inductor.config.compile_threads,
        "seconds": seconds,
        "step_ms_after": [round(x, 2) for x in times],
        "step_ms_median_of_last_5": round(statistics.median(times[3:]), 2),
        "counters": counters,
        "compile_times": torch._dynamo.utils.compile_times(repr="str", aggregate=True),
    }
    dist.destroy_process_group()
    out.mkdir(parents=True, exist_ok=True)
    (out / f"compile_probe-{mode}.json").write_text(json.dumps(result, indent=1, default=str))
    return result


if __name__ == "__main__":
    if len(sys.argv) < 2 or (len(sys.argv) > 2 and sys.argv[2] not in ("ahead", "at-first-call")):
        sys.exit(__doc__)
    r = main(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "ahead")
    print(json.dumps({k: r[k] for k in ("mode", "device", "seconds", "step_ms_median_of_last_5")}, indent=1))
