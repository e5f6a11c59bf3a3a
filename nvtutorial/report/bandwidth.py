"""nccl-tests output, the reference machine's saved sweeps, and what the bandwidth runs show.

Used in notebooks 01 and 02: rows from a RunResult to tables and verdicts. The arithmetic
(algbw, busbw, sizes) is in :mod:`nvtutorial.units`; the runs are started by
:mod:`nvtutorial.experiments.bandwidth` and drawn by :mod:`nvtutorial.plots.bandwidth`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..units import format_size, ring_bytes_per_rank


# --- nccl-tests and the reference machine's saved outputs --------------------------------------

@dataclasses.dataclass
class NcclTestsRun:
    """One block of ``all_reduce_perf`` output."""

    label: str
    rows: list[dict[str, Any]]
    version: str | None = None
    avg_busbw: float | None = None
    devices: list[str] = dataclasses.field(default_factory=list)

    def busbw_at(self, size: int, in_place: bool = False) -> float | None:
        key = "ip_busbw" if in_place else "busbw"
        for row in self.rows:
            if row["size"] == size:
                return row[key]
        return None


def _number(token: str) -> float | None:
    try:
        return float(token)
    except ValueError:
        return None  # "N/A" where validation was off


def parse_nccl_tests(text: str) -> list[NcclTestsRun]:
    """Every result block of nccl-tests output (``== label`` lines, as the saved files have, start a new block).

    Rows hold ``size, count, type, redop, root`` and out-of-place ``time_us, algbw, busbw, wrong``
    plus in-place ``ip_time_us, ip_algbw, ip_busbw, ip_wrong`` (older versions without a root column too).
    """
    runs: list[NcclTestsRun] = []
    current: NcclTestsRun | None = None

    def block() -> NcclTestsRun:
        nonlocal current
        if current is None:
            current = NcclTestsRun(label="nccl-tests", rows=[])
            runs.append(current)
        return current

    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("=="):
            current = NcclTestsRun(label=line.strip("= ").strip(), rows=[])
            runs.append(current)
            continue
        m = re.match(r"#\s*nccl-tests version (\S+)", line)
        if m:
            block().version = m.group(1)
            continue
        m = re.match(r"#\s*Avg bus bandwidth\s*:\s*([\d.]+)", line)
        if m:
            block().avg_busbw = float(m.group(1))
            current = None  # the block ends here; rows after it belong to a new one
            continue
        m = re.match(r"#\s+Rank\s+\d+.*device\s+\d+\s+\[(.*?)\]\s+(.+)$", line)
        if m:
            block().devices.append(m.group(2).strip())
            continue
        if not line or line.startswith("#"):
            continue
        tokens = line.split()
        if len(tokens) < 11 or not tokens[0].isdigit() or not tokens[1].isdigit():
            continue
        tail = tokens[-8:]
        head = tokens[:-8]
        row = {"size": int(head[0]), "count": int(head[1]), "type": head[2] if len(head) > 2 else None,
               "redop": head[3] if len(head) > 3 else None, "root": int(head[4]) if len(head) > 4 else None}
        for prefix, values in (("", tail[:4]), ("ip_", tail[4:])):
            row[f"{prefix}time_us"], row[f"{prefix}algbw"], row[f"{prefix}busbw"] = (_number(v) for v in values[:3])
            row[f"{prefix}wrong"] = values[3]
        block().rows.append(row)
    return [r for r in runs if r.rows]


def parse_torch_busbw(text: str) -> dict[str, list[dict[str, Any]]]:
    """The reference machine's ``torch-all_reduce-busbw.txt``: label → rows (size, time_us, algbw, busbw)."""
    out: dict[str, list[dict[str, Any]]] = {}
    label = None
    for line in text.splitlines():
        if line.startswith("=="):
            label = line.strip("= ").strip()
            out[label] = []
            continue
        m = re.match(r"^torch-allreduce\s+(\d+) B\s+([\d.]+) us\s+algbw\s+([\d.]+)\s+busbw\s+([\d.]+) GB/s", line)
        if m and label is not None:
            out[label].append({"size": int(m.group(1)), "time_us": float(m.group(2)),
                               "algbw": float(m.group(3)), "busbw": float(m.group(4))})
    return out


REFERENCE_FILES = {
    "default": "nccl-tests-all_reduce-nvlink.txt",
    "P2P off": "nccl-tests-all_reduce-p2p-disabled-shm.txt",
    "P2P+SHM off": "nccl-tests-all_reduce-socket.txt",
}


def reference_nccl_tests() -> dict[str, NcclTestsRun]:
    """nccl-tests ``all_reduce_perf`` on the reference 2× H200, per path (saved outputs)."""
    from ..machine import hardware

    return {path: parse_nccl_tests(hardware.reference_output(name).read_text())[0]
            for path, name in REFERENCE_FILES.items()}


def reference_frame():  # -> pandas.DataFrame
    """Reference busbw (GB/s, out-of-place) by size and path, labelled as such."""
    import pandas as pd

    ref = reference_nccl_tests()
    sizes = sorted({row["size"] for run in ref.values() for row in run.rows})
    rows = [{"size": format_size(s), **{path: run.busbw_at(s) for path, run in ref.items()}} for s in sizes]
    frame = pd.DataFrame(rows).set_index("size")
    frame.columns.name = "nccl-tests busbw GB/s on the reference 2× H200"
    return frame


# --- Our measurements ---------------------------------------------------------------------------

def rows_of(result: Any, key: str = "rows") -> list[dict[str, Any]]:
    """Rank 0's table from a RunResult (or the list itself)."""
    if isinstance(result, list):
        return result
    return list(result.metrics.get(key, []))


def sweep_frame(result: Any, key: str = "rows"):  # -> pandas.DataFrame
    """A sweep as a table with readable sizes; ``frame.attrs["where"]`` says where it was measured."""
    import pandas as pd

    rows = rows_of(result, key)
    frame = pd.DataFrame(rows)
    if not frame.empty:
        frame.insert(0, "size_label", [format_size(s) for s in frame["size"]])
    frame.attrs["where"] = getattr(result, "label", "")
    return frame


def at_size(rows: Sequence[Mapping[str, Any]], size: int | None = None, key: str = "busbw") -> tuple[int, float]:
    """``(size, value)`` at ``size``, or at the largest size measured when ``size`` is None."""
    if not rows:
        raise ValueError("no rows: the run measured nothing")
    if size is None:
        row = max(rows, key=lambda r: r["size"])
    else:
        matches = [r for r in rows if r["size"] == size]
        if not matches:
            raise KeyError(f"size {format_size(size)} was not measured; sizes: {', '.join(format_size(r['size']) for r in rows)}")
        row = matches[0]
    return int(row["size"]), float(row[key])


def compare_with_reference(rows: Sequence[Mapping[str, Any]], reference: NcclTestsRun,
                           min_size: int = 256 << 20, tolerance: float = 0.03) -> list[dict[str, Any]]:
    """Measured busbw against nccl-tests at the sizes both have (≥ ``min_size``)."""
    out = []
    for row in sorted(rows, key=lambda r: r["size"]):
        ref = reference.busbw_at(int(row["size"]))
        if ref is None or row["size"] < min_size:
            continue
        ratio = row["busbw"] / ref
        out.append({"size": format_size(row["size"]), "measured busbw": round(row["busbw"], 1),
                    "nccl-tests busbw": ref, "measured ÷ nccl-tests": round(ratio, 3),
                    f"within {tolerance:.0%}": abs(ratio - 1) <= tolerance})
    return out


def noise(row: Mapping[str, Any]) -> float:
    """Relative spread of a row's repeats: (max − min) / median busbw (0 with one repeat)."""
    lo, hi, mid = row.get("busbw_min"), row.get("busbw_max"), row.get("busbw")
    if not mid or lo is None or hi is None:
        return 0.0
    return (hi - lo) / mid


def compare_runs(base: Sequence[Mapping[str, Any]], other: Sequence[Mapping[str, Any]], min_size: int = 0,
                 floor: float = 0.03) -> list[dict[str, Any]]:
    """Size by size: other ÷ base busbw, and whether the difference is within the runs' own noise.

    The tolerance at a size is the larger of ``floor`` and the spread of either run's repeats.
    """
    by_size = {int(r["size"]): r for r in base}
    out = []
    for row in sorted(other, key=lambda r: r["size"]):
        b = by_size.get(int(row["size"]))
        if b is None or row["size"] < min_size:
            continue
        ratio = row["busbw"] / b["busbw"]
        tol = max(floor, noise(row), noise(b))
        out.append({"size": int(row["size"]), "size_label": format_size(row["size"]), "base busbw": b["busbw"],
                    "other busbw": row["busbw"], "ratio": ratio, "tolerance": tol,
                    "within noise": abs(ratio - 1) <= tol})
    return out


# --- The link A/B lab -------------------------------------------------------------------------


@dataclasses.dataclass
class LabRun:
    """One path of an A/B lab: the path run (``experiments.bandwidth.LabPath``), its result, the transport NCCL used."""

    path: Any  # experiments.bandwidth.LabPath: name, env, meaning
    result: Any  # RunResult
    transport: Any  # nccl_debug.TransportReport

    @property
    def rows(self) -> list[dict[str, Any]]:
        return rows_of(self.result)


def common_largest_size(lab: Sequence[LabRun]) -> int:
    sizes = set.intersection(*({int(r["size"]) for r in run.rows} for run in lab))
    if not sizes:
        raise ValueError("the lab's runs have no size in common")
    return max(sizes)


def lab_rows(lab: Sequence[LabRun]) -> list[dict[str, Any]]:
    """One row per path: NCCL variables, transport read from its logs, busbw at its largest size,
    and how many times faster the first path (default) was at that size."""
    rows = []
    for run in lab:
        size, value = at_size(run.rows)
        ratio = None
        if run is not lab[0]:
            ratio, _ = lab_ratio(lab, lab[0].path.name, run.path.name)
        rows.append({"path": run.path.name, "NCCL variables": " ".join(f"{k}={v}" for k, v in run.path.env.items()) or "—",
                     "transport (from NCCL_DEBUG)": run.transport.summary, "largest size": format_size(size),
                     "busbw there (GB/s)": round(value, 3),
                     f"{lab[0].path.name} ÷ this": round(ratio, 2) if ratio is not None else None})
    return rows


def lab_ratio(lab: Sequence[LabRun], a: str = "default", b: str = "P2P off") -> tuple[float, int]:
    """busbw(a) ÷ busbw(b) at the largest size both measured, and that size."""
    runs = {run.path.name: run for run in lab}
    pair = [runs[a], runs[b]]
    size = common_largest_size(pair)
    return at_size(runs[a].rows, size)[1] / at_size(runs[b].rows, size)[1], size


# --- Notebook 01's steps -------------------------------------------------------------------------

REFERENCE_COPY = {"size": 1 << 30, "gbps": 394.0}
"""``tensor.copy_`` from GPU 0 to GPU 1 on the reference 2× H200 (nvtutorial/data/h200x2/README.md)."""

REFERENCE_WIRE = {"size": 1 << 30, "ops": 10, "link0_kib": 585_513, "links": 18}
"""NVML's ``NVLINK_THROUGHPUT_DATA_TX`` on the reference machine: link 0 advanced by 585,513 KiB over
ten all-reduces of 1 GiB (README of the saved outputs); 18 links share the traffic."""


def reference_torch() -> dict[str, list[dict[str, Any]]]:
    """The reference machine's saved torch all-reduce sweeps, by label."""
    from ..machine import hardware

    return parse_torch_busbw(hardware.reference_output("torch-all_reduce-busbw.txt").read_text())


def reference_torch_busbw(size: int = 1 << 30, label: str = "torch allreduce default") -> tuple[int, float]:
    """``(size, busbw)`` of the reference machine's torch all-reduce at ``size``."""
    return at_size(reference_torch()[label], size)


def is_gpu(result: Any) -> bool:
    env = getattr(result, "env", None)
    return bool(env is not None and env.is_gpu)


def _frame_or_none(rows: list[dict[str, Any]]):  # -> pandas.DataFrame | None
    import pandas as pd

    return pd.DataFrame(rows) if rows else None


def reference_check(result: Any, min_size: int = 256 << 20, tolerance: float = 0.03) -> tuple[Any, str]:
    """This sweep against nccl-tests on the reference machine (≥ ``min_size``): a table (None when there is
    nothing to compare) and a verdict sentence."""
    ref = reference_nccl_tests()["default"]
    if not is_gpu(result):
        return None, ("CPU simulation: gloo on a CPU is not comparable with nccl-tests on the reference GPUs "
                      "(their numbers are in the reference table above, for scale)")
    rows = compare_with_reference(rows_of(result), ref, min_size=min_size, tolerance=tolerance)
    if not rows:
        return None, f"no size ≥ {format_size(min_size)} in common with nccl-tests' sweep: nothing to compare"
    worst = min(rows, key=lambda r: r["measured ÷ nccl-tests"])
    ok = all(r[f"within {tolerance:.0%}"] for r in rows)
    verdict = (f"within {tolerance:.0%} of nccl-tests at every size ≥ {format_size(min_size)} "
               f"(lowest: {worst['measured ÷ nccl-tests']:.1%} at {worst['size']})" if ok else
               f"below nccl-tests by more than {tolerance:.0%}: {worst['measured ÷ nccl-tests']:.1%} at {worst['size']}")
    return _frame_or_none(rows), verdict


def sendrecv_frame(result: Any):  # -> pandas.DataFrame
    """Send/recv rows pivoted: one line per size, GB/s per direction one way and both ways."""
    import pandas as pd

    frame = pd.DataFrame(rows_of(result))
    if frame.empty:
        return frame
    table = frame.pivot_table(index="size", columns="direction", values="algbw", aggfunc="first")
    table.index = [format_size(s) for s in table.index]
    table.columns = [f"{c}: GB/s per direction" for c in table.columns]
    table.attrs["where"] = getattr(result, "label", "")
    return table.round(3)


def duplex_verdict(result: Any) -> str:
    """Whether sending both ways at once keeps the one-way bandwidth (a full-duplex link), at the largest size."""
    rows = rows_of(result)
    one = [r for r in rows if r["direction"] == "one way"]
    two = [r for r in rows if r["direction"] == "both ways"]
    if not one or not two:
        return "needs both directions measured (directions=both)"
    size = max({r["size"] for r in one} & {r["size"] for r in two})
    a = at_size(one, size, "algbw")[1]
    b = at_size(two, size, "algbw")[1]
    where = getattr(result, "label", "")
    text = (f"at {format_size(size)}: one way {a:.2f} GB/s; both ways at once {b:.2f} GB/s per direction "
            f"({b / a:.0%} of one way, {2 * b:.2f} GB/s in total)")
    if not is_gpu(result):
        return f"{text}. CPU simulation ({where}): processes copying through memory, not a link."
    if b >= 0.85 * a:
        return f"{text}: full duplex, each direction keeps its own bandwidth ({where})."
    return f"{text}: the two directions share the path ({where})."


@dataclasses.dataclass
class CopyRun:
    """The device-to-device copy step of notebook 01: a run, or a row saying why there was none."""

    rows: list[dict[str, Any]]
    label: str
    note: str
    result: Any = None

    def frame(self):  # -> pandas.DataFrame
        import pandas as pd

        frame = pd.DataFrame(self.rows)
        if "size" in frame and frame["size"].notna().all():
            frame.insert(1, "size_label", [format_size(s) for s in frame["size"]])
        frame.attrs["where"] = self.label
        return frame

    def verdict(self, expectation: Any = None) -> str:
        gpu_rows = [r for r in self.rows if r.get("gbps") and r.get("path", "").startswith("cuda")]
        if not gpu_rows:
            ref = f"on the reference 2× H200 a 1 GiB copy GPU 0 → GPU 1 ran at {REFERENCE_COPY['gbps']:.0f} GB/s (saved)"
            return f"{self.note}; {ref}"
        best = max(gpu_rows, key=lambda r: r["size"])
        text = f"{best['path']} at {format_size(best['size'])}: {best['gbps']:.1f} GB/s"
        if expectation is not None:
            text += f" = {best['gbps'] / expectation.physical_gbps:.0%} of the {expectation.physical_gbps:.0f} GB/s physical limit"
        return f"{text} ({self.label})"


def lab_verdict(lab: Sequence[LabRun]) -> str:
    """What the lab shows, computed from its runs."""
    runs = {run.path.name: run for run in lab}
    parts = []
    for name, run in runs.items():
        if name == lab[0].path.name:
            continue
        ratio, size = lab_ratio(lab, lab[0].path.name, name)
        parts.append(f"{lab[0].path.name} ÷ {name} = {ratio:.1f}× at {format_size(size)} ({run.transport.summary})")
    if not is_gpu(lab[0].result):
        ref = reference_nccl_tests()
        return ("CPU simulation: gloo ignores every NCCL_* variable, so the three runs took the same path and their "
                f"differences are CPU noise ({'; '.join(parts)}). On the reference 2× H200, nccl-tests measured "
                + ", ".join(f"{name} {run.busbw_at(1 << 30):.1f} GB/s" for name, run in ref.items()) + " at 1 GiB (saved).")
    return f"{lab[0].path.name} path used {lab[0].transport.summary}; " + "; ".join(parts) + f" ({lab[0].result.label})"


def wire_report(result: Any) -> tuple[Any, str]:
    """NVLink bytes on the wire per all-reduce against 2(n−1)/n · S: a table (None where the counters were not
    read) and a verdict; the reference machine's saved count where unavailable."""
    wire = result.metrics.get("wire") if hasattr(result, "metrics") else None
    ref = REFERENCE_WIRE
    ref_bytes = ref["link0_kib"] * 1024 * ref["links"] / ref["ops"]
    ref_expected = ring_bytes_per_rank(ref["size"], 2)
    ref_text = (f"reference 2× H200 (saved): link 0 sent {ref['link0_kib']:,} KiB over {ref['ops']} all-reduces of "
                f"{format_size(ref['size'])}; × {ref['links']} links = {ref_bytes / 2**30:.3f} GiB per all-reduce = "
                f"{ref_bytes / ref_expected:.3f} × 2(n−1)/n·S")
    if not wire or not wire.get("available"):
        why = (wire or {}).get("reason", "the run did not measure it (wire_bytes=0)")
        return None, f"not available here: {why}. {ref_text}."
    rows = [{"size": format_size(wire["size"]), "all-reduces": wire["iters"], "NVLinks read": wire["links_read"],
             "NVLinks carrying": wire["links_carrying"], "sent per all-reduce (bytes)": round(wire["tx_bytes_per_op"]),
             "received per all-reduce (bytes)": round(wire["rx_bytes_per_op"]),
             "2(n−1)/n · S (bytes)": round(wire["expected_bytes_per_op"]), "sent ÷ formula": round(wire["tx_ratio"], 3)}]
    close = abs(wire["tx_ratio"] - 1) <= 0.05
    verdict = (f"GPU 0 sent {wire['tx_ratio']:.3f} × 2(n−1)/n·S per all-reduce over {wire['links_carrying']} links: "
               + ("the ring formula holds" if close else "not the ring formula: NCCL moved more (or other traffic ran)")
               + f" ({result.label}). For comparison, {ref_text}.")
    return _frame_or_none(rows), verdict


def claim_nvlink_vs_pcie(lab: Sequence[LabRun]) -> dict[str, Any]:
    """The measured side of C5: NVLink against the host-staged path on this machine."""
    if not is_gpu(lab[0].result):
        ref = reference_nccl_tests()
        ratio = ref["default"].busbw_at(4 << 30) / ref["P2P off"].busbw_at(4 << 30)
        return {"claim": "C5 (measured)", "source": "NVLink is 3–5× faster than PCIe",
                "measured": f"not measurable on a CPU; reference 2× H200 (saved nccl-tests): NVLink ÷ host-staged = {ratio:.1f}× at 4 GiB",
                "verdict": "the ratio depends on the machine: ~12× on H200 SXM, ~1.8× (by vendor figures) on an RTX 3090 pair"}
    ratio, size = lab_ratio(lab, "default", "P2P off")
    return {"claim": "C5 (measured)", "source": "NVLink is 3–5× faster than PCIe",
            "measured": f"default (NVLink) ÷ NCCL_P2P_DISABLE=1 (host-staged) = {ratio:.1f}× at {format_size(size)}, {lab[0].result.label}",
            "verdict": "machine-dependent: here far more than 3–5×; an RTX 3090 bridge gives ~1.8× by vendor figures"}


def c7_verdict(ab: Sequence[LabRun], base: str = "default", other: str = "source's settings",
               min_size: int = 16 << 20) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Claim C7: are the source's NCCL settings measurably different from the default? Size by size, and a verdict."""
    runs = {run.path.name: run for run in ab}
    a, b = runs[base], runs[other]
    gpu = is_gpu(a.result)
    cmp = compare_runs(a.rows, b.rows, min_size=min_size if gpu else 0)
    rows = [{"size": r["size_label"], f"{base} busbw": round(r["base busbw"], 3), f"{other} busbw": round(r["other busbw"], 3),
             "ratio": round(r["ratio"], 3), "tolerance (noise)": f"±{r['tolerance']:.1%}", "within noise": r["within noise"]}
            for r in cmp]
    claim = {"claim": "C7", "source": "NCCL_NET_GDR_LEVEL=3 and NCCL_IB_DISABLE=1 help NVLink"}
    if not gpu:
        claim.update(measured="CPU simulation: gloo ignores NCCL_* variables, so both runs are the same path",
                     verdict="not testable on a CPU; NCCL reads both variables only for its network transport")
        return rows, claim
    read = {k: v for k, v in b.transport.env_set.items() if k in b.path.env}
    seen = (f"NCCL's log confirms it read {', '.join(f'{k}={v}' for k, v in read.items())}; " if read else "")
    worst = max(cmp, key=lambda r: abs(r["ratio"] - 1)) if cmp else None
    if worst is None:
        claim.update(measured="no common size to compare", verdict="undecided")
    elif all(r["within noise"] for r in cmp):
        claim.update(measured=f"{seen}transport {a.transport.summary} in both runs; largest difference "
                              f"{worst['ratio'] - 1:+.1%} at {worst['size_label']} (tolerance ±{worst['tolerance']:.1%}), {a.result.label}",
                     verdict="no effect on one machine: busbw unchanged within noise")
    else:
        claim.update(measured=f"{seen}busbw changed by {worst['ratio'] - 1:+.1%} at {worst['size_label']} "
                              f"(tolerance ±{worst['tolerance']:.1%}); transports {a.transport.summary} vs {b.transport.summary}",
                     verdict="a difference beyond noise: rerun to check it repeats before believing it")
    return rows, claim
