"""nccl-tests output, the reference machine's saved sweeps, and what the bandwidth runs show.

Used in notebooks 01 and 02: the typed results of ``allreduce_bench``, ``sendrecv_bench`` and ``p2p_copy`` (their
schemas' ``Rank``, read with ``RunResult.metrics_as``) to tables and :class:`~nvtutorial.report.verdict.Verdict`
values (the sweep against nccl-tests, the two directions at once, the copy engines, the bytes on the
wire). The A/B lab is :mod:`nvtutorial.chapters.ch01_hardware.report_lab`. The arithmetic (algbw, busbw, sizes) is in
:mod:`nvtutorial.units`; the runs are started by :mod:`nvtutorial.chapters.ch01_hardware.lab` and drawn
by :mod:`nvtutorial.chapters.ch01_hardware.plots`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol

from nvtutorial.chapters.ch01_hardware import schema_allreduce, schema_p2p, schema_sendrecv
from nvtutorial.chapters.ch01_hardware.report_reference import saved_label
from nvtutorial.report.verdict import Comparison, Verdict, compare, comparison_verdict
from nvtutorial.results import RunResult
from nvtutorial.units import format_size

if TYPE_CHECKING:
    import pandas as pd

    from nvtutorial.machine.links import Expectation

Sweep = RunResult[schema_allreduce.Rank]
"""A run of ``allreduce_bench``."""
SendRecv = RunResult[schema_sendrecv.Rank]
"""A run of ``sendrecv_bench``."""

# --- nccl-tests and the reference machine's saved outputs --------------------------------------


@dataclasses.dataclass
class NcclTestsRun:
    """One block of ``all_reduce_perf`` output."""

    label: str
    rows: list[dict[str, Any]]
    version: str | None = None
    avg_busbw: float | None = None
    devices: list[str] = dataclasses.field(default_factory=list)

    def busbw_by_size(self, in_place: bool = False) -> dict[int, float | None]:
        """busbw (GB/s; None where nccl-tests printed N/A) by size, out of place or in place."""
        key = "ip_busbw" if in_place else "busbw"
        return {row["size"]: row[key] for row in self.rows}

    def busbw_at(self, size: int, in_place: bool = False) -> float | None:
        return self.busbw_by_size(in_place).get(size)


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
        row = {
            "size": int(head[0]),
            "count": int(head[1]),
            "type": head[2] if len(head) > 2 else None,
            "redop": head[3] if len(head) > 3 else None,
            "root": int(head[4]) if len(head) > 4 else None,
        }
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
            out[label].append(
                {
                    "size": int(m.group(1)),
                    "time_us": float(m.group(2)),
                    "algbw": float(m.group(3)),
                    "busbw": float(m.group(4)),
                }
            )
    return out


REFERENCE_FILES = {
    "default": "nccl-tests-all_reduce-nvlink.txt",
    "P2P off": "nccl-tests-all_reduce-p2p-disabled-shm.txt",
    "P2P+SHM off": "nccl-tests-all_reduce-socket.txt",
}


def reference_nccl_tests() -> dict[str, NcclTestsRun]:
    """nccl-tests ``all_reduce_perf`` on the reference 2× H200, per path (saved outputs)."""
    from nvtutorial.machine import hardware

    return {
        path: parse_nccl_tests(hardware.reference_output(name).read_text())[0] for path, name in REFERENCE_FILES.items()
    }


def reference_frame():  # -> pandas.DataFrame
    """Reference busbw (GB/s, out-of-place) by size and path, labelled as such."""
    import pandas as pd

    ref = reference_nccl_tests()
    sizes = sorted({size for run in ref.values() for size in run.busbw_by_size()})
    rows = [{"size": format_size(s), **{path: run.busbw_at(s) for path, run in ref.items()}} for s in sizes]
    frame = pd.DataFrame(rows).set_index("size")
    frame.columns.name = "nccl-tests busbw GB/s on the reference 2× H200"
    return frame


# --- Our measurements ---------------------------------------------------------------------------


class Rate(Protocol):
    """A row with a size and its rates: a sweep's row (either workload's) or a saved torch all-reduce's."""

    @property
    def size(self) -> int: ...
    @property
    def time_us(self) -> float: ...
    @property
    def algbw(self) -> float: ...
    @property
    def busbw(self) -> float: ...


@dataclasses.dataclass(frozen=True)
class TorchRow:
    """One line of the reference machine's saved torch all-reduce sweep (:func:`parse_torch_busbw`)."""

    size: int
    time_us: float
    algbw: float
    busbw: float


def sweep_of(result: Sweep) -> schema_allreduce.Rank:
    """Rank 0's result of an ``allreduce_bench`` run, typed."""
    return result.metrics_as(schema_allreduce.Rank)


def sweep_rows(result: Sweep | Sequence[schema_allreduce.Row]) -> tuple[schema_allreduce.Row, ...]:
    """The rows of an ``allreduce_bench`` run (rank 0's, typed), or the rows themselves."""
    if isinstance(result, RunResult):
        return sweep_of(result).rows
    return tuple(result)


def sendrecv_rows(result: SendRecv) -> tuple[schema_sendrecv.Row, ...]:
    """The rows of a ``sendrecv_bench`` run (rank 0's, typed)."""
    return result.metrics_as(schema_sendrecv.Rank).rows


def rows_of(result: Sweep | Sequence[schema_allreduce.Row]) -> list[dict[str, Any]]:
    """The rows of an ``allreduce_bench`` run as plain dicts (``dataclasses.asdict`` of :func:`sweep_rows`), for a
    reader that indexes them by key (chapter 10's reference fit); this chapter reads the typed rows."""
    return [dataclasses.asdict(r) for r in sweep_rows(result)]


def sweep_frame(result: Sweep | Sequence[schema_allreduce.Row]):  # -> pandas.DataFrame
    """A sweep as a table with readable sizes; ``frame.attrs["where"]`` says where it was measured."""
    import pandas as pd

    frame = pd.DataFrame([dataclasses.asdict(r) for r in sweep_rows(result)])
    if not frame.empty:
        frame.insert(0, "size_label", [format_size(s) for s in frame["size"]])
    frame.attrs["where"] = getattr(result, "label", "")
    return frame


def at_size(
    rows: Sequence[Rate], size: int | None = None, key: Literal["busbw", "algbw", "time_us"] = "busbw"
) -> tuple[int, float]:
    """``(size, value)`` at ``size``, or at the largest size measured when ``size`` is None."""
    if not rows:
        raise ValueError("no rows: the run measured nothing")
    if size is None:
        row = max(rows, key=lambda r: r.size)
    else:
        matches = [r for r in rows if r.size == size]
        if not matches:
            raise KeyError(
                f"size {format_size(size)} was not measured; sizes: {', '.join(format_size(r.size) for r in rows)}"
            )
        row = matches[0]
    return int(row.size), float(getattr(row, key))


def is_gpu(result: object) -> bool:
    """Whether a run (anything with an ``env``) ran on GPUs."""
    env = getattr(result, "env", None)
    return bool(env is not None and env.is_gpu)


def _frame_or_none(rows: Sequence[dict[str, object]]) -> pd.DataFrame | None:
    import pandas as pd

    return pd.DataFrame(rows) if rows else None


# --- The sweep against nccl-tests (issue 15: within 1 % at 1 and 4 GiB) -----------------------------

REFERENCE_TARGET = 0.99
"""The course's all-reduce must reach this share of nccl-tests' in-place busbw on the same machine."""
REFERENCE_SIZES = (1 << 30, 4 << 30)
"""Where it is checked: large enough that both measure the link, not the per-call overhead."""


def same_machine_as_reference(result: object) -> bool:
    """Whether a run was made on the kind of machine the saved nccl-tests output comes from (2× H200, NV18)."""
    env = getattr(result, "env", None)
    return bool(
        env is not None
        and env.is_gpu
        and tuple(env.device_names) == ("NVIDIA H200", "NVIDIA H200")
        and env.link == "NV18"
    )


@dataclasses.dataclass(frozen=True)
class ReferenceRow:
    """One size of :func:`reference_check`: this sweep's busbw and nccl-tests' two columns there."""

    size: int
    busbw: float
    in_place: float
    out_of_place: float | None

    @property
    def ratio(self) -> float:
        """This run ÷ nccl-tests in place (to four digits, as the table shows it)."""
        return round(self.busbw / self.in_place, 4)

    @property
    def own_ratio(self) -> float | None:
        """nccl-tests' in place ÷ out of place (to four digits), None without an out-of-place number."""
        return round(self.in_place / self.out_of_place, 4) if self.out_of_place else None

    def table_row(self) -> dict[str, object]:
        return {
            "size": format_size(self.size),
            "this run busbw": round(self.busbw, 1),
            "nccl-tests in place": self.in_place,
            "this ÷ nccl-tests in place": self.ratio,
            "nccl-tests out of place": self.out_of_place,
            "nccl-tests: in place ÷ out of place": self.own_ratio,
        }


def _reference_rows(result: Sweep, ref: NcclTestsRun) -> list[ReferenceRow]:
    """:func:`reference_check`'s rows: each size of the sweep that nccl-tests' run ``ref`` measured in place."""
    rows = []
    for row in sorted(sweep_rows(result), key=lambda r: r.size):
        theirs = ref.busbw_at(row.size, in_place=True)
        if theirs is not None:
            rows.append(ReferenceRow(row.size, row.busbw, theirs, ref.busbw_at(row.size)))
    return rows


def reference_check(
    result: Sweep, target: float = REFERENCE_TARGET, sizes: tuple[int, ...] = REFERENCE_SIZES
) -> tuple[pd.DataFrame | None, Verdict]:
    """This sweep's busbw against nccl-tests' **in-place** busbw on the reference machine: a table of every common
    size (None where nothing compares) and a ``pass``/``fail`` verdict at ``sizes`` (``info`` where it cannot apply).

    ``dist.all_reduce`` always works in place, so nccl-tests' in-place column is the like-for-like number; the
    table also gives the out-of-place one, and the verdict says how far nccl-tests' own two columns differ at
    each checked size (its run-to-run spread is at least that), so a miss by less than that reads as such."""
    ref = reference_nccl_tests()["default"]
    where = result.label
    key = "busbw vs nccl-tests"
    if not is_gpu(result):
        return None, Verdict(
            key,
            "info",
            "CPU simulation: gloo on a CPU is not comparable with nccl-tests on the "
            "reference GPUs (their numbers are in the table above, for scale).",
            {},
            where,
        )
    if not same_machine_as_reference(result):
        return None, Verdict(
            key,
            "info",
            "This is not the reference machine (2× H200, NV18): run nccl-tests' "
            "all_reduce_perf here to compare like with like.",
            {},
            where,
        )
    rows = _reference_rows(result, ref)
    table = _frame_or_none([r.table_row() for r in rows])
    checked: dict[str, float | None] = {format_size(s): None for s in sizes}
    own_spread: dict[str, float] = {}
    for r in rows:
        if format_size(r.size) in checked:
            checked[format_size(r.size)] = r.ratio
            own_spread[format_size(r.size)] = abs(1 - r.own_ratio) if r.own_ratio is not None else float("nan")
    measured = {k: v for k, v in checked.items() if v is not None}
    numbers = {
        "target": target,
        **{f"ratio at {k}": v for k, v in checked.items()},
        **{f"nccl-tests own spread at {k}": v for k, v in own_spread.items()},
    }
    if not measured:
        return table, Verdict(
            key,
            "info",
            f"The sweep reached none of {', '.join(checked)}: nothing to check (the full profile sweeps to 4 GiB).",
            numbers,
            where,
        )
    worst = min(measured, key=measured.__getitem__)
    missing = [k for k, v in checked.items() if v is None]
    text = ", ".join(f"{v:.2%} of nccl-tests' in-place busbw at {k}" for k, v in measured.items()) + (
        f" ({', '.join(missing)} not measured)" if missing else ""
    )
    if all(v >= target for v in measured.values()):
        return table, Verdict(key, "pass", f"{text}: at least {target:.0%} everywhere checked.", numbers, where)
    gap = 1 - measured[worst]
    spread = own_spread[worst]
    text += (
        f": below {target:.0%} at {worst}, a {gap:.2%} gap; nccl-tests' own in-place and out-of-place "
        f"columns differ by {spread:.2%} there, so "
        + ("the miss is within the benchmark's own spread." if gap <= spread else "the miss is larger than that.")
    )
    if missing:
        text += f" {', '.join(missing)}: not measured (the full profile sweeps to 4 GiB)."
    return table, Verdict(key, "fail", text, numbers, where)


FLAT_FACTOR = 1.5
"""A size is on the small-message plateau while its time per call is within this factor of the fastest call of the
sizes before it (the plateau's floor so far)."""


def small_message_cost(result: Sweep | Sequence[schema_allreduce.Row], flat_factor: float = FLAT_FACTOR) -> Verdict:
    """Up to which size the time per all-reduce stays flat, read from the sweep's rows: from the smallest size up to
    (not including) the first size whose time exceeds ``flat_factor`` × the fastest call of the sizes before it.

    Anchored on that minimum, not on the first size: a slow first size (a warm-up effect, or gloo switching
    algorithms) would otherwise stretch the plateau over a curve that grows. A size on the plateau that took more
    than ``flat_factor`` × the floor is named as slower than the floor, not a cost of its size, and left out of the
    plateau's range (``flat_from``, ``flat_time_us_min``/``max``). With no plateau, only the two ends' times."""
    rows = sorted(sweep_rows(result), key=lambda r: r.size)
    small, large = rows[0], rows[-1]
    plateau = [small]
    for row in rows[1:]:
        if row.time_us > flat_factor * min(r.time_us for r in plateau):
            break
        plateau.append(row)
    floor = min(plateau, key=lambda r: r.time_us)
    slow = [r for r in plateau if r.time_us > flat_factor * floor.time_us]
    steady = [r for r in plateau if r not in slow]
    flat = plateau[-1]
    times = [r.time_us for r in steady]
    numbers = {
        "smallest": small.size,
        "time_us_smallest": small.time_us,
        "largest": large.size,
        "time_us_largest": large.time_us,
        "flat_from": steady[0].size if len(steady) > 1 else None,
        "flat_up_to": flat.size if len(steady) > 1 else None,
        "flat_time_us_min": min(times),
        "flat_time_us_max": max(times),
        "floor_size": floor.size,
        "slow_sizes": [r.size for r in slow],
        "flat_factor": flat_factor,
    }
    slow_text = (
        f" {', '.join(f'{format_size(r.size)} took {r.time_us:.1f} µs' for r in slow)}: more than {flat_factor:g}× "
        "the fastest and slower than larger messages, so not a cost of the size (the first sizes of a sweep: "
        "warm-up, or the backend's choice of algorithm)."
        if slow
        else ""
    )
    if len(steady) > 1:
        first = steady[0]
        text = (
            f"From {format_size(first.size)} to {format_size(flat.size)} ({flat.size // first.size:,}× the size) the "
            f"time per all-reduce stays within {flat_factor:g}× of the fastest call before it ({min(times):.1f}–"
            f"{max(times):.1f} µs): a fixed cost per call of about {floor.time_us:.1f} µs (the fastest, at "
            f"{format_size(floor.size)}), so busbw there says little about the link.{slow_text} The largest size, "
            f"{format_size(large.size)}, took {large.time_us:.0f} µs."
        )
    else:
        after = rows[len(plateau)] if len(plateau) < len(rows) else None
        why = (
            f"the next size, {format_size(after.size)}, took {after.time_us:.1f} µs, more than {flat_factor:g}× the "
            f"fastest call before it ({format_size(floor.size)}, {floor.time_us:.1f} µs)"
            if after is not None
            else "no size after the fastest was measured"
        )
        text = (
            f"An all-reduce of {format_size(small.size)} took {small.time_us:.1f} µs, one of "
            f"{format_size(large.size)} {large.time_us:.0f} µs; {why}, so this sweep shows no flat region.{slow_text}"
        )
    return Verdict("small messages", "info", text, numbers, getattr(result, "label", ""))


# --- Point to point: NCCL send/recv and the copy engines, one way and both ways ---------------------


def sendrecv_frame(result: SendRecv):  # -> pandas.DataFrame
    """Send/recv rows pivoted: one line per size, GB/s per direction one way and both ways."""
    import pandas as pd

    frame = pd.DataFrame([dataclasses.asdict(r) for r in sendrecv_rows(result)])
    if frame.empty:
        return frame
    table = frame.pivot_table(index="size", columns="direction", values="algbw", aggfunc="first")
    table.index = [format_size(s) for s in table.index]
    table.columns = [f"{c}: GB/s per direction" for c in table.columns]
    table.attrs["where"] = result.label
    return table.round(3)


def _duplex_comparison(
    one: Sequence[schema_sendrecv.Row | schema_p2p.Row], both: Sequence[schema_sendrecv.Row | schema_p2p.Row]
) -> tuple[int, Comparison]:
    """Both at once against one way, at the largest size both measured: each row's repeats (busbw for send/recv,
    GB/s for a copy), higher is better."""
    size = max({r.size for r in one} & {r.size for r in both})
    base = [v for r in one if r.size == size for v in r.samples()]
    cand = [v for r in both if r.size == size for v in r.samples()]
    return size, compare(base, cand, lower_is_better=False)


def sendrecv_duplex(result: SendRecv) -> Verdict:
    """NCCL send/recv: GB/s per direction with both directions at once against one way, at the largest size."""
    return _sendrecv_duplex(result)[0]


def _sendrecv_duplex(result: SendRecv) -> tuple[Verdict, Comparison | None]:
    """:func:`sendrecv_duplex` and its comparison (None where it could not compare)."""
    rows = sendrecv_rows(result)
    one = [r for r in rows if r.direction == "one way"]
    two = [r for r in rows if r.direction == "both ways"]
    where = saved_label(result)
    if not one or not two:
        why = "needs both directions measured (directions=both)"
        return Verdict("duplex: NCCL send/recv", "info", why, {}, where), None
    size, c = _duplex_comparison(one, two)  # sendrecv: busbw = algbw
    text = c.describe("GB/s", f"NCCL send/recv of {format_size(size)}, one way → each way with both at once")
    if not is_gpu(result):
        text += ". CPU simulation: processes copying through memory, not a link."
    return comparison_verdict("duplex: NCCL send/recv", c, text, where, size=size), c


@dataclasses.dataclass
class CopyRun:
    """The copy-engine step of notebook 01: the rows of a ``p2p_copy`` run, or none and why (``note``)."""

    rows: Sequence[schema_p2p.Row]
    label: str
    note: str
    result: RunResult[schema_p2p.Rank] | None = None
    path: str = "cuda:0 → cuda:1"
    """The copy asked for, named in the row that says why nothing was copied."""

    @property
    def measured(self) -> bool:
        return any(r.gbps and r.path.startswith("cuda") for r in self.rows)

    def frame(self):  # -> pandas.DataFrame
        """The rows without their repeats (sizes readable); with none, one row saying why (no empty size and speed)."""
        import pandas as pd

        if not self.rows:
            frame = pd.DataFrame([{"path": self.path, "note": self.note}])
        else:
            frame = pd.DataFrame(  # a one-way row has no busy share: left out (an empty cell, or no column)
                [
                    {
                        k: v
                        for k, v in dataclasses.asdict(r).items()
                        if not k.endswith("_repeats") and not (k == "busy_share" and v is None)
                    }
                    for r in self.rows
                ]
            )
            frame.insert(1, "size_label", [format_size(s) for s in frame["size"]])
        frame.attrs["where"] = self.label
        return frame

    def verdict(self, expectation: Expectation | None = None) -> Verdict:
        """The fastest one-way copy against the link's physical limit."""
        one = [r for r in self.rows if r.gbps and r.mode == "one way" and r.path.startswith("cuda")]
        if not one:
            return Verdict(
                "copy engines",
                "info",
                f"{self.note}; on the reference 2× H200 a 1 GiB copy GPU 0 → GPU 1 "
                f"ran at {REFERENCE_COPY.gbps:.0f} GB/s (saved).",
                {"reference_gbps": REFERENCE_COPY.gbps},
                "reference 2× H200 (saved)",
            )
        best = max(one, key=lambda r: (r.size, r.gbps))
        numbers: dict[str, float] = {"size": best.size, "gbps": best.gbps}
        text = f"{best.path}, {format_size(best.size)}: {best.gbps:.1f} GB/s"
        if expectation is not None:
            numbers["share_of_physical"] = best.gbps / expectation.physical_gbps
            text += (
                f" = {best.gbps / expectation.physical_gbps:.0%} of the "
                f"{expectation.physical_gbps:.0f} GB/s physical limit"
            )
        return Verdict("copy engines", "info", text + ".", numbers, self.label)

    def duplex(self) -> Verdict:
        """Copy engines: each direction with both at once against the same direction alone, at the largest size."""
        return self.duplex_parts()[0]

    def duplex_parts(self) -> tuple[Verdict, Comparison | None]:
        """:meth:`duplex` and the comparison it reports (the worst direction's; None where it could not compare)."""
        one = [r for r in self.rows if r.mode == "one way" and r.gbps]
        both = [r for r in self.rows if r.mode == "both at once" and r.gbps]
        if not one or not both:
            why = f"not measured here ({self.note or 'no GPU-to-GPU copies'})"
            return Verdict("duplex: copy engines", "info", why, {}, self.label), None
        worst: tuple[int, Comparison, str] | None = None
        for path in sorted({r.path for r in both}):
            size, c = _duplex_comparison([r for r in one if r.path == path], [r for r in both if r.path == path])
            if worst is None or c.ratio < worst[1].ratio:
                worst = (size, c, path)
        assert worst is not None  # both is not empty
        size, c, path = worst
        busy = [b for r in both if r.size == size and (b := r.busy_share) is not None]
        text = c.describe("GB/s", f"copy engines, {format_size(size)}, {path} alone → with the other direction at once")
        if busy:
            text += f"; each direction's stream was busy {min(busy):.0%}–{max(busy):.0%} of the time both ran"
        busy_min = min(busy) if busy else None
        return comparison_verdict(
            "duplex: copy engines", c, text, self.label, size=size, path=path, busy_share_min=busy_min
        ), c


def duplex_verdict(sendrecv: SendRecv, copy: CopyRun | None = None) -> Verdict:
    """What running both directions at once shows, as far as the runs show it (notebook 01, issue 11 finding 3).

    NVLink is full duplex by design: each direction has its own lanes. The copy engines measure what
    the link carries each way when both run; NCCL's send/recv adds its own kernels and protocol.
    """
    nccl, nccl_c = _sendrecv_duplex(sendrecv)
    engines, copy_c = copy.duplex_parts() if copy is not None else (None, None)
    numbers = {
        "nccl_ratio": nccl_c.ratio if nccl_c else None,
        "nccl_status": nccl.status,
        "copy_ratio": copy_c.ratio if copy_c else None,
        "copy_status": engines.status if engines else None,
    }
    where = nccl.where
    if not is_gpu(sendrecv):
        return Verdict(
            "duplex",
            "info",
            "CPU simulation: two processes exchanging through memory, not a link, so "
            "these numbers say nothing about duplex. On the reference 2× H200 NCCL's send/recv kept 85 % "
            "per direction with both ways at once (saved run).",
            numbers,
            where,
        )
    if engines is None or engines.status == "info":
        return Verdict(
            "duplex",
            "info",
            f"{nccl.text}. Without the copy-engine measurement these runs cannot say "
            "whether the link or NCCL's transfer kernels set that number.",
            numbers,
            where,
        )
    if engines.status == "no change" and nccl.status == "slower":
        text = (
            f"The link carries both directions at once at the one-way rate ({engines.text}); NCCL's send/recv "
            f"does not ({nccl.text}). The drop is in how NCCL moves the data (GPU kernels on the SMs, its "
            "protocol), not a path the two directions share; these runs do not show which part of NCCL."
        )
    elif engines.status == "no change":
        text = (
            f"Both directions at once keep the one-way rate: with the copy engines ({engines.text}) "
            f"and with NCCL ({nccl.text})."
        )
    else:
        text = (
            f"Both directions at once lose rate with the copy engines too ({engines.text}; NCCL: {nccl.text}). "
            "NVLink has separate lanes per direction, so the limit is at the ends (memory, copy engines, PCIe "
            "or switch ports); these runs do not show which."
        )
    return Verdict("duplex", "info", text, numbers, where)


# --- Bytes on the wire ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SavedCopy:
    """A copy measured on the reference machine: its size and rate (GB/s)."""

    size: int
    gbps: float


@dataclasses.dataclass(frozen=True)
class SavedWire:
    """Bytes counted on the NVLinks on the reference machine: ``ops`` all-reduces of ``size`` over ``links_read``
    links, sent ÷ the ring formula, and the range of MB per link."""

    size: int
    ops: int
    links_read: int
    tx_ratio: float
    per_link_mb_min: float
    per_link_mb_max: float


@dataclasses.dataclass(frozen=True)
class SavedBusbw:
    """A busbw (GB/s) at one size measured on the reference machine."""

    size: int
    busbw: float


REFERENCE_COPY = SavedCopy(size=1 << 30, gbps=394.0)
"""``tensor.copy_`` from GPU 0 to GPU 1 on the reference 2× H200 (nvtutorial/data/h200x2/README.md)."""

REFERENCE_WIRE = SavedWire(
    size=1 << 30, ops=10, links_read=18, tx_ratio=1.0000316, per_link_mb_min=59.35, per_link_mb_max=59.89
)
"""NVML's ``NVLINK_THROUGHPUT_DATA_TX`` summed over all 18 NVLinks of GPU 0, ten all-reduces of 1 GiB, on the
reference 2× H200 (the course's saved sweep, ``reference/h200x2/runs/allreduce_bench-20261130-014824-f3bc9e``):
GPU 0 sent 1.0000316 × S per all-reduce, 59.35–59.89 MB per link."""

REFERENCE_SWEEP = SavedBusbw(size=1 << 30, busbw=326.76)
"""The course's all-reduce sweep at 1 GiB on the reference 2× H200 (the same saved run), GB/s."""

WIRE_TOLERANCE = 0.05
"""How far the bytes counted on the links may be from the ring formula (protocol headers, other traffic)."""


def wire_report(result: Sweep) -> tuple[pd.DataFrame | None, Verdict]:
    """NVLink bytes on the wire per all-reduce against 2(n−1)/n · S: a table (None where the counters were not
    read) and a verdict (``pass`` within :data:`WIRE_TOLERANCE`); the reference machine's saved count where
    unavailable."""
    wire = sweep_of(result).wire
    ref = REFERENCE_WIRE
    ref_ratio = ref.tx_ratio
    ref_text = (
        f"on the reference 2× H200 (saved sweep) GPU 0 sent {ref_ratio:.5f} × 2(n−1)/n·S per all-reduce of "
        f"{format_size(ref.size)} over its {ref.links_read} NVLinks, all counted "
        f"({ref.per_link_mb_min:.2f}–{ref.per_link_mb_max:.2f} MB per link), over {ref.ops} all-reduces"
    )
    if wire is None or not wire.available:
        why = (wire.reason if wire is not None else None) or "the run did not measure it (wire_bytes=0)"
        return None, Verdict(
            "ring bytes",
            "info",
            f"Not available here: {why}. For comparison, {ref_text}.",
            {"reference_ratio": ref_ratio},
            result.label,
        )
    tx_ratio, carrying, sent, received = wire.tx_ratio, wire.links_carrying, wire.tx_bytes_per_op, wire.rx_bytes_per_op
    assert tx_ratio is not None and carrying is not None and sent is not None and received is not None, wire  # counted
    rows = [
        {
            "size": format_size(wire.size),
            "all-reduces": wire.iters,
            "NVLinks read": wire.links_read,
            "NVLinks carrying": carrying,
            "sent per all-reduce (bytes)": round(sent),
            "received per all-reduce (bytes)": round(received),
            "2(n−1)/n · S (bytes)": round(wire.expected_bytes_per_op),
            "sent ÷ formula": round(tx_ratio, 3),
        }
    ]
    table = _frame_or_none(rows)
    close = abs(tx_ratio - 1) <= WIRE_TOLERANCE
    text = (
        f"GPU 0 sent {tx_ratio:.3f} × 2(n−1)/n·S per all-reduce over {carrying} links: "
        + ("the ring formula holds" if close else "not the ring formula: NCCL moved more, or other traffic ran")
        + f" (within ±{WIRE_TOLERANCE:.0%}). For comparison, {ref_text}."
    )
    return table, Verdict(
        "ring bytes",
        "pass" if close else "fail",
        text,
        {
            "tx_ratio": tx_ratio,
            "rx_ratio": wire.rx_ratio,
            "links_carrying": carrying,
            "reference_ratio": ref_ratio,
        },
        result.label,
    )


def reference_torch() -> dict[str, list[dict[str, Any]]]:
    """The reference machine's saved torch all-reduce sweeps, by label."""
    from nvtutorial.machine import hardware

    return parse_torch_busbw(hardware.reference_output("torch-all_reduce-busbw.txt").read_text())


def reference_sweep_busbw(size: int = 1 << 30) -> tuple[int, float]:
    """``(size, busbw)`` of the course's own all-reduce sweep on the reference 2× H200 (:data:`REFERENCE_SWEEP`
    at 1 GiB; other sizes from the saved run, which a checkout has)."""
    if size == REFERENCE_SWEEP.size:
        return size, REFERENCE_SWEEP.busbw
    from nvtutorial.chapters.ch01_hardware import report_reference as reference_runs

    return at_size(sweep_rows(reference_runs.load("sweep")), size)


def reference_torch_busbw(size: int = 1 << 30, label: str = "torch allreduce default") -> tuple[int, float]:
    """``(size, busbw)`` of the reference machine's torch all-reduce at ``size``."""
    return at_size([TorchRow(**r) for r in reference_torch()[label]], size)
