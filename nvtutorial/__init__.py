"""nvtutorial: a course on getting the most out of two NVLink-connected GPUs with PyTorch.

Notebooks call :func:`run` to launch a real multi-process workload and get a
:class:`RunResult` back; see ``notebooks/00_welcome.ipynb``.
"""

from .launch import LaunchError, RunFailed, RunTimedOut, run
from .results import EnvInfo, RunResult

__version__ = "0.1.0"
__all__ = ["EnvInfo", "LaunchError", "RunFailed", "RunResult", "RunTimedOut", "run", "__version__"]
