"""The selftest contract of ``nvtutorial run``, checked on the machine at hand (used by reference-run.sh).

Runs ``selftest`` ok (three times, for the launch overhead), crash and hang through the command
line, times each, checks that no process of any run is left, and writes a JSON report.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil


def cli(*args: str) -> tuple[int, float, str]:
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "nvtutorial.cli", *args], capture_output=True, text=True)
    return proc.returncode, time.monotonic() - t0, proc.stderr


def leftovers(run_dir: Path) -> list[int]:
    pids = [int(p.read_text()) for p in run_dir.glob("rank*.pid")]
    return [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]


def main(report: str) -> int:
    base = Path(tempfile.mkdtemp(prefix="cli-checks-"))
    checks: dict = {"ok_runs": []}
    for i in range(3):
        rc, elapsed, err = cli("run", "selftest", "--nproc", "2", "--out", str(base / f"ok{i}"))
        result = json.loads((base / f"ok{i}" / "result.json").read_text())
        checks["ok_runs"].append(
            {
                "rc": rc,
                "cli_s": elapsed,
                "wall_s": result["wall_s"],
                "first_output_s": result["first_output_s"],
                "env": result["env"],
                "left": leftovers(base / f"ok{i}"),
            }
        )
    rc, elapsed, err = cli("run", "selftest", "--nproc", "2", "--set", "mode=crash", "--out", str(base / "crash"))
    checks["crash"] = {
        "rc": rc,
        "cli_s": elapsed,
        "names_rank_1": "rank 1 failed: RuntimeError" in err,
        "left": leftovers(base / "crash"),
        "stderr_head": err.splitlines()[:3],
    }
    rc, elapsed, err = cli(
        "run", "selftest", "--nproc", "2", "--set", "mode=hang", "--timeout", "10", "--out", str(base / "hang")
    )
    checks["hang"] = {"rc": rc, "cli_s": elapsed, "left": leftovers(base / "hang"), "stderr_head": err.splitlines()[:3]}
    ok = checks["ok_runs"]
    checks["overhead"] = {
        "median_first_output_s": statistics.median(r["first_output_s"] for r in ok),
        "median_wall_s": statistics.median(r["wall_s"] for r in ok),
        "median_cli_s": statistics.median(r["cli_s"] for r in ok),
    }
    passed = (
        all(r["rc"] == 0 and not r["left"] for r in ok)
        and checks["crash"]["rc"] == 1
        and checks["crash"]["cli_s"] < 15
        and checks["crash"]["names_rank_1"]
        and not checks["crash"]["left"]
        and checks["hang"]["rc"] == 1
        and checks["hang"]["cli_s"] < 20
        and not checks["hang"]["left"]
    )
    checks["passed"] = passed
    Path(report).write_text(json.dumps(checks, indent=2))
    print(json.dumps({k: checks[k] for k in ("overhead", "crash", "hang", "passed")}, indent=2))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
