"""pytest plugin for the mutation run (``-p mutation_select``, loaded by scripts/mutate.py): the fast tests only.

mutmut runs, for each mutant, the tests that call the mutated function. Tests that run in the pytest
process (or fork gloo ranks from it, as ``tests/helpers/ranks.py`` does) take milliseconds; tests that
launch runs through the course's launcher, start ``%%ranks`` workers, execute notebooks, drive a browser
or submit to Slurm take seconds each, and a module can have hundreds of mutants. Those are left to
``make test``: this plugin deselects a test when its function, a fixture it uses, or a helper of its
module that either of them calls, contains one of :data:`LAUNCHES`, or when it is marked ``notebooks``,
``slurm`` or ``gpu``, or listed in :data:`SLOW` (seconds in-process, with the reason it is safe to leave out).
The same rule applies to every revision measured (before and after).
"""

from __future__ import annotations

import inspect
import re
import sys

import pytest

LAUNCHES = re.compile(
    r"\b(launch\.run\(|nvtutorial\.run\(|launch_mod\.run\(|ranks\.start\(|ranks\.restart\(|run_course\(|"
    r"check\.check\(|run_trap\(|subprocess\.|Popen\(|sync_playwright|executed\(|slurm\.submit|_run_script|torchrun)"
)
MARKS = ("notebooks", "slurm", "gpu")
SLOW = {
    "tests/launch/test_faults.py::test_random_command_lines": "300 hypothesis command lines, 10-40 s; guards and "
    "diagnosis are tested at their rules in tests/launch/test_guards.py and tests/launch/test_diagnosis.py",
    "tests/project/test_layout.py::test_import_rules_hold": "imports every module in a fresh interpreter (about 2 "
    "minutes); it checks the package's layout, not a rule",
}
"""In-process tests too slow to run once per mutant (measured in the stats run of 2026-12-02), with why that is safe."""


def _source(obj) -> str:
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError):
        return ""


def _launching_helpers(module) -> set[str]:
    """Names of the module's functions that launch, directly or through another such function."""
    functions = {
        name: _source(fn)
        for name, fn in vars(module).items()
        if inspect.isfunction(fn) and getattr(fn, "__module__", None) == module.__name__
    }
    found = {name for name, text in functions.items() if LAUNCHES.search(text)}
    while True:
        more = {
            name
            for name, text in functions.items()
            if name not in found and any(re.search(rf"\b{re.escape(h)}\(", text) for h in found)
        }
        if not more:
            return found
        found |= more


_helpers: dict[str, set[str]] = {}


def launches(item) -> bool:
    if any(item.get_closest_marker(m) for m in MARKS) or item.nodeid.split("[")[0] in SLOW:
        return True
    module = getattr(item, "module", None)
    if module is None:
        return False
    if module.__name__ not in _helpers:
        _helpers[module.__name__] = _launching_helpers(module)
    helpers = _helpers[module.__name__]
    texts = [_source(getattr(item, "function", None))]
    for defs in item._fixtureinfo.name2fixturedefs.values():
        texts += [_source(d.func) for d in defs]
    return any(LAUNCHES.search(t) or any(re.search(rf"\b{re.escape(h)}\(", t) for h in helpers) for t in texts)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    keep, drop = [], []
    for item in items:
        (drop if launches(item) else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    print(f"mutation_select: {len(keep)} tests kept, {len(drop)} that launch runs deselected", file=sys.stderr)
