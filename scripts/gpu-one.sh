#!/usr/bin/env bash
# What a machine with exactly ONE GPU shows of the course: run from the repository root there.
#
#   scripts/gpu-one.sh OUT_DIR [STEP ...]
#
# Steps (all by default, in this order); each has its own time limit and writes into OUT_DIR when it ends:
#   facts     OUT_DIR/machine.txt: GPU, driver, torch, NCCL, cores, the commit (COURSE_COMMIT)
#   course    `nvtutorial course` with its default (profile auto: each notebook places each part; on one GPU every
#             one-GPU part runs on it at the lesson's sizes, the two-rank parts as the CPU simulation);
#             COURSE_ONLY="07 08" runs only the notebooks matching those patterns
#   more      a second `nvtutorial course` after the first, for MORE_ONLY="04 05" (MORE_LIMIT): what matters most
#             goes first, in course, what may be cut by GPU_DEADLINE in more
#   ch10ci    (after course, before more) notebook 10 with --profile ci: the device problems at the small sizes, where they are overhead-bound
#   gather    scripts/one_gpu_03_04.py gather: the cost of notebook 03's gather per batch on the GPU (review N14)
#   starts    scripts/ch09_start_costs.py: where notebook 09's seconds go (rank starts, phase by phase)
#   typed     scripts/typed_check.py: every run the steps above made, read back through its workload's schema
# GPU_DEADLINE=S keeps every step together within S seconds (a step that would start with under MIN_STEP=45 s left is
# skipped, and says so); COURSE_LIMIT and CH10_LIMIT cap the course and notebook 10's step.
# Results: OUT_DIR/steps.txt, summary.txt (the course's summary), notebooks.tar.gz (the executed notebooks and each
# summary.json), runs.tar.gz (every run's result.json, rank*.json and logs; no traces or checkpoints), *.json.
# Where the Jupyter stack is missing, the wheels in .whl/ (nvtutorial bundle) go to /tmp/site.
set -uo pipefail
out=${1:?usage: scripts/gpu-one.sh OUT_DIR [STEP ...]}
shift
steps=${*:-facts course ch10ci gather typed}
work=$(mktemp -d /tmp/gpu-one.XXXX)
. scripts/device-env.sh
mkdir -p "$out"

deadline=$((SECONDS + ${GPU_DEADLINE:-100000}))  # GPU_DEADLINE: seconds for every step together (a lease's budget)
step() {  # step NAME SECONDS COMMAND...: run it with a limit (cut to what GPU_DEADLINE leaves), log it, record it
    local name=$1 limit=$2
    shift 2
    case " $steps " in *" $name "*) ;; *) return 0 ;; esac
    local left=$((deadline - SECONDS))
    if [ "$left" -lt "${MIN_STEP:-45}" ]; then echo "$name skipped: ${left} s left of GPU_DEADLINE" | tee -a "$out/steps.txt"; return 0; fi
    [ "$limit" -gt "$left" ] && limit=$left
    echo "== $name (limit ${limit} s): $*"
    local t0=$SECONDS
    timeout -k 10 "$limit" "$@" > "$work/$name.log" 2>&1
    local rc=$?
    echo "$name rc=$rc $((SECONDS - t0)) s" | tee -a "$out/steps.txt"
    tail -n 30 "$work/$name.log"
}

mkdir -p "$work/probes"
machine_facts "$out/machine.txt"
only=()
for pattern in ${COURSE_ONLY:-}; do only+=(--only "$pattern"); done
step course "${COURSE_LIMIT:-420}" $PY -m nvtutorial.cli course "${only[@]}" --out "$work/course"
step ch10ci "${CH10_LIMIT:-90}" $PY -m nvtutorial.cli course --profile ci --only 10_cost_model --out "$work/ch10ci"
more=()
for pattern in ${MORE_ONLY:-}; do more+=(--only "$pattern"); done
[ ${#more[@]} -gt 0 ] && step more "${MORE_LIMIT:-420}" $PY -m nvtutorial.cli course "${more[@]}" --out "$work/more"
cat "$work/course.log" "$work/more.log" > "$out/summary.txt" 2>/dev/null
MIN_STEP=20 step gather 20 $PY scripts/one_gpu_03_04.py "$work/probes" gather
step starts 60 $PY scripts/ch09_start_costs.py "$work/probes"
MIN_STEP=3 step typed 20 $PY scripts/typed_check.py "$work/probes/typed-check.json" "$work/course/runs" "$work/more/runs" "$work/ch10ci/runs"
cp "$work"/probes/*.json "$out/" 2>/dev/null

# pack: executed notebooks and summaries; runs (no checkpoints or traces); the step logs
tar -C "$work" -czf "$out/notebooks.tar.gz" --exclude='runs' --exclude='*.log' course more ch10ci 2>/dev/null
tar -C "$work" -czf "$out/runs.tar.gz" --exclude='*.pt' --exclude='*.distcp' --exclude='*.pt.trace.json*' \
    --exclude='*.json.gz' --exclude='*.nsys-rep' --exclude='*.sqlite' --exclude='checkpoint*' --exclude='*.pickle' \
    course/runs more/runs ch10ci/runs 2>/dev/null
(cd "$work" && tar -czf "$out/logs.tar.gz" ./*.log) 2>/dev/null
ls -la "$out"
