"""How the GPUs are wired: ``nvidia-smi topo -m`` parsed into a matrix and a verdict per pair.

Used in notebook 01 and by ``nvtutorial topology [--from-file PATH] [--json]``. The parser
takes the text exactly as ``nvidia-smi`` prints it (any number of GPUs, NIC rows, colour
codes, the CPU/NUMA affinity columns, old and new legends), or as pasted from a colleague's
terminal (tabs turned into spaces).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
"""Terminal colour and style codes (``ESC[4m`` … ``ESC[0m``) that nvidia-smi may print."""

AFFINITY_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_GPU = re.compile(r"^GPU(\d+)$")
_NV = re.compile(r"^NV(\d+)$")

PCIE_WORDS = {
    "PIX": "PCIe through at most one PCIe bridge (a switch), without the CPU",
    "PXB": "PCIe through several PCIe bridges (switches), without the CPU's host bridge",
    "PHB": "PCIe through the CPU's host bridge",
    "NODE": "PCIe across host bridges inside one NUMA node",
    "SYS": "PCIe across the link between CPU sockets (QPI/UPI/Infinity Fabric): the slowest path",
    "SOC": "PCIe across the link between CPU sockets (older name for SYS): the slowest path",
}
"""What each PCIe code of the legend means, in plain words (nearest first)."""

PCIE_RANK = {"PIX": 1, "PXB": 2, "PHB": 3, "NODE": 4, "SYS": 5, "SOC": 5}
"""Distance order used by ``NCCL_P2P_LEVEL`` (LOC < NVL < PIX < PXB < PHB < SYS)."""


class TopologyError(ValueError):
    """The text is not ``nvidia-smi topo -m`` output; the message says what was missing."""


@dataclasses.dataclass(frozen=True)
class Link:
    """One cell of the matrix, e.g. ``NV18`` or ``PHB``."""

    code: str

    @property
    def kind(self) -> str:
        """``"self"``, ``"nvlink"``, ``"pcie"`` or ``"unknown"``."""
        if self.code == "X":
            return "self"
        if _NV.match(self.code):
            return "nvlink"
        if self.code in PCIE_WORDS:
            return "pcie"
        return "unknown"

    @property
    def nvlinks(self) -> int:
        """How many bonded NVLinks (0 for a PCIe path)."""
        m = _NV.match(self.code)
        return int(m.group(1)) if m else 0

    @property
    def verdict(self) -> str:
        """The cell in plain language: ``"18 bonded NVLinks"``, ``"PCIe through the CPU's host bridge"``."""
        if self.kind == "self":
            return "the same device"
        if self.kind == "nvlink":
            n = self.nvlinks
            return (
                f"{n} bonded NVLink{'s' if n != 1 else ''} between the pair (to each other, or through NVSwitches "
                "on an HGX board: topo -m does not say which); NCCL's P2P transport uses them"
            )
        if self.kind == "pcie":
            return PCIE_WORDS[self.code]
        return f"unknown code {self.code!r} (not in nvidia-smi's legend)"


@dataclasses.dataclass(frozen=True)
class Topology:
    """A parsed ``nvidia-smi topo -m``: devices (GPUs then NICs), their links, affinities."""

    devices: tuple[str, ...]
    matrix: dict[str, dict[str, str]]
    affinity: dict[str, dict[str, str]]
    nic_names: dict[str, str]
    legend: dict[str, str]
    source: str = ""

    @property
    def gpus(self) -> list[str]:
        return [d for d in self.devices if _GPU.match(d)]

    @property
    def nics(self) -> list[str]:
        return [d for d in self.devices if not _GPU.match(d)]

    def link(self, a: str | int, b: str | int) -> Link:
        """The link between two devices (``0``/``"GPU0"``, ``"NIC1"``)."""
        a, b = _name(a), _name(b)
        try:
            return Link(self.matrix[a][b])
        except KeyError:
            raise KeyError(f"no entry for {a} -> {b}; devices: {', '.join(self.devices)}") from None

    def gpu_pairs(self) -> list[tuple[str, str, Link]]:
        """Every unordered GPU pair with its link, in order."""
        gpus = self.gpus
        return [(a, b, self.link(a, b)) for i, a in enumerate(gpus) for b in gpus[i + 1 :]]

    def pair_rows(self) -> list[dict[str, Any]]:
        """One row per GPU pair: code, kind, NVLink count, verdict."""
        return [
            {"pair": f"{a}–{b}", "code": link.code, "kind": link.kind, "nvlinks": link.nvlinks, "verdict": link.verdict}
            for a, b, link in self.gpu_pairs()
        ]

    def asymmetries(self) -> list[tuple[str, str]]:
        """Pairs whose two cells differ (nvidia-smi prints a symmetric matrix; a paste error otherwise)."""
        out = []
        for i, a in enumerate(self.devices):
            for b in self.devices[i + 1 :]:
                if self.matrix.get(a, {}).get(b) != self.matrix.get(b, {}).get(a):
                    out.append((a, b))
        return out

    def summary(self) -> str:
        """One sentence about the GPUs, e.g. ``"2 GPUs; every pair joined by 18 bonded NVLinks (NV18)"``."""
        gpus, pairs = self.gpus, self.gpu_pairs()
        if len(gpus) < 2:
            return f"{len(gpus)} GPU: no GPU pair to connect"
        nv = [link.nvlinks for _, _, link in pairs if link.kind == "nvlink"]
        head = f"{len(gpus)} GPUs" + (f" and {len(self.nics)} NICs" if self.nics else "")
        if len(nv) == len(pairs):
            if len(set(nv)) == 1:
                return f"{head}; every GPU pair is joined by {nv[0]} bonded NVLinks (NV{nv[0]})"
            return f"{head}; every GPU pair has NVLink, {min(nv)} to {max(nv)} links per pair"
        if not nv:
            worst = max((link for _, _, link in pairs), key=lambda link: PCIE_RANK.get(link.code, 9))
            return f"{head}; no NVLink: every pair talks over PCIe (farthest: {worst.code}, {worst.verdict})"
        return (
            f"{head}; {len(nv)} of {len(pairs)} GPU pairs have NVLink, the other {len(pairs) - len(nv)} talk over PCIe"
        )

    def to_frame(self, gpus_only: bool = False):  # -> pandas.DataFrame
        """The matrix as a DataFrame (rows and columns: devices), plus the affinity columns."""
        import pandas as pd

        rows = self.gpus if gpus_only else list(self.devices)
        data = {r: {**{c: self.matrix[r].get(c, "") for c in rows}, **self.affinity.get(r, {})} for r in rows}
        frame = pd.DataFrame.from_dict(data, orient="index")
        frame.index.name = "from \\ to"
        return frame

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "devices": list(self.devices),
            "gpus": self.gpus,
            "nics": {n: self.nic_names.get(n) for n in self.nics},
            "matrix": self.matrix,
            "affinity": self.affinity,
            "pairs": self.pair_rows(),
            "summary": self.summary(),
        }


def _name(device: str | int) -> str:
    return f"GPU{device}" if isinstance(device, int) else device


def strip_ansi(text: str) -> str:
    return ANSI.sub("", text)


def _split_header(line: str) -> list[str]:
    """Column names of the header line; the affinity columns hold spaces, so they are rejoined."""
    text = line.strip()
    names = []
    for column in AFFINITY_COLUMNS:
        text = text.replace(column, column.replace(" ", "\x00"))
    for token in text.split():
        names.append(token.replace("\x00", " "))
    return names


def parse(text: str, source: str = "") -> Topology:
    """Parse ``nvidia-smi topo -m`` output. Raises :class:`TopologyError` if it is something else."""
    lines = [strip_ansi(line).rstrip("\r\n") for line in text.replace("\r\n", "\n").split("\n")]
    header_at = None
    for i, line in enumerate(lines):
        tokens = line.split()
        if (
            tokens
            and _GPU.match(tokens[0])
            and (line[:1] in ("\t", " ") or len(lines) > i + 1 and lines[i + 1].split()[:1] == [tokens[0]])
        ):
            header_at = i
            break
    if header_at is None:
        raise TopologyError("no header line with GPU0, GPU1, … found: is this `nvidia-smi topo -m` output?")
    columns = _split_header(lines[header_at])
    devices = [c for c in columns if c not in AFFINITY_COLUMNS]
    extra = [c for c in columns if c in AFFINITY_COLUMNS]
    matrix: dict[str, dict[str, str]] = {}
    affinity: dict[str, dict[str, str]] = {}
    for line in lines[header_at + 1 :]:
        tokens = line.split()
        if not tokens:
            continue
        if tokens[0].rstrip(":") in ("Legend", "NIC") or tokens[0] not in devices:
            break
        name, cells = tokens[0], tokens[1:]
        if len(cells) < len(devices):
            raise TopologyError(f"row {name} has {len(cells)} cells for {len(devices)} devices: {line.strip()!r}")
        matrix[name] = dict(zip(devices, cells[: len(devices)]))
        values = cells[len(devices) :]
        # nvidia-smi leaves a cell empty (two tabs) before "GPU NUMA ID"; values never hold spaces.
        affinity[name] = {col: values[i] for i, col in enumerate(extra) if i < len(values)}
    missing = [d for d in devices if d not in matrix]
    if missing:
        raise TopologyError(f"the header names {', '.join(missing)} but no row for it follows")
    legend: dict[str, str] = {}
    nic_names: dict[str, str] = {}
    for line in lines:
        m = re.match(r"^\s+(X|SYS|SOC|NODE|PHB|PXB|PIX|NV#)\s+=\s+(.+?)\s*$", line)
        if m:
            legend[m.group(1)] = m.group(2)
        m = re.match(r"^\s+(NIC\d+):\s+(\S+)\s*$", line)
        if m:
            nic_names[m.group(1)] = m.group(2)
    for d in devices:
        if not _GPU.match(d) and d not in nic_names:
            nic_names.setdefault(d, d)  # older drivers name the NIC columns mlx5_0 … directly
    unknown = sorted({c for row in matrix.values() for c in row.values() if Link(c).kind == "unknown"})
    if unknown:
        raise TopologyError(f"unknown link code(s) {', '.join(unknown)}; known: X, NV#, {', '.join(PCIE_WORDS)}")
    return Topology(
        devices=tuple(devices), matrix=matrix, affinity=affinity, nic_names=nic_names, legend=legend, source=source
    )


def read(path: str | Path) -> Topology:
    """Parse a saved ``nvidia-smi topo -m`` output (``-`` reads standard input)."""
    if str(path) == "-":
        return parse(sys.stdin.read(), source="standard input")
    path = Path(path)
    return parse(path.read_text(errors="replace"), source=f"saved output {path.name}")


class NoNvidiaSmi(RuntimeError):
    pass


def query(timeout: float = 30.0) -> Topology:
    """Run ``nvidia-smi topo -m`` on this machine and parse it; :class:`NoNvidiaSmi` if there is none."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        raise NoNvidiaSmi("nvidia-smi is not installed on this machine (no NVIDIA driver)")
    proc = subprocess.run([exe, "topo", "-m"], capture_output=True, text=True, timeout=timeout, check=False)
    if proc.returncode != 0:
        raise NoNvidiaSmi(
            f"`nvidia-smi topo -m` failed with code {proc.returncode}: {(proc.stderr or proc.stdout).strip()[:300]}"
        )
    import socket

    return parse(proc.stdout, source=f"nvidia-smi topo -m on {socket.gethostname()}")


def current_or_reference() -> tuple[Topology, bool]:
    """This machine's topology, or, without nvidia-smi, the reference machine's saved output.

    Also falls back when this machine has fewer than 2 GPUs. Returns ``(topology, measured_here)``;
    ``topology.source`` says which it is. Used in notebook 01.
    """
    from nvtutorial.machine import hardware

    try:
        topo = query()
        if len(topo.gpus) >= 2:
            return topo, True
    except (NoNvidiaSmi, TopologyError, subprocess.TimeoutExpired, OSError):
        pass
    topo = read(hardware.reference_output("nvidia-smi-topo-m.txt"))
    return dataclasses.replace(
        topo, source=f"a saved output of the reference machine ({hardware.REFERENCE_MACHINE})"
    ), False


def format_report(topo: Topology) -> str:
    """The matrix and one line per GPU pair, as ``nvtutorial topology`` prints them."""
    lines = [f"topology of: {topo.source or 'unknown source'}", topo.summary(), ""]
    width = max(len(d) for d in topo.devices) + 1
    cols = [c for c in topo.devices]
    lines.append(" " * width + " ".join(f"{c:>6}" for c in cols))
    for r in topo.devices:
        lines.append(
            f"{r:<{width}}"
            + " ".join(f"{topo.matrix[r][c]:>6}" for c in cols)
            + (
                "   " + ", ".join(f"{k}: {v}" for k, v in topo.affinity.get(r, {}).items())
                if topo.affinity.get(r)
                else ""
            )
        )
    if topo.nics:
        lines.append("NICs: " + ", ".join(f"{n} = {topo.nic_names.get(n, n)}" for n in topo.nics))
    lines.append("")
    for row in topo.pair_rows():
        lines.append(f"{row['pair']:<12} {row['code']:<5} {row['verdict']}")
    for a, b in topo.asymmetries():
        lines.append(f"warning: {a}->{b} is {topo.matrix[a][b]} but {b}->{a} is {topo.matrix[b][a]}")
    return "\n".join(lines)


def cmd_topology(args: argparse.Namespace) -> int:
    try:
        topo = read(args.from_file) if args.from_file else query()
    except NoNvidiaSmi as exc:
        print(
            f"nvtutorial topology: {exc}.\n"
            "Pass saved output instead: nvidia-smi topo -m > topo.txt on the GPU machine, then "
            "nvtutorial topology --from-file topo.txt",
            file=sys.stderr,
        )
        return 1
    except FileNotFoundError:
        print(f"nvtutorial topology: no such file: {args.from_file}", file=sys.stderr)
        return 2
    except TopologyError as exc:
        print(f"nvtutorial topology: cannot read {args.from_file or 'nvidia-smi output'}: {exc}", file=sys.stderr)
        return 1
    except subprocess.TimeoutExpired:
        print("nvtutorial topology: `nvidia-smi topo -m` did not answer within 30 s", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(topo.to_dict(), indent=2))
    else:
        print(format_report(topo))
    return 0


def add_command(sub: Any) -> None:
    """``nvtutorial topology [--from-file PATH] [--json]``."""
    p = sub.add_parser("topology", help="how the GPUs are connected (nvidia-smi topo -m, explained)")
    p.add_argument(
        "--from-file",
        metavar="PATH",
        help="read saved `nvidia-smi topo -m` output (e.g. a colleague's; - for stdin) instead of running it",
    )
    p.add_argument("--json", action="store_true", help="print JSON (matrix, pairs, verdicts)")
    p.set_defaults(func=cmd_topology)
