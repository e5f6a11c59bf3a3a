#!/usr/bin/env bash
# What a machine with exactly ONE GPU shows of the course: run from the repository root there.
#
#   scripts/gpu-one.sh OUT_DIR [STEP ...]
#
# Steps (all by default, in this order):
#   facts     OUT_DIR/machine.txt: GPU, driver, torch, NCCL, cores
#   checks    scripts/one_gpu_checks.py: selftest on one NCCL rank; two emulated nodes sharing GPU 0
#             (nNodes 2, NET/Socket) and the same with one NCCL_HOSTID (Duplicate GPU detected)
#   course    the whole course with --profile auto (on one GPU: the CPU simulation for two-rank lessons);
#             COURSE_ONLY="07 08" runs only the notebooks matching those patterns
#   ranks     tests/test_ranks.py's one-GPU NCCL test (%%ranks on real NCCL)
#   full0809  notebooks 08 and 09 with the full profile (their one-GPU paths)
#   overhead  benchmarks/launch_overhead.py with one NCCL rank
#   typed     scripts/typed_check.py: every run the steps above made, read back through its workload's schema
# Each step has its own time limit; the results are packed into OUT_DIR/gpu-one.tar.gz.
# Where the Jupyter stack is missing, the wheels in .whl/ (nvtutorial bundle) go to /tmp/site.
set -uo pipefail
out=${1:?usage: scripts/gpu-one.sh OUT_DIR [STEP ...]}
shift
steps=${*:-facts checks course ranks full0809 overhead typed}
work=$(mktemp -d /tmp/gpu-one.XXXX)
. scripts/device-env.sh
mkdir -p "$out"

step() {  # step NAME SECONDS COMMAND...: run it with a limit, log it, record its exit code and time
    local name=$1 limit=$2
    shift 2
    case " $steps " in *" $name "*) ;; *) return 0 ;; esac
    echo "== $name (limit ${limit} s): $*"
    local t0=$SECONDS
    timeout -k 10 "$limit" "$@" > "$work/$name.log" 2>&1
    local rc=$?
    echo "$name rc=$rc $((SECONDS - t0)) s" | tee -a "$work/steps.txt"
    tail -n 15 "$work/$name.log"
}

machine_facts "$work/machine.txt"

step checks 150 $PY scripts/one_gpu_checks.py "$work/one-gpu-checks.json"
only=()
for pattern in ${COURSE_ONLY:-}; do only+=(--only "$pattern"); done
step course "${COURSE_LIMIT:-330}" $PY -m nvtutorial.cli course --profile auto "${only[@]}" --out "$work/course"
step ranks 90 $PY -m pytest -q -p no:cacheprovider tests/test_ranks.py -k "gpu or nccl" -rA
step full0809 200 $PY -m nvtutorial.cli course --profile full --only 08 --only 09 --out "$work/full"
step overhead 150 $PY benchmarks/launch_overhead.py --backend nccl --nproc 1 --repeats 5 --out "$work/launch-overhead-nccl-1gpu.json"
step typed 60 $PY scripts/typed_check.py "$work/typed-check.json" "$work"
cp "$work/typed-check.json" "$out/" 2>/dev/null

# pack: executed notebooks, result JSON and logs (no checkpoints or traces)
tar -C "$work" -czf "$out/gpu-one.tar.gz" --exclude='*.pt' --exclude='*.distcp' --exclude='*.pt.trace.json*' \
    --exclude='*.json.gz' --exclude='*.nsys-rep' --exclude='*.sqlite' --exclude='checkpoint*' .
cp "$work/steps.txt" "$out/" 2>/dev/null
ls -la "$out"
