"""The Chinese edition runs (issue 31, item 5): two Chinese notebooks (``notebooks/zh/``) executed end to end, as
``make course LANG=zh`` executes them (``nvtutorial course --notebooks notebooks/zh``, papermill, the ``ci`` profile).

A Chinese notebook's code cells are the English ones, byte for byte (``tests/project/test_translation.py``), so the
English notebooks' tests cover what the code does; this shows that the code also runs from ``notebooks/zh/``, one
folder deeper (every path a notebook names resolves from the repository, not from the notebook's folder). The two
fastest on the CPU: 01 and 02, about 10 s together on the 2-core CI machine, in the stream beside the notebooks' own.
"""

from __future__ import annotations

import nbformat
import pytest

from nvtutorial import course
from tests.helpers.paths import ROOT

ZH = ROOT / "notebooks" / "zh"
FASTEST = ("01_hardware", "02_environment")


@pytest.mark.notebooks
@pytest.mark.timeout(300)
def test_two_chinese_notebooks_run_end_to_end(tmp_path):
    summary = course.run_course(out=tmp_path, only=[f"{n}." for n in FASTEST], profile="ci", notebooks_dir=ZH)
    assert [n.name for n in summary.notebooks] == [f"{n}.ipynb" for n in FASTEST]
    for outcome in summary.notebooks:
        assert outcome.passed, f"{outcome.name}: {outcome.error}"
        ran = nbformat.read(tmp_path / outcome.name, as_version=4)
        errors = [o for c in ran.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
        assert not errors, f"{outcome.name}: {errors[0].get('ename')}: {errors[0].get('evalue')}"
        assert all(c.outputs for c in ran.cells if c.cell_type == "code" and c.source.strip().startswith("print(")), (
            f"{outcome.name}: a print cell printed nothing"
        )
        zh_text = "".join(c.source for c in ran.cells if c.cell_type == "markdown")
        assert sum("\u4e00" <= ch <= "\u9fff" for ch in zh_text) > 500, f"{outcome.name} is not the Chinese notebook"
    assert (tmp_path / "runs").is_dir(), "the runs land beside the executed copies, not in notebooks/zh/"
