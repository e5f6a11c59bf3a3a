"""``nvtutorial doctor``: is this machine ready for the course, and if not, what to fix.

Used in notebook 02. :func:`collect` gathers the facts (Python, torch and its CUDA runtime,
driver, NCCL, cuDNN, GPUs and links, the ``NCCL_*`` variables); the checks are pure functions
of those facts (:func:`run_checks`), so a test or the notebook can simulate a broken set-up by
changing one fact. Each check says ok / warn / fail and, when not ok, the fix.

The calling process never initialises CUDA: GPU facts come from NVML, and torch's CUDA-side
facts from a short child process (``torch.backends.cudnn.version()`` queries the devices, and
so would create a CUDA context in the notebook kernel).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import subprocess
import sys
from collections.abc import Callable, Mapping
from typing import Any, Literal

from nvtutorial.machine import nccl_debug
from nvtutorial.machine.nccl_names import KNOWN_NCCL, NOT_READ_BY_NCCL, READ_UNDOCUMENTED, TORCH_RENAMED

Status = Literal["ok", "warn", "fail"]

PROBE_PREFIX = "@@doctor "
_PROBE = r"""
import json, sys, warnings
out = {}
try:
    import torch
except Exception as exc:
    print("@@doctor " + json.dumps({"torch_error": f"{type(exc).__name__}: {exc}"}))
    sys.exit(0)
out["torch"] = torch.__version__
out["torch_cuda"] = torch.version.cuda
try:
    import torch.distributed as dist
    out["nccl_available"] = bool(dist.is_available() and dist.is_nccl_available())
except Exception as exc:
    out["nccl_available"] = False
if torch.version.cuda:
    try:
        v = torch.cuda.nccl.version()
        out["nccl"] = ".".join(str(x) for x in v[:3]) + (f"+{v[3]}" if len(v) > 3 else "")
    except Exception as exc:
        out["nccl_error"] = f"{type(exc).__name__}: {exc}"
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
        out["cuda_available"] = bool(torch.cuda.is_available())
        out["cuda_device_count"] = int(torch.cuda.device_count())
    except Exception as exc:
        out["cuda_warning"] = f"{type(exc).__name__}: {exc}"
    try:
        out["cudnn"] = torch.backends.cudnn.version()
    except Exception as exc:
        out["cudnn_error"] = f"{type(exc).__name__}: {exc}"
    if caught and "cuda_warning" not in out:
        out["cuda_warning"] = str(caught[0].message).strip().splitlines()[0][:300]
print("@@doctor " + json.dumps(out))
"""


@dataclasses.dataclass(frozen=True)
class Facts:
    """Everything the checks look at. Plain values, JSON-able, easy to change in a test."""

    python: str
    platform: str = ""
    executable: str = ""
    torch: str | None = None
    torch_cuda: str | None = None
    torch_error: str | None = None
    nccl: str | None = None
    nccl_available: bool | None = None
    nccl_wheel: str | None = None
    cudnn: int | None = None
    cuda_available: bool | None = None
    cuda_device_count: int | None = None
    cuda_warning: str | None = None
    probe_error: str | None = None
    driver: str | None = None
    driver_cuda: str | None = None
    gpus: tuple[str, ...] = ()  # visible GPU names, CUDA_VISIBLE_DEVICES applied
    gpus_total: int = 0  # every GPU NVML sees
    nvlinks_01: int = 0  # active NVLinks between visible GPU 0 and 1
    p2p_01: str | None = None  # nvmlDeviceGetP2PStatus between visible GPU 0 and 1: "OK (write, nvlink)" or why not
    cuda_visible_devices: str | None = None
    nccl_env: dict[str, str] = dataclasses.field(default_factory=dict)
    interfaces: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Check:
    name: str
    status: Status
    value: str
    detail: str = ""
    fix: str = ""


# --- Collecting ---------------------------------------------------------------------------------


def probe_torch(timeout: float = 180.0, python: str | None = None) -> dict[str, Any]:
    """torch's versions and CUDA view, from a child process (so this one never initialises CUDA)."""
    try:
        proc = subprocess.run(
            [python or sys.executable, "-c", _PROBE],
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {"probe_error": f"the torch probe did not finish within {timeout:g} s"}
    for line in proc.stdout.splitlines():
        if line.startswith(PROBE_PREFIX):
            return json.loads(line[len(PROBE_PREFIX) :])
    return {
        "probe_error": f"the torch probe failed (code {proc.returncode}): {(proc.stderr or proc.stdout).strip()[-400:]}"
    }


def _nccl_wheel() -> str | None:
    from importlib import metadata

    for dist in metadata.distributions():
        name = (dist.metadata["Name"] or "").lower()
        if name.startswith("nvidia-nccl"):
            return f"{name} {dist.version}"
    return None


def _p2p_summary(caps: dict[str, str] | None) -> str | None:
    """NVML's P2P answers for a pair in one string: ``"OK (write, nvlink, atomics)"``, or the read answer."""
    if not caps:
        return None
    ok = [name for name, status in caps.items() if status == "OK"]
    return f"OK ({', '.join(ok)})" if ok else caps.get("read", "unknown")


def collect(probe: bool = True) -> Facts:
    """This machine's facts: NVML in this process, torch in a child process (``probe=False`` skips it)."""
    from nvtutorial import nvml

    inv = nvml.inventory()
    with nvml.nvml() as pynvml:
        total = int(pynvml.nvmlDeviceGetCount()) if pynvml is not None else 0
    try:
        import psutil

        interfaces = tuple(sorted(psutil.net_if_addrs()))
    except Exception:  # noqa: BLE001 - the interface list is a nicety
        interfaces = ()
    torch_facts = probe_torch() if probe else {}
    known = {f.name for f in dataclasses.fields(Facts)}
    return Facts(
        python=platform.python_version(),
        platform=platform.platform(),
        executable=sys.executable,
        nccl_wheel=_nccl_wheel(),
        driver=inv.driver,
        driver_cuda=inv.cuda_driver,
        gpus=tuple(g.name for g in inv.gpus),
        gpus_total=total,
        nvlinks_01=inv.links_between(0, 1),
        p2p_01=_p2p_summary(inv.p2p.get("0-1")),
        cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
        nccl_env={k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")},
        interfaces=interfaces,
        **{k: v for k, v in torch_facts.items() if k in known},
    )


def reference_facts() -> Facts:
    """The reference machine (2× H200, NV18, driver 580, torch 2.11 + CUDA 13.0), as its saved README
    records it (cuDNN and the NCCL wheel are not recorded there). Notebook 02 breaks one fact at a
    time on it to show what the doctor says.
    """
    return Facts(
        python="3.12.3",
        platform="Linux",
        torch="2.11.0+cu130",
        torch_cuda="13.0",
        nccl="2.28.9",
        nccl_available=True,
        nccl_wheel=None,
        cudnn=None,
        cuda_available=True,
        cuda_device_count=2,
        driver="580.159.04",
        driver_cuda="13.0",
        gpus=("NVIDIA H200", "NVIDIA H200"),
        gpus_total=2,
        nvlinks_01=18,
        p2p_01="OK",
        nccl_env={"NCCL_NVLS_ENABLE": "0"},
        interfaces=("eth0", "lo"),
    )


# --- Checks (pure functions of Facts) -------------------------------------------------------------


def version_tuple(text: str | None) -> tuple[int, ...]:
    import re

    if not text:
        return ()
    return tuple(int(x) for x in re.findall(r"\d+", text.split("+")[0])[:3])


TORCH_WHEEL_INDEXES: dict[tuple[int, ...], tuple[str, ...]] = {
    (2, 11): ("12.6", "12.8", "13.0"),
    (2, 12): ("12.6", "13.0", "13.2"),
    (2, 13): ("12.6", "13.0", "13.2"),
    (2, 14): ("12.6", "13.0", "13.2"),
}
"""The CUDA builds PyTorch publishes for each release the course supports, one wheel index each
(``https://download.pytorch.org/whl/cu126`` ...). From PyTorch's CUDA support matrices: issue #172663
(2.11: 12.6, 12.8, 13.0), issue #178665 (2.12: 12.8 dropped, 13.2 added), pull requests #187075 (2.13)
and #194367 (2.14) in pytorch/pytorch. 2.15, which the course also runs on, is not listed yet (the course knows only its
PyPI wheel, built with CUDA 13.2): for it :func:`wheel_index` chooses among every listed release's builds."""


def wheel_index(driver_cuda: str | None, torch_version: str | None = None) -> tuple[str, bool] | None:
    """The torch wheel index (``"cu130"``) to install for a driver that supports ``driver_cuda``, for
    ``torch_version`` (or any release the course supports), and whether it runs only through CUDA's
    minor-version compatibility (a newer 12.x runtime on an older 12.x driver). ``None``: no build runs
    on this driver."""
    have = version_tuple(driver_cuda)[:2]
    if not have:
        return None
    release = version_tuple(torch_version)[:2]
    cudas = TORCH_WHEEL_INDEXES.get(release) or sorted(
        {c for cs in TORCH_WHEEL_INDEXES.values() for c in cs}, key=version_tuple
    )
    usable = [c for c in cudas if version_tuple(c)[:2] <= have]
    if usable:
        return f"cu{usable[-1].replace('.', '')}", False
    same_major = [c for c in cudas if version_tuple(c)[0] == have[0]]
    return (f"cu{same_major[0].replace('.', '')}", True) if same_major else None


def install_hint(driver_cuda: str | None, torch_version: str | None = None) -> str:
    """The pip command for a torch build this driver runs, or what to upgrade when there is none."""
    if not driver_cuda:
        return (
            "no NVIDIA driver here: the CPU build (pip install torch --index-url https://download.pytorch.org/whl/cpu) "
            "runs the course as a simulation; with a driver, a CUDA build"
        )
    found = wheel_index(driver_cuda, torch_version)
    if found is None:
        oldest = min((c for cs in TORCH_WHEEL_INDEXES.values() for c in cs), key=version_tuple)
        return (
            f"no torch 2.11–2.15 build runs on a driver for CUDA {driver_cuda or '?'} (the oldest is built with "
            f"CUDA {oldest}): upgrade the NVIDIA driver"
        )
    index, compat = found
    pin = ""
    if version_tuple(torch_version)[:2] in TORCH_WHEEL_INDEXES:
        pin = f"=={'.'.join(map(str, version_tuple(torch_version)))}"
    hint = f"pip install 'torch{pin}' --index-url https://download.pytorch.org/whl/{index}"
    return hint + (
        " (a newer CUDA 12 runtime on this driver: runs through minor-version compatibility)" if compat else ""
    )


def check_python(f: Facts) -> Check:
    v = version_tuple(f.python)
    if (3, 11) <= v[:2] <= (3, 12):
        return Check("python", "ok", f.python)
    return Check(
        "python",
        "warn",
        f.python,
        "the course is tested with Python 3.11 and 3.12",
        "create the environment with Python 3.11 or 3.12 (make install PYTHON=python3.12)",
    )


def check_torch(f: Facts) -> Check:
    if f.torch is None:
        why = f.torch_error or f.probe_error or "torch could not be imported"
        return Check("torch", "fail", "not importable", why, "pip install torch (see the README for the CUDA build)")
    v = version_tuple(f.torch)
    build = f"CUDA {f.torch_cuda}" if f.torch_cuda else "CPU-only build"
    if not (2, 11) <= v[:2] < (2, 16):
        return Check(
            "torch",
            "warn",
            f"{f.torch} ({build})",
            "the course is tested with torch 2.11 to 2.15",
            "pip install 'torch>=2.11,<2.16'",
        )
    return Check("torch", "ok", f"{f.torch} ({build})")


def check_torch_build(f: Facts) -> Check:
    """A CPU-only torch on a machine with GPUs: everything runs, on the CPU, slowly."""
    if f.torch is None:
        return Check("torch build", "ok", "not applicable", "no torch (see the torch check)")
    if not f.torch_cuda and f.gpus:
        return Check(
            "torch build",
            "fail",
            "CPU-only torch, but NVML sees " + f"{len(f.gpus)} GPU(s)",
            "this torch cannot use the GPUs: every lesson would run on the CPU as a simulation",
            f"install a CUDA build the driver supports (it supports CUDA {f.driver_cuda or '?'}): "
            + install_hint(f.driver_cuda, f.torch),
        )
    if not f.torch_cuda:
        return Check("torch build", "ok", "CPU-only torch, no GPU here", "lessons run as CPU simulations (gloo)")
    return Check("torch build", "ok", f"CUDA {f.torch_cuda} runtime bundled with torch")


def check_driver(f: Facts) -> Check:
    if f.driver is None:
        if f.torch_cuda:
            return Check(
                "driver",
                "warn",
                "no NVIDIA driver (NVML not found)",
                "a CUDA torch without a driver runs everything on the CPU",
                "install the NVIDIA driver, or use the CPU simulation knowingly",
            )
        return Check("driver", "ok", "no NVIDIA driver", "CPU simulation mode: the course still runs")
    return Check("driver", "ok", f"{f.driver} (supports CUDA ≤ {f.driver_cuda or '?'})")


def check_driver_runtime(f: Facts) -> Check:
    """Claim C4: what matters is a driver at least as new as the CUDA runtime torch was built with."""
    name = "driver ≥ torch's CUDA"
    if not f.torch_cuda or not f.driver_cuda:
        return Check(name, "ok", "not applicable", "needs both a CUDA torch and a driver")
    have, need = version_tuple(f.driver_cuda)[:2], version_tuple(f.torch_cuda)[:2]
    value = f"driver supports CUDA {f.driver_cuda}, torch built with CUDA {f.torch_cuda}"
    if have >= need:
        return Check(name, "ok", value)
    fix = (
        f"upgrade the NVIDIA driver to one supporting CUDA {f.torch_cuda}, or install a torch build this driver "
        f"supports: {install_hint(f.driver_cuda, f.torch)}"
    )
    if have[0] < need[0]:
        return Check(
            name,
            "fail",
            value,
            "the driver is older than torch's CUDA runtime (another major version): CUDA will not initialise",
            fix,
        )
    return Check(
        name,
        "warn",
        value,
        "same major version: runs through CUDA's minor-version compatibility, but "
        "features needing the newer driver (PTX JIT of new kernels) fail",
        fix,
    )


def check_cuda_usable(f: Facts) -> Check:
    name = "CUDA usable by torch"
    if not f.torch_cuda or not f.gpus:
        return Check(name, "ok", "not applicable", "no CUDA torch or no GPU")
    if f.probe_error:
        return Check(
            name, "warn", "unknown", f.probe_error, "run python -c 'import torch; print(torch.cuda.is_available())'"
        )
    if not f.cuda_available:
        return Check(
            name,
            "fail",
            "torch.cuda.is_available() is False although NVML sees GPUs",
            f.cuda_warning or "usually a driver older than torch's CUDA, or CUDA_VISIBLE_DEVICES hiding every GPU",
            "see the driver check above; unset CUDA_VISIBLE_DEVICES or correct it",
        )
    return Check(name, "ok", f"{f.cuda_device_count} device(s)")


def check_nccl(f: Facts) -> Check:
    if not f.torch_cuda:
        return Check("NCCL", "ok", "not applicable", "CPU torch: the course uses gloo")
    if not f.nccl_available or not f.nccl:
        return Check(
            "NCCL",
            "fail",
            "not available in this torch",
            "torch.distributed cannot use the nccl backend",
            "install an official CUDA build of torch (Linux wheels bundle NCCL)",
        )
    source = f" from {f.nccl_wheel}" if f.nccl_wheel else ""
    return Check("NCCL", "ok", f"{f.nccl}{source}")


def check_cudnn(f: Facts) -> Check:
    if not f.torch_cuda:
        return Check("cuDNN", "ok", "not applicable")
    if f.cudnn is None:
        return Check(
            "cuDNN", "warn", "not found", "convolutions will not use cuDNN", "reinstall the CUDA build of torch"
        )
    return Check("cuDNN", "ok", str(f.cudnn))


def check_gpus(f: Facts) -> Check:
    n = len(f.gpus)
    if n >= 2:
        names = sorted(set(f.gpus))
        return Check("GPUs", "ok", f"{n}× " + " + ".join(names))
    detail = "the lessons need 2 GPUs; with fewer they run as CPU simulations"
    if n == 1 and f.torch_cuda:
        detail = (
            "the two-GPU lessons (NCCL between GPUs, the link) run as the CPU simulation; the one-GPU parts run on "
            "this GPU (each notebook's plan says which)"
        )
    fix = "for the two-GPU lessons: a machine with 2 NVIDIA GPUs (CUDA_VISIBLE_DEVICES must show both)"
    return Check("GPUs", "warn", f"{n} visible", detail, fix)


def check_link(f: Facts) -> Check:
    if len(f.gpus) < 2:
        return Check("GPU 0–1 link", "ok", "not applicable", "fewer than 2 GPUs")
    if f.nvlinks_01 > 0:
        return Check("GPU 0–1 link", "ok", f"NV{f.nvlinks_01} ({f.nvlinks_01} active NVLinks)")
    return Check(
        "GPU 0–1 link",
        "warn",
        "no active NVLink: PCIe only",
        "everything runs, but the bandwidth lessons will show PCIe numbers",
        "check the bridge/SXM board; nvidia-smi nvlink -s shows each link's state",
    )


def check_p2p(f: Facts) -> Check:
    if len(f.gpus) < 2 or f.p2p_01 is None:
        return Check("P2P 0–1", "ok", "not applicable")
    if f.p2p_01.startswith("OK"):
        return Check("P2P 0–1", "ok", f"supported: {f.p2p_01}")
    return Check(
        "P2P 0–1",
        "warn",
        f.p2p_01,
        "NCCL will stage through host memory (SHM) instead of P2P",
        "normal on consumer cards without NVLink; on servers check IOMMU/ACS settings",
    )


def check_visible_devices(f: Facts) -> Check:
    if f.cuda_visible_devices is None:
        return Check("CUDA_VISIBLE_DEVICES", "ok", "unset (all GPUs visible)")
    if f.gpus_total > len(f.gpus):
        return Check(
            "CUDA_VISIBLE_DEVICES",
            "warn",
            f"{f.cuda_visible_devices!r}: {len(f.gpus)} of {f.gpus_total} GPUs visible",
            "the course sees only the listed GPUs",
            "unset it, or list two GPUs joined by NVLink",
        )
    return Check("CUDA_VISIBLE_DEVICES", "ok", repr(f.cuda_visible_devices))


CHECKS: tuple[Callable[[Facts], Check], ...] = (
    check_python,
    check_torch,
    check_torch_build,
    check_driver,
    check_driver_runtime,
    check_cuda_usable,
    check_nccl,
    check_cudnn,
    check_gpus,
    check_link,
    check_p2p,
    check_visible_devices,
)


def _truthy(value: str) -> bool:
    return value.strip().lower() not in ("", "0", "false", "no", "off")


def check_nccl_variable(name: str, value: str, f: Facts) -> Check:
    """One ``NCCL_*`` variable of the environment, judged against this machine."""
    label = f"{name}={value}"
    if name in TORCH_RENAMED:
        return Check(
            label,
            "warn",
            "a PyTorch variable under its old name",
            "recent torch reads only the new name",
            f"use {TORCH_RENAMED[name]}={value}",
        )
    if name in NOT_READ_BY_NCCL:
        loads = f"; torch loads NCCL {f.nccl}" if f.nccl_available and f.nccl else ""
        return Check(label, "ok", NOT_READ_BY_NCCL[name] + loads)
    if name in READ_UNDOCUMENTED:
        return Check(
            label,
            "warn" if len(f.gpus) >= 2 else "ok",
            "read by NCCL, not documented",
            READ_UNDOCUMENTED[name],
            f"unset {name} unless you mean to make NCCL see separate hosts" if len(f.gpus) >= 2 else "",
        )
    if name not in KNOWN_NCCL:
        return Check(
            label,
            "warn",
            "not a variable NCCL documents",
            "NCCL ignores unknown names silently: a typo?",
            f"check the spelling against the NCCL documentation, or unset {name}",
        )
    if name in _JUDGES:
        return _JUDGES[name](label, value, f)
    if name in ("NCCL_IB_DISABLE", "NCCL_NET_GDR_LEVEL"):
        return Check(
            label,
            "ok",
            "network transport only",
            "no effect between GPUs joined by NVLink (claim C7, measured in notebook 02); within a PCIe server NCCL "
            "may route a GPU pair through a NIC, and there it applies",
        )
    if name in ("NCCL_ALGO", "NCCL_PROTO"):
        return Check(
            label,
            "warn",
            "forces NCCL's choice",
            "a forced algorithm/protocol is slower somewhere in the size range",
            f"unset {name} unless you are measuring it",
        )
    return Check(label, "ok", "set", "a tuning variable; the course does not need it")


def _check_p2p_disable(label: str, value: str, f: Facts) -> Check:
    if not _truthy(value):
        return Check(label, "ok", "P2P allowed")
    if _truthy(f.nccl_env.get("NCCL_SHM_DISABLE", "0")):
        return Check(
            label,
            "fail",
            "P2P and SHM both disabled: NCCL falls back to TCP sockets",
            "about 100× slower than NVLink on the reference machine",
            "unset NCCL_P2P_DISABLE and NCCL_SHM_DISABLE",
        )
    if f.nvlinks_01 > 0:
        return Check(
            label,
            "fail",
            f"disables NVLink for NCCL although GPU 0–1 have NV{f.nvlinks_01}",
            "all traffic is staged through host memory (10.9× slower at 256 MiB on the reference 2× H200, "
            "notebook 02's A/B; 11.9× for 4 GiB in nccl-tests)",
            "unset NCCL_P2P_DISABLE",
        )
    return Check(
        label,
        "warn",
        "P2P over PCIe disabled",
        "sometimes needed on consumer cards whose PCIe P2P is broken",
        "unset it if your GPUs support P2P (nvidia-smi topo -p2p r)",
    )


def _check_p2p_level(label: str, value: str, f: Facts) -> Check:
    if value.strip().upper() in ("LOC", "0"):
        nvlink = f.nvlinks_01 > 0
        status: Status = "fail" if nvlink else "warn"
        return Check(
            label,
            status,
            "LOC: P2P never used (same effect as NCCL_P2P_DISABLE=1)",
            "NVLink unused" if nvlink else "",
            "unset NCCL_P2P_LEVEL",
        )
    return Check(label, "ok", "P2P allowed up to this distance", "NVLink is always within reach (NVL and above)")


def _check_shm_disable(label: str, value: str, f: Facts) -> Check:
    p2p_works = not _truthy(f.nccl_env.get("NCCL_P2P_DISABLE", "0")) and (f.nvlinks_01 > 0 or len(f.gpus) < 2)
    if _truthy(value) and p2p_works:
        return Check(label, "ok", "SHM disabled; unused while P2P works")
    if _truthy(value):
        return Check(
            label,
            "warn",
            "SHM disabled",
            "where P2P is impossible NCCL falls back to sockets",
            "unset NCCL_SHM_DISABLE",
        )
    return Check(label, "ok", "SHM allowed")


def _check_debug(label: str, value: str, f: Facts) -> Check:
    if value.strip().upper() in ("INFO", "TRACE"):
        return Check(
            label,
            "warn",
            "verbose: every process prints many lines",
            "useful for one run, noisy as a default",
            "set it for one run only (nvtutorial.run(..., env={'NCCL_DEBUG': 'INFO'}))",
        )
    return Check(label, "ok", "quiet")


def _check_nvls(label: str, value: str, f: Facts) -> Check:
    when = nccl_debug.nvls_when(f.nccl)
    if not _truthy(value):
        return Check(label, "ok", "NVLink SHARP off", f"as in every run of the course (notebook 02); unset, {when}")
    if len(f.gpus) < (nccl_debug.nvls_min_gpus(f.nccl) or 2):
        return Check(label, "ok", "NVLink SHARP allowed; unused here", f"{len(f.gpus)} GPU(s) visible: {when}")
    forced = "; 1 turns it on without asking the driver (unset, NCCL asks)" if value.strip() == "1" else ""
    return Check(label, "ok", "NVLink SHARP allowed", when + forced)


def _check_ifname(label: str, value: str, f: Facts) -> Check:
    spec = value.strip()
    exclude = spec.startswith("^")
    spec = spec.lstrip("^")
    exact = spec.startswith("=")
    names = [n for n in spec.lstrip("=").split(",") if n]
    if exclude or not f.interfaces:
        return Check(label, "ok", "interfaces excluded" if exclude else "set")
    matches = [i for i in f.interfaces if any((i == n) if exact else i.startswith(n) for n in names)]
    if matches:
        return Check(label, "ok", f"matches {', '.join(matches)}")
    return Check(
        label,
        "fail",
        "matches no interface of this machine",
        f"interfaces here: {', '.join(f.interfaces)}; NCCL cannot bootstrap ('no socket interface found')",
        "unset NCCL_SOCKET_IFNAME or name an existing interface",
    )


_JUDGES: dict[str, Callable[[str, str, Facts], Check]] = {
    "NCCL_P2P_DISABLE": _check_p2p_disable,
    "NCCL_P2P_LEVEL": _check_p2p_level,
    "NCCL_SHM_DISABLE": _check_shm_disable,
    "NCCL_DEBUG": _check_debug,
    "NCCL_SOCKET_IFNAME": _check_ifname,
    "NCCL_NVLS_ENABLE": _check_nvls,
}
"""The variables judged against this machine, each by its own check (``label``, ``value``, the facts)."""


def run_checks(f: Facts) -> list[Check]:
    """Every check, in order, then one per ``NCCL_*`` variable of ``f.nccl_env``."""
    checks = [check(f) for check in CHECKS]
    checks += [check_nccl_variable(k, v, f) for k, v in sorted(f.nccl_env.items())]
    return checks


def healthy(checks: list[Check]) -> bool:
    return not any(c.status == "fail" for c in checks)


def simulate(f: Facts, env: Mapping[str, str] | None = None, **changes: Any) -> list[Check]:
    """The checks of ``f`` with some facts changed (and ``env`` added to its NCCL variables)."""
    if env is not None:
        changes["nccl_env"] = {**f.nccl_env, **env}
    return run_checks(dataclasses.replace(f, **changes))


BROKEN_SETUPS: dict[str, dict[str, Any]] = {
    "driver older than torch's CUDA (driver 535, CUDA 12.2)": {
        "driver": "535.183.01",
        "driver_cuda": "12.2",
        "cuda_available": False,
    },
    "NCCL_P2P_DISABLE=1 on an NVLink machine": {"env": {"NCCL_P2P_DISABLE": "1"}},
    "CPU-only torch on a GPU machine": {
        "torch": "2.11.0+cpu",
        "torch_cuda": None,
        "nccl": None,
        "nccl_available": False,
        "cudnn": None,
        "cuda_available": False,
    },
    "NCCL_SOCKET_IFNAME naming a missing interface": {"env": {"NCCL_SOCKET_IFNAME": "ib0"}},
    "the source's driver 515 + CUDA 11.7 with today's torch": {
        "driver": "515.105.01",
        "driver_cuda": "11.7",
        "cuda_available": False,
    },
}
"""What notebook 02 and the tests break, one at a time, on :func:`reference_facts`."""


def broken_setup_rows(base: Facts | None = None) -> list[dict[str, Any]]:
    """For each :data:`BROKEN_SETUPS` entry: the checks that changed from ``base``, their cause and fix."""
    base = base or reference_facts()
    before = {(c.name, c.status, c.value) for c in run_checks(base)}
    rows = []
    for label, changes in BROKEN_SETUPS.items():
        changes = dict(changes)
        checks = simulate(base, env=changes.pop("env", None), **changes)
        bad = [c for c in checks if c.status != "ok" and (c.name, c.status, c.value) not in before]
        rows.append(
            {
                "set-up": label,
                "exit code": 0 if healthy(checks) else 1,
                "what the doctor says": "; ".join(f"{c.status}: {c.name}: {c.value}" for c in bad) or "all ok",
                "fix": " | ".join(c.fix for c in bad if c.fix),
            }
        )
    return rows


# --- Report -------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Report:
    facts: Facts
    checks: list[Check]

    @property
    def healthy(self) -> bool:
        return healthy(self.checks)

    @property
    def exit_code(self) -> int:
        return 0 if self.healthy else 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": 1,
            "healthy": self.healthy,
            "exit_code": self.exit_code,
            "checks": [dataclasses.asdict(c) for c in self.checks],
            "facts": dataclasses.asdict(self.facts),
        }

    def rows(self) -> list[dict[str, Any]]:
        return [
            {"status": c.status, "check": c.name, "value": c.value, "detail": c.detail, "fix": c.fix}
            for c in self.checks
        ]

    def format(self) -> str:
        lines = [f"nvtutorial doctor: Python {self.facts.python}, {self.facts.executable or sys.executable}"]
        width = max(len(c.name) for c in self.checks)
        for c in self.checks:
            lines.append(f"  {c.status:<4}  {c.name:<{width}}  {c.value}")
            if c.status != "ok":
                if c.detail:
                    lines.append(f"  {'':<4}  {'':<{width}}  why: {c.detail}")
                if c.fix:
                    lines.append(f"  {'':<4}  {'':<{width}}  fix: {c.fix}")
        fails = sum(c.status == "fail" for c in self.checks)
        warns = sum(c.status == "warn" for c in self.checks)
        verdict = "healthy" if self.healthy else "NOT healthy"
        lines.append(f"{verdict}: {fails} failure(s), {warns} warning(s); exit code {self.exit_code}")
        return "\n".join(lines)


def run(probe: bool = True) -> Report:
    """Collect this machine's facts and check them (notebook 02, ``nvtutorial doctor``)."""
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    if probe and type(shell).__name__ == "ZMQInteractiveShell":  # a notebook cell would otherwise wait in silence
        print(
            "doctor: reading the driver, the GPUs and, from a fresh Python process, torch's versions and CUDA's "
            "view (it imports torch: a few seconds)",
            flush=True,
        )
    facts = collect(probe=probe)
    return Report(facts, run_checks(facts))


# --- CLI -------------------------------------------------------------------------------------------


def cmd_doctor(args: argparse.Namespace) -> int:
    report = run()
    if args.json:
        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(report.format())
    return report.exit_code


def add_command(sub: Any) -> None:
    """``nvtutorial doctor [--json]``: exit 0 when healthy, 1 when a check fails."""
    p = sub.add_parser(
        "doctor", help="check Python, torch, CUDA, driver, NCCL, GPUs and NCCL variables; say what to fix"
    )
    p.add_argument("--json", action="store_true", help="print JSON (for a bug report)")
    p.set_defaults(func=cmd_doctor)
