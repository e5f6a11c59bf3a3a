#!/usr/bin/env bash
# A short first look at two GPUs (when little device time is left): run from the repository root.
#
#   scripts/gpu-two-quick.sh OUT_DIR
#
# 1. the test suite's two-GPU tests (NCCL selftest, the hang at the first use of the result, the
#    %%ranks hang recovered, the transport and NVLink counters, the memory lesson);
# 2. benchmarks/ranks_bench.py on two NCCL ranks (a warm %%ranks cell, the cold start);
# 3. notebook 08 with the small (ci) sizes on both GPUs (FSDP2, tensor parallel, DCP on NCCL).
# Each writes into OUT_DIR as soon as it ends, so what finished comes back if the time runs out.
set -uo pipefail
out=${1:?usage: scripts/gpu-two-quick.sh OUT_DIR}
mkdir -p "$out"
. scripts/device-env.sh
machine_facts "$out/machine.txt"
t0=$SECONDS
timeout -k 5 110 $PY -m pytest -q -p no:cacheprovider -rA --timeout 100 \
    "tests/launch/test_runner.py::test_selftest_on_two_gpus_with_nccl" \
    "tests/chapters/ch00_welcome/test_report.py::test_the_hang_on_two_gpus_waits_at_the_first_use_of_the_result" \
    "tests/teach/test_ranks.py::test_nccl_all_reduce_and_a_hang_recovered_on_two_gpus" \
    "tests/chapters/ch01_hardware/test_lab.py::test_on_two_gpus_the_logs_name_the_transport_and_the_counters_match_the_ring" \
    "tests/chapters/ch06_pitfalls/test_lab.py::test_memory_lesson_fits_with_the_fixes" > "$out/tests-2gpu.log" 2>&1
echo "tests rc=$? $((SECONDS - t0)) s" | tee -a "$out/steps.txt"; tail -n 12 "$out/tests-2gpu.log"
t0=$SECONDS
timeout -k 5 70 $PY benchmarks/ranks_bench.py --backend nccl --nproc 2 --repeats 20 --cold 1 --launcher-runs 1 \
    --out "$out/ranks-nccl-2gpu.json" > "$out/ranks-bench.log" 2>&1
echo "ranks_bench rc=$? $((SECONDS - t0)) s" | tee -a "$out/steps.txt"; tail -n 12 "$out/ranks-bench.log"
t0=$SECONDS
work=$(mktemp -d)
timeout -k 5 100 $PY -m nvtutorial.cli course --profile ci --only 08 --out "$work/c08" > "$work/c08.log" 2>&1
echo "nb08_ci rc=$? $((SECONDS - t0)) s" | tee -a "$out/steps.txt"; grep -v WARNING "$work/c08.log" | tail -n 5
tar -C "$work" -czf "$out/nb08-ci-2gpu.tar.gz" --exclude='*.pt' --exclude='*.distcp' --exclude='*.json.gz' \
    --exclude='*.pt.trace.json*' --exclude='checkpoint*' . 2>/dev/null
ls -la "$out"
