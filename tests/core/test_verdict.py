"""The one rule behind every A/B of the course (:func:`compare`) and the Verdict type, at their rules.

Every threshold is crossed from both sides (the noise against the change, each term of the noise, the
floor), every branch taken, and the numbers behind each status pinned: a bug that moves a threshold or
swaps a rule fails here even where the reference runs would still give the same answer.
"""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nvtutorial.report.verdict import (
    CHECK_STATUSES,
    CLAIM_STATUSES,
    COMPARISON_STATUSES,
    GRADE_STATUSES,
    MIME,
    STATUSES,
    UNDECIDED,
    Comparison,
    Verdict,
    _plain,
    aa_gap,
    compare,
    comparison_verdict,
    relative_spread,
    verdicts_in_notebook,
)


# --------------------------------------------------------------------------- compare: the noise
def test_the_noise_is_the_largest_of_the_spreads_the_aa_gap_and_the_floor():
    base, cand = [10.0, 10.4, 10.2], [9.0, 9.9, 9.45]  # spreads 0.4/10.2 and 0.9/9.45
    c = compare(base, cand)
    assert c.spread == pytest.approx((0.4 / 10.2, 0.9 / 9.45))
    assert c.noise == pytest.approx(0.9 / 9.45) and c.baseline == 10.2 and c.candidate == 9.45
    assert c.ratio == pytest.approx(9.45 / 10.2) and c.change == pytest.approx(9.45 / 10.2 - 1)
    assert c.repeats == (3, 3) and c.aa_gap is None and c.lower_is_better
    assert compare(cand, base).noise == pytest.approx(0.9 / 9.45)  # either side's spread
    assert compare(base, cand, aa_gap=0.2).noise == 0.2 and compare(base, cand, aa_gap=0.2).aa_gap == 0.2
    assert compare(base, cand, aa_gap=0.01).noise == pytest.approx(0.9 / 9.45)
    still = [5.0, 5.0]
    assert compare(still, still).noise == 0.01  # the floor
    assert compare(still, still, floor=0.05).noise == 0.05
    assert compare(still, still, aa_gap=0.0).noise == 0.01 and compare(still, still, aa_gap=0.02).noise == 0.02


@pytest.mark.parametrize(
    "change, status",
    [
        (-0.0101, "faster"),
        (-0.0099, "no change"),
        (0.0, "no change"),
        (0.0099, "no change"),
        (0.0101, "slower"),
    ],
)
def test_a_change_counts_only_beyond_the_floor(change, status):
    c = compare([100.0, 100.0], [100.0 * (1 + change)] * 2)
    assert c.status == status and c.noise == 0.01


def test_a_change_equal_to_the_noise_is_no_change():
    c = compare([100.0, 100.0], [90.0, 90.0], aa_gap=0.1)
    assert c.ratio == pytest.approx(0.9) and c.status == "no change"  # |0.9 - 1| <= 0.1: inside, not beyond
    assert compare([100.0, 100.0], [89.99, 89.99], aa_gap=0.1).status == "faster"


@pytest.mark.parametrize("lower_is_better, higher, lower", [(True, "slower", "faster"), (False, "faster", "slower")])
def test_the_direction_follows_lower_is_better(lower_is_better, higher, lower):
    assert compare([10.0, 10.0], [12.0, 12.0], lower_is_better=lower_is_better).status == higher
    assert compare([10.0, 10.0], [8.0, 8.0], lower_is_better=lower_is_better).status == lower
    assert compare([10.0, 10.0], [12.0, 12.0], lower_is_better=lower_is_better).lower_is_better is lower_is_better


def test_each_side_needs_two_positive_finite_repeats():
    for base, cand in (([1.0], [1.0, 1.0]), ([1.0, 1.0], [1.0]), ([], [])):
        with pytest.raises(ValueError, match="at least 2 repeats"):
            compare(base, cand)
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="positive, finite"):
            compare([1.0, bad], [1.0, 1.0])
        with pytest.raises(ValueError, match="positive, finite"):
            compare([1.0, 1.0], [bad, 1.0])
    with pytest.raises(ValueError, match="non-negative"):
        compare([1.0, 1.0], [1.0, 1.0], aa_gap=-0.01)
    assert compare([1, 2], [2, 3]).baseline == 1.5  # integers are measurements too


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(
    st.lists(st.floats(0.1, 1e4), min_size=2, max_size=6),
    st.lists(st.floats(0.1, 1e4), min_size=2, max_size=6),
    st.one_of(st.none(), st.floats(0, 0.5)),
    st.booleans(),
)
def test_compare_is_one_rule_for_any_input(base, cand, gap, lower):
    c = compare(base, cand, aa_gap=gap, lower_is_better=lower)
    spread = (relative_spread(base), relative_spread(cand))
    assert c.noise == max(*spread, gap or 0.0, 0.01)
    assert c.ratio == c.candidate / c.baseline
    if abs(c.ratio - 1) <= c.noise:
        assert c.status == "no change"
    else:
        assert c.status == ("faster" if (c.ratio < 1) == lower else "slower")
    # the same measurements the other way round: the same noise, and never the same direction
    back = compare(cand, base, aa_gap=gap, lower_is_better=lower)
    assert back.noise == c.noise
    assert c.status == "no change" or back.status != c.status


# --------------------------------------------------------------------------- spreads and A/A gaps
def test_relative_spread_and_aa_gap():
    assert relative_spread([9.0, 10.0, 12.0]) == pytest.approx(3 / 10)
    assert relative_spread([4.0, 4.0]) == 0.0
    assert relative_spread([-1.0, 1.0]) == math.inf  # a median of 0: no relative spread
    assert aa_gap([10.0, 12.0], [11.0, 15.0]) == pytest.approx((13 - 11) / 11)  # relative to the smaller median
    assert aa_gap([13.0, 13.0], [10.0, 12.0]) == pytest.approx(2 / 11)
    assert aa_gap([5.0, 5.0], [5.0, 5.0]) == 0.0


def test_comparison_as_a_verdict_keeps_its_numbers():
    c = compare([10.0, 10.1], [8.0, 8.05], aa_gap=0.02)
    v = comparison_verdict("fp16 · NVLink", c, "faster", "CPU", bytes_saved=0.5)
    assert v.status == "faster" and v.key == "fp16 · NVLink" and v.where == "CPU" and v.text == "faster"
    assert v.numbers == {"ratio": c.ratio, "noise": c.noise, "baseline": 10.05, "candidate": 8.025, "bytes_saved": 0.5}
    assert Comparison(**c.to_dict()) == c


def test_describe_states_the_rule_it_applied():
    faster = compare([10.0, 10.0], [8.0, 8.0]).describe("ms", "step")
    assert faster.startswith("step: 10.00 ms → 8.00 ms: 20% faster") and "noise ±1%, 2+2 repeats" in faster
    same = compare([10.0, 10.0], [10.05, 10.05]).describe()
    assert same.startswith("10.00 → 10.05: no change (+0.5% is within noise ±1%")


def test_describe_gives_both_sides_the_larger_ones_four_digits():
    """Review R5-3: "74.17 ms → 74.1 ms" read as if the second were less precise; both sides take the decimals of the
    larger one's four significant digits, on either side of each power of ten."""

    def shown(a: float, b: float) -> str:
        return compare([a, a], [b, b]).describe().split(":")[0]

    assert shown(74.17, 74.1) == "74.17 → 74.10"
    assert shown(9.99, 9.5) == "9.990 → 9.500" and shown(10.0, 9.5) == "10.00 → 9.50"
    assert shown(999.0, 990.0) == "999.0 → 990.0" and shown(1000.0, 990.0) == "1000 → 990"
    assert shown(1053.0, 1055.4) == "1053 → 1055" and shown(12345.0, 100.0) == "12345 → 100"
    assert shown(0.0123, 0.5) == "0.0123 → 0.5000"


# --------------------------------------------------------------------------- the Verdict type
def test_the_status_vocabulary():
    assert STATUSES == CLAIM_STATUSES + COMPARISON_STATUSES + CHECK_STATUSES + GRADE_STATUSES + ("info", UNDECIDED)
    assert len(set(STATUSES)) == len(STATUSES) == 15
    for status in STATUSES:
        assert Verdict("k", status, "t").ok is (status != "fail")
    for bad in ("Pass", "", "fail "):
        with pytest.raises(ValueError, match="is not one of"):
            Verdict("k", bad, "t")
    with pytest.raises(ValueError, match="must state"):
        Verdict("k", "pass", "\n ")


def test_a_verdict_travels_through_a_notebook_and_back():
    v = Verdict("C1", "wrong", "claimed 2.9×", {"speedup": 1.96, "steps": (1, 2), "inf": math.inf}, "2× H200")
    assert str(v) == "C1 · wrong: claimed 2.9× [2× H200]" and str(Verdict("x", "info", "t")) == "x · info: t"
    bundle = v._repr_mimebundle_()
    assert bundle["text/plain"] == str(v)
    assert bundle["text/markdown"] == "**C1 · wrong**: claimed 2.9×  \n<small>measured on: 2× H200</small>"
    assert Verdict("x", "info", "t")._repr_mimebundle_()["text/markdown"] == "**x · info**: t"
    assert bundle[MIME] == {
        "key": "C1",
        "status": "wrong",
        "text": "claimed 2.9×",
        "numbers": {"speedup": 1.96, "steps": [1, 2], "inf": None},
        "where": "2× H200",
    }
    nb = {
        "cells": [
            {"cell_type": "markdown", "source": "x", "outputs": [{"data": {MIME: bundle[MIME]}}]},  # not a code cell
            {"cell_type": "code", "outputs": [{"output_type": "stream", "text": "C2 · wrong: printed"}]},
            {
                "cell_type": "code",
                "outputs": [
                    {"output_type": "display_data", "data": {MIME: json.dumps(bundle[MIME])}},
                    {"output_type": "display_data", "data": {MIME: Verdict("y", "pass", "t").to_dict()}},
                ],
            },
        ]
    }
    first, second = verdicts_in_notebook(nb)
    assert (first.key, first.status, first.numbers["speedup"], first.where) == ("C1", "wrong", 1.96, "2× H200")
    assert (second.key, second.status, second.numbers, second.where) == ("y", "pass", {}, "")
    assert Verdict.from_dict({"key": "z", "status": "info", "text": "t", "numbers": None}).numbers == {}


def test_numbers_become_plain_json():
    import numpy as np
    import torch

    assert _plain({1: np.float32(0.5), "t": torch.tensor(3), "n": math.nan, "i": -math.inf, "ok": True}) == {
        "1": 0.5,
        "t": 3,
        "n": None,
        "i": None,
        "ok": True,
    }
    assert _plain([(1, "a"), None, b"x"]) == [[1, "a"], None, "b'x'"]
    assert _plain(object.__new__(Comparison).__class__) == str(Comparison)
