"""Exercise of notebook 02: the rule ``nvtutorial doctor`` applies to the driver and torch's CUDA runtime.

The learner writes ``driver_status(driver_cuda, torch_cuda)``, the newest CUDA the driver supports and
the CUDA torch was built with (``"12.8"``, ``"13.0"``), returning ``"ok"``, ``"warn"`` or ``"fail"``:
ok when the driver supports at least torch's CUDA; warn when it is older within the same major version
(CUDA's minor-version compatibility runs it, except features that need the newer driver); fail when it
is of an older major version (CUDA does not initialise). :func:`check_local` compares it with that rule.
"""

from __future__ import annotations

from collections.abc import Callable

NAME = "driver_rule"
"""The exercise's name (``teach.check.check("driver_rule", ...)``)."""

NOTEBOOK = "02_environment"
TASK = "Write driver_status(driver_cuda, torch_cuda) returning 'ok', 'warn' or 'fail' (the doctor's driver rule)."
KIND = "function"


def driver_status(driver_cuda: str, torch_cuda: str) -> str:
    """Compare versions as numbers, major first: a newer major is needed for a new major runtime."""
    have = tuple(int(x) for x in driver_cuda.split("."))
    need = tuple(int(x) for x in torch_cuda.split("."))
    if have >= need:
        return "ok"
    return "warn" if have[0] == need[0] else "fail"


SOLUTION = driver_status


def _as_strings(driver_cuda, torch_cuda):
    return "ok" if driver_cuda >= torch_cuda else ("warn" if driver_cuda[:2] == torch_cuda[:2] else "fail")


def _exact_pair(driver_cuda, torch_cuda):
    return "ok" if driver_cuda == torch_cuda else "fail"


def _no_minor_compatibility(driver_cuda, torch_cuda):
    have = tuple(int(x) for x in driver_cuda.split("."))
    need = tuple(int(x) for x in torch_cuda.split("."))
    return "ok" if have >= need else "fail"


WRONG = {
    "versions compared as text": (_as_strings, "numbers"),
    "only the exact pair works": (_exact_pair, "newer driver"),
    "an older minor version fails": (_no_minor_compatibility, "minor-version"),
}
"""Known wrong answers and a word their reason must contain (tests run every one)."""

CASES = [
    ("13.0", "13.0", "ok"),
    ("13.2", "13.0", "ok"),
    ("12.8", "12.6", "ok"),
    ("12.4", "12.8", "warn"),
    ("12.2", "12.6", "warn"),
    ("12.8", "13.0", "fail"),
    ("11.7", "12.6", "fail"),
    ("10.2", "9.2", "ok"),
    ("13.0", "12.8", "ok"),
]
"""(driver's CUDA, torch's CUDA, status). ("10.2", "9.2") catches versions compared as text."""


def check_local(candidate: Callable[[str, str], str]) -> tuple[bool, str]:
    """Pass when ``candidate`` gives the doctor's status in every case, else the first wrong case and why."""
    for driver, runtime, want in CASES:
        try:
            got = candidate(driver, runtime)
        except Exception as exc:  # noqa: BLE001 - the learner's code: say what it raised
            return (
                False,
                f"driver for CUDA {driver}, torch for CUDA {runtime}: your function raised {type(exc).__name__}: {exc}",
            )
        if got == want:
            continue
        case = f"driver for CUDA {driver}, torch built with CUDA {runtime}: expected {want!r}, got {got!r}"
        if driver == "10.2" and runtime == "9.2":
            why = "compare the versions as numbers (10 > 9), not as text ('1' < '9')"
        elif want == "ok":
            why = "a newer driver runs an older runtime: any driver at least as new as torch's CUDA is ok"
        elif want == "warn":
            why = (
                "an older driver of the same major version still runs a newer runtime through CUDA's "
                "minor-version compatibility: a warning, not a failure"
            )
        else:
            why = "a driver of an older major version cannot run the runtime at all: a failure"
        return False, f"{case}: {why}"
    return True, "the doctor's rule: ok from torch's CUDA up, warn within the major version, fail below it"
