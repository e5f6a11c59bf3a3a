"""What notebook 05's live telemetry concludes: claim C13 (``nvidia-smi dmon -s u`` as the source's
"bandwidth utilisation" monitor).

The sampler itself is :mod:`nvtutorial.machine.telemetry`; the run's all-reduce probe moves a
known number of bytes, so NVML's NVLink counters can be checked against it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from nvtutorial.chapters.ch05_profiling.schema import Rank
from nvtutorial.machine.telemetry import dmon_columns, parse_dmon, shows_nvlink
from nvtutorial.report.verdict import Verdict
from nvtutorial.results import RunResult

if TYPE_CHECKING:
    from nvtutorial.chapters.ch05_profiling.report import Traffic
    from nvtutorial.machine.telemetry import Sampler


def _around(dmon, start: float, end: float):
    """dmon's lines that may cover part of ``[start, end]``: ``-o T`` stamps drop the fraction of a second, so a
    line stamped S was printed in ``[S, S + 1)``; its reading is the driver's short-window sample from shortly before
    (on one H100, NVML's own reading about 0.7 s after the stamp's second began; review RR15-8), not a 1-s average."""
    return dmon.loc[(dmon["t"] >= start - 1) & (dmon["t"] <= end + 1)]


def dmon_busy_during(dmon_text: str, start: float, end: float, day: float) -> float | None:
    """The highest ``sm`` of dmon's lines around two wall-clock times (:func:`_around`; needs ``-o T``)."""
    frame = parse_dmon(dmon_text, day=day)
    if "t" not in frame.columns or "sm" not in frame.columns:
        return None
    inside = _around(frame, start, end)
    return float(inside["sm"].max()) if len(inside) else None


def dmon_against_nvml(nvml, dmon, busy: float = 80.0) -> str | None:
    """Where NVML saw the GPU busy (``sm_util_pct`` ≥ ``busy``), what dmon's 1-s lines around that span read
    (:func:`_around`): a burst it saw, at ``busy / 2`` or more, or one it missed (review R6-6, RR13-8); None
    without a busy NVML sample or dmon's times. ``nvml``: the sampler's ``frame()``; ``dmon``: its ``dmon_frame()``."""
    if nvml is None or dmon is None or "t" not in dmon.columns or "sm" not in dmon.columns or not len(nvml):
        return None
    hot = nvml.loc[nvml["sm_util_pct"] >= busy, "t"]
    if not len(hot):
        return None
    start, end = float(hot.min()), float(hot.max())
    head = f"NVML: ≥ {busy:.0f} % busy for {end - start:.1f} s ({_clock(start)} to {_clock(end)}); "
    lines = _around(dmon, start, end)
    if not len(lines):
        return head + "dmon printed no line around that span"
    sm, stamps = lines["sm"], f"{_clock(lines['t'].min())[:-2]} to {_clock(lines['t'].max())[:-2]}"
    read = f"{head}dmon's 1-s lines around that span ({stamps}) read {sm.min():.0f}–{sm.max():.0f} %"
    if sm.max() >= busy / 2:
        return read + ": it saw the burst, on a 1-s grid"
    return read + ": a burst this short can fall between dmon's once-a-second samples"


def _clock(t: float) -> str:
    import time

    return time.strftime("%H:%M:%S", time.localtime(t)) + f".{int(t * 10) % 10}"


def verdict_c13(
    dmon_text: str,
    nvlink_sent_bytes: Sequence[float] = (),
    expected_bytes: float | None = None,
    *,
    sm_during_probe: float | None = None,
    reason: str = "",
    where: str = "",
) -> Verdict:
    """Claim C13, listed by the source under "bandwidth utilisation": ``nvidia-smi dmon -s u -c 10``.

    ``wrong`` when dmon's columns hold no NVLink counter while NVML's NVLink counters saw the probe's
    bytes (``nvlink_sent_bytes``, one value per GPU); ``holds`` if dmon showed an NVLink column;
    ``unverifiable`` without an NVIDIA driver (``reason`` says why).
    """
    cols = dmon_columns(dmon_text) if dmon_text else []
    numbers: dict[str, object] = {
        "dmon_columns": cols,
        "nvlink_sent_bytes": list(nvlink_sent_bytes),
        "expected_bytes": expected_bytes,
        "sm_during_probe": sm_during_probe,
    }
    if not cols and not nvlink_sent_bytes:
        return Verdict(
            "C13",
            "unverifiable",
            f"not checked here: {reason or 'no dmon output and no NVML counters'}",
            numbers,
            where,
        )
    if cols and shows_nvlink(cols):
        return Verdict(
            "C13",
            "holds",
            f"`nvidia-smi dmon -s u` printed {', '.join(cols)}, an NVLink column among them",
            numbers,
            where,
        )
    text = f"`nvidia-smi dmon -s u` printed {', '.join(cols) or 'nothing'}: how busy each GPU was, no NVLink column"
    if sm_during_probe is not None:
        text += (
            f"; during the all-reduce probe, which only moved data, sm read {sm_during_probe:.0f} %: dmon shows "
            "that a kernel ran, not what the link carried"
        )
    if nvlink_sent_bytes:
        sent = max(nvlink_sent_bytes)
        text += f". NVML's NVLink counters saw {sent / 2**30:.1f} GiB sent per GPU during the probe"
        if expected_bytes:
            text += f" ({sent / expected_bytes:.2f}× what the all-reduce sends)"
            numbers["sent_over_expected"] = sent / expected_bytes
        text += ": the link shows only in those counters (or `nvidia-smi nvlink -gt d`), not in utilisation"
    else:
        text += (
            ". A link's traffic shows only in NVML's NVLink counters (or `nvidia-smi nvlink -gt d`), not in "
            "utilisation; this run sent nothing over one"
        )
    return Verdict("C13", "wrong", text, numbers, where)


def verdict_c13_from(sampler: Sampler, res: RunResult, traffic: Sequence[Traffic] = ()) -> Verdict:
    """:func:`verdict_c13` from a telemetry sampler and the run it watched (with its probe rows).

    ``unverifiable`` when the run was not on GPUs: its probe was a gloo all-reduce on the CPU, so
    whatever dmon printed watched an idle GPU (the 2× H200 reference's reading is quoted instead).
    """
    if res.env is None or not res.env.is_gpu:
        from nvtutorial.report.claims import claim

        seen = (
            (
                "so dmon, which printed " + ", ".join(dmon_columns(sampler.dmon_text)) + ", watched an idle GPU and "
                "says nothing about an all-reduce"
            )
            if sampler.dmon_text
            else f"and dmon did not run ({sampler.reason or sampler.dmon_reason or 'no NVIDIA driver'})"
        )
        return Verdict(
            "C13",
            "unverifiable",
            f"not checked here: the all-reduce probe ran on the CPU (gloo), {seen}. On the 2× H200 "
            f"reference: {claim('C13').finding}",
            {
                "dmon_columns": dmon_columns(sampler.dmon_text) if sampler.dmon_text else [],
                "nvlink_sent_bytes": [],
                "sm_during_probe": None,
            },
            res.label,
        )
    ranks = res.ranks_as(Rank)
    probe = ranks[0].probe if ranks else None
    sm = None
    if probe is not None and sampler.dmon_text and sampler.started_at:
        sm = dmon_busy_during(sampler.dmon_text, probe.start, probe.end, sampler.started_at)
    return verdict_c13(
        sampler.dmon_text,
        [r.nvml_sent_gib * 2**30 for r in traffic],
        probe.bytes_per_rank_algorithm if probe is not None else None,
        sm_during_probe=sm,
        reason=sampler.reason or sampler.dmon_reason,
        where=res.label,
    )
