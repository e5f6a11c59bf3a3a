"""Notebook 09's ``resume`` (``nvtutorial/chapters/ch09_multinode/lessons/elastic_train.py``): rank 0's view of the
checkpoint decides.

On shared storage a node can for a moment see an older checkpoint, or none, after another node renamed a new
one into place; ranks that started from different steps would run different numbers of collectives. Two gloo
ranks of one run of this file: every rank reads the same file (they agree), then rank 1 is given a folder
without the checkpoint (it disagrees and must stop with an error naming both steps), then neither has one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.paths import ROOT


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    out = tmp_path_factory.mktemp("resume")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", __file__, str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads((out / f"rank{rank}.json").read_text()) for rank in (0, 1)]


def test_ranks_that_see_the_same_checkpoint_resume_from_its_step(outcomes):
    assert [o["same file"] for o in outcomes] == [6, 6]
    assert [o["no file anywhere"] for o in outcomes] == [0, 0]


def test_a_rank_that_sees_another_checkpoint_than_rank_0_stops_with_both_steps(outcomes):
    assert outcomes[0]["rank 1 sees none"] == 6  # rank 0's own view: it goes on (its peer's error ends the job)
    error = outcomes[1]["rank 1 sees none"]
    assert error.startswith("RuntimeError: rank 1 sees a checkpoint of step 0") and "rank 0 one of step 6" in error


def _rank_side(out: Path) -> None:
    """``torchrun --nproc-per-node 2 tests/test_elastic_resume.py OUT``."""
    import gc

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    from nvtutorial.chapters.ch09_multinode.lessons import elastic_train

    dist.init_process_group("gloo")
    rank = dist.get_rank()

    def fresh():
        torch.manual_seed(0)
        model = DDP(torch.nn.Linear(4, 1))
        return model, torch.optim.AdamW(model.parameters())

    shared = out / "shared"
    shared.mkdir(exist_ok=True)
    model, optimizer = fresh()
    elastic_train.save(str(shared / "last.pt"), model, optimizer, 6)  # rank 0 writes, then a barrier
    seen = {}
    seen["same file"] = elastic_train.resume(str(shared / "last.pt"), *fresh())
    elsewhere = out / f"empty{rank}"
    elsewhere.mkdir(exist_ok=True)
    path = shared / "last.pt" if rank == 0 else elsewhere / "last.pt"
    try:
        seen["rank 1 sees none"] = elastic_train.resume(str(path), *fresh())
    except RuntimeError as exc:
        seen["rank 1 sees none"] = f"RuntimeError: {exc}"
    seen["no file anywhere"] = elastic_train.resume(str(elsewhere / "last.pt"), *fresh())
    (out / f"rank{rank}.json").write_text(json.dumps(seen))
    # the DDP models hold the process group: free them before it is destroyed, or gloo's threads can outlive it into
    # the interpreter's finalization and abort the rank ("terminate called without an active exception", SIGABRT)
    del model, optimizer
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    _rank_side(Path(sys.argv[1]))
