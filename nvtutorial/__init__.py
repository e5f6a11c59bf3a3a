"""nvtutorial: a course on getting the most out of two NVLink-connected GPUs with PyTorch.

Notebooks call :func:`run` to launch a real multi-process workload (or a script) and get a
:class:`RunResult` back; see ``notebooks/00_welcome.ipynb``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
__all__ = ["EnvInfo", "LaunchError", "RunFailed", "RunResult", "RunTimedOut", "__version__", "run"]

if TYPE_CHECKING:
    from nvtutorial.launch import LaunchError, RunFailed, RunTimedOut, run
    from nvtutorial.results import EnvInfo, RunResult

_LAZY = {
    "LaunchError": "launch",
    "RunFailed": "launch",
    "RunTimedOut": "launch",
    "run": "launch",
    "EnvInfo": "results",
    "RunResult": "results",
}


class _ImportNotice:
    """In a Jupyter kernel, says once per library, as its first import begins, that the cell is importing it: torch
    takes seconds on a busy CPU (more on a GPU machine), pandas and matplotlib most of a second; a setup cell would
    otherwise pass them with nothing shown. While the import lasts, a thread says so again every ``EVERY_S`` (a cell is
    never silent for 2 s). It finds nothing itself: the import goes on as usual."""

    EVERY_S = 1.5

    SAID = {
        "torch": "PyTorch in this kernel (once per kernel; it starts no GPU)",
        "pandas": "pandas (once per kernel)",
        "matplotlib": "matplotlib (once per kernel)",
    }

    def __init__(self) -> None:
        self.said: set[str] = set()

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        import sys

        # an import, not a look-up (importlib.util.find_spec, which the launcher uses to read torch's version)
        if (
            name in self.SAID
            and name not in self.said
            and name not in sys.modules
            and sys._getframe(2).f_code.co_name == "_find_and_load_unlocked"
        ):
            self.said.add(name)
            print(f"[nvtutorial] importing {self.SAID[name]}", flush=True)
            self._tick(name)
        return None

    def _tick(self, name: str) -> None:
        """Until ``name``'s import is done (its spec no longer initialising), say every ``EVERY_S`` that it goes on."""
        import contextvars
        import sys
        import threading
        import time

        t0 = time.perf_counter()

        def tick() -> None:
            while True:
                time.sleep(self.EVERY_S)
                spec = getattr(sys.modules.get(name), "__spec__", None)  # gone: the import failed
                if not getattr(spec, "_initializing", False):
                    return
                print(f"[nvtutorial] still importing {name}, {time.perf_counter() - t0:.0f} s so far", flush=True)

        # a copy of this context: a kernel sends the thread's lines to the cell that imports
        threading.Thread(target=contextvars.copy_context().run, args=(tick,), daemon=True).start()


def _prestart_in_a_kernel() -> None:
    """In a Jupyter kernel, start the warm interpreter the runs' ranks are forked from, so that it imports
    torch while the learner reads (:mod:`nvtutorial.launch.warm`), and install :class:`_ImportNotice`.
    Ranks and the CLI never start it here."""
    import sys

    ipython = sys.modules.get("IPython")
    if "ipykernel" in sys.modules and ipython is not None and ipython.get_ipython() is not None:
        from nvtutorial.launch import warm

        warm.prestart()
        if not any(type(f).__name__ == "_ImportNotice" for f in sys.meta_path):
            sys.meta_path.insert(0, _ImportNotice())


_prestart_in_a_kernel()


def __getattr__(name: str) -> Any:
    # Imported on first use: a rank that imports nvtutorial.runtime never loads the launcher,
    # and `nvtutorial.launch.prepare(...)` still works after a bare `import nvtutorial`.
    import importlib

    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    if not name.startswith("_"):
        try:
            return importlib.import_module(f".{name}", __name__)
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{name}":
                raise
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
