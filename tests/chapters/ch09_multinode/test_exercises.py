"""Tests of nvtutorial/chapters/ch09_multinode/exercises*.py."""

from __future__ import annotations

import pytest
import torch


def test_the_resume_exercise_as_the_script_recovery_launches(monkeypatch, tmp_path):
    """multinode_resume run as a script: the learner's resume loaded from their file into the lesson, the lesson's
    own arguments after ``--`` (the run on ranks is tested with the launcher, in tests/test_faults.py)."""
    import sys

    from nvtutorial.chapters.ch09_multinode import exercises as multinode_resume
    from nvtutorial.chapters.ch09_multinode.lessons import elastic_train

    mine = tmp_path / "mine.py"
    mine.write_text(
        "def my_resume(path, model, optimizer):\n    return 7 if os.path.exists(path) else torch.zeros(1).numel() - 1\n"
    )
    loaded = multinode_resume.load_candidate(str(mine), "my_resume")
    assert loaded(str(mine), None, None) == 7 and loaded(str(tmp_path / "none"), None, None) == 0
    with pytest.raises(NameError, match="your code defines no function 'resume'"):
        multinode_resume.load_candidate(str(mine), "resume")
    (tmp_path / "value.py").write_text("resume = 3\n")
    with pytest.raises(NameError):
        multinode_resume.load_candidate(str(tmp_path / "value.py"), "resume")

    ran = []
    monkeypatch.setattr(elastic_train, "main", lambda: ran.append((list(sys.argv), elastic_train.resume)))
    monkeypatch.setattr(elastic_train, "resume", elastic_train.resume)  # put back afterwards
    monkeypatch.setattr(sys, "argv", sys.argv)
    multinode_resume.main(["--candidate", str(mine), "--entry", "my_resume", "--", "--steps", "9", "--every", "2"])
    ((argv, resume),) = ran
    assert argv == [elastic_train.__file__, "--steps", "9", "--every", "2"]
    assert resume.__name__ == "my_resume" and resume(str(mine), None, None) == 7


def test_the_resume_checkers_own_model():
    """The stand-in for DDP keeps the model in .module (the slip "loaded into the wrapper" depends on it)."""
    from nvtutorial.chapters.ch09_multinode import exercises as multinode_resume

    model, optimizer = multinode_resume._setup()
    assert isinstance(model.module, torch.nn.Sequential) and list(model.state_dict())[0].startswith("module.")
    x = torch.randn(2, 8)
    assert torch.equal(model(x), model.module(x))
    assert multinode_resume.SAVED_AFTER == 3
