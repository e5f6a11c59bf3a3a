"""Which transport NCCL really used, read from its ``NCCL_DEBUG=INFO`` lines; the NCCL variables explained.

Used in notebooks 01 and 02. With ``NCCL_DEBUG=INFO`` (and ``NCCL_DEBUG_SUBSYS`` including
``INIT``, as its default INIT,BOOTSTRAP,ENV does) every channel NCCL connects prints a line such as::

    NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM          (NVLink or PCIe peer-to-peer)
    NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/direct pointer (one process driving both GPUs)
    NCCL INFO Channel 00 : 1[1] -> 0[0] via SHM/direct/direct     (staged through host memory)
    NCCL INFO Channel 00/0 : 1[1] -> 0[0] [receive] via NET/Socket/0   (TCP sockets)
    NCCL INFO Channel 00/0 : 1[1] -> 0[0] [send] via NET/IB/0/GDRDMA   (InfiniBand/RoCE, GPUDirect RDMA)

The topology tells what the hardware offers; these lines tell what NCCL chose.
"""

from __future__ import annotations

import collections
import dataclasses
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

_CHANNEL = re.compile(
    r"NCCL INFO Channel (\d+)(?:/\d+)?\s*:\s*(\d+)\[[^\]]*\]\s*->\s*(\d+)\[[^\]]*\]"
    r"(?:\s*\[(send|receive)\])?\s*via\s+(.+?)\s*$"
)
_VERSION = re.compile(r"NCCL INFO NCCL version (\S+)")
_ENV_SET = re.compile(r"NCCL INFO (NCCL_\w+) set by environment to (\S*)")

FAMILIES = {
    "P2P": "peer-to-peer: one GPU reads/writes the other's memory (NVLink, or PCIe where there is no NVLink)",
    "SHM": "shared host memory: each GPU copies into host RAM, the other copies out",
    "NET/Socket": "TCP sockets through the network stack (on one machine the kernel delivers them locally)",
    "NET/IB": "InfiniBand/RoCE verbs through a NIC",
    "COLLNET": "in-network reduction (SHARP) through the NIC",
    "NVLS": "NVLink SHARP: the NVSwitches reduce the data (an NVSwitch board; from two GPUs with NCCL ≥ 2.28.7)",
}

NVLS_FROM_TWO_GPUS = (2, 28, 7)
"""The first NCCL whose ``ncclNvlsInit`` (``src/transport/nvls.cc``) sets NVLink SHARP up for two GPUs. Up to
v2.28.3-1 it returned early where its topology held two GPUs or fewer (``gpuCount <= 2``); from v2.28.7-1 on
(v2.28.9-1, v2.29.x and v2.30.x too) only for fewer than two (``gpuCount < 2``; 2.28.7's release notes: "Makes
multimem available with as few as two ranks"). torch 2.11 to 2.14 load 2.28.9 or later."""


def nvls_min_gpus(nccl: str | None) -> int | None:
    """The fewest GPUs for which this NCCL version sets NVLink SHARP up (2 from 2.28.7, 3 before); None: unknown."""
    v = tuple(int(x) for x in re.findall(r"\d+", (nccl or "").split("+")[0])[:3])
    if len(v) < 2:
        return None
    return 2 if v >= NVLS_FROM_TWO_GPUS else 3


def nvls_when(nccl: str | None) -> str:
    """When NCCL (``nccl``: its version, or None) sets NVLink SHARP up, in words: the doctor and notebook 02."""
    least = nvls_min_gpus(nccl)
    who = f"NCCL {nccl} sets it up from {least} GPUs" if least else "NCCL sets it up from 2 GPUs (3 before 2.28.7)"
    return (
        f"{who} where their NVLinks reach NVSwitches, on Hopper or newer, and the driver reports multicast support "
        "(ncclNvlsInit, NCCL's src/transport/nvls.cc)"
    )


@dataclasses.dataclass(frozen=True)
class Channel:
    channel: int
    src: int
    dst: int
    direction: str | None
    via: str  # "P2P/CUMEM", "SHM/direct/direct", "NET/Socket/0"

    @property
    def family(self) -> str:
        """``P2P``, ``SHM``, ``NET/Socket``, ``NET/IB``, …"""
        parts = self.via.split("/")
        if parts[0] == "NET" and len(parts) > 1:
            return f"NET/{parts[1]}"
        return parts[0].split()[0]


@dataclasses.dataclass(frozen=True)
class TransportReport:
    """What the logs say: channels, NCCL version, variables NCCL reports as set."""

    channels: tuple[Channel, ...]
    version: str | None
    env_set: dict[str, str]
    backend: str | None = None

    @property
    def families(self) -> collections.Counter:
        return collections.Counter(c.family for c in self.channels)

    @property
    def transport(self) -> str | None:
        """The transport most channels used (``"P2P"``, ``"SHM"``, ``"NET/Socket"``), None without NCCL lines."""
        counts = self.families
        return counts.most_common(1)[0][0] if counts else None

    @property
    def details(self) -> list[str]:
        """Distinct ``via`` strings, e.g. ``["P2P/CUMEM"]`` (channel numbers dropped)."""
        seen: dict[str, None] = {}
        for c in self.channels:
            seen[re.sub(r"/\d+(?=/|$)", "", c.via)] = None
        return list(seen)

    @property
    def summary(self) -> str:
        """A short label for tables and legends: ``"P2P/CUMEM"``, ``"SHM"``, ``"gloo: no NCCL"``."""
        if self.backend == "gloo":
            return "gloo: no NCCL"
        if not self.channels:
            return "not reported"
        transport = self.transport
        assert transport is not None  # there are channels
        details = [d for d in self.details if d.split("/")[0] == transport.split("/")[0]]
        return details[0] if len(details) == 1 else transport

    def describe(self, link_code: str | None = None) -> str:
        """A sentence: what NCCL used, and what that means on this link."""
        if self.backend == "gloo":
            return (
                "gloo on CPU: NCCL is not used, so the NCCL_* variables have no effect and no transport "
                "lines are printed; on GPUs the same run prints them"
            )
        if not self.channels:
            return "no NCCL channel lines found: was NCCL_DEBUG=INFO set for this run?"
        t = self.transport or "?"
        text = f"{self.summary}: {FAMILIES.get(t, 'a transport this course does not describe')}"
        if t == "P2P" and link_code:
            text += "; here over NVLink" if link_code.startswith("NV") else f"; here over PCIe ({link_code})"
        other = {f: n for f, n in self.families.items() if f != t}
        if other:
            text += " (also: " + ", ".join(f"{f} on {n} channel(s)" for f, n in other.items()) + ")"
        return text

    def to_dict(self) -> dict[str, Any]:
        return {
            "transport": self.transport,
            "summary": self.summary,
            "details": self.details,
            "channels": len(self.channels),
            "version": self.version,
            "env_set": self.env_set,
            "backend": self.backend,
        }


def parse_lines(lines: Iterable[str], backend: str | None = None) -> TransportReport:
    """Read NCCL's INFO lines (any order, several ranks mixed)."""
    channels: list[Channel] = []
    version = None
    env_set: dict[str, str] = {}
    for line in lines:
        if "NCCL INFO" not in line:
            continue
        m = _CHANNEL.search(line)
        if m:
            channels.append(
                Channel(
                    channel=int(m.group(1)),
                    src=int(m.group(2)),
                    dst=int(m.group(3)),
                    direction=m.group(4),
                    via=m.group(5),
                )
            )
            continue
        m = _VERSION.search(line)
        if m:
            version = m.group(1)
            continue
        m = _ENV_SET.search(line)
        if m:
            env_set[m.group(1)] = m.group(2).rstrip(".")
    return TransportReport(channels=tuple(channels), version=version, env_set=env_set, backend=backend)


def parse_text(text: str, backend: str | None = None) -> TransportReport:
    return parse_lines(text.splitlines(), backend=backend)


def read_logs(log_files: Mapping[int, Path] | Iterable[Path], backend: str | None = None) -> TransportReport:
    """The transport report of a run from its rank logs (``RunResult.log_files``)."""
    paths = log_files.values() if isinstance(log_files, Mapping) else log_files
    lines: list[str] = []
    for path in paths:
        try:
            lines += Path(path).read_text(errors="replace").splitlines()
        except FileNotFoundError:
            continue
    return parse_lines(lines, backend=backend)


def nccl_version_number(text: str | None) -> tuple[int, ...] | None:
    """``"2.28.9+cuda13.0"`` → ``(2, 28, 9)``."""
    if not text:
        return None
    m = re.match(r"(\d+)\.(\d+)\.(\d+)", text)
    return tuple(int(g) for g in m.groups()) if m else None


# --- The NCCL variables notebook 02 explains -----------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Variable:
    name: str
    what: str
    values: str
    on_one_machine: str
    transports: tuple[str, ...] = ()  # transports it acts on ("all": every run)


VARIABLES: tuple[Variable, ...] = (
    Variable(
        "NCCL_DEBUG",
        "how much NCCL logs",
        "VERSION, WARN, INFO, TRACE (debug builds); unset: nothing is printed "
        "(NONE; set WARN to see why a call failed)",
        "INFO prints the version, the topology and one line per channel with its transport: the way to see "
        "what NCCL really uses; too chatty to leave on",
        ("all",),
    ),
    Variable(
        "NCCL_DEBUG_SUBSYS",
        "which parts log at INFO",
        "INIT, BOOTSTRAP, ENV (these three are the default), COLL, P2P, SHM, NET, GRAPH, TUNING, ALL; ^X to exclude",
        "the default already prints the transport lines (INIT) and the '… set by environment' lines (ENV)",
        ("all",),
    ),
    Variable(
        "NCCL_P2P_DISABLE",
        "forbid the P2P transport (GPU reads/writes the peer's memory over NVLink or PCIe)",
        "1 disables",
        "1 turns NVLink off for NCCL: traffic is staged through host memory (SHM), 10.9× "
        "slower at 256 MiB on the reference 2× H200 (notebook 02's A/B); nvidia-smi topo -m still shows NV18 "
        "(it does not read NCCL's variables)",
        ("P2P",),
    ),
    Variable(
        "NCCL_P2P_LEVEL",
        "the farthest topology distance at which P2P is still used",
        "LOC (never), NVL (NVLink only), PIX, PXB, PHB, SYS (always)",
        "with NVLink the default already uses it; LOC has the same effect as NCCL_P2P_DISABLE=1",
        ("P2P",),
    ),
    Variable(
        "NCCL_SHM_DISABLE",
        "forbid the shared-host-memory transport",
        "1 disables",
        "matters only when P2P is off or impossible; then NCCL falls back to its network transport "
        "(IB/RoCE if the machine has a NIC for it, else sockets; sockets on the reference machine, about 100× "
        "slower than NVLink there: nccl-tests 3.05 against 330 GB/s at 1 GiB)",
        ("SHM",),
    ),
    Variable(
        "NCCL_IB_DISABLE",
        "forbid NCCL's own InfiniBand/RoCE verbs transport",
        "1 disables (then sockets, "
        "unless a network plugin such as AWS EFA's aws-ofi-nccl provides the network transport)",
        "none between GPUs joined by NVLink: they talk over P2P, which no NIC path beats; within a PCIe server NCCL "
        "may route a GPU pair through a NIC both reach faster than each other (NCCL_NET_DISABLE_INTRA=1 forbids it), "
        "and there it matters",
        ("NET/IB",),
    ),
    Variable(
        "NCCL_NET_GDR_LEVEL",
        "the farthest NIC-to-GPU distance at which GPUDirect RDMA is used",
        "LOC, PIX, PXB, PHB, SYS (older: 0–5)",
        "none between GPUs joined by NVLink: it concerns a NIC reading and writing GPU memory directly "
        "(NCCL_NET_GDR_READ is the send-side switch); NCCL reads it only for a NIC that supports GPUDirect RDMA: "
        "between nodes, or where NCCL routes a pair of one machine's GPUs through one",
        ("NET/IB",),
    ),
    Variable(
        "NCCL_ALGO",
        "force the collective algorithm",
        "Ring, Tree, CollnetDirect, CollnetChain, NVLS, NVLSTree, PAT (lists allowed)",
        "forcing one removes NCCL's choice; whether ring and tree differ with 2 GPUs the course has "
        "not measured (notebook 02, exercise 4)",
        ("all",),
    ),
    Variable(
        "NCCL_PROTO",
        "force the protocol",
        "LL, LL128, Simple (lists allowed)",
        "LL is fast for small messages, Simple for large ones; forcing one slows the other end of the sweep",
        ("all",),
    ),
    Variable(
        "NCCL_SOCKET_IFNAME",
        "which network interfaces NCCL may use for bootstrap and sockets",
        "prefixes (eth,ens), ^ to exclude (^docker,lo), = for an exact name",
        "bootstrap only, unless P2P and SHM are off; a name that matches no interface stops NCCL from starting",
        ("NET/Socket",),
    ),
    Variable(
        "NCCL_NVLS_ENABLE",
        "NVLink SHARP (NVLS): the NVSwitches reduce the data, through multicast memory",
        "0 off; 1 on without asking the driver; unset (2): on where the driver reports multicast support",
        "on an NVSwitch board such as the reference HGX, NCCL 2.28.7 and later set NVLS up for two GPUs too (up to "
        "2.28.3 only for more than two: ncclNvlsInit in NCCL's src/transport/nvls.cc), with Hopper or newer GPUs and "
        "multicast support in the driver; none without NVSwitches. Every run of the course keeps it off (0), as the "
        "reference machine, which others share, does: what NVLS would change for two GPUs is not measured here",
        ("NVLS",),
    ),
)
"""The variables notebook 02 explains (the source tutorial sets three of them)."""

SOURCE_SETTINGS = {"NCCL_DEBUG": "INFO", "NCCL_NET_GDR_LEVEL": "3", "NCCL_IB_DISABLE": "1"}
"""What the source tutorial exports in its environment section (claim C7); ``NCCL_IB_DISABLE=1`` with the comment
"needed in non-InfiniBand environments"."""


def variables_rows(environ: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """The table of :data:`VARIABLES`, with the value each has in ``environ`` (default: this process)."""
    import os

    env = os.environ if environ is None else environ
    return [
        {
            "variable": v.name,
            "what it does": v.what,
            "values": v.values,
            "effect on one machine with NVLink": v.on_one_machine,
            "here": env.get(v.name, "(unset)"),
            "source sets": SOURCE_SETTINGS.get(v.name, ""),
        }
        for v in VARIABLES
    ]


def affects(name: str, transport: str | None) -> bool:
    """Whether variable ``name`` can change a run whose transport is ``transport``."""
    for v in VARIABLES:
        if v.name == name:
            return "all" in v.transports or (transport is not None and transport in v.transports)
    return False
