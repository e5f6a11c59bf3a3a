#!/usr/bin/env bash
# Notebook 10 on a machine with ONE H200 (or any one GPU): run from the repository root there.
#
#   scripts/ch10-h200.sh [OUT_DIR]        (default: $OUT, the folder a device run brings back)
#
# Steps, each with its own time limit (about 5 minutes in all); each writes into OUT_DIR as soon as it ends:
#   facts     OUT_DIR/machine.txt: GPU, driver, torch, NCCL, cores, the commit (COURSE_COMMIT, else git's)
#   notebook  notebook 10 with --profile full (`auto` would resolve to the small sizes, as the course does for
#             fewer than two GPUs): on one GPU the GPU calibrates its roofs (bf16, fp32) and answers the four
#             device problems at the lesson's sizes (one NCCL rank); the two-rank parts run as the CPU simulation
#             (two gloo ranks, small sizes); the link problems are also checked against the committed 2x H200 runs
#   tests     the chapter's tests on this machine (tests/test_cost_model.py, the 3-rank one left out for time;
#             CH10_TESTS=0 leaves them out)
# Results: OUT_DIR/10_cost_model.ipynb (executed), summary.json, ch10-runs.tar.gz (the notebook's runs: result.json,
# rank*.json, logs; no traces or checkpoints), ch10-model-vs-run.txt (the verdicts and the model-vs-run table read
# back from the executed notebook), notebook.log, tests.log, steps.txt.
set -uo pipefail
out=${1:-${OUT:?usage: scripts/ch10-h200.sh OUT_DIR (or set OUT)}}
mkdir -p "$out"
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

step notebook 270 $PY -m nvtutorial.cli course --profile full --only 10_cost_model --out "$work/course"
[ "${CH10_TESTS:-1}" = 1 ] && step tests 100 $PY -m pytest -q -p no:cacheprovider -rA -k "not three_stages" tests/test_cost_model.py

cp "$work/course/10_cost_model.ipynb" "$work/course/summary.json" "$out/" 2>/dev/null
tar -C "$work/course" -czf "$out/ch10-runs.tar.gz" --exclude='*.pt' --exclude='*.distcp' --exclude='*.json.gz' \
    --exclude='*.pt.trace.json*' --exclude='checkpoint*' runs 2>/dev/null
$PY - "$out/10_cost_model.ipynb" > "$out/ch10-model-vs-run.txt" 2>&1 <<'EOF'
import sys

import nbformat

from nvtutorial.report.verdict import verdicts_in_notebook

nb = nbformat.read(sys.argv[1], as_version=4)
for v in verdicts_in_notebook(nb):
    if v.key.startswith(("costmodel.errors", "costmodel.reference", "costmodel.pipeline", "costmodel.capstone")):
        print(f"{v.key} · {v.status}: {v.text} [{v.where}]")
for cell in nb.cells:
    if cell.cell_type == "code" and cell.source.startswith("shared = PLAN.shared"):
        for o in cell.outputs:
            if "text/plain" in o.get("data", {}):
                print(o["data"]["text/plain"])
EOF
cat "$out/ch10-model-vs-run.txt"
ls -la "$out"
