"""Notebook 10's calibration as numbers: each sweep's roof and floor (``t = max(α, work / rate)``) with the table
of every measurement behind them, and the collectives' α–β fits with their residuals. Re-exported by ``report.py``,
where the notebook reads them; it imports nothing of it.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Mapping, Sequence

from nvtutorial.chapters.ch10_cost_model import model, schema
from nvtutorial.report.verdict import Verdict
from nvtutorial.units import bus_factor, format_size

# --------------------------------------------------------------------------------------------------- the roofs


SCALING = 0.5
"""A sweep's two smallest sizes reached no floor when the time grew at least half as much as the work between
them (:attr:`FloorFit.low_scaling`): on the floor the time does not grow at all, on a roof it grows as the work."""
ABOVE_FLOOR = 2.0
"""A sweep reached its roof when its largest size took at least this many floors (:attr:`FloorFit.above_floor`):
its work, not the floor, set its time."""


@dataclasses.dataclass(frozen=True)
class FloorFit:
    """``t = max(α, work / rate)`` on one sweep of one rank (the matrix multiplies of one dtype, or the copies):
    ``rate`` is the roof (FLOP/s or B/s), ``floor`` the least one call costs (α, seconds)."""

    what: str
    work: tuple[float, ...]
    """FLOPs (a multiply: 2n³) or bytes moved (a copy: twice the buffer) per call, from small to large."""
    measured: tuple[float, ...]
    rate: float
    floor: float

    @property
    def predicted(self) -> tuple[float, ...]:
        return tuple(max(self.floor, w / self.rate) for w in self.work)

    @property
    def residuals(self) -> tuple[float, ...]:
        """(model − measured) ÷ measured at each size."""
        return tuple(p / m - 1 for p, m in zip(self.predicted, self.measured))

    @property
    def above_floor(self) -> float | None:
        """The largest size's time in floors: about 1 when even the largest size only paid the floor; None when the
        sweep reached no floor (every size's time grew with its work)."""
        return self.measured[-1] / self.floor if self.floor else None

    @property
    def low_scaling(self) -> float | None:
        """How much the time grew between the two smallest sizes, as a share of how much the work grew: about 0
        when they pay the floor, about 1 on a roof; None with a single size."""
        return _scaling(self.work[:2], self.measured[:2])


def _scaling(work: Sequence[float], seconds: Sequence[float]) -> float | None:
    if len(work) < 2:
        return None
    return (seconds[1] / seconds[0]) / (work[1] / work[0])


def fit_floor(what: str, work: Sequence[float], seconds: Sequence[float], rate: float) -> FloorFit:
    """The floor α of ``t = max(α, work / rate)`` by the relative least squares of :func:`fit_link`: minimise
    Σ((max(α, wᵢ/rate) − tᵢ)/tᵢ)² over α ≥ 0. ``rate`` is the roof, the best rate the sweep reached (the model
    then never predicts a call faster than the sweep's best). The loss is a quadratic in α between two consecutive
    roof times wᵢ/rate (the points below α pay the floor): each piece's minimum, kept within its piece, and α = 0.
    A sweep whose two smallest sizes already grow with their work (:data:`SCALING`) never reached the floor: α = 0
    (none measured), not the smallest size's time."""
    if len(work) != len(seconds) or not work:
        raise ValueError(f"{what}: a fit needs a time for every size (got {len(work)} sizes, {len(seconds)} times)")
    if any(t <= 0 for t in seconds) or any(w <= 0 for w in work) or rate <= 0:
        raise ValueError(f"{what}: work, times and the rate must be positive")
    order = sorted(range(len(work)), key=lambda i: work[i])
    work, seconds = [work[i] for i in order], [seconds[i] for i in order]
    low = _scaling(work[:2], seconds[:2])
    if low is not None and low >= SCALING:  # even the smallest sizes grow with their work: no floor reached
        return FloorFit(what, tuple(work), tuple(seconds), rate, 0.0)
    roof_t = [w / rate for w in work]
    cuts = sorted(set(roof_t)) + [math.inf]

    def loss(a: float) -> float:
        return sum((max(a, r) / t - 1) ** 2 for r, t in zip(roof_t, seconds))

    candidates = [0.0]
    for lo, hi in zip(cuts, cuts[1:]):
        floor = [1 / t for r, t in zip(roof_t, seconds) if r <= lo]
        candidates.append(min(max(sum(floor) / sum(x * x for x in floor), lo), hi))
    alpha = min(candidates, key=lambda a: (loss(a), a))
    return FloorFit(what, tuple(work), tuple(seconds), rate, alpha)


def floor_fits(c: schema.CalibrationRank) -> dict[str, FloorFit]:
    """One rank's sweeps, fitted: ``matmul <dtype>`` (the roof: the best rate) and ``copy`` (the roof: the largest
    buffer's rate, the one meant to be larger than every cache; a copy that ran above it from L2, :func:`in_l2`, left
    out)."""
    out = {}
    for dtype in sorted({m.dtype for m in c.matmul}):
        points = [m for m in c.matmul if m.dtype == dtype]
        rate = max(m.flops_per_s for m in points)
        out[f"matmul {dtype}"] = fit_floor(
            f"matmul {dtype}", [2.0 * m.n**3 for m in points], [m.seconds for m in points], rate
        )
    largest = max(c.copy, key=lambda q: (q.nbytes, q.bytes_per_s))
    copies = [q for q in c.copy if not in_l2(q, c.l2_bytes, largest.bytes_per_s)]
    out["copy"] = fit_floor("copy", [2.0 * q.nbytes for q in copies], [q.seconds for q in copies], largest.bytes_per_s)
    return out


def in_l2(q: schema.CopyPoint, l2_bytes: int | None, roof: float) -> bool:
    """A copy that fits in the GPU's L2 cache (:func:`copy_name`) and ran above the memory roof ``roof``: it measured
    the cache, so it stays out of the copies' floor fit."""
    return bool(l2_bytes) and 2 * q.nbytes <= (l2_bytes or 0) and q.bytes_per_s > roof


def roofs(calibration: Sequence[schema.CalibrationRank]) -> dict[str, model.Roof]:
    """The roofs per dtype, then the slowest rank's (a synchronous step waits for it): each rank's best
    matrix-multiply rate, its largest copy's bandwidth, and its fitted floor of one multiply (:func:`fit_floor`)."""
    fitted = [floor_fits(c) for c in calibration]
    dtypes = sorted(k.removeprefix("matmul ") for k in fitted[0] if k.startswith("matmul "))
    bandwidth = min(f["copy"].rate for f in fitted)
    return {
        d: model.Roof(
            flops=min(f[f"matmul {d}"].rate for f in fitted),
            bandwidth=bandwidth,
            call_s=max(f[f"matmul {d}"].floor for f in fitted),
        )
        for d in dtypes
    }


def roof_share(flops: float, nbytes: float, seconds: float, roof: model.Roof, dtype: str = "") -> str:
    """Where a call of ``flops`` and ``nbytes`` that took ``seconds`` ran against ``roof``, in words: its rates and
    their shares of each roof. A share over 100 % says so instead: the run went above the calibration's roof (the
    roofs are the best rates the calibration saw; on a shared CPU another moment can beat them)."""

    def share(rate: float, top: float, what: str) -> str:
        x = rate / top
        above = f"{x:.3g}× the {what}: above the calibration's roof (a rate its sweep saw, not a bound)"  # RR13-6
        return f"{x:.1%} of the {what}" if x <= 1 else above

    compute, memory = flops / seconds, nbytes / seconds
    return (
        f"it ran at {compute / 1e12:.3g} TFLOP/s, {share(compute, roof.flops, f'{dtype} roof'.strip())}, "
        f"{memory / 1e9:.4g} GB/s, {share(memory, roof.bandwidth, 'memory roof')}"
    )


def program_floors(calibration: Sequence[schema.CalibrationRank]) -> dict[str, float]:
    """Each program's floor (``schema.PROGRAMS``), the slowest rank's; none when the run measured none."""
    programs = {f.program for c in calibration for f in c.floors}
    return {k: max(f.seconds for c in calibration for f in c.floors if f.program == k) for k in sorted(programs)}


def roof_verdict(calibration: Sequence[schema.CalibrationRank], is_gpu: bool, where_: str) -> Verdict:
    """Pass when every sweep (each dtype's multiplies, the copies, on every rank) reached its roof: its largest size
    took at least :data:`ABOVE_FLOOR` floors, or the sweep met no floor at all. Otherwise its "roof" is the floor's
    rate, work ÷ α, and every answer costed with it is off: fail on a GPU; ``info`` on the CPU (a simulation, where
    a busy core moves every time)."""
    fits = {
        f"{k}, rank {c.rank}" if len(calibration) > 1 else k: f for c in calibration for k, f in floor_fits(c).items()
    }
    above = {k: f.above_floor for k, f in fits.items()}
    floored = [k for k, x in above.items() if x is not None and x < ABOVE_FLOOR]
    numbers = {"above_floor": above, "threshold": ABOVE_FLOOR, "floored": floored}
    key = "costmodel.calibration.roofs"
    if floored:
        f = fits[floored[0]]
        text = (
            f"{floored[0]}: even its largest size took {f.measured[-1] * 1e6:.3g} µs, {above[floored[0]]:.2g}× the "
            f"floor of one call ({f.floor * 1e6:.3g} µs): the floor set its time, not its work, so its 'roof' is work "
            "÷ floor, and every answer costed with it is off. Add sizes large enough to take several floors (on a "
            "GPU, multiplies of 2048 or more)."
        )
        return Verdict(
            key, "fail" if is_gpu else "info", text + ("" if is_gpu else " (A CPU simulation.)"), numbers, where_
        )
    reached = "; ".join(f"{k}: {x:.3g}" for k, x in above.items() if x is not None)
    return Verdict(
        key,
        "pass",
        "Every sweep reached its roof: its largest size took at least "
        f"{ABOVE_FLOOR:g} floors of one call"
        + (f" ({reached})" if reached else "")
        + (", or the sweep met no floor at all" if None in above.values() else "")
        + ".",
        numbers,
        where_,
    )


def roof_table(calibration: Sequence[schema.CalibrationRank]):  # -> pandas.DataFrame
    """Every measurement behind the roofs and floors, per rank: each matrix size and dtype (TFLOP/s), each copied
    buffer (GB/s), each program's floor; with the time the fit ``max(α, work / roof)`` gives it and the limit the fit
    puts it at (``overhead``: the floor; ``roof``; a copy that ran from L2 above the memory roof, :func:`in_l2`:
    ``L2 (above the memory roof)``)."""
    import pandas as pd

    def row(
        c: schema.CalibrationRank,
        what: str,
        work: float,
        seconds: float,
        rate: float,
        unit: str,
        fit: FloorFit,
        l2=False,
    ):
        return {
            "rank": c.rank,
            "device": c.device,
            "measured": what,
            "time (ms)": seconds * 1e3,
            "rate": rate,
            "unit": unit,
            "fit (ms)": max(fit.floor, work / fit.rate) * 1e3,
            "regime": "L2 (above the memory roof)" if l2 else ("overhead" if work / fit.rate < fit.floor else "roof"),
        }

    rows = []
    for c in calibration:
        fits = floor_fits(c)
        rows += [
            row(
                c,
                f"matmul {m.n}³ {m.dtype}",
                2.0 * m.n**3,
                m.seconds,
                m.flops_per_s / 1e12,
                "TFLOP/s",
                fits[f"matmul {m.dtype}"],
            )
            | ({"SM clock (MHz)": f"{m.sm_clock_mhz[0]}–{m.sm_clock_mhz[1]}"} if m.sm_clock_mhz else {})
            for m in c.matmul
        ]
        rows += [
            row(
                c,
                copy_name(q.nbytes, c.l2_bytes),
                2.0 * q.nbytes,
                q.seconds,
                q.bytes_per_s / 1e9,
                "GB/s",
                fits["copy"],
                in_l2(q, c.l2_bytes, fits["copy"].rate),
            )
            for q in c.copy
        ]
        rows += [
            {
                "rank": c.rank,
                "device": c.device,
                "measured": f"floor of {f.program}",
                "time (ms)": f.seconds * 1e3,
                "regime": "overhead",
            }
            for f in c.floors
        ]
    return pd.DataFrame(rows).set_index(["rank", "measured"])


def copy_name(nbytes: int, l2_bytes: int | None) -> str:
    """A copy's row name; ``(fits in L2)`` where its bytes read and written fit in the GPU's L2 cache: it measured
    the cache, not memory, and may run above the memory roof."""
    return f"copy {format_size(nbytes)}" + (" (fits in L2)" if l2_bytes and 2 * nbytes <= l2_bytes else "")


# --------------------------------------------------------------------------------------------------- the α–β fit


@dataclasses.dataclass(frozen=True)
class Fit:
    """``t = α + S · factor / β`` fitted to one collective's sweep, with the measurements and the residuals."""

    kind: str
    ranks: int
    link: model.Link
    sizes: tuple[int, ...]
    measured: tuple[float, ...]
    where: str

    @property
    def predicted(self) -> tuple[float, ...]:
        return tuple(model.collective_time(s, self.link, self.kind, self.ranks) for s in self.sizes)

    @property
    def residuals(self) -> tuple[float, ...]:
        """(model − measured) ÷ measured at each size."""
        return tuple(p / m - 1 for p, m in zip(self.predicted, self.measured))


def fit_link(kind: str, sizes: Sequence[int], seconds: Sequence[float], ranks: int, where: str = "") -> Fit:
    """Least squares on the *relative* residuals, so that a 1 KiB point counts as much as a 1 GiB one: minimise
    Σ((α + x·γ − t)/t)² over α ≥ 0 and γ = 1/β > 0, with x = S · factor (the bytes a rank sends)."""
    if len(sizes) != len(seconds) or len(sizes) < 2:
        raise ValueError(
            f"{kind}: a fit needs at least two sizes with a time each (got {len(sizes)} and {len(seconds)})"
        )
    if any(t <= 0 for t in seconds) or any(s <= 0 for s in sizes):
        raise ValueError(f"{kind}: sizes and times must be positive")
    f = bus_factor(kind, ranks)
    x = [s * f for s in sizes]
    w = [1 / t for t in seconds]
    # the normal equations of min Σ (w·α + w·x·γ − 1)² (w·t = 1)
    a11 = sum(wi * wi for wi in w)
    a12 = sum(wi * wi * xi for wi, xi in zip(w, x))
    a22 = sum((wi * xi) ** 2 for wi, xi in zip(w, x))
    b1, b2 = sum(w), sum(wi * xi for wi, xi in zip(w, x))
    det = a11 * a22 - a12 * a12
    alpha, gamma = ((b1 * a22 - b2 * a12) / det, (a11 * b2 - a12 * b1) / det) if det > 0 else (-1.0, -1.0)
    if alpha < 0 or gamma <= 0:  # a negative latency or bandwidth fits noise, not a link: no latency, bandwidth alone
        alpha, gamma = 0.0, b2 / a22
    return Fit(
        kind=kind,
        ranks=ranks,
        link=model.Link(alpha=alpha, beta=1 / gamma),
        sizes=tuple(sizes),
        measured=tuple(seconds),
        where=where,
    )


def fits(calibration: Sequence[schema.CalibrationRank], where: str = "") -> dict[str, Fit]:
    """One fit per collective the run swept (rank 0's record: every point is already the slowest rank's)."""
    c = calibration[0]
    kinds = sorted({p.kind for p in c.collectives}, key=schema.COLLECTIVES.index)
    out = {}
    for kind in kinds:
        points = [p for p in c.collectives if p.kind == kind]
        out[kind] = fit_link(kind, [p.size for p in points], [p.seconds for p in points], c.world, where)
    return out


def fit_table(all_fits: Mapping[str, Fit]):  # -> pandas.DataFrame
    """α (µs) and β (GB/s) per collective, with the median and largest |residual|."""
    import pandas as pd

    rows = [
        {
            "collective": k,
            "α (µs)": f.link.alpha * 1e6,
            "β (GB/s)": f.link.beta / 1e9,
            "sizes": len(f.sizes),
            "median |residual|": statistics.median(abs(r) for r in f.residuals),
            "largest |residual|": max(abs(r) for r in f.residuals),
            "measured on": f.where,
        }
        for k, f in all_fits.items()
    ]
    return pd.DataFrame(rows).set_index("collective")


def residual_table(all_fits: Mapping[str, Fit]):  # -> pandas.DataFrame
    """Every point of every fit: size, measured, model, residual."""
    import pandas as pd

    rows = [
        {"collective": k, "size": format_size(s), "measured (µs)": m * 1e6, "model (µs)": p * 1e6, "residual": r}
        for k, f in all_fits.items()
        for s, m, p, r in zip(f.sizes, f.measured, f.predicted, f.residuals)
    ]
    return pd.DataFrame(rows).set_index(["collective", "size"])
