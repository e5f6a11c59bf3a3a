"""Live GPU telemetry during a run: NVML sampled by a thread of the notebook's own process.

Used in notebook 05::

    with telemetry.sample(interval=0.1) as t:
        res = nvtutorial.run("profile_step", ...)
    frame = t.frame()   # one row per GPU and sample

Each sample holds, per GPU, what :data:`MEASURES` describes: NVML's utilisation (the share of
the driver's last sample period in which at least one kernel ran: what ``nvidia-smi dmon -s u``
calls ``sm``), memory utilisation, memory used, power draw, and NVLink data bytes per second
sent and received, from NVML's cumulative NVLink counters
(``NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX/RX``, read per active link and summed). Only NVML is
used: the notebook's process never creates a CUDA context, so the launched workers have the
GPUs to themselves.

``sample(dmon=True)`` also runs ``nvidia-smi dmon -s u -o T`` beside it (where ``nvidia-smi``
exists), one line per GPU per second with its time, to show what that tool reports and what it
does not (claim C13).

Where there is no NVIDIA driver the sampler says why and yields an empty frame.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from nvtutorial import nvml

COLUMNS = [
    "t",
    "t_s",
    "gpu",
    "sm_util_pct",
    "mem_util_pct",
    "mem_used_mib",
    "power_w",
    "nvlink_tx_gbs",
    "nvlink_rx_gbs",
]
"""Columns of :meth:`Sampler.frame`; ``t`` is the wall clock (``time.time()``), ``t_s`` seconds since start."""

MEASURES = {
    "sm_util_pct": "percent of the driver's last sample period (1/6 s to 1 s, depending on the GPU) in which at least "
    "one kernel ran: a busy NCCL kernel on a few SMs reads 100 %, so it says nothing of how full the GPU "
    "is, nor of the link",
    "mem_util_pct": "percent of the same period in which device memory was read or written",
    "mem_used_mib": "device memory in use by every process on the GPU (the driver's count, allocator cache included)",
    "power_w": "power draw as the driver reports it",
    "nvlink_tx_gbs": "NVLink data bytes sent per second: the difference of NVML's cumulative counters "
    "(per active link, summed) between two samples, over the time between them",
    "nvlink_rx_gbs": "NVLink data bytes received per second, the same way",
}
"""What each telemetry column measures (NVML's definitions), for the notebook to print beside the plot."""


@dataclasses.dataclass
class _Raw:
    t: float
    gpu: int
    sm: float | None
    mem: float | None
    used_mib: float | None
    power_w: float | None
    tx_kib: float | None  # cumulative, summed over the active links
    rx_kib: float | None


class Sampler:
    """Samples NVML every ``interval`` seconds in a background thread between start() and stop()."""

    def __init__(self, interval: float = 0.1, nvlink: bool = True, dmon: bool = False) -> None:
        if interval <= 0:
            raise ValueError(f"interval={interval!r}: give a positive number of seconds")
        self.interval = float(interval)
        self.nvlink = nvlink
        self.want_dmon = dmon
        self.available = False
        self.reason = ""
        self.gpu_names: list[str] = []
        self.links: dict[int, list[int]] = {}
        self.nvlink_note = ""
        self.started_at: float | None = None
        self.stopped_at: float | None = None
        self.dmon_reason = ""
        self.dmon_text = ""
        self._raw: list[_Raw] = []
        self._errors: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pynvml: Any = None
        self._handles: list[Any] = []
        self._dmon: subprocess.Popen[str] | None = None

    # ----------------------------------------------------------------- lifecycle
    def start(self) -> Sampler:
        self.started_at = time.time()
        try:
            import pynvml
        except ImportError:
            self.reason = "NVML is unavailable: the nvidia-ml-py package (pynvml) is not installed"
            return self
        try:
            pynvml.nvmlInit()
        except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded...
            self.reason = (
                f"NVML is unavailable here (no NVIDIA driver: {type(exc).__name__}); no GPU telemetry on this machine"
            )
            return self
        self._pynvml = pynvml
        self._handles = nvml.visible_handles(pynvml)
        if not self._handles:
            self.reason = "NVML sees no GPU: no telemetry"
            pynvml.nvmlShutdown()
            self._pynvml = None
            return self
        self.available = True
        self.gpu_names = [nvml.nvml_text(pynvml.nvmlDeviceGetName(h)) for h in self._handles]
        if self.nvlink:
            for i, h in enumerate(self._handles):
                self.links[i] = nvml.active_nvlinks(pynvml, h)
            if not any(self.links.values()):
                self.nvlink_note = "no active NVLink: the NVLink columns stay empty"
        if self.want_dmon:
            self._start_dmon()
        self._thread = threading.Thread(target=self._loop, name="nvtutorial-telemetry", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5 * self.interval + 2.0)
        self.stopped_at = time.time()
        if self._dmon is not None:
            self._dmon.terminate()
            try:
                out, _ = self._dmon.communicate(timeout=3)
            except subprocess.TimeoutExpired:
                self._dmon.kill()
                out, _ = self._dmon.communicate()
            self.dmon_text = out or ""
            self._dmon = None
        if self._pynvml is not None:
            with contextlib.suppress(Exception):
                self._pynvml.nvmlShutdown()
            self._pynvml = None

    # ----------------------------------------------------------------- NVML
    def _nvlink_kib(self, handle: Any, links: list[int]) -> tuple[float | None, float | None]:
        counters = nvml.nvlink_counters(self._pynvml, handle, links) if links else {}
        if not counters:
            return None, None
        return float(sum(tx for tx, _ in counters.values())), float(sum(rx for _, rx in counters.values()))

    def _read(self, i: int, handle: Any) -> _Raw:
        pynvml = self._pynvml
        t = time.time()
        sm = mem = used = power = None
        tx = rx = None
        with contextlib.suppress(pynvml.NVMLError):
            u = pynvml.nvmlDeviceGetUtilizationRates(handle)
            sm, mem = float(u.gpu), float(u.memory)
        with contextlib.suppress(pynvml.NVMLError):
            used = pynvml.nvmlDeviceGetMemoryInfo(handle).used / 2**20
        with contextlib.suppress(pynvml.NVMLError):
            power = pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0
        if self.nvlink:
            try:
                tx, rx = self._nvlink_kib(handle, self.links.get(i, []))
            except pynvml.NVMLError as exc:
                if not self._errors:
                    self._errors.append(f"NVLink counters unreadable: {exc}")
        return _Raw(t, i, sm, mem, used, power, tx, rx)

    def _loop(self) -> None:
        next_t = time.perf_counter()
        while not self._stop.is_set():
            for i, h in enumerate(self._handles):
                self._raw.append(self._read(i, h))
            next_t += self.interval
            self._stop.wait(max(0.0, next_t - time.perf_counter()))
        for i, h in enumerate(self._handles):  # one last sample, so the end of the run is in
            self._raw.append(self._read(i, h))

    # ----------------------------------------------------------------- dmon
    def _start_dmon(self) -> None:
        exe = shutil.which("nvidia-smi")
        if exe is None:
            self.dmon_reason = "nvidia-smi is not on PATH: no dmon output"
            return
        self._dmon = subprocess.Popen(
            [exe, "dmon", "-s", "u", "-o", "T", "-d", "1"],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            stdin=subprocess.DEVNULL,
        )

    def dmon_frame(self):  # -> pandas.DataFrame
        """What ``nvidia-smi dmon -s u`` printed during the run, as a table (its own columns, and ``t``,
        the wall clock of each line, where dmon printed its time)."""
        return parse_dmon(self.dmon_text, day=self.started_at)

    # ----------------------------------------------------------------- results
    def frame(self):  # -> pandas.DataFrame
        """One row per GPU and sample (see :data:`COLUMNS`); empty, with ``attrs["reason"]``, without NVML."""
        import pandas as pd

        rows = []
        last: dict[int, _Raw] = {}
        for r in self._raw:
            prev = last.get(r.gpu)
            tx_rate = rx_rate = float("nan")
            if prev is not None and r.tx_kib is not None and prev.tx_kib is not None and r.t > prev.t:
                dt = r.t - prev.t
                if (
                    r.tx_kib >= prev.tx_kib
                    and r.rx_kib is not None
                    and prev.rx_kib is not None
                    and r.rx_kib >= prev.rx_kib
                ):
                    tx_rate = (r.tx_kib - prev.tx_kib) * 1024 / dt / 1e9
                    rx_rate = (r.rx_kib - prev.rx_kib) * 1024 / dt / 1e9
            last[r.gpu] = r
            rows.append(
                {
                    "t": r.t,
                    "t_s": r.t - (self.started_at or r.t),
                    "gpu": r.gpu,
                    "sm_util_pct": r.sm,
                    "mem_util_pct": r.mem,
                    "mem_used_mib": r.used_mib,
                    "power_w": r.power_w,
                    "nvlink_tx_gbs": tx_rate,
                    "nvlink_rx_gbs": rx_rate,
                }
            )
        frame = pd.DataFrame(rows, columns=COLUMNS)
        frame.attrs["reason"] = self.reason
        frame.attrs["gpus"] = list(self.gpu_names)
        return frame

    def nvlink_bytes(self, start: float, end: float) -> dict[int, dict[str, float]]:
        """Bytes each GPU sent and received over NVLink between two wall-clock times (``time.time()``),
        from the counter samples closest inside the interval."""
        out: dict[int, dict[str, float]] = {}
        for gpu in range(len(self._handles)):
            inside = [r for r in self._raw if r.gpu == gpu and start <= r.t <= end and r.tx_kib is not None]
            if len(inside) >= 2:
                a, b = inside[0], inside[-1]
                assert a.tx_kib is not None and b.tx_kib is not None  # (inside holds only such samples)
                out[gpu] = {
                    "tx_bytes": (b.tx_kib - a.tx_kib) * 1024,
                    "rx_bytes": (b.rx_kib - a.rx_kib) * 1024,  # type: ignore[operator]
                    "seconds": b.t - a.t,
                }
        return out

    @property
    def errors(self) -> list[str]:
        return list(self._errors)

    def describe(self) -> list[str]:
        """What was sampled, how often, and what each column means; or why nothing was."""
        if not self.available:
            return [f"no telemetry: {self.reason}"]
        lines = [
            f"NVML read every {self.interval:g} s in a thread of this notebook, for {len(self._handles)} GPU(s): "
            + ", ".join(self.gpu_names)
        ]
        lines += [f"{k}: {v}" for k, v in MEASURES.items() if self.nvlink or not k.startswith("nvlink")]
        if self.nvlink_note:
            lines.append(self.nvlink_note)
        return lines

    def to_dict(self) -> dict[str, Any]:
        """Everything sampled (JSON-safe), to keep beside a run's results."""
        frame = self.frame()
        return {
            "available": self.available,
            "reason": self.reason,
            "interval_s": self.interval,
            "gpus": self.gpu_names,
            "nvlinks": {str(k): v for k, v in self.links.items()},
            "started_at": self.started_at,
            "stopped_at": self.stopped_at,
            "dmon_text": self.dmon_text,
            "dmon_reason": self.dmon_reason,
            "samples": frame.astype(object).where(frame.notna(), None).to_dict("records"),
        }

    def save(self, path: str | Path) -> Path:
        """Write :meth:`to_dict` as JSON (e.g. ``run.run_dir / "telemetry.json"``)."""
        path = Path(path)
        path.write_text(json.dumps(self.to_dict(), indent=1))
        return path

    def summary(self) -> str:
        """One line: how many samples of which GPUs, or why there are none."""
        if not self.available:
            return self.reason
        n = len(self._raw) // max(1, len(self._handles))
        links = ", ".join(f"GPU {g}: {len(v)} NVLinks" for g, v in self.links.items()) or "NVLink not sampled"
        return f"{n} samples of {len(self._handles)} GPU(s) every {self.interval:g} s ({links})"


@contextlib.contextmanager
def sample(interval: float = 0.1, nvlink: bool = True, dmon: bool = False) -> Iterator[Sampler]:
    """Sample NVML in a background thread for the duration of the ``with`` block."""
    sampler = Sampler(interval=interval, nvlink=nvlink, dmon=dmon).start()
    try:
        yield sampler
    finally:
        sampler.stop()


TIME_COLUMNS = ("date", "time")
"""Columns ``nvidia-smi dmon -o DT`` adds before ``gpu``: text, not numbers."""


def parse_dmon(text: str, day: float | None = None):  # -> pandas.DataFrame
    """``nvidia-smi dmon`` output as a table: its ``# gpu sm mem ...`` header (``#Time gpu ...`` with
    ``-o T``) names the columns. With a ``time`` column and ``day`` (a ``time.time()`` on the day of
    the run), ``t`` is each line's wall clock."""
    import pandas as pd

    columns: list[str] | None = None
    rows = []
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "#":
            parts = parts[1:]
        elif parts[0].startswith("#"):
            parts[0] = parts[0][1:]
        else:
            if columns is not None and len(parts) == len(columns):
                rows.append(parts)
            continue
        if columns is None and parts and parts[0].lower() in ("gpu", "idx", *TIME_COLUMNS):
            columns = [p.lower() for p in parts]
    if columns is None:
        return pd.DataFrame()
    frame = pd.DataFrame(rows, columns=columns)
    for c in frame.columns:
        if c not in TIME_COLUMNS:
            frame[c] = pd.to_numeric(frame[c], errors="coerce")
    if "time" in frame.columns and day is not None:
        midnight = time.mktime(time.localtime(day)[:3] + (0, 0, 0, 0, 0, -1))

        def clock(hms: str) -> float:
            try:
                h, m, sec = (int(x) for x in hms.split(":"))
            except ValueError:
                return float("nan")
            return midnight + 3600 * h + 60 * m + sec

        frame["t"] = frame["time"].map(clock)
    return frame


def dmon_columns(text: str) -> list[str]:
    """The metric columns ``nvidia-smi dmon`` printed (``gpu`` and the time left out)."""
    return [c for c in parse_dmon(text).columns if c not in ("gpu", *TIME_COLUMNS)]


def shows_nvlink(columns: list[str]) -> bool:
    """Whether any dmon column is an NVLink counter (names containing ``nvl``)."""
    return any("nvl" in c.lower() for c in columns)
