"""The mutation tool's own rules (scripts/mutate.py, scripts/mutation_select.py), without running mutmut: which string
literals it mutates, and which tests it runs against each mutant."""

from __future__ import annotations

import importlib.util
import sys
import types

import pytest

from tests.helpers.paths import ROOT

SCRIPTS = ROOT / "scripts"


def _module(name: str):
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


mutate = _module("mutate")
select = _module("mutation_select")


def test_sentences_are_not_mutated_statuses_and_keys_are():
    def operator(node):
        yield f"XX{node.value}XX"

    only_words = mutate._without_sentences(operator)
    assert list(only_words(types.SimpleNamespace(value='"no change"'))) == []
    assert list(only_words(types.SimpleNamespace(value='"a sentence\\twith a tab"'))) == []
    assert list(only_words(types.SimpleNamespace(value="'multi\nline'"))) == []
    assert list(only_words(types.SimpleNamespace(value='"faster"'))) == ['XX"faster"XX']
    assert list(only_words(types.SimpleNamespace(value="'step_ms'"))) == ["XX'step_ms'XX"]


def test_mutants_are_listed_in_their_numeric_order():
    names = ["m.x_f__mutmut_10", "m.x_f__mutmut_2", "m.x_e__mutmut_1"]
    assert sorted(names, key=mutate._natural) == ["m.x_e__mutmut_1", "m.x_f__mutmut_2", "m.x_f__mutmut_10"]


def test_the_sample_is_seeded_uniform_and_all_of_a_small_module():
    names = [f"m.x_f__mutmut_{i}" for i in range(1, 41)]
    drawn = mutate.sample_of(names, 10)
    assert len(drawn) == 10 and len(set(drawn)) == 10 and set(drawn) <= set(names)
    assert drawn == sorted(drawn, key=mutate._natural)
    assert mutate.sample_of(list(reversed(names)), 10) == drawn  # the order they come in does not matter
    assert mutate.sample_of(names, 10, seed=mutate.SEED + 1) != drawn
    assert mutate.sample_of(names[:7], 10) == names[:7]
    assert mutate.sample_of(names[:10], 10) == names[:10]
    hits = sum("__mutmut_1" == n[-10:] for seed in range(400) for n in mutate.sample_of(names, 10, seed))
    assert 60 < hits < 140  # each name drawn about 10/40 of the time (100 of 400 draws)


def test_the_interval_of_a_sampled_score():
    assert mutate.interval(0, 0) is None
    low, high = mutate.interval(8, 10)
    assert low == pytest.approx(0.4902, abs=1e-4) and high == pytest.approx(0.9433, abs=1e-4)  # Wilson, z = 1.96
    assert mutate.interval(10, 10)[1] == 1.0 and mutate.interval(0, 10)[0] == 0.0
    assert (
        mutate.interval(500, 1000)[1] - mutate.interval(500, 1000)[0]
        < mutate.interval(5, 10)[1] - mutate.interval(5, 10)[0]
    )


LAUNCHING = """
import pytest
from nvtutorial import launch


def helper():
    return launch.run("selftest")


def indirect():
    return helper()


@pytest.fixture
def run_fixture():
    return indirect()


def test_in_process():
    assert 1 + 1 == 2


def test_launches_in_its_body():
    launch.run("selftest")


def test_through_a_helper():
    indirect()


def test_through_a_fixture(run_fixture):
    pass


@pytest.mark.notebooks
def test_marked():
    pass


def test_random_command_lines():
    pass
"""


@pytest.fixture
def probe(tmp_path):
    folder = tmp_path / "tests"
    folder.mkdir()
    (folder / "test_probe.py").write_text(LAUNCHING)
    return folder


def test_tests_that_launch_runs_are_left_to_make_test(probe):
    import subprocess

    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "mutation_select",
            "-p",
            "no:cacheprovider",
            "-o",
            "markers=notebooks",
            str(probe),
        ],
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "PYTHONPATH": str(SCRIPTS)},
        cwd=probe.parent,
    )
    kept = [line.split("::")[-1] for line in out.stdout.splitlines() if "::" in line]
    assert kept == ["test_in_process", "test_random_command_lines"], out.stdout + out.stderr
    assert "2 tests kept, 4 that launch runs deselected" in out.stderr
    assert "tests/launch/test_faults.py::test_random_command_lines" in select.SLOW  # by its id, not its name


def test_the_launch_patterns():
    for text in (
        "launch.run(x)",
        "nvtutorial.run(path)",
        "ranks.start(nproc=2)",
        "course.run_course(out)",
        "check.check('busbw')",
        "subprocess.run([...])",
        "traps.run_trap(x)",
        "executed('03.ipynb')",
    ):
        assert select.LAUNCHES.search(text), text
    for text in (
        "check.check_local(x)",
        "check.check_ranks('x')",
        "ranks.pull('x')",
        "on_ranks(fn, 3)",
        "run_candidate(c, s)",
        "bwlab.run_lab({}, reuse=x)",
        "launch.run_lab",
    ):
        assert not select.LAUNCHES.search(text), text
