"""Tests of nvtutorial/launch/diagnosis.py."""

from __future__ import annotations

import json

from nvtutorial.launch import diagnosis
from tests.helpers.launch import made_spec


# --------------------------------------------------------------------------- diagnosis, verdicts, predictions
def test_collect_records_the_nodes_when_the_ranks_do_not(tmp_path):
    spec = made_spec(tmp_path, world=2, nnodes=2)
    run_dir = spec.run_dir
    assert spec.world_size == 2
    env = {
        "host": "h",
        "backend": "gloo",
        "world_size": 2,
        "device": "cpu",
        "torch": "2",
        "python": "3",
        "cuda": None,
        "nccl": None,
    }
    for r in range(2):
        (run_dir / f"rank{r}.json").write_text(json.dumps({"metrics": {}, "env": env}))
        (run_dir / f"rank{r}.log").write_text("")
    r = diagnosis.collect(spec, 0, 1.0, None)
    assert r.env is not None and r.env.nnodes == 2
    (run_dir / "rank0.json").write_text(json.dumps({"metrics": {}, "env": {**env, "nnodes": 3}}))
    assert diagnosis.collect(spec, 0, 1.0, None).env.nnodes == 3  # what the rank reported wins
