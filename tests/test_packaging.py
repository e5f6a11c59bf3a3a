"""One list of dependencies, one test command: the files that say so agree."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_environment_yml_installs_the_package_and_lists_nothing_else():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    conda = [d for d in env["dependencies"] if isinstance(d, str)]
    pip = [d for d in env["dependencies"] if isinstance(d, dict)]
    assert sorted(re.split(r"[=<> ]", d)[0] for d in conda) == ["pip", "python"], (
        "environment.yml may only pin python and pip; every package comes from pyproject.toml"
    )
    assert len(pip) == 1 and len(pip[0]["pip"]) == 1
    (spec,) = pip[0]["pip"]
    match = re.fullmatch(r"-e \.\[(?P<extras>[\w,]+)\]", spec)
    assert match, f"environment.yml should install this package with pip (-e .[extras]), not {spec!r}"
    extras = set(match["extras"].split(","))
    assert extras <= set(_pyproject()["project"]["optional-dependencies"])


def test_environment_python_is_supported():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    (python,) = [d for d in env["dependencies"] if isinstance(d, str) and d.startswith("python")]
    version = python.split("=")[-1]
    assert version in ("3.11", "3.12")
    assert _pyproject()["project"]["requires-python"] == ">=3.11,<3.13"


def test_core_dependencies_are_declared():
    names = {re.split(r"[<>=!~\[ ]", d)[0].lower() for d in _pyproject()["project"]["dependencies"]}
    assert {"torch", "jupyterlab", "ipywidgets", "papermill", "matplotlib"} <= names
    (torch,) = [d for d in _pyproject()["project"]["dependencies"] if d.startswith("torch")]
    assert torch == "torch>=2.11,<2.15"


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    quick = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"^(make \w+)$", quick, flags=re.M)
    assert commands[:2] == ["make course", "make test"], commands
    assert "make test" in (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^test: ", (ROOT / "Makefile").read_text(), flags=re.M)
