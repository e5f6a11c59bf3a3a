"""The course's conclusions as values: one ``Verdict`` type and one rule for "faster / slower / no change".

Every function of the course that concludes something returns a :class:`Verdict`: a status word
from a small vocabulary, the numbers it rests on, and where they were measured. A notebook
displays it (text, and a machine-readable copy in the cell's output that the tests read); a test
asserts on ``status`` and ``numbers``, never on the wording, so CI fails when a conclusion flips.

Every A/B comparison of the course goes through :func:`compare`: a difference counts only when it
is larger than the noise, and the noise is the larger of the spread of each side's repeats and the
gap of an A/A comparison (the same thing measured twice) where there is one.
"""

from __future__ import annotations

import dataclasses
import html
import json
import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from nvtutorial.i18n import N_, _, tr

MIME = "application/vnd.nvtutorial.verdict+json"
"""The MIME type of a verdict's machine-readable copy in a notebook's outputs."""

CLAIM_STATUSES = ("holds", "partly", "wrong", "unverifiable")
"""A claim of the source: true as stated; true with a correction; false; not checkable (said why)."""
COMPARISON_STATUSES = ("faster", "slower", "no change")
"""An A/B measurement: candidate against baseline, under the noise rule of :func:`compare`."""
CHECK_STATUSES = ("pass", "fail")
"""A property that must hold in a run (identical weights, exact resume...) and whether it did."""
GRADE_STATUSES = ("right", "close", "off", "no answer")
"""A learner's prediction, graded against the measurement (see :mod:`nvtutorial.teach.predict`)."""
GRADE_LOOK = {
    "right": ("✔", "#1a7f37"),
    "close": ("≈", "#9a6700"),
    "off": ("✘", "#cf222e"),
    "no answer": ("?", "#57606a"),
}
"""How a grade shows at a glance: its mark and colour (green, amber, red; grey when nothing was predicted)."""
UNDECIDED = "undecided"
"""A reading the run's noise cannot settle either way (the verdict says which bound it could not pass)."""
STATUSES = CLAIM_STATUSES + COMPARISON_STATUSES + CHECK_STATUSES + GRADE_STATUSES + ("info", UNDECIDED)


def status_word(status: str) -> str:
    """A status as the reader sees it, in the learner's language (``status`` itself stays the English word: the
    machine-readable copy and the tests read it)."""
    words = {
        "holds": _("holds"),
        "partly": _("partly"),
        "wrong": _("wrong"),
        "unverifiable": _("unverifiable"),
        "faster": _("faster"),
        "slower": _("slower"),
        "no change": _("no change"),
        "pass": _("pass"),
        "fail": _("fail"),
        "right": _("right"),
        "close": _("close"),
        "off": _("off"),
        "no answer": _("no answer"),
        "info": _("info"),
        UNDECIDED: _("undecided"),
    }
    return words.get(status, status)


@dataclasses.dataclass(frozen=True)
class Verdict:
    """A conclusion: ``key`` (a claim id such as ``"C14"`` or a lesson's name for it), ``status``,
    a sentence that states it, the ``numbers`` it rests on, and ``where`` they were measured."""

    key: str
    status: str
    text: str
    numbers: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    where: str = ""
    title: str = ""
    """What a reader calls it (a grade: the question asked), shown instead of ``key`` when given."""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"verdict {self.key}: status {self.status!r} is not one of {', '.join(STATUSES)}")
        if not self.text.strip():
            raise ValueError(f"verdict {self.key}: the text must state the conclusion")
        object.__setattr__(self, "numbers", dict(self.numbers))

    @property
    def ok(self) -> bool:
        """False for a failed check; True otherwise (a claim found wrong is a correct finding)."""
        return self.status != "fail"

    @property
    def is_grade(self) -> bool:
        return self.status in GRADE_STATUSES

    def __str__(self) -> str:
        where = f" [{tr(self.where)}]" if self.where else ""
        status, name, text = status_word(self.status), tr(self.title or self.key), tr(self.text)
        if self.is_grade:
            return f"{GRADE_LOOK[self.status][0]} {status} · {name}: {text}{where}"
        return f"{name} · {status}: {text}{where}"

    def to_dict(self) -> dict[str, Any]:
        out = {
            "key": self.key,
            "status": self.status,
            "text": self.text,
            "numbers": _plain(self.numbers),
            "where": self.where,
        }
        if self.title:
            out["title"] = self.title
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Verdict:
        return cls(
            key=data["key"],
            status=data["status"],
            text=data["text"],
            numbers=dict(data.get("numbers") or {}),
            where=data.get("where", ""),
            title=data.get("title", ""),
        )

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        measured_on = _("measured on: {where}", where=tr(self.where)) if self.where else ""
        where = f"  \n<small>{measured_on}</small>" if self.where else ""
        name, status, text = tr(self.title or self.key), status_word(self.status), tr(self.text)
        bundle = {
            "text/plain": str(self),
            "text/markdown": f"**{name} · {status}**: {text}{where}",
            MIME: self.to_dict(),
        }
        if self.is_grade:  # a grade is seen at a glance: its mark and colour first, then the question
            mark, colour = GRADE_LOOK[self.status]
            bundle["text/markdown"] = f"**{mark} {status}** · *{name}*: {text}{where}"
            bundle["text/html"] = (
                f'<div class="nvtutorial-grade nvtutorial-grade-{self.status.replace(" ", "-")}" '
                f'style="border-left: 4px solid {colour}; padding: 2px 0 2px 10px; margin: 4px 0">'
                f'<span style="background: {colour}; color: #fff; font-weight: bold; border-radius: 3px; '
                f'padding: 1px 7px; margin-right: 6px">{mark} {html.escape(status)}</span>'
                f"<b>{html.escape(name)}</b><br>{html.escape(text)}"
                + (f'<br><small style="opacity: 0.75">{html.escape(measured_on)}</small>' if self.where else "")
                + "</div>"
            )
        return bundle


def _plain(value: Any) -> Any:
    """Numbers and containers as JSON-safe plain values (NaN and infinities become None)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def verdicts_in_notebook(nb: Any) -> list[Verdict]:
    """Every verdict a notebook displayed, in order, read from its saved outputs (``nbformat`` node or dict)."""
    found = []
    for cell in nb["cells"]:
        for output in cell.get("outputs", []) if cell.get("cell_type") == "code" else []:
            data = output.get("data", {})
            if MIME in data:
                payload = data[MIME]
                found.append(Verdict.from_dict(json.loads(payload) if isinstance(payload, str) else payload))
    return found


# --- the one rule for "faster / slower / no change" -------------------------------------------


@dataclasses.dataclass(frozen=True)
class Comparison:
    """A candidate measured against a baseline. Times are "lower is better" unless said otherwise.

    ``ratio`` is candidate ÷ baseline of the medians; ``noise`` is the relative difference below
    which the course says "no change"; ``status`` applies the rule.
    """

    baseline: float
    candidate: float
    ratio: float
    noise: float
    status: str
    repeats: tuple[int, int]
    spread: tuple[float, float]
    aa_gap: float | None
    lower_is_better: bool

    @property
    def change(self) -> float:
        """Relative change of the candidate against the baseline (−0.10: 10 % lower)."""
        return self.ratio - 1.0

    def describe(self, unit: str = "", what: str = "") -> str:
        """``"1.23 ms → 1.10 ms: 11 % faster (noise ±3 %)"`` and the like."""

        # both sides with the decimals of the larger one's 4 significant digits: 74.17 → 74.10, not 74.1 (review R5-3)
        top = max(abs(self.baseline), abs(self.candidate))
        places = max(0, 3 - math.floor(math.log10(top))) if top > 0 and math.isfinite(top) else 0

        def fmt(x: float) -> str:
            return f"{x:.{places}f}{(' ' + unit) if unit else ''}"

        noise = N_(
            "noise ±{noise:.0%}, {baseline}+{candidate} repeats",
            noise=self.noise,
            baseline=self.repeats[0],
            candidate=self.repeats[1],
        )
        values = f"{fmt(self.baseline)} → {fmt(self.candidate)}"
        if self.status == "no change":
            said = N_(
                "{values}: no change ({change:+.1%} is within {noise})", values=values, change=self.change, noise=noise
            )
        elif self.status == "faster":
            said = N_("{values}: {change:.0%} faster ({noise})", values=values, change=abs(self.change), noise=noise)
        else:
            said = N_("{values}: {change:.0%} slower ({noise})", values=values, change=abs(self.change), noise=noise)
        return N_("{what}: {said}", what=what, said=said) if what else said

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def relative_spread(values: Sequence[float]) -> float:
    """(max − min) ÷ median of repeated measurements of one thing."""
    mid = statistics.median(values)
    return (max(values) - min(values)) / abs(mid) if mid else math.inf


def compare(
    baseline: Sequence[float],
    candidate: Sequence[float],
    *,
    aa_gap: float | None = None,
    lower_is_better: bool = True,
    floor: float = 0.01,
) -> Comparison:
    """Compare repeated measurements of a candidate with those of a baseline.

    Each side needs at least two repeats (a spread cannot be known from one). The noise is the
    largest of: each side's relative spread, ``aa_gap`` (the relative difference between two
    configurations that do the same work, measured the same way), and ``floor``. The candidate
    is "faster"/"slower" only when its median differs from the baseline's by more than the noise.
    With ``lower_is_better=False`` (throughput, bandwidth) a higher value is "faster".
    """
    base, cand = [float(x) for x in baseline], [float(x) for x in candidate]
    if len(base) < 2 or len(cand) < 2:
        raise ValueError(
            f"compare needs at least 2 repeats on each side (got {len(base)} and {len(cand)}): "
            "one measurement has no known spread"
        )
    if any(not math.isfinite(x) or x <= 0 for x in base + cand):
        raise ValueError("compare takes positive, finite measurements (times, rates)")
    if aa_gap is not None and aa_gap < 0:
        raise ValueError(f"aa_gap={aa_gap} must be a non-negative relative difference")
    b, c = statistics.median(base), statistics.median(cand)
    spread = (relative_spread(base), relative_spread(cand))
    noise = max(spread[0], spread[1], aa_gap or 0.0, floor)
    ratio = c / b
    if abs(ratio - 1.0) <= noise:
        status = "no change"
    else:
        better = ratio < 1.0 if lower_is_better else ratio > 1.0
        status = "faster" if better else "slower"
    return Comparison(
        baseline=b,
        candidate=c,
        ratio=ratio,
        noise=noise,
        status=status,
        repeats=(len(base), len(cand)),
        spread=spread,
        aa_gap=aa_gap,
        lower_is_better=lower_is_better,
    )


def aa_gap(first: Sequence[float], second: Sequence[float]) -> float:
    """The relative gap between the medians of two measurements of the same work (an A/A test)."""
    a, b = statistics.median(first), statistics.median(second)
    return abs(a - b) / min(a, b)


def comparison_verdict(key: str, comparison: Comparison, text: str, where: str, **numbers: Any) -> Verdict:
    """A :class:`Verdict` whose status is the comparison's (``faster``/``slower``/``no change``)."""
    return Verdict(
        key=key,
        status=comparison.status,
        text=text,
        where=where,
        numbers={
            "ratio": comparison.ratio,
            "noise": comparison.noise,
            "baseline": comparison.baseline,
            "candidate": comparison.candidate,
            **numbers,
        },
    )
