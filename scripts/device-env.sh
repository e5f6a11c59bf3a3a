# Sourced by the scripts that run on a GPU machine (reference-run.sh, gpu-one.sh, gpu-two-quick.sh):
# the environment every run there starts with, the Jupyter stack from .whl/ where it is missing, and
# `machine_facts FILE`, what the machine says about itself.
# NVLink multicast stays off on shared machines; the launcher passes these on to every rank.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
PY=${PYTHON:-python3}
if [ -d .whl ] && ! $PY -c "import papermill" 2>/dev/null; then
    # the wheels of `nvtutorial bundle`; the package itself comes from this checkout
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        $(ls .whl/*.whl | grep -v '/nvtutorial-') || exit 1
    export PYTHONPATH=$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}
else
    export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi

machine_facts() {  # machine_facts FILE: GPUs, links, driver, torch, NCCL, cores, the commit (COURSE_COMMIT)
    {
        date -u
        nvidia-smi --query-gpu=name,memory.total,driver_version,pci.bus_id --format=csv
        nvidia-smi topo -m
        $PY -c "import torch, platform; print('python', platform.python_version(), 'torch', torch.__version__, 'cuda', torch.version.cuda, 'nccl', torch.cuda.nccl.version(), 'gpus', torch.cuda.device_count())"
        echo "nsys: $(command -v nsys || echo none)"
        echo "cores: $(nproc)"
        echo "commit: ${COURSE_COMMIT:-unknown (set COURSE_COMMIT)}"
    } > "$1" 2>&1
    cat "$1"
}
