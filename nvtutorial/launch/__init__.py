"""The process layer: every run of the course starts, is followed and ends here.

- :mod:`.spec`: a run checked before anything starts (:func:`prepare` -> :class:`LaunchSpec`), and the
  ``torchrun`` command lines it stands for (built once: :func:`.spec.torchrun_options`, :func:`.spec.workload_program`);
- :mod:`.environment`: the one rule for a rank's environment (torchrun's variables), free ports;
- :mod:`.warm`: the warm interpreter that forks ranks (:mod:`._zygote`), and the run's store (:mod:`._store`);
- :mod:`.tree`: the one supervisor of a process tree: whose processes, their ending, their stacks;
- :mod:`.runner`: :func:`run` and :func:`execute` on top: warm ranks or the literal ``torchrun``,
  followed to the end, with deadlines, live output, progress (:mod:`.progress`) and a diagnosis (:mod:`.diagnosis`);
- :mod:`.guards`: what is refused before a launch; :mod:`.runtime_script`: a learner's script run as a rank;
- :mod:`.slurm` (``nvtutorial slurm``) and :mod:`.slurm_result`: a run on a Slurm cluster, and its result.

What it may import is written in docs/architecture.md and held by tests/project/test_layout.py: itself, the core,
``machine/`` and the workloads' registry; never a chapter, ``report/``, ``plots/`` or ``teach/``.

This ``__init__`` imports nothing: the warm interpreter imports :mod:`._zygote` through it, and a
name such as ``launch.run`` is loaded on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nvtutorial.launch.environment import (
        child_environment,
        free_port,
        node_devices,
        node_environment,
        rank_environment,
    )
    from nvtutorial.launch.runner import MAX_SHOWN_BYTES, execute, run
    from nvtutorial.launch.spec import (
        STARTUP_TIMEOUT_S,
        Backend,
        LaunchError,
        LaunchSpec,
        Output,
        RunFailed,
        RunInterrupted,
        RunTimedOut,
        files_folder,
        is_script,
        prepare,
        resolve_backend,
        run_folder,
        runs_root,
        torch_cuda,
    )

__all__ = [
    "MAX_SHOWN_BYTES",
    "STARTUP_TIMEOUT_S",
    "Backend",
    "LaunchError",
    "LaunchSpec",
    "Output",
    "RunFailed",
    "RunInterrupted",
    "RunTimedOut",
    "child_environment",
    "execute",
    "files_folder",
    "free_port",
    "is_script",
    "node_devices",
    "node_environment",
    "prepare",
    "rank_environment",
    "resolve_backend",
    "run",
    "run_folder",
    "runs_root",
    "torch_cuda",
]
_LAZY = {
    **dict.fromkeys(__all__, "spec"),  # a name's module: spec, but for these
    **dict.fromkeys(
        ("child_environment", "free_port", "node_devices", "node_environment", "rank_environment"), "environment"
    ),
    **dict.fromkeys(("execute", "run", "MAX_SHOWN_BYTES"), "runner"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
