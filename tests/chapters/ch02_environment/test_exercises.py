"""Tests of nvtutorial/chapters/ch02_environment/exercises*.py."""

from __future__ import annotations

from nvtutorial.chapters.ch02_environment import exercises as driver_rule


# --------------------------------------------------------------------------- chapter 02: the driver rule's slips
def test_no_minor_compatibility_fails_where_the_rule_warns_and_agrees_elsewhere():
    for driver, runtime, want in driver_rule.CASES:
        got = driver_rule._no_minor_compatibility(driver, runtime)
        assert got == ("fail" if want == "warn" else want), (driver, runtime, got)
