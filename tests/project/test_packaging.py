"""One list of dependencies, one test command: the files that say so agree."""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess
import sys
import tomllib

import pytest
import yaml

from tests.helpers.paths import ROOT


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
    assert _torch_requirement() == "torch>=2.11,<2.16"


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    quick = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"^(make \w+)$", quick, flags=re.M)
    assert commands[:2] == ["make course", "make test"], commands
    assert "make test" in (ROOT / ".ci" / "run").read_text()
    assert re.search(r"^test: ", (ROOT / "Makefile").read_text(), flags=re.M)


def _torch_requirement() -> str:
    (torch,) = [d for d in _pyproject()["project"]["dependencies"] if d.startswith("torch")]
    return torch


def test_make_install_with_an_empty_torch_sees_the_pythons_own_packages_and_only_then():
    """`make install TORCH=` makes the environment with --system-site-packages, so the torch of the Python it is made
    from is there for pip to keep; the default (CI's pinned torch) stays isolated."""

    def venv_line(*args: str) -> str:
        out = subprocess.run(
            ["make", "-n", "install", "VENV=/nonexistent/venv", *args],
            cwd=ROOT,
            text=True,
            capture_output=True,
            check=True,
        ).stdout
        (line,) = [line for line in out.splitlines() if " -m venv " in line]
        return line

    assert "--system-site-packages" in venv_line("TORCH=")
    assert "--system-site-packages" not in venv_line()
    assert "--system-site-packages" not in venv_line("TORCH=torch==2.11.0")


@pytest.mark.timeout(180)
@pytest.mark.parametrize(("found", "kept"), [("2.15.0", True), ("2.11.0", True), ("2.10.0", False), ("2.16.0", False)])
def test_pip_keeps_a_torch_it_finds_in_the_supported_range_and_only_that(tmp_path, found, kept):
    """What `make install TORCH=` relies on: pip, asked for the course's torch requirement where a torch is already
    installed, installs nothing when that torch is in range (2.11 to 2.15), and replaces it otherwise."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "env")], check=True)
    (site,) = (tmp_path / "env" / "lib").glob("python3*/site-packages")
    info = site / f"torch-{found}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {found}\n")
    (info / "RECORD").write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull  # this machine's pip settings (a cap on torch) are not a learner's
    answer = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(tmp_path / "env" / "bin" / "python"),
            "install",
            "--dry-run",
            "--no-index",
            "--no-deps",
            _torch_requirement(),
        ],
        text=True,
        capture_output=True,
        env=env,
        timeout=150,
    )
    if kept:
        satisfied = re.search(r"Requirement already satisfied: torch\S* in .* \((\S+)\)", answer.stdout)
        assert answer.returncode == 0 and satisfied and satisfied[1] == found, answer.stdout + answer.stderr
    else:  # pip would install another torch (here, with no index, it cannot find one)
        assert answer.returncode != 0 and "No matching distribution found for torch" in answer.stderr, answer.stderr


@pytest.mark.parametrize("version", ["2.10.1", "2.11.0", "2.13.0+cpu", "2.15.0", "2.15.0+cu132", "2.16.0"])
def test_the_doctor_accepts_exactly_the_torch_releases_pyproject_accepts(version):
    """`nvtutorial doctor` says ok for a torch in pyproject's range and warns, with an install command in range,
    outside it: the two say the same range."""
    from packaging.requirements import Requirement
    from packaging.version import Version

    from nvtutorial.machine import doctor

    check = doctor.check_torch(dataclasses.replace(doctor.reference_facts(), torch=version))
    in_range = Requirement(_torch_requirement()).specifier.contains(Version(version).base_version)
    assert check.status == ("ok" if in_range else "warn"), (version, check)
    if not in_range:
        assert check.fix == f"pip install '{_torch_requirement()}'"


def test_ci_installs_the_course_and_its_test_tools_in_one_pip_call(tmp_path):
    """`make test EXTRAS=test` (CI): torch, the course and the test tools in one pip install (one resolution, one
    editable build); a plain `make test` installs the test tools in a second call, as before."""

    def pip_lines(*args: str) -> list[str]:
        out = subprocess.run(
            ["make", "-n", f"VENV={tmp_path / 'venv'}", f"{tmp_path / 'venv'}/.test-extra", *args],
            cwd=ROOT,
            env={k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")},  # under make
            text=True,
            capture_output=True,
            check=True,
        ).stdout
        return [line for line in out.splitlines() if "-m pip install" in line and "--upgrade pip" not in line]

    (one,) = pip_lines("EXTRAS=test")
    assert '"torch==' in one and one.endswith('-e ".[test]"')
    plain = pip_lines("EXTRAS=")
    assert len(plain) == 2 and plain[0].endswith('-e "."') and plain[1].endswith('-e ".[test]"')
