"""Tables and verdicts from the train workload's results (notebooks 03 and 04).

Pure functions of the numbers the runs returned, so they are tested without running anything:
scaling efficiency, the source tutorial's table next to ours, the validation comparison, the
knob ranking, and the claim verdicts (C1, C8, C10, C11, C14, C15), each computed from the
measurements rather than written in advance.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

SOURCE_TABLE = [
    # The source's part 4 (ResNet-50 on ImageNet, per epoch; its hardware unnamed).
    {"path": "1 GPU", "minutes_per_epoch": 58.0, "memory_gb_per_gpu": 24.0, "comm_share": None},
    {"path": "2 GPUs over PCIe", "minutes_per_epoch": 34.0, "memory_gb_per_gpu": 13.0, "comm_share": 0.18},
    {"path": "2 GPUs over NVLink", "minutes_per_epoch": 29.0, "memory_gb_per_gpu": 13.0, "comm_share": 0.09},
]
"""The source tutorial's results table, as printed."""

PATHS = {
    "1gpu": "1 GPU",
    "nvlink": "2 GPUs, NVLink (NCCL P2P)",
    "host": "2 GPUs, host-staged (NCCL_P2P_DISABLE=1)",
    "socket": "2 GPUs, sockets (+ NCCL_SHM_DISABLE=1)",
}
"""Our rows, and the environment that selects each path."""

PATH_ENV = {
    "1gpu": {},
    "nvlink": {},
    "host": {"NCCL_P2P_DISABLE": "1"},
    "socket": {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"},
}

SOURCE_ROW_FOR = {"1gpu": "1 GPU", "nvlink": "2 GPUs over NVLink", "host": "2 GPUs over PCIe"}
"""Which source row each of ours sits next to (the source's PCIe row: no GPU-to-GPU path)."""


def _ok(row: Mapping[str, Any] | None) -> bool:
    return bool(row) and row.get("status") == "ok"  # type: ignore[union-attr]


def find_row(rows: Iterable[Mapping[str, Any]], variant: str) -> dict[str, Any] | None:
    """The row of ``variant`` (exact name), or None."""
    for row in rows:
        if row.get("variant") == variant:
            return dict(row)
    return None


def efficiency(samples_per_s_n: float, samples_per_s_1: float, n: int = 2) -> float:
    """Scaling efficiency: throughput on ``n`` GPUs ÷ (``n`` × throughput on 1 GPU)."""
    if samples_per_s_1 <= 0 or n < 1:
        raise ValueError("efficiency needs a positive 1-GPU throughput and n >= 1")
    return samples_per_s_n / (n * samples_per_s_1)


def scaling_summary(one: Mapping[str, Any], fixed_global: Mapping[str, Any], fixed_per_gpu: Mapping[str, Any]) -> dict[str, Any]:
    """Compare a 1-GPU row (batch B) with two 2-GPU rows: B/2 per GPU (fixed global batch) and
    B per GPU (fixed per-GPU batch). Throughput, efficiency and memory per GPU for each."""
    out: dict[str, Any] = {"one_gpu_batch": one.get("per_gpu_batch")}
    for name, row in (("fixed_global", fixed_global), ("fixed_per_gpu", fixed_per_gpu)):
        if not (_ok(one) and _ok(row)):
            out[name] = None
            continue
        mem1, mem2 = one.get("peak_mem_gb"), row.get("peak_mem_gb")
        out[name] = {
            "per_gpu_batch": row["per_gpu_batch"], "global_batch": row["global_batch"],
            "samples_per_s_1": one["samples_per_s"], "samples_per_s_2": row["samples_per_s"],
            "speedup": row["samples_per_s"] / one["samples_per_s"],
            "efficiency": efficiency(row["samples_per_s"], one["samples_per_s"], int(row.get("world_size", 2))),
            "memory_gb_1": mem1, "memory_gb_2": mem2,
            "memory_ratio": (mem2 / mem1) if (mem1 and mem2) else None,
            "comm_share": row.get("comm_share"),
        }
    return out


def scaling_frame(summary: Mapping[str, Any]):
    """:func:`scaling_summary` as a DataFrame, one row per convention."""
    import pandas as pd

    rows = []
    for name, label in (("fixed_global", "fixed global batch"), ("fixed_per_gpu", "fixed per-GPU batch")):
        s = summary.get(name)
        if not s:
            continue
        rows.append({"convention": label, "batch per GPU (1 GPU → 2 GPUs)": f"{summary['one_gpu_batch']} → {s['per_gpu_batch']}",
                     "samples/s 1 GPU": round(s["samples_per_s_1"], 1), "samples/s 2 GPUs": round(s["samples_per_s_2"], 1),
                     "speed-up": round(s["speedup"], 3), "efficiency %": round(100 * s["efficiency"], 1),
                     "memory/GPU 1 GPU (GB)": _r(s["memory_gb_1"]), "memory/GPU 2 GPUs (GB)": _r(s["memory_gb_2"]),
                     "memory ratio": _r(s["memory_ratio"], 2)})
    return pd.DataFrame(rows)


def _r(x: float | None, nd: int = 2) -> float | str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else round(x, nd)


CPU_PATHS = {"1gpu": "1 process (CPU)", "nvlink": "2 processes, gloo (CPU)",
             "host": "2 processes, gloo (CPU)", "socket": "2 processes, gloo (CPU)"}
"""Row names when the runs were CPU simulations: no GPU path was measured."""


def path_labels(is_gpu: bool = True) -> dict[str, str]:
    return dict(PATHS) if is_gpu else dict(CPU_PATHS)


def source_comparison(rows: Mapping[str, Mapping[str, Any] | None], epoch_images: int, is_gpu: bool = True):
    """Our rows (keys of :data:`PATHS`: each a measured variant row with the same global batch)
    next to the source's table. Time per epoch = ``epoch_images`` / samples per second.
    ``is_gpu=False`` names the rows as the CPU processes they were."""
    import pandas as pd

    base = rows.get("1gpu")
    source = {r["path"]: r for r in SOURCE_TABLE}
    src_base = source["1 GPU"]["minutes_per_epoch"]
    out = []
    for key, label in path_labels(is_gpu).items():
        row = rows.get(key)
        src = source.get(SOURCE_ROW_FOR.get(key, ""), None)
        entry: dict[str, Any] = {"path": label}
        if _ok(row):
            minutes = epoch_images / row["samples_per_s"] / 60  # type: ignore[index]
            entry.update({
                "per-GPU batch": row["per_gpu_batch"],  # type: ignore[index]
                "min/epoch (ours)": round(minutes, 2),
                "speed-up (ours)": round(row["samples_per_s"] / base["samples_per_s"], 2) if _ok(base) else "n/a",  # type: ignore[index]
                "memory/GPU GB (ours)": _r(row.get("peak_mem_gb")),  # type: ignore[union-attr]
                "comm share (ours)": _pct(row.get("comm_share")) if key != "1gpu" else "—",  # type: ignore[union-attr]
            })
        else:
            entry.update({"per-GPU batch": "", "min/epoch (ours)": "not run" if row is None else row.get("status", "failed"),
                          "speed-up (ours)": "", "memory/GPU GB (ours)": "", "comm share (ours)": ""})
        if src:
            entry.update({"min/epoch (source)": src["minutes_per_epoch"],
                          "speed-up (source)": round(src_base / src["minutes_per_epoch"], 2),
                          "memory/GPU GB (source)": src["memory_gb_per_gpu"],
                          "comm share (source)": _pct(src["comm_share"]) if src["comm_share"] is not None else "—"})
        else:
            entry.update({"min/epoch (source)": "—", "speed-up (source)": "—", "memory/GPU GB (source)": "—", "comm share (source)": "—"})
        out.append(entry)
    return pd.DataFrame(out)


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:.1f} %"


# --- verdicts ---------------------------------------------------------------------------------
def verdict_c1(speedup: float) -> str:
    """C1: "a week on one GPU became 58 hours on two" is a 2.9× speed-up from 2 GPUs."""
    claimed = 7 * 24 / 58
    if speedup > 2.0:
        return (f"C1: measured speed-up {speedup:.2f}× on 2 GPUs is super-linear; look for a change besides the GPU count")
    return (f"C1: claimed {claimed:.1f}× from 2 GPUs; measured {speedup:.2f}× (at most 2× is possible with the same work "
            f"per sample) → the claim is impossible as stated: something else changed (batch size, input pipeline)")


def verdict_scaling(eff: float, target: float = 0.95) -> str:
    verdict = "meets" if eff >= target else "misses"
    return f"scaling efficiency {100 * eff:.1f} % {verdict} the {100 * target:.0f} % target"


def scaling_verdicts(summary: Mapping[str, Any], is_gpu: bool = True, target: float = 0.95) -> str:
    """The scaling section's conclusions (efficiency, C1, C15); on a CPU, only the caveat."""
    if not is_gpu:
        return ("CPU simulation: the processes share the same cores, so efficiency, speed-up and memory say nothing "
                "about GPUs; claims C1 and C15 are decided on 2 GPUs")
    lines = []
    for key, label in (("fixed_per_gpu", "fixed per-GPU batch"), ("fixed_global", "fixed global batch")):
        s = summary.get(key)
        lines.append(f"{label}: " + (verdict_scaling(s["efficiency"], target) if s else "not measured"))
    if summary.get("fixed_per_gpu"):
        lines.append(verdict_c1(summary["fixed_per_gpu"]["speedup"]))
    lines.append(verdict_c15(summary))
    return "\n".join(lines)


def verdict_c15(summary: Mapping[str, Any]) -> str:
    """C15: "per-GPU memory halves with 2 GPUs" holds only with a fixed global batch."""
    g, p = summary.get("fixed_global"), summary.get("fixed_per_gpu")
    if not g or not p or g.get("memory_ratio") is None or p.get("memory_ratio") is None:
        return "C15: not decided here: peak memory is only measured on GPUs"
    return (f"C15: memory per GPU, 2 GPUs ÷ 1 GPU: {g['memory_ratio']:.2f} with a fixed global batch "
            f"(per-GPU batch halved), {p['memory_ratio']:.2f} with a fixed per-GPU batch → memory shrinks only "
            f"when each GPU gets fewer samples, and not quite by half (weights, gradients and optimizer state are "
            f"replicated on every GPU)")


def verdict_c14(rows: Mapping[str, Mapping[str, Any] | None]) -> str:
    """C14: the shape of the source's table: NVLink faster than PCIe, communication share lower."""
    nv, host = rows.get("nvlink"), rows.get("host")
    if not (_ok(nv) and _ok(host)):
        return "C14: not decided here: needs the NVLink and host-staged runs on 2 GPUs"
    faster = nv["samples_per_s"] / host["samples_per_s"]  # type: ignore[index]
    return (f"C14: NVLink gives {faster:.2f}× the host-staged throughput; exposed communication "
            f"{_pct(nv.get('comm_share'))} vs {_pct(host.get('comm_share'))} (source: 9 % vs 18 %, 34/29 = 1.17×)")  # type: ignore[union-attr]


# --- validation and resume --------------------------------------------------------------------
def validation_frame(lesson: Mapping[str, Any]):
    """The three validation numbers of a lesson run, with what each does about the padding."""
    import pandas as pd

    single = lesson.get("val_single") or {}
    rows = [
        {"method": "all_reduce of sums (loss, pixels, intersections, unions), padding skipped",
         "val loss": lesson["val"]["loss"], "IoU": lesson["val"]["iou"], "samples counted": lesson["val"]["samples"]},
        {"method": "source: mean of each rank's batch means, all_reduce'd and averaged (padding included)",
         "val loss": lesson["val_naive"]["loss"], "IoU": float("nan"), "samples counted": lesson["val_naive"]["samples"]},
        {"method": "reference: one process, whole set, no sampler",
         "val loss": single.get("loss", float("nan")), "IoU": single.get("iou", float("nan")),
         "samples counted": single.get("samples", 0)},
    ]
    return pd.DataFrame(rows)


def validation_verdict(lesson: Mapping[str, Any], rtol: float = 1e-6) -> str:
    ref = (lesson.get("val_single") or {}).get("loss")
    if ref is None:
        return "no single-process reference"
    ok = abs(lesson["val"]["loss"] - ref) <= rtol * abs(ref) + 1e-12
    naive = abs(lesson["val_naive"]["loss"] - ref) / abs(ref)
    return (f"all_reduce of sums {'equals' if ok else 'DIFFERS FROM'} the single-process loss "
            f"(|Δ| = {abs(lesson['val']['loss'] - ref):.2e}); the source's mean of means is off by {100 * naive:.3f} % "
            f"and counts {lesson['val_naive']['samples']} samples for {lesson['val_samples']} "
            f"(DistributedSampler padded {lesson['val_padding']})")


def resume_verdict(resume: Mapping[str, Any]) -> str:
    if resume["identical"]:
        return (f"resumed after epoch {resume['from_epoch']}: every later step loss is bit-for-bit the same as in "
                f"the uninterrupted run → training continued exactly where it stopped")
    return (f"resumed after epoch {resume['from_epoch']}: step losses differ by at most {resume['max_abs_loss_diff']:.2e} "
            f"from the uninterrupted run (non-deterministic kernels), val loss {resume['val_resumed']:.5f} vs "
            f"{resume['val_uninterrupted']:.5f}")


def shuffle_frame(ranks: Sequence[Mapping[str, Any]]):
    """First sample indices per epoch and rank, with and without ``set_epoch``."""
    import pandas as pd

    rows = []
    for r, m in enumerate(ranks):
        sh = m["shuffle"]
        for e, (a, b) in enumerate(zip(sh["with_set_epoch"], sh["without_set_epoch"])):
            rows.append({"rank": r, "epoch": e, "with set_epoch": " ".join(map(str, a)),
                         "without set_epoch": " ".join(map(str, b))})
    return pd.DataFrame(rows)


# --- knobs (notebook 04) ----------------------------------------------------------------------
def knob_frame(rows: Sequence[Mapping[str, Any]], baseline: str = "base"):
    """Every variant against the baseline: step time, throughput, memory, comm share, final loss."""
    import pandas as pd

    base = find_row(rows, baseline)
    out = []
    for row in rows:
        entry: dict[str, Any] = {"variant": row["variant"], "status": row.get("status", "?")}
        if _ok(row):
            entry.update({
                "step ms (median)": round(row["step_ms"], 2),
                "samples/s": round(row["samples_per_s"], 1),
                "speed-up vs base": round(row["samples_per_s"] / base["samples_per_s"], 3) if _ok(base) else "n/a",
                "peak GB/rank": _r(row.get("peak_mem_gb")),
                "memory vs base": (_r(row["peak_mem_gb"] / base["peak_mem_gb"], 3)
                                   if _ok(base) and row.get("peak_mem_gb") and base.get("peak_mem_gb") else "n/a"),
                "comm share": _pct(row.get("comm_share")) if row.get("comm_share") is not None else "n/a",
                "first loss": round(row["loss_curve"][0], 4), "last loss": round(row["loss_curve"][-1], 4),
            })
        out.append(entry)
    return pd.DataFrame(out)


def loss_ok(row: Mapping[str, Any], base: Mapping[str, Any], tolerance: float = 0.1) -> bool:
    """Training still works: the last loss within ``tolerance`` (relative) of the baseline's, and finite."""
    last, ref = row["loss_curve"][-1], base["loss_curve"][-1]
    return math.isfinite(last) and last <= ref * (1 + tolerance) + 1e-3


def rank_knobs(rows: Sequence[Mapping[str, Any]], baseline: str = "base", tolerance: float = 0.1):
    """The closing table: variants sorted by throughput gain over the baseline, with what they cost."""
    import pandas as pd

    base = find_row(rows, baseline)
    out = []
    for row in rows:
        if row["variant"] == baseline:
            continue
        entry: dict[str, Any] = {"knob": row["variant"]}
        if _ok(row) and _ok(base):
            speed = row["samples_per_s"] / base["samples_per_s"]  # type: ignore[index]
            mem = (row["peak_mem_gb"] / base["peak_mem_gb"]) if row.get("peak_mem_gb") and base.get("peak_mem_gb") else None  # type: ignore[union-attr]
            entry.update({"throughput vs base": round(speed, 3), "memory vs base": _r(mem, 3),
                          "training still converges": "yes" if loss_ok(row, base, tolerance) else "NO",  # type: ignore[arg-type]
                          "verdict": _knob_verdict(speed, mem, loss_ok(row, base, tolerance))})  # type: ignore[arg-type]
        else:
            entry.update({"throughput vs base": "n/a", "memory vs base": "n/a", "training still converges": "n/a",
                          "verdict": row.get("status", "not measured")})
        out.append(entry)
    frame = pd.DataFrame(out)
    if not frame.empty:
        key = frame["throughput vs base"].map(lambda v: v if isinstance(v, (int, float)) else -1.0)
        frame = frame.assign(_k=key).sort_values("_k", ascending=False).drop(columns="_k").reset_index(drop=True)
    return frame


def _knob_verdict(speed: float, mem: float | None, converges: bool, noise: float = 0.03) -> str:
    if not converges:
        return "breaks training"
    parts = []
    if speed > 1 + noise:
        parts.append(f"{100 * (speed - 1):.0f} % faster")
    elif speed < 1 - noise:
        parts.append(f"{100 * (1 - speed):.0f} % slower")
    else:
        parts.append("same speed (within 3 %)")
    if mem is not None:
        if mem < 1 - noise:
            parts.append(f"{100 * (1 - mem):.0f} % less memory")
        elif mem > 1 + noise:
            parts.append(f"{100 * (mem - 1):.0f} % more memory")
    return ", ".join(parts)


CPU_CAVEAT = " [CPU simulation: the timings say nothing about GPUs; the losses are real]"


def verdict_c11(rows: Sequence[Mapping[str, Any]], is_gpu: bool = True) -> str:
    fp32, fp16, bf16 = (find_row(rows, v) for v in ("amp=fp32", "amp=fp16", "base"))
    if not (_ok(fp32) and _ok(fp16) and _ok(bf16)):
        return "C11: not decided: a precision run is missing"
    s16 = fp16["samples_per_s"] / fp32["samples_per_s"]  # type: ignore[index]
    sb = bf16["samples_per_s"] / fp32["samples_per_s"]  # type: ignore[index]
    return (f"C11: against fp32, fp16 + GradScaler runs {s16:.2f}× and bf16 {sb:.2f}× as fast; "
            f"final losses {fp32['loss_curve'][-1]:.3f} / {fp16['loss_curve'][-1]:.3f} / {bf16['loss_curve'][-1]:.3f} → "  # type: ignore[index]
            f"mixed precision works as the source says; bf16 needs no scaler, and the source's torch.cuda.amp spellings "
            f"are deprecated: use torch.autocast(\"cuda\", dtype=...) and torch.amp.GradScaler(\"cuda\")"
            + ("" if is_gpu else CPU_CAVEAT))


def verdict_c10(rows: Sequence[Mapping[str, Any]], is_gpu: bool = True, params: int | None = None,
                noise: float = 0.01) -> str:
    """C10 from the ``base`` and ``gradient_as_bucket_view=true`` rows: memory just before the
    optimizer step (every gradient alive: where the view saves a buffer) and at the peak; peak
    differences under ``noise`` (relative) are called no change. ``params``: the model's
    parameter count, to compare the saving with one fp32 gradient."""
    base, gv = find_row(rows, "base"), find_row(rows, "gradient_as_bucket_view=true")
    if not (_ok(base) and _ok(gv)):
        return "C10: not decided: a run is missing"
    speed = gv["samples_per_s"] / base["samples_per_s"]  # type: ignore[index]
    if base.get("optimizer_mem_gb") and gv.get("optimizer_mem_gb"):  # type: ignore[union-attr]
        b, g = base["optimizer_mem_gb"], gv["optimizer_mem_gb"]  # type: ignore[index]
        grad = f" (one fp32 copy of the {params / 1e6:.1f} M parameters is {4 * params / 1e9:.3f} GB)" if params else ""
        mem = f"just before the optimizer step, when every gradient exists, it holds {b - g:.3f} GB less per GPU{grad}"
        pb, pg = base.get("peak_mem_gb"), gv.get("peak_mem_gb")  # type: ignore[union-attr]
        if pb and pg:
            change = ("no measurable change" if abs(pg - pb) < noise * pb
                      else f"{pb - pg:+.3f} GB saved")
            mem += (f"; at the peak, earlier in the step (activations, before the gradients exist), "
                    f"{pb:.2f} → {pg:.2f} GB: {change}")
    else:
        mem = "memory is not measured on CPU"
    return (f"C10: with gradient_as_bucket_view=True, {mem}; the step runs {speed:.3f}× as fast; the bytes "
            f"all-reduced are the same (.grad becomes a view into DDP's bucket: one copy and one gradient-sized "
            f"buffer less) → a memory/copy optimisation, not gradient compression" + ("" if is_gpu else CPU_CAVEAT))


def lms_check() -> dict[str, Any]:
    """C8: does ``torch.cuda.set_enabled_lms`` exist? (Checked without initialising CUDA.)"""
    import torch

    exists = hasattr(torch.cuda, "set_enabled_lms")
    error = None
    if not exists:
        try:
            torch.cuda.set_enabled_lms(True)  # type: ignore[attr-defined]
        except AttributeError as exc:
            error = f"AttributeError: {exc}"
    return {"torch": torch.__version__, "exists": exists, "error": error,
            "instead": [
                "activation checkpointing (torch.utils.checkpoint, use_reentrant=False): measured below as checkpointing=true",
                "mixed precision (bf16 autocast): smaller activations",
                "a smaller per-GPU batch with gradient accumulation under no_sync()",
                "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against fragmentation",
                "FSDP / ZeRO (torch.distributed.fsdp) to shard parameters, gradients and optimizer state",
            ]}


def optimisation_variants(batch: int, accumulation: int = 4, buckets: Sequence[float] = (1, 5, 100),
                          compile: bool = True) -> dict[str, list[str]]:
    """Notebook 04's variants, grouped by lesson section. The launch's own settings are ``base``
    (bf16, bucket_cap_mb=25, per-GPU batch ``batch``); each other variant changes one thing.
    Gradient accumulation keeps the samples per optimizer step: ``batch/accumulation`` × ``accumulation``."""
    if accumulation < 2 or batch % accumulation:
        raise ValueError(f"batch={batch} must be a multiple of accumulation={accumulation} (at least 2)")
    micro = batch // accumulation
    groups = {
        "precision": ["amp=fp32", "amp=fp16", "base"],
        "bucket_view": ["base", "gradient_as_bucket_view=true"],
        "buckets": sorted(["base"] + [f"bucket_cap_mb={b:g}" for b in buckets],
                          key=lambda v: 25.0 if v == "base" else float(v.split("=")[1])),
        "static_graph": ["base", "static_graph=true"],
        "accumulation": ["base", f"batch_size={micro}+accumulation={accumulation}",
                         f"batch_size={micro}+accumulation={accumulation}+no_sync=false"],
        "channels_last": ["base", "channels_last=true"],
        "memory": ["base", "checkpointing=true"],
        "compile": ["base"] + (["compile=true"] if compile else []),
        "flash": ["base", "flash_sdp=false"],
    }
    return groups


def all_variants(groups: Mapping[str, Sequence[str]]) -> list[str]:
    """The distinct variants of :func:`optimisation_variants`, ``base`` first, compile last."""
    seen: list[str] = []
    for names in groups.values():
        for v in names:
            if v not in seen:
                seen.append(v)
    seen.sort(key=lambda v: (v != "base", v.startswith("compile")))
    return seen


def show(frame: Any, where: Any, title: str | None = None) -> None:
    """Display a table with where it was measured above it (in Jupyter: as HTML; else as text)."""
    label = getattr(where, "label", where)
    print((f"{title}\n" if title else "") + f"measured on: {label}")
    try:
        from IPython import get_ipython
        from IPython.display import display

        if get_ipython() is not None:
            display(frame)
            return
    except ImportError:
        pass
    print(frame.to_string(index=False))


def attention_frame(metrics: Mapping[str, Any]):
    """The attention workload's timings: setting, the kernel (ATen operator) that ran, ms."""
    import pandas as pd

    return pd.DataFrame([{"setting": r["setting"], "kernel that ran": ", ".join(o for o in r["ops"] if "backward" not in o) or "?",
                          "fwd+bwd ms (median)": round(r["ms"], 3)} for r in metrics["attention"]])


def verdict_c9(metrics: Mapping[str, Any], rows: Sequence[Mapping[str, Any]] = (), is_gpu: bool = True) -> str:
    """C9: enable_flash_sdp only picks SDPA's kernel; on by default; a UNet never calls SDPA."""
    d = metrics["defaults"]
    u = metrics["unet"]
    by = {r["setting"]: r for r in metrics["attention"]}
    default, off = by.get("default switches"), by.get("enable_flash_sdp(False)")
    parts = [f"C9: flash SDPA is {'on' if d['flash_sdp_enabled'] else 'off'} by default here"]
    if default and off:
        parts.append(f"switching it off moves the attention block from {', '.join(default['ops'][:1]) or '?'} "
                     f"({default['ms']:.2f} ms) to {', '.join(off['ops'][:1]) or '?'} ({off['ms']:.2f} ms)")
    parts.append(f"the UNet makes {u['sdpa_calls']} SDPA calls per forward, and its step takes "
                 f"{u['ms_flash_on']:.2f} ms with flash on, {u['ms_flash_off']:.2f} ms off")
    base, flash = find_row(rows, "base"), find_row(rows, "flash_sdp=false")
    if _ok(base) and _ok(flash):
        parts.append(f"the DDP step {base['step_ms']:.2f} vs {flash['step_ms']:.2f} ms")  # type: ignore[index]
    parts.append("→ an attention-kernel switch, already on, with nothing to do with NVLink or with a UNet")
    return "; ".join(parts) + ("" if is_gpu else CPU_CAVEAT)
