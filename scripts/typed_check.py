"""Read every run under the given folders back through its workload's schema (what a GPU machine's runs give back).

    python scripts/typed_check.py OUT.json DIR [DIR ...]

For each ``result.json`` under each DIR: ``RunResult.load``, ``nvtutorial.workloads.result_type`` and
``ranks_as``; the JSON says, per run, its workload, device, world size and whether every rank read typed (or the
error that says which field of which rank did not fit). It exits non-zero when a run of a workload with a schema
did not read.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from nvtutorial.results import RunResult
from nvtutorial.workloads import result_type


def check(path: Path) -> dict:
    result = RunResult.load(path)
    row = {"run": str(path.parent.name), "workload": Path(result.workload).name, "ok": result.ok}
    row["label"] = result.label
    try:
        schema = result_type(result.workload, result.params)
        ranks = result.ranks_as(schema)
        row.update(schema=f"{schema.__module__}.{schema.__qualname__}", ranks=len(ranks), typed=True)
    except LookupError as e:
        row.update(typed=None, why=str(e))  # a learner's own script: no schema to read it with
    except (ValueError, TypeError) as e:
        row.update(typed=False, why=str(e))
    return row


def main(argv: list[str]) -> int:
    out, *dirs = argv
    rows = [check(p) for d in dirs for p in sorted(Path(d).rglob("result.json"))]
    Path(out).write_text(json.dumps(rows, indent=1) + "\n")
    bad = [r for r in rows if r["typed"] is False]
    print(
        f"{len(rows)} runs: {sum(r['typed'] is True for r in rows)} read typed, {len(bad)} did not, "
        f"{sum(r['typed'] is None for r in rows)} without a schema"
    )
    for r in bad:
        print(f"  {r['run']}: {r['why']}")
    return 1 if bad or not rows else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
