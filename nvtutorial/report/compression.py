"""What notebook 07's compression runs show: one table of the hooks per link, and verdicts.

Reads the metrics of the ``compression`` workload; the hooks themselves are
:mod:`nvtutorial.lessons.compression`.
"""

from __future__ import annotations

from typing import Any


TIME_TOLERANCE = 0.03
"""Step-time changes smaller than this fraction of the baseline, or than the measurement's noise
on that link (``step_noise``, see :func:`hooks_frame`), are called "no change"."""
TWINS = ("fp16", "bf16")
"""Two hooks that do the same work (a cast, half the bytes): their gap is an A/A comparison."""
IOU_TOLERANCE = 0.02
"""IoU differences smaller than this (absolute) are called "no visible cost" in a short run."""


def hooks_frame(results: dict[str, dict[str, Any]]):  # -> pandas.DataFrame
    """One row per (link, hook) from the ``compression`` workload's metrics, keyed by link name.

    Adds the step time and IoU relative to ``none`` on the same link, the bytes saved, and
    ``step_noise``, the size of a step-time difference that is noise, relative to ``none``: the
    largest of the spread of the rounds' medians of the hook, that of ``none``, and the gap
    between the ``fp16`` and ``bf16`` hooks on the same link (they do the same work, so whatever
    separates them is the machine, not the method).
    """
    import pandas as pd

    rows = []
    for link, metrics in results.items():
        hooks = {h["hook"]: h for h in metrics["hooks"]}
        base = hooks.get("none")
        twin_gap = (abs(hooks[TWINS[0]]["step_ms_median"] - hooks[TWINS[1]]["step_ms_median"]) / base["step_ms_median"]
                    if base and all(t in hooks for t in TWINS) else 0.0)
        for name, h in hooks.items():
            rows.append({
                "link": link,
                "hook": name,
                "step_ms": h["step_ms_median"],
                "step_vs_none": h["step_ms_median"] / base["step_ms_median"] if base else float("nan"),
                "step_noise": max(h.get("step_ms_spread", 0.0), base.get("step_ms_spread", 0.0) if base else 0.0,
                                  twin_gap),
                "sent_MB_per_step": h["sent_bytes_per_step"] / 1e6,
                "bytes_saved": 1 - h["sent_bytes_per_step"] / h["dense_bytes_per_step"],
                "nvlink_tx_MB_per_step": (h["nvlink_tx_bytes_per_step"] / 1e6
                                          if h.get("nvlink_tx_bytes_per_step") is not None else None),
                "nvml_over_counted": (h["nvlink_tx_bytes_per_step"] / h["sent_bytes_per_step"]
                                      if h.get("nvlink_tx_bytes_per_step") is not None and h["sent_bytes_per_step"]
                                      else None),
                "nvml_note": h.get("nvlink_note"),
                "final_val_loss": h["final_val_loss"],
                "final_iou": h["final_iou"],
                "iou_vs_none": h["final_iou"] - base["final_iou"] if base else float("nan"),
                "compressed_when_timed": h.get("compressed_when_timed", True),
            })
    return pd.DataFrame(rows)


def _time_word(ratio: float, tolerance: float) -> str:
    if ratio != ratio:
        return "not measured"
    change = ratio - 1
    if abs(change) < tolerance:
        return f"no change ({change:+.0%})"
    return f"{change:+.0%} ({'slower' if change > 0 else 'faster'})"


def verdict_table(frame, time_tolerance: float = TIME_TOLERANCE, iou_tolerance: float = IOU_TOLERANCE):
    """Per hook: bytes saved, step-time change on each link, accuracy change, where it pays.

    "Pays" on a link means its median step is faster than ``none`` by more than
    ``time_tolerance`` and more than ``step_noise``; the accuracy cost is the final IoU
    difference after the same steps.
    """
    import pandas as pd

    rows = []
    links = list(dict.fromkeys(frame["link"]))
    for hook in dict.fromkeys(frame["hook"]):
        if hook == "none":
            continue
        sub = frame[frame["hook"] == hook].set_index("link")
        row: dict[str, Any] = {"hook": hook, "bytes_saved": f"{sub['bytes_saved'].iloc[0]:.1%}"}
        pays = []
        for link in links:
            if link in sub.index:
                ratio = float(sub.loc[link, "step_vs_none"])
                tolerance = max(time_tolerance, float(sub.loc[link, "step_noise"]))
                row[f"step time, {link}"] = _time_word(ratio, tolerance)
                if ratio < 1 - tolerance:
                    pays.append(link)
        d_iou = float(sub["iou_vs_none"].mean())
        row["IoU vs none"] = (f"{d_iou:+.3f} (within {iou_tolerance})" if abs(d_iou) < iou_tolerance
                              else f"{d_iou:+.3f}")
        row["pays on"] = ", ".join(pays) if pays else "none of the links measured"
        rows.append(row)
    return pd.DataFrame(rows).set_index("hook") if rows else pd.DataFrame()


def nvml_statements(frame) -> list[str]:
    """What NVML's NVLink data counter of GPU 0 saw per step against the bytes counted in the hooks."""
    def present(x: Any) -> bool:
        return x is not None and x == x  # not None, not NaN

    out = []
    for _, r in frame.iterrows():
        if not present(r["nvlink_tx_MB_per_step"]):
            out.append(f"{r['link']}, {r['hook']}: NVLink counter {r['nvml_note'] or 'not available'}")
            continue
        ratio = f" (NVML ÷ counted = {r['nvml_over_counted']:.2f})" if present(r["nvml_over_counted"]) else ""
        out.append(f"{r['link']}, {r['hook']}: NVML saw {r['nvlink_tx_MB_per_step']:.3g} MB leave GPU 0 over NVLink "
                   f"per step; the hook counted {r['sent_MB_per_step']:.3g} MB sent{ratio}")
    return out


def slower_statements(frame, time_tolerance: float = TIME_TOLERANCE) -> list[str]:
    """Plain sentences for every (link, hook) where compression made the training step slower."""
    out = []
    for _, r in frame.iterrows():
        if r["hook"] != "none" and r["step_vs_none"] > 1 + max(time_tolerance, r["step_noise"]):
            base = r["step_ms"] / r["step_vs_none"]
            out.append(f"On {r['link']}, {r['hook']} made each training step {r['step_vs_none'] - 1:.0%} slower "
                       f"({r['step_ms']:.2f} ms against {base:.2f} ms without compression), "
                       f"although it sent {r['bytes_saved']:.0%} fewer bytes.")
    return out


def link_statement(frame, time_tolerance: float = TIME_TOLERANCE) -> str:
    """What the link did to the step without compression, where more than one link was measured."""
    base = frame[frame["hook"] == "none"].set_index("link")["step_ms"]
    if len(base) < 2:
        return "One link measured: nothing to compare the uncompressed step with."
    fastest, slowest = base.idxmin(), base.idxmax()
    times = ", ".join(f"{ms:.2f} ms on {link}" for link, ms in base.items())
    if base[slowest] / base[fastest] - 1 < time_tolerance:
        return (f"Without compression the step took {times}: the link's speed did not show in the step time, "
                f"since the gradient exchange is hidden behind the backward pass on every link measured.")
    return (f"Without compression the step took {times}: fastest on {fastest}. Where the exchange is hidden "
            f"behind the backward pass, the link's bandwidth hardly matters; what can differ between the links "
            f"is how much the communication kernels, which share the GPU with that pass, slow it down (a likely "
            f"cause, not measured here: notebook 05's profile shows the overlap).")


def density_verdict(summary: dict[str, Any], claimed_saving: float = 0.85) -> str:
    """Claim C23 (the source's sparse all-reduce "cuts communication by 85 %") against the
    measured density of the gradients."""
    if not summary or not summary.get("params"):
        return "no gradient density was measured"
    zero = summary["frac_zero"]
    source_ratio = summary["source_format_ratio"]
    ours = summary["index_value_ratio"]
    saving = 1 - source_ratio
    verdict = "refuted" if saving < claimed_saving else "supported"
    return (f"C23 {verdict}: {zero:.1%} of the UNet's gradient entries are exactly zero "
            f"({summary['frac_near_zero']:.1%} below 1e-3 of their layer's largest); "
            f"99 % of the squared gradient norm needs {summary['frac_for_energy']:.0%} of the entries. "
            f"Sending only the non-zeros in the source's format (int64 coordinates per dimension + value) "
            f"would move {source_ratio:.1f}× the dense bytes ({saving:+.0%} 'saved', claim: {claimed_saving:.0%}); "
            f"with one int32 index per value {ours:.2f}×. Conv-net gradients are dense: sparsity must be made "
            f"(top-k), and then needs error feedback.")
