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
# NVLink multicast stays off on shared machines; the launcher passes these on to every rank.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
if [ -d .whl ] && ! $PY -c "import papermill, nbval" 2>/dev/null; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        $(ls .whl/*.whl | grep -v '/nvtutorial-') || exit 1
    export PYTHONPATH=$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}
else
    export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi

{
    date -u
    nvidia-smi --query-gpu=name,memory.total,driver_version,pci.bus_id --format=csv
    nvidia-smi topo -m
    $PY -c "import torch, platform; print('python', platform.python_version(), 'torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version(), 'gpus', torch.cuda.device_count())"
    echo "nsys: $(command -v nsys || echo none)"
    nproc
} > "$out/machine.txt" 2>&1
cat "$out/machine.txt"

if [ "${CLI_CHECKS:-1}" != 0 ]; then
    $PY scripts/cli_checks.py "$out/cli-checks.json" || echo "cli checks FAILED"
fi

args=()
for pattern in "$@"; do args+=(--only "$pattern"); done
$PY -m nvtutorial.cli course --profile full --out "$out" "${args[@]}"
