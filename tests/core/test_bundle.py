"""The offline bundle's requirement list comes from the package's single list."""

from __future__ import annotations

import tomllib

import pytest

from nvtutorial import bundle
from tests.helpers.paths import ROOT


def _declared() -> list[str]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return data["project"]["dependencies"]


def test_requirements_follow_pyproject_without_torch_by_default():
    names = [bundle._name(r) for r in bundle.requirements()]
    expected = [bundle._name(r) for r in _declared() if not r.startswith("torch")]
    assert sorted(names) == sorted(expected)
    assert "torch" in [bundle._name(r) for r in bundle.requirements(with_torch=True)]


def test_skip_leaves_packages_out():
    names = [bundle._name(r) for r in bundle.requirements(skip=["JupyterLab", "nvidia_ml_py"])]
    assert "jupyterlab" not in names and "nvidia-ml-py" not in names and "papermill" in names


def test_bad_python_version_is_rejected_before_downloading(tmp_path):
    with pytest.raises(bundle.BundleError, match="give a version like 3.12"):
        bundle.build(out=tmp_path, python="three")
    assert not any(tmp_path.iterdir())


def test_install_instructions_name_the_folder_and_what_was_left_out(tmp_path):
    (tmp_path / "a-1.0-py3-none-any.whl").write_bytes(b"x" * 1024)
    (tmp_path / "LEFT_OUT.txt").write_text("torch\n")
    text = bundle.install_instructions(tmp_path)
    assert f"--no-index --find-links {tmp_path} nvtutorial" in text
    assert "1 wheels" in text and "Left out (the node must already have them): torch" in text
