#!/usr/bin/env bash
# Notebook 10 on a machine with ONE GPU (an H200 or an H100), at BOTH sizes: run from the repository root there.
#
#   scripts/ch10-h200.sh [OUT_DIR]        (default: $OUT, the folder a device run brings back)
#
# Steps, each with its own time limit (about 2.5 minutes in all); each writes into OUT_DIR as soon as it ends:
#   facts     OUT_DIR/machine.txt: GPU, driver, torch, NCCL, cores, the commit (COURSE_COMMIT, else git's)
#   ci        notebook 10 with --profile ci: the GPU calibrates its roofs and floors (multiplies of 64³ to 4096³,
#             copies of 64 KiB to 256 MiB, the floors of Adam's step and of a training step) and answers the four
#             device problems at the small sizes, where they are overhead-bound (one NCCL rank); the two-rank parts
#             run as the CPU simulation (two gloo ranks)
#   full      the same with --profile auto, which on one GPU gives the device its lesson sizes (64³ to 4096³, the
#             problems at the lesson's sizes with the two sides of Adam and of the step measured apart)
#   tests     the chapter's tests on this machine (tests/chapters/ch10_cost_model, the 3-rank one left out for time), only
#             with CH10_TESTS=1
# Results: OUT_DIR/{ci,full}/10_cost_model.ipynb and summary.json (executed), ch10-runs.tar.gz (both notebooks' runs:
# result.json, rank*.json, logs), ch10-model-vs-run.txt (per size: the verdicts, the calibrated numbers and the
# model-vs-run table read back from the executed notebook), {ci,full}.log, tests.log, steps.txt.
set -uo pipefail
out=${1:-${OUT:?usage: scripts/ch10-h200.sh OUT_DIR (or set OUT)}}
mkdir -p "$out/ci" "$out/full"
. scripts/device-env.sh
COURSE_COMMIT=${COURSE_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)} machine_facts "$out/machine.txt"
work=$(mktemp -d /tmp/ch10.XXXX)

step() {  # step NAME SECONDS COMMAND...: run it with a limit, log it, record its exit code and time
    local name=$1 limit=$2
    shift 2
    echo "== $name (limit ${limit} s): $*"
    local t0=$SECONDS
    timeout -k 10 "$limit" "$@" > "$out/$name.log" 2>&1
    local rc=$?
    echo "$name rc=$rc $((SECONDS - t0)) s" | tee -a "$out/steps.txt"
    tail -n 8 "$out/$name.log"
}

step ci 75 $PY -m nvtutorial.cli course --profile ci --only 10_cost_model --out "$work/ci"
step full 100 $PY -m nvtutorial.cli course --profile auto --only 10_cost_model --out "$work/full"
[ "${CH10_TESTS:-0}" = 1 ] && step tests 100 $PY -m pytest -q -p no:cacheprovider -rA -k "not three_stages" tests/chapters/ch10_cost_model

for size in ci full; do
    cp "$work/$size/10_cost_model.ipynb" "$work/$size/summary.json" "$out/$size/" 2>/dev/null
done
tar -C "$work" -czf "$out/ch10-runs.tar.gz" --exclude='*.pt' --exclude='*.distcp' --exclude='*.json.gz' \
    --exclude='*.pt.trace.json*' --exclude='checkpoint*' ci/runs full/runs 2>/dev/null
$PY - "$out" > "$out/ch10-model-vs-run.txt" 2>&1 <<'EOF'
import sys
from pathlib import Path

import nbformat

from nvtutorial.report.verdict import verdicts_in_notebook

SHOWN = {"ch10-04": "plan", "ch10-15": "calibrated numbers", "ch10-33": "model vs run"}
for size in ("ci", "full"):
    path = Path(sys.argv[1]) / size / "10_cost_model.ipynb"
    print(f"======== {size} ({path})")
    if not path.is_file():
        print("no executed notebook: see", size + ".log")
        continue
    nb = nbformat.read(path, as_version=4)
    for v in verdicts_in_notebook(nb):
        if v.key.startswith(("costmodel.calibration", "costmodel.errors", "costmodel.pipeline.clocks")):
            print(f"{v.key} · {v.status}: {v.text} [{v.where}]")
    for cell in nb.cells:
        if cell.get("id") in SHOWN:
            print(f"---- {SHOWN[cell['id']]}")
            for o in cell.get("outputs", []):
                if cell["id"] == "ch10-33" and o.get("output_type") not in ("execute_result", "display_data"):
                    continue  # the launcher's lines: the tables are the cell's displays
                text = o.get("data", {}).get("text/plain") if "data" in o else None
                if o.get("output_type") == "stream" and cell["id"] == "ch10-15":
                    text = o["text"]
                if text:
                    print(text)
EOF
cat "$out/ch10-model-vs-run.txt"
ls -la "$out"
