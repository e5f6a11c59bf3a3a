#!/usr/bin/env bash
# Produce the real-GPU reference: run on a machine with 2 GPUs, from the repository root.
#
#   scripts/reference-run.sh OUT_DIR [NOTEBOOK_PATTERN ...]
#
# Writes OUT_DIR/machine.txt (what the machine is), OUT_DIR/cli-checks.json (the selftest
# contract: ok, crash, hang, launch overhead), the executed notebooks with their runs, and
# OUT_DIR/summary.json. Without a pattern it runs every notebook; CLI_CHECKS=0 skips the selftest
# contract (a later part of the same reference run). Where the Jupyter stack is not installed, a
# folder .whl/ of wheels (see `nvtutorial bundle`) is installed to /tmp/site.
set -uo pipefail
out=${1:?usage: scripts/reference-run.sh OUT_DIR [PATTERN ...]}
shift
mkdir -p "$out"
. scripts/device-env.sh
machine_facts "$out/machine.txt"

if [ "${CLI_CHECKS:-1}" != 0 ]; then
    $PY scripts/cli_checks.py "$out/cli-checks.json" || echo "cli checks FAILED"
fi

args=()
for pattern in "$@"; do args+=(--only "$pattern"); done
$PY -m nvtutorial.cli course --profile full --out "$out" "${args[@]}"
