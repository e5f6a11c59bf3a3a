"""What notebook 05's live telemetry concludes: claim C13 (``nvidia-smi dmon`` "monitors the run").

The sampler itself is :mod:`nvtutorial.machine.telemetry`.
"""

from __future__ import annotations

from typing import Any

from ..machine.telemetry import Sampler, dmon_columns, shows_nvlink


def verdict_c13(sampler: Sampler, probe_rows: list[dict[str, Any]]) -> str:
    """Claim C13: ``nvidia-smi dmon -s u`` "monitors the run": it shows utilisation, not NVLink traffic."""
    if not sampler.available:
        return f"C13: not checked here: {sampler.reason}"
    cols = dmon_columns(sampler.dmon_text) if sampler.dmon_text else []
    dmon = (f"`nvidia-smi dmon -s u` printed the columns {', '.join(cols)}: "
            + ("it includes an NVLink column" if shows_nvlink(cols) else "no NVLink traffic among them")
            if cols else f"dmon gave no output ({sampler.dmon_reason or 'nothing parsed'})")
    if probe_rows:
        moved = max(r["nvml_sent_gib"] for r in probe_rows)
        nvml = f"; NVML's NVLink counters saw {moved:.2f} GiB sent per GPU during the all-reduce probe"
    else:
        nvml = "; NVML's NVLink counters were not read (no probe or no NVLink)"
    verdict = "partly true: dmon -s u shows whether the GPUs are busy, not the link" if cols and not shows_nvlink(cols) else "see above"
    return f"C13: {dmon}{nvml}. Verdict: {verdict}."
