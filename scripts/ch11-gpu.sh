#!/usr/bin/env bash
# Notebook 11 on a machine with ONE GPU (an H200 or an H100): run from the repository root there.
#
#   scripts/ch11-gpu.sh [OUT_DIR]        (default: $OUT, the folder a device run brings back)
#
# Steps, each with its own time limit (not yet run on a GPU; 300 s allowed: one cold torch.compile); each
# writes into OUT_DIR as soon as it ends:
#   facts     OUT_DIR/machine.txt: GPU, driver, torch, NCCL, cores, the commit (COURSE_COMMIT, else git's)
#   notebook  notebook 11 with --profile auto: on one GPU every one-GPU part runs on it at the lesson's sizes (one op,
#             the batch-doubling sweep, the step eager and in one CUDA graph at widths 256 and 1024 and under
#             reduce-overhead at width 256 only, one cold compile; the all-reduce in a world of one), the all-reduce
#             over two ranks as the CPU simulation
#   tests     tests/chapters/ch11_overhead on this machine (its one-GPU test included; CH11_TESTS=0 leaves them out)
# Results: OUT_DIR/11_overhead.ipynb (executed), summary.json, ch11-runs.tar.gz (the notebook's runs, result.json and
# rank*.json: unpack it into reference/<machine>/runs-11/, where the notebook's CPU copy reads the committed run),
# ch11-model-vs-run.txt (the verdicts and the model-vs-run table read back from the executed notebook),
# typed-check-11.json (every run read back through its schema), notebook.log, tests.log, steps.txt.
set -uo pipefail
out=${1:-${OUT:?usage: scripts/ch11-gpu.sh OUT_DIR (or set OUT)}}
mkdir -p "$out"
. scripts/device-env.sh
COURSE_COMMIT=${COURSE_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)} machine_facts "$out/machine.txt"
work=$(mktemp -d /tmp/ch11.XXXX)

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

step notebook 300 $PY -m nvtutorial.cli course --profile auto --only 11_overhead --out "$work/course"
[ "${CH11_TESTS:-1}" = 1 ] && step tests 90 $PY -m pytest -q -p no:cacheprovider -rA tests/chapters/ch11_overhead

cp "$work/course/11_overhead.ipynb" "$work/course/summary.json" "$out/" 2>/dev/null
tar -C "$work/course/runs" -czf "$out/ch11-runs.tar.gz" --exclude='*.json.gz' --exclude='trace-*' . 2>/dev/null
$PY scripts/typed_check.py "$out/typed-check-11.json" "$work/course/runs"
$PY - "$out/11_overhead.ipynb" > "$out/ch11-model-vs-run.txt" 2>&1 <<'PYEOF'
import sys

import nbformat

from nvtutorial.report.verdict import verdicts_in_notebook

nb = nbformat.read(sys.argv[1], as_version=4)
for v in verdicts_in_notebook(nb):
    print(f"{v.key} · {v.status}: {v.text} [{v.where}]")
for cell in nb.cells:
    if cell.cell_type == "code" and cell.source.startswith(("STEP_RUN", "GPU_CAL", "CAL_RUN")):
        for o in cell.outputs:
            data = o.get("data", {})
            text = o.get("text") if o.get("output_type") == "stream" else data.get("text/plain")
            if text and "application/vnd.nvtutorial.verdict+json" not in data:
                print(text)
PYEOF
cat "$out/ch11-model-vs-run.txt"
ls -la "$out"
