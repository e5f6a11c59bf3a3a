"""What notebooks 03 and 04 run on one GPU, timed: each part's launch as the notebook makes it; the gather per batch.

    python scripts/one_gpu_03_04.py OUT [gather] [03] [04] [c10]  # default: all four, one JSON file each in OUT

``gather`` (review finding N14): a batch of ``DeviceShapes``, the training set kept on the device, at the lesson's
sizes: the host time of ``ds[indices]`` and its device time (CUDA events; on the CPU the host clock), median of 50,
beside the lesson's step at the same batch. ``03``: notebook 03's one-GPU run (the lesson's step on one rank at ``B``
and ``B/2``). ``04``: notebook 04's A/Bs on one GPU (precision, channels_last, checkpointing, torch.compile) and its
attention run, with the wall time of each launch and every row's first step (the compilation for torch.compile).
``c10``: what measuring C10's memory on the GPU adds to that launch (without torch.compile, with and without
``gradient_as_bucket_view=True``: the wall times, their difference, the verdict's memory numbers). The
sizes are read from each notebook's ``parameters`` cell and placed by its ``course.plan`` on this machine, as the
notebook does. Each part writes ``OUT/<part>.json`` when it ends, so a part cut off leaves the others.
"""

from __future__ import annotations

import ast
import json
import statistics
import sys
import time
from pathlib import Path

import nbformat

import nvtutorial
from nvtutorial import course

ROOT = Path(__file__).resolve().parent.parent


def sizes(notebook: str) -> dict:
    """The ``SIZES`` literal of a notebook's parameters cell."""
    nb = nbformat.read(ROOT / "notebooks" / f"{notebook}.ipynb", as_version=4)
    cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
    tree = ast.parse(cell.source)
    return next(ast.literal_eval(n.value) for n in tree.body if n.targets[0].id == "SIZES")  # type: ignore[attr-defined]


def rows(run) -> list[dict]:
    keep = ("variant", "per_gpu_batch", "status", "first_step_s", "step_ms", "step_ms_rounds", "peak_mem_gb")
    return [{k: r.get(k) for k in keep} for r in run.metrics["rows"]]


def launch_record(run, wall: float) -> dict:
    return {"label": run.label, "wall_s": wall, "params": run.params, "rows": rows(run)}


def part_gather() -> dict:
    import torch

    from nvtutorial.models.segdata import DeviceShapes, make_dataset

    p = sizes("03_ddp_training")["full"]
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    ds = DeviceShapes(make_dataset(p["bench_samples"], p["bench_image_size"]), device)
    out = {"device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu", "batches": []}
    for batch in (p["bench_batch"], p["bench_batch"] // 2):
        host, dev = [], []
        for i in range(60):
            idx = [(i * 7 + k * 13) % len(ds) for k in range(batch)]
            if device.type == "cuda":
                torch.cuda.synchronize()
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
            t0 = time.perf_counter()
            ds[idx]
            t1 = time.perf_counter()
            if device.type == "cuda":
                b.record()
                b.synchronize()
                dev.append(a.elapsed_time(b) * 1e3)
            host.append((t1 - t0) * 1e6)
        moved = batch * (ds.images[0].numel() * 4 + ds.masks[0].numel() * 8)
        out["batches"].append(
            {
                "batch": batch,
                "bytes_gathered": moved,
                "host_us_median": statistics.median(host[10:]),
                "device_us_median": statistics.median(dev[10:]) if dev else None,
            }
        )
    return out


def part_03() -> dict:
    p_all = sizes("03_ddp_training")
    part = course.plan("03_ddp_training", "auto", {"one GPU's step": "one GPU"})["one GPU's step"]
    p = p_all[part.profile]
    t0 = time.perf_counter()
    run = nvtutorial.run(
        "train",
        nproc=1,
        backend=part.backend,
        timeout=p["timeout"],
        params={
            "model": p["model"],
            "image_size": p["bench_image_size"],
            "samples": p["bench_samples"],
            "batch_sizes": (p["bench_batch"], p["bench_batch"] // 2),
            "warmup": p["warmup"],
            "steps": p["one_gpu_steps"],
            "repeats": p["repeats"],
            "comm_share": False,
            "count": not part.gpus,
            "aa": False,
        },
    )
    return {"plan": part.where, "one_gpu": launch_record(run, time.perf_counter() - t0)}


def part_04() -> dict:
    from nvtutorial.chapters.ch04_optimisations import lab

    s = sizes("04_optimisations")
    plan = course.plan(
        "04_optimisations", "auto", {"A/Bs on one GPU": "one GPU", "DDP's options": "two GPUs", "C9": "one GPU"}
    )
    p = s[plan["A/Bs on one GPU"].profile]
    variants = ["fp32", "fp16", "channels_last", "activation checkpointing"] + (
        ["torch.compile"] if p["compile"] else []
    )
    if plan["A/Bs on one GPU"].gpus and not plan["DDP's options"].gpus:  # C10's memory, as the notebook adds it
        variants.append("gradient_as_bucket_view=True")
    out: dict = {"plan": plan["A/Bs on one GPU"].where}
    t0 = time.perf_counter()
    runs = lab.measure(plan, {"A/Bs on one GPU": (p, variants)})
    out["ab"] = launch_record(runs["A/Bs on one GPU"], time.perf_counter() - t0)
    c9 = plan["C9"]
    t0 = time.perf_counter()
    attn = nvtutorial.run(
        "attention_sdp",
        nproc=1,
        backend=c9.backend,
        timeout=s[c9.profile]["timeout"],
        params=s[c9.profile]["attention"],
    )
    out["attention"] = {"label": attn.label, "wall_s": time.perf_counter() - t0}
    return out


def part_c10() -> dict:
    """What C10's memory costs the one-GPU launch (review R1-19): the launch at the lesson's sizes without
    torch.compile, with and without ``gradient_as_bucket_view=True``, after one launch that starts the warm
    interpreter; the difference of their wall times is its cost, and the verdict's memory numbers come from the
    last."""
    from nvtutorial.chapters.ch04_optimisations import lab
    from nvtutorial.chapters.ch04_optimisations import report as o

    s = sizes("04_optimisations")
    plan = course.plan("04_optimisations", "auto", {"A/Bs on one GPU": "one GPU"})
    p = s[plan["A/Bs on one GPU"].profile]
    out: dict = {"plan": plan["A/Bs on one GPU"].where}
    with_view = ["fp32", "gradient_as_bucket_view=True"]
    for name, variants in (("warm-up", ["fp32"]), ("without", ["fp32"]), ("with", with_view)):  # warm: no start-up
        t0 = time.perf_counter()
        run = lab.measure(plan, {"A/Bs on one GPU": (p, variants)})["A/Bs on one GPU"]
        out[name] = launch_record(run, time.perf_counter() - t0)
        out[name]["rank_wall_s"] = run.wall_s
    out["cost_s"] = out["with"]["wall_s"] - out["without"]["wall_s"]
    v = o.verdict_c10(run)
    out["verdict_c10"] = {"status": v.status, "numbers": v.numbers, "text": v.text}
    return out


PARTS = {"gather": part_gather, "03": part_03, "04": part_04, "c10": part_c10}

if __name__ == "__main__":
    folder = Path(sys.argv[1])
    folder.mkdir(parents=True, exist_ok=True)
    for name in sys.argv[2:] or list(PARTS):
        t0 = time.perf_counter()
        record = PARTS[name]()
        record["part_wall_s"] = time.perf_counter() - t0
        (folder / f"{name}.json").write_text(json.dumps(record, indent=1, default=str))
        print(name, f"{record['part_wall_s']:.1f} s", flush=True)
