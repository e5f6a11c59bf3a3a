"""The committed 2x H200 runs of chapters 3 and 4 (reference/h200x2/runs) by kind, and runs made up in their
shape, for the tests of both chapters."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from nvtutorial.chapters.ch03_ddp_training import report
from nvtutorial.results import EnvInfo, RunResult
from tests.helpers.paths import ROOT

REFERENCE = ROOT / "reference" / "h200x2" / "runs"


# --- the committed 2× H200 runs ------------------------------------------------------------------
def run_kind(result: RunResult) -> str:
    if result.workload == "attention_sdp":
        return "attention"
    names = {r.variant for r in report.rows_of(result)}  # typed: the committed names read as today's
    env = result.overrides or {}
    if len(result.ranks) == 1:
        return "one_gpu"
    if env.get("NCCL_SHM_DISABLE") == "1":
        return "socket"
    if env.get("NCCL_P2P_DISABLE") == "1":
        return "host"
    return "optimisations" if "fp32" in names else "scaling"


def reference_runs() -> dict[str, RunResult]:
    found: dict[str, RunResult] = {}
    for path in sorted(REFERENCE.glob("*/result.json")):  # the latest of each kind wins (names sort by time)
        if path.parent.name.startswith(("train-", "attention_sdp-")):
            result = RunResult.load(path)
            found[run_kind(result)] = result
    return found


REF = reference_runs()


def rows_run(rows):
    """A run on GPUs whose rank 0 returned ``rows`` (today's layout), as the launcher collects it."""
    for r in rows:
        r.update({"code": "test", "per_gpu_batch": 8, "world_size": 2, "global_batch": 16, **r})
        r.setdefault("status", "ok")
        r.setdefault("step_ms", r["step_ms_rounds"][0])
    metrics = {
        "device": "cuda:0",
        "world_size": 2,
        "model": "tiny",
        "model_params": 1,
        "image_size": 16,
        "tf32_convolutions": True,
        "precision": "bf16 autocast",
        "rows": rows,
    }
    return _train_run("nccl", "test GPU", [metrics])


def gloo_run(ranks_out: list) -> RunResult:
    """The two ranks' typed results as the launcher collects a run of them (each as JSON)."""
    return _train_run("gloo", "CPU", [json.loads(json.dumps(dataclasses.asdict(out))) for out in ranks_out])


def _train_run(backend: str, device: str, ranks: list) -> RunResult:
    """A finished two-rank run of the training workload on ``backend``, its ranks' results ``ranks``."""
    env = EnvInfo(
        host="h", backend=backend, world_size=2, device_names=(device,) * 2, torch="2", cuda=None, nccl=None, python=""
    )
    return ended_run("train", env, ranks)


def ended_run(
    workload: str, env: EnvInfo | None, ranks: list, run_dir: Path = Path("run"), returncode: int = 0
) -> RunResult:
    """A run of ``workload`` that ended with ``returncode`` after a second, its ranks' results ``ranks`` (no logs)."""
    return RunResult(
        workload=workload,
        params={},
        returncode=returncode,
        wall_s=1.0,
        first_output_s=None,
        env=env,
        ranks=ranks,
        run_dir=run_dir,
        log_files={},
        log_tail=[],
    )
