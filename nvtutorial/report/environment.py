"""What notebook 02 concludes about the software stack: the source's claims about versions (C4,
C6, the minimums) and its troubleshooting table, row by row, against the doctor's facts and the
A/B runs. The facts and checks themselves are :mod:`nvtutorial.machine.doctor`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from ..machine.doctor import Facts, check_driver_runtime, reference_facts, version_tuple
from ..machine.nccl_debug import nccl_version_number
from . import bandwidth


def claim_c4(f: Facts) -> dict[str, Any]:
    """C4 "driver 515 + CUDA 11.7 is the most stable": what the rule really is, on this machine."""
    here = check_driver_runtime(f)
    base = f if f.torch_cuda else reference_facts()
    old = check_driver_runtime(dataclasses.replace(base, driver="515.105.01", driver_cuda="11.7"))
    where = "this machine" if f.torch_cuda else "the reference machine's torch"
    text = (f"rule: the driver must support at least the CUDA version torch was built with. Here: {here.value} → "
            f"{here.status}. Driver 515 (CUDA ≤ 11.7) with {where} (CUDA {base.torch_cuda}) → {old.status}.")
    return {"claim": "C4", "source": "driver 515 + CUDA 11.7 is the most stable combination", "measured": text,
            "verdict": "dated: no fixed pair is 'most stable'; driver ≥ torch's CUDA runtime is what matters"}


def claim_c6(f: Facts) -> dict[str, Any]:
    """C6 "the cu117 wheel index gives 12 % more speed on p4d": not checkable; report what torch bundles."""
    nccl = f.nccl or "none (CPU build)"
    wheel = f" ({f.nccl_wheel})" if f.nccl_wheel else ""
    text = (f"torch {f.torch or '?'} ships its own CUDA runtime ({f.torch_cuda or 'none'}) and NCCL {nccl}{wheel}; "
            "the index URL only chooses which CUDA build you get, it tunes nothing for NVLink")
    return {"claim": "C6", "source": "the cu117 wheel index gives 12 % more speed on AWS p4d", "measured": text,
            "verdict": "not checkable (no p4d, no cu117 wheels for today's torch); no claim made"}


def claim_minimums(f: Facts) -> dict[str, Any]:
    """The source's floors: torch ≥ 1.13, NCCL ≥ 2.10."""
    t, n = version_tuple(f.torch), version_tuple(f.nccl)
    ok_t = bool(t) and t[:2] >= (1, 13)
    ok_n = bool(n) and n[:2] >= (2, 10)
    text = f"torch {f.torch or 'missing'} ({'≥' if ok_t else '<'} 1.13), NCCL {f.nccl or 'n/a'}" + (
        f" ({'≥' if ok_n else '<'} 2.10)" if n else " (CPU build: no NCCL)")
    return {"claim": "versions", "source": "torch ≥ 1.13 and NCCL ≥ 2.10", "measured": text,
            "verdict": "met" if ok_t and (ok_n or not f.torch_cuda) else "not met"}


def troubleshooting_rows(f: Facts, runtime_nccl: str | None, is_gpu: bool, p2p_ratio: float | None,
                         topo_code: str | None, reference_ratio: float | None = None) -> list[dict[str, Any]]:
    """The source's troubleshooting table, row by row, with what the runs of notebook 02 showed."""
    rows = []
    if is_gpu and runtime_nccl:
        same = nccl_version_number(runtime_nccl) == nccl_version_number(f.nccl)
        measured = (f"torch reports NCCL {f.nccl}; the run loaded NCCL {runtime_nccl} (its NCCL_DEBUG lines): "
                    + ("the same library" if same else "a DIFFERENT library (LD_LIBRARY_PATH/LD_PRELOAD?)"))
        verdict = ("corrected: torch uses the NCCL it ships with, so a 'version mismatch' is rare; usual causes of an "
                   "NCCL error are a rank that crashed or diverged, a bad NCCL_SOCKET_IFNAME, a small /dev/shm in "
                   "containers, a driver older than the runtime: run nvtutorial doctor and NCCL_DEBUG=INFO"
                   if same else "reproduced: this process loads another NCCL than torch was built with")
    else:
        measured = "CPU simulation: gloo, no NCCL loaded"
        verdict = ("not reproducible here; on GPUs torch uses the NCCL it ships with (nvtutorial doctor shows it), so "
                   "check crashed ranks, NCCL_SOCKET_IFNAME, /dev/shm and the driver first")
    rows.append({"symptom": "NCCL error", "source's cause": "NCCL version mismatch",
                 "source's fix": "update PyTorch or install NCCL separately", "what we measured": measured, "verdict": verdict})
    rows.append({"symptom": "out of memory", "source's cause": "gradient checkpointing not enabled",
                 "source's fix": "use gradient checkpointing", "what we measured": "not measured in this notebook",
                 "verdict": "incomplete: checkpointing is one remedy (trading compute for activation memory); a smaller "
                            "per-GPU batch, bf16 and the allocator settings are others — measured in the memory lesson (C19, C20)"})
    if is_gpu and p2p_ratio is not None:
        measured = (f"nvidia-smi topo -m shows {topo_code or '?'} with and without NCCL_P2P_DISABLE=1, yet busbw fell "
                    f"{p2p_ratio:.1f}× with it")
        verdict = ("corrected: topo -m shows the hardware, not what NCCL uses; read the transport (NCCL_DEBUG=INFO: "
                   "P2P vs SHM) and measure busbw" if p2p_ratio > 1.5 else
                   "not reproduced: disabling P2P changed little here (no NVLink?)")
    else:
        ref = f" (on the reference 2× H200 the same switch costs {reference_ratio:.1f}×)" if reference_ratio else ""
        measured = "CPU simulation: gloo ignores NCCL_P2P_DISABLE" + ref
        verdict = ("corrected: topo -m shows the hardware, not what NCCL uses; an NCCL variable can turn NVLink off "
                   "while topo -m still shows NV#: read the transport and measure busbw")
    rows.append({"symptom": "no speed-up", "source's cause": "NVLink not enabled",
                 "source's fix": "check the output of nvidia-smi topo -m", "what we measured": measured, "verdict": verdict})
    return rows


def troubleshooting_from_runs(f: Facts, ab: Any) -> list[dict[str, Any]]:
    """:func:`troubleshooting_rows` fed from notebook 02's A/B runs (``experiments.bandwidth.run_lab`` with SOURCE_AB_PATHS)."""
    runs = {run.path.name: run for run in ab}
    default = runs["default"]
    gpu = bandwidth.is_gpu(default.result)
    ratio = bandwidth.lab_ratio(ab, "default", "P2P off")[0] if gpu and "P2P off" in runs else None
    ref = bandwidth.reference_nccl_tests()
    reference_ratio = ref["default"].busbw_at(4 << 30) / ref["P2P off"].busbw_at(4 << 30)
    link = default.result.env.link if default.result.env is not None else None
    return troubleshooting_rows(f, runtime_nccl=default.transport.version, is_gpu=gpu, p2p_ratio=ratio,
                                topo_code=link, reference_ratio=reference_ratio)
