"""What a machine with exactly one GPU shows of the launcher and of NCCL (used by scripts/gpu-one.sh).

    python scripts/one_gpu_checks.py OUT.json

1. ``selftest`` on one rank with NCCL.
2. Two emulated nodes of one rank each, both on GPU 0, NCCL_DEBUG=INFO: the launcher gives each
   node's agent its own ``NCCL_HOSTID``, so NCCL should report ``nNodes 2`` and route over its
   network transport (NET/Socket), even though both ranks drive the same GPU.
3. The same with one ``NCCL_HOSTID`` for both nodes: NCCL should refuse two ranks on one GPU of
   one host ("Duplicate GPU detected").

Each check records what the run printed, not what it was expected to print; the JSON says which
expectation held.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time
from pathlib import Path

import nvtutorial
from nvtutorial.chapters.ch09_multinode import report as multinode


def grep(files, pattern: str) -> list[str]:
    found = []
    for path in files:
        try:
            found += [ln.strip() for ln in Path(path).read_text(errors="replace").splitlines() if pattern in ln]
        except OSError:
            continue
    return found


def logs(run_dir: Path) -> list[Path]:
    return sorted(run_dir.rglob("*.log"))


def main(report: str) -> int:
    out = Path(report)
    runs = out.parent / "one-gpu-runs"
    checks: dict = {}

    t0 = time.monotonic()
    result = nvtutorial.run("selftest", nproc=1, backend="nccl", output="none", timeout=120, out=runs / "selftest")
    checks["selftest_nccl_1rank"] = {
        "ok": result.ok,
        "wall_s": result.wall_s,
        "cli_s": time.monotonic() - t0,
        "env": dataclasses.asdict(result.env) if result.env else None,
        "ranks": result.ranks,
    }

    env = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,GRAPH,NET"}
    result = nvtutorial.run(
        "selftest", nproc=1, nnodes=2, backend="nccl", env=env, output="none", timeout=180, out=runs / "two-nodes"
    )
    verdict = multinode.transport_verdict(result, expect_nodes=2)  # notebook 09's reading of NCCL's lines
    checks["two_emulated_nodes_one_gpu"] = {
        "ok": result.ok,
        "wall_s": result.wall_s,
        "ranks": result.ranks,
        "verdict": verdict.text,
        "numbers": verdict.numbers,
        "expected": "nNodes 2 and NET/Socket",
        "held": result.ok and verdict.status == "pass",
    }

    try:
        result = nvtutorial.run(
            "selftest",
            nproc=1,
            nnodes=2,
            backend="nccl",
            env={**env, "NCCL_HOSTID": "one-host"},
            output="none",
            timeout=120,
            out=runs / "same-hostid",
        )
        said, ok = "", result.ok
    except nvtutorial.RunFailed as exc:
        said, ok = str(exc), False
    duplicate = grep(logs(runs / "same-hostid"), "Duplicate GPU")
    checks["two_emulated_nodes_same_hostid"] = {
        "ok": ok,
        "error_head": said.splitlines()[:3],
        "duplicate_lines": duplicate[:2],
        "expected": "refused: Duplicate GPU detected",
        "held": (not ok) and bool(duplicate or "Duplicate GPU" in said),
    }
    out.write_text(json.dumps(checks, indent=2, default=str) + "\n")
    for name, check in checks.items():
        print(f"{name}: ok={check['ok']}" + (f", expectation held={check['held']}" if "held" in check else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
