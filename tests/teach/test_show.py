"""The notebook helpers: verdicts, the noise rule, predictions, showing code from its file, the claim registry."""

from __future__ import annotations

import json
import textwrap

import pytest

from nvtutorial.report import claims
from nvtutorial.report.verdict import MIME, Verdict, aa_gap, compare, verdicts_in_notebook
from nvtutorial.teach import predict
from nvtutorial.teach.show import ShowError, sections, show, show_diff

# --- verdicts ---------------------------------------------------------------------------------


def test_verdict_rejects_unknown_status_and_empty_text():
    with pytest.raises(ValueError, match="status"):
        Verdict("C1", "maybe", "text")
    with pytest.raises(ValueError, match="state the conclusion"):
        Verdict("C1", "wrong", "  ")


def test_verdict_round_trips_through_a_notebook_output():
    v = Verdict("C14", "partly", "NVLink and host-staged within noise", {"ratio": 1.01, "nan": float("nan")}, "2× H200")
    bundle = v._repr_mimebundle_()
    assert bundle[MIME]["numbers"] == {"ratio": 1.01, "nan": None}
    nb = {
        "cells": [
            {"cell_type": "markdown", "source": "x"},
            {
                "cell_type": "code",
                "outputs": [{"output_type": "display_data", "data": {MIME: json.dumps(bundle[MIME])}}],
            },
        ]
    }
    (back,) = verdicts_in_notebook(nb)
    assert back.key == "C14" and back.status == "partly" and back.numbers["ratio"] == 1.01


# --- the noise rule ---------------------------------------------------------------------------


def test_compare_needs_repeats():
    with pytest.raises(ValueError, match="2 repeats"):
        compare([1.0], [1.0, 1.1])


@pytest.mark.parametrize(
    ("base", "cand", "kw", "status"),
    [
        ([10.0, 10.2, 9.9], [8.0, 8.1, 7.9], {}, "faster"),  # 20 % lower time, spread ~3 %
        ([10.0, 10.2, 9.9], [12.0, 12.1, 11.9], {}, "slower"),
        ([10.0, 10.2, 9.9], [10.1, 10.3, 10.0], {}, "no change"),
        ([10.0, 10.1], [9.0, 9.1], {"aa_gap": 0.15}, "no change"),  # 10 % inside a 15 % A/A gap
        ([100.0, 101.0], [120.0, 121.0], {"lower_is_better": False}, "faster"),  # a higher rate is faster
        ([10.0, 14.0], [8.0, 8.2], {}, "no change"),  # a noisy baseline hides a 20 % drop
    ],
)
def test_compare_applies_one_rule(base, cand, kw, status):
    assert compare(base, cand, **kw).status == status


def test_aa_gap_is_relative_to_the_smaller():
    assert aa_gap([10.0, 10.0], [11.0, 11.0]) == pytest.approx(0.1)


# --- predictions ------------------------------------------------------------------------------


def test_grade_number():
    g = predict.grade_number("busbw", 300, 340, unit="GB/s", where="here", explanation="why")
    assert g.status == "right" and "too low" in g.text
    assert predict.grade_number("busbw", 100, 340, unit="GB/s", where="", explanation="").status == "off"
    assert predict.grade_number("busbw", 200, 340, unit="GB/s", where="", explanation="").status == "close"
    assert predict.grade_number("busbw", None, 340, unit="GB/s", where="", explanation="x").status == "no answer"
    with pytest.raises(predict.PredictionError, match="number"):
        predict.grade_number("busbw", "fast", 340, unit="GB/s", where="", explanation="")  # pyright: ignore[reportArgumentType]  # bad input on purpose
    beyond = predict.grade_number("busbw", 900, 340, unit="GB/s", where="", explanation="", limit=450)
    assert "450" in beyond.text


def test_grade_choice():
    choices = {"a": "faster", "b": "the same", "c": "slower"}
    assert predict.grade_choice("q", "B", "b", choices, where="", explanation="").status == "right"
    assert predict.grade_choice("q", "a", "b", choices, where="", explanation="").status == "off"
    with pytest.raises(predict.PredictionError, match="pick one"):
        predict.grade_choice("q", "d", "b", choices, where="", explanation="")


# --- code from its file -----------------------------------------------------------------------


def test_show_sections_functions_and_diffs(tmp_path):
    script = tmp_path / "lesson.py"
    script.write_text(
        textwrap.dedent("""\
        import torch

        # %% setup
        x = 1

        # %% train
        def step(a):
            return a + 1
        """)
    )
    assert sections(script) == {"setup": (3, 4), "train": (6, 8)}
    code = show(path=script, section="train")
    assert code.text.startswith("# %% train") and code.first_line == 6 and "lines 6–8" in code.origin
    assert "def step" in code._repr_html_() or "step" in code._repr_html_()
    with pytest.raises(ShowError, match="its sections: 'setup', 'train'"):
        show(path=script, section="validate")

    def one(a):
        return a + 1

    def two(a):
        return a + 2

    diff = show_diff(one, two).text
    assert "-        return a + 1" in diff and "+        return a + 2" in diff
    assert "def one" not in diff.replace("def two", "")  # renamed functions: the def line is not the change


# --- the claim registry -----------------------------------------------------------------------


def test_registry_has_the_23_claims_of_the_source():
    assert [c.id for c in claims.CLAIMS] == [f"C{i}" for i in range(1, 24)]
    table = claims.markdown_table()
    assert table.count("\n") == 24 and "| C23 |" in table
