"""Open the course in JupyterLab: ``make lab [LANG=zh]``, or ``python -m nvtutorial.lab [--lang zh] [--port N] [DIR]``.

What it adds to a plain ``jupyter lab``:

- ``--allow-root`` when (and only when) it runs as root, the default user of most GPU containers;
- widget state not saved with notebooks (the jupyter-widgets setting, :data:`WIDGET_SETTINGS`): the course's
  progress bars are HTML, saved as they ended (:mod:`nvtutorial.launch.progress`), and saved widget state would make
  JupyterLab mark a reopened notebook modified for each widget model it restores (and draw each restored widget
  with a red broken-link icon: no kernel holds its model);
- a status bar that reads "Busy" while a cell runs (:data:`SUBSHELL_MESSAGES`);
- ``--lang zh`` (``make lab LANG=zh``): JupyterLab in Simplified Chinese (the locale setting of its translation
  extension, :data:`LOCALES`; the language pack ``jupyterlab-language-pack-zh-CN``, which ``make lab LANG=zh``
  installs), on the Chinese notebooks (``notebooks/zh``) unless another folder is named;
- notebooks that open unmodified: JupyterLab rewrites a notebook's ``kernelspec`` and
  ``language_info`` from the kernel it starts, and marks the notebook modified when they differ
  (another Python patch version, another kernel display name). :class:`CourseContentsManager`
  hands JupyterLab the values that kernel will report, so nothing changes on open. The file on
  disk is untouched until you save.

Any other argument goes to ``jupyter lab`` as it is (``--ServerApp.token=...``, ``--ip``...).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import nbformat
from jupyter_client.kernelspec import NoSuchKernel
from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager

WIDGET_SETTINGS = {"@jupyter-widgets/jupyterlab-manager:plugin": {"saveState": False}}
"""JupyterLab setting overrides installed by :func:`install_settings`: JupyterLab's default, written so that it
replaces the ``saveState: true`` that ``make lab`` wrote before the bars were HTML."""
LOCALES = {"en": None, "zh": "zh_CN"}
"""The course's languages and JupyterLab's locale for each (None: JupyterLab's default, English)."""
LANGUAGE_PACKS = {"zh": "jupyterlab_language_pack_zh_CN"}
"""The module of the JupyterLab language pack each non-English locale needs (pip: jupyterlab-language-pack-zh-CN)."""
FOLDERS = {"en": "notebooks", "zh": "notebooks/zh"}
"""The notebooks JupyterLab opens in each language when no folder is named."""
SUBSHELL_MESSAGES = (
    "create_subshell_request",
    "create_subshell_reply",
    "delete_subshell_request",
    "delete_subshell_reply",
    "list_subshell_request",
    "list_subshell_reply",
)
"""Control-channel messages that JupyterLab sends while a cell runs (the widget manager asks for a kernel subshell
when a cell shows its first widget: the course's bars were widgets until they became HTML; a learner's may be one)
and whose answer's ``idle`` status JupyterLab would otherwise show as the kernel's: its status bar read "Idle" while
the cell ran. Jupyter Server's default list of untracked messages, which JupyterLab reads to ignore such statuses,
leaves them out (jupyter_server 2.21); :func:`command` adds them."""


def untracked_message_types() -> list[str]:
    """Jupyter Server's default ``untracked_message_types`` and :data:`SUBSHELL_MESSAGES`."""
    from jupyter_server.services.kernels.kernelmanager import MappingKernelManager

    trait = MappingKernelManager.class_traits()["untracked_message_types"]
    default = list(trait.default() or [])  # a List trait: a list (traitlets types default() as Optional)
    return default + [m for m in SUBSHELL_MESSAGES if m not in default]


def python_language_info() -> dict[str, Any]:
    """The ``language_info`` that an IPython kernel on this interpreter reports (and JupyterLab saves)."""
    from ipykernel.ipkernel import IPythonKernel

    return json.loads(json.dumps(IPythonKernel.language_info))


def _same_python(argv0: str) -> bool:
    """Whether a kernel started with ``argv0`` runs this interpreter (jupyter_client maps ``python`` to it)."""
    if argv0 in ("python", f"python{sys.version_info[0]}"):
        return True
    try:
        return os.path.samefile(argv0, sys.executable)
    except OSError:
        return False


def kernel_metadata(metadata: dict[str, Any], kernel_spec_manager: Any) -> dict[str, Any]:
    """``metadata`` with ``kernelspec`` and ``language_info`` as JupyterLab will set them on opening it.

    Only for a Python kernel that runs this interpreter; other notebooks come back unchanged.
    """
    name = (metadata.get("kernelspec") or {}).get("name")
    if not name:
        return metadata
    try:
        spec = kernel_spec_manager.get_kernel_spec(name)
    except NoSuchKernel:  # JupyterLab will ask which kernel to use
        return metadata
    if spec.language.lower() != "python" or not spec.argv or not _same_python(spec.argv[0]):
        return metadata
    updated = dict(metadata)
    updated["kernelspec"] = {"display_name": spec.display_name, "language": spec.language, "name": name}
    updated["language_info"] = python_language_info()
    return updated


class CourseContentsManager(AsyncLargeFileManager):
    """Jupyter Server's default contents manager, serving notebooks with their kernel's metadata."""

    async def get(
        self, path: str, content: bool = True, type: str | None = None, format: str | None = None, **kwargs: Any
    ) -> dict[str, Any]:
        model = await super().get(path, content=content, type=type, format=format, **kwargs)
        if content and model.get("type") == "notebook" and model.get("content") is not None:
            nb = model["content"]
            specs = getattr(self.parent, "kernel_spec_manager", None)
            if specs is None:
                from jupyter_client.kernelspec import KernelSpecManager

                specs = KernelSpecManager()
            nb["metadata"] = nbformat.from_dict(kernel_metadata(dict(nb["metadata"]), specs))
        return model


def settings_dir() -> Path:
    """JupyterLab's application settings folder for this environment (where overrides live)."""
    from jupyterlab.commands import get_app_dir

    return Path(get_app_dir()) / "settings"


def settings(lang: str = "en") -> dict[str, Any]:
    """The course's setting overrides: :data:`WIDGET_SETTINGS`, and the locale of a language other than English
    (JupyterLab's translation extension; a learner's own choice in Settings > Language still wins)."""
    locale = LOCALES[lang]
    return {**WIDGET_SETTINGS, **({"@jupyterlab/translation-extension:plugin": {"locale": locale}} if locale else {})}


def install_settings(folder: Path | None = None, lang: str = "en") -> Path | None:
    """Write the course's setting overrides (:func:`settings`) into ``overrides.d``; None if not writable. The file is
    written again at every start, so ``make lab`` after ``make lab LANG=zh`` is English again."""
    target = (folder or settings_dir()) / "overrides.d" / "nvtutorial.json"
    text = json.dumps(settings(lang), indent=2) + "\n"
    try:
        if not target.exists() or target.read_text() != text:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
    except OSError as exc:
        print(
            f"nvtutorial lab: could not write {target} ({exc.strerror}); where an earlier `make lab` wrote it, "
            "JupyterLab still saves widget state with notebooks and marks a notebook with widgets modified on "
            "reopening",
            file=sys.stderr,
        )
        return None
    return target


def command(
    folder: str = "notebooks",
    port: int | None = None,
    no_browser: bool = False,
    extra: list[str] | None = None,
    is_root: bool | None = None,
) -> list[str]:
    """The ``jupyter lab`` command line (``--allow-root`` only for root)."""
    jupyter = shutil.which("jupyter", path=str(Path(sys.executable).parent)) or shutil.which("jupyter") or "jupyter"
    cmd = [
        jupyter,
        "lab",
        f"--ServerApp.root_dir={folder}",
        "--ServerApp.contents_manager_class=nvtutorial.lab.CourseContentsManager",  # by name: we may be __main__
        f"--MappingKernelManager.untracked_message_types={json.dumps(untracked_message_types())}",
        # CurveZMQ keys for every kernel (ipykernel's spec says it takes them): encrypted messages, and no warning
        # from each kernel that it talks in plain text over TCP
        "--KernelManager.transport_encryption=auto",
    ]
    if is_root if is_root is not None else (hasattr(os, "geteuid") and os.geteuid() == 0):
        cmd.append("--allow-root")
    if port is not None:
        cmd.append(f"--port={port}")
    if no_browser:
        cmd.append("--no-browser")
    return cmd + list(extra or [])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m nvtutorial.lab", description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "folder", nargs="?", default=None, help="the folder JupyterLab opens (default: notebooks, or notebooks/zh)"
    )
    parser.add_argument(
        "--lang",
        choices=sorted(LOCALES),
        default="en",
        help="the course's language: zh opens notebooks/zh with JupyterLab in Simplified Chinese",
    )
    parser.add_argument("--port", type=int, help="the port (default: 8888, or the next free one)")
    parser.add_argument(
        "--no-browser", action="store_true", help="do not open a browser (a remote node: see the README)"
    )
    args, extra = parser.parse_known_args(argv)
    folder = args.folder or FOLDERS[args.lang]
    if not Path(folder).is_dir():
        parser.error(f"{folder}: no such folder; run from the repository root, or name the folder of notebooks")
    pack = LANGUAGE_PACKS.get(args.lang)
    if pack and importlib.util.find_spec(pack) is None:
        print(
            f"nvtutorial lab: no JupyterLab language pack for {args.lang} ({pack}): its menus stay English; "
            f"`make lab LANG={args.lang}` installs it (pip install {pack.replace('_', '-')})",
            file=sys.stderr,
        )
    install_settings(lang=args.lang)
    cmd = command(folder, args.port, args.no_browser, extra)
    os.execvp(cmd[0], cmd)


if __name__ == "__main__":
    main()
