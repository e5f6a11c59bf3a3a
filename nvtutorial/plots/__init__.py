"""Plots: data in, ``(fig, ax)`` out; they never launch a run."""

# MERGE: this package shadows the module file nvtutorial/plots.py, whose helpers the other notebooks
# use as `nvtutorial.plots.figure` and so on. Until nvtutorial/plots/style.py replaces that file,
# load it here under its own name. Delete these lines when the layout change lands.
import importlib.util as _util
from pathlib import Path as _Path

_spec = _util.spec_from_file_location("nvtutorial._plots_file", _Path(__file__).resolve().parent.parent / "plots.py")
_file = _util.module_from_spec(_spec)
_spec.loader.exec_module(_file)
figure, stamp, launch_timeline = _file.figure, _file.stamp, _file.launch_timeline
