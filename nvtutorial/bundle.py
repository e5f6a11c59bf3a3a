"""An offline bundle: a folder of wheels for an air-gapped GPU node (workshop clusters).

``nvtutorial bundle --python 3.12 --out wheels`` downloads, for the node's Python and
platform, this package's wheel and every dependency's, as listed in ``pyproject.toml`` (the
single list). On the node::

    python -m pip install --no-index --find-links wheels nvtutorial

torch is left out by default (GPU nodes bring their own build, matched to their driver).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

DEFAULT_PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
    "any",
)


class BundleError(RuntimeError):
    pass


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[(]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def requirements(with_torch: bool = False, skip: list[str] | tuple[str, ...] = ()) -> list[str]:
    """The package's run-time requirements (no extras), less torch unless asked, less ``skip``."""
    try:
        declared = metadata.requires("nvtutorial") or []
    except metadata.PackageNotFoundError:
        raise BundleError("nvtutorial is not installed: run `make install` (or pip install -e .) first") from None
    leave_out = {_name(s) for s in skip} | (set() if with_torch else {"torch"})
    return [r for r in declared if "extra ==" not in r and _name(r) not in leave_out]


def repository_root() -> Path:
    root = Path(__file__).resolve().parent.parent
    if not (root / "pyproject.toml").exists():
        raise BundleError(f"no pyproject.toml beside the package in {root}: bundle from a checkout of the repository")
    return root


def build(
    out: str | os.PathLike[str] = "wheels",
    python: str = "3.12",
    platforms: list[str] | None = None,
    with_torch: bool = False,
    skip: list[str] | tuple[str, ...] = (),
) -> Path:
    """Fill ``out`` with wheels for ``python`` on ``platforms``; returns the folder."""
    if not re.fullmatch(r"3\.\d+", python):
        raise BundleError(f"python={python!r}: give a version like 3.12")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    pip = [sys.executable, "-m", "pip"]
    _call(pip + ["wheel", "--no-deps", "--wheel-dir", str(out), str(repository_root())])
    cmd = pip + [
        "download",
        "--only-binary=:all:",
        "--dest",
        str(out),
        "--python-version",
        python,
        "--implementation",
        "cp",
    ]
    for tag in platforms or DEFAULT_PLATFORMS:
        cmd += ["--platform", tag]
    _call(cmd + requirements(with_torch, skip))
    (out / "LEFT_OUT.txt").write_text("".join(f"{_name(s)}\n" for s in (*skip, *(() if with_torch else ("torch",)))))
    return out


def _call(cmd: list[str]) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise BundleError(f"{' '.join(cmd[:4])} ... failed (exit {proc.returncode}):\n{tail}")


def install_instructions(folder: Path) -> str:
    wheels = sorted(folder.glob("*.whl"))
    size = sum(w.stat().st_size for w in wheels) / 2**20
    left_out = (folder / "LEFT_OUT.txt").read_text().split() if (folder / "LEFT_OUT.txt").exists() else []
    text = (
        f"{len(wheels)} wheels, {size:.0f} MiB, in {folder}\n"
        f"Copy the folder to the node, then, in its Python environment:\n"
        f"    python -m pip install --no-index --find-links {folder} nvtutorial"
    )
    if left_out:
        text += f"\nLeft out (the node must already have them): {', '.join(left_out)}"
    return text
