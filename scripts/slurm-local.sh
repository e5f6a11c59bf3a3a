#!/usr/bin/env bash
# A real Slurm on this machine: munge, slurmctld and two slurmd nodes (n1, n2) on 127.0.0.1.
#
#   eval "$(scripts/slurm-local.sh start)"    # start; prints `export SLURM_CONF=...` for sbatch/srun
#   scripts/slurm-local.sh status             # daemons, nodes, jobs; exit 0 when all are up
#   scripts/slurm-local.sh stop               # cancel every job, stop the daemons: no process left
#
# Installs nothing (Debian: apt-get install --no-install-recommends slurmctld slurmd slurm-client
# munge; .ci/run does it). Everything lives in a private folder, $NVTUTORIAL_SLURM_DIR or
# /tmp/nvtutorial-slurm-$UID (or the second argument): its own munge key and socket, free ports,
# slurm.conf, state, spool, logs and the daemons' pids. No systemd and no cgroups
# (proctrack/linuxproc, task/none); the nodes are two `slurmd -N` of one host (MULTIPLE_SLURMD).
# Facts measured on this kind of machine: /work/shared/notes/slurm-on-one-host.md.
# Used by tests/launch/test_slurm.py and nvtutorial.launch.slurm.local_cluster() (notebook 09).
set -uo pipefail

cmd=${1:-}
STATE=${2:-${NVTUTORIAL_SLURM_DIR:-/tmp/nvtutorial-slurm-$(id -u)}}
CONF="$STATE/slurm.conf"
MUNGE_SOCKET="$STATE/munge/munge.socket"
NODES=(n1 n2)
DAEMONS=(munged slurmctld "${NODES[@]/#/slurmd-}")   # pid files under $STATE/pids/

say() { echo "slurm-local: $*" >&2; }

pid_of() {  # the pid recorded for a daemon, if that process is still alive (and not a zombie)
  local file="$STATE/pids/$1.pid" pid
  [[ -f $file ]] || return 1
  pid=$(<"$file")
  [[ -n $pid && -d /proc/$pid ]] || return 1
  [[ $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) != Z ]]
}

free_ports() {  # N ports nobody listens on now
  python3 - "$1" <<'PY'
import socket, sys
socks = [socket.socket() for _ in range(int(sys.argv[1]))]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
}

launch() {  # launch NAME COMMAND...: a daemon in its own session, in the background; pid recorded
  local name=$1
  shift
  setsid "$@" >"$STATE/log/$name.out" 2>&1 </dev/null &
  echo $! >"$STATE/pids/$name.pid"
}

write_conf() {
  local host cpus mem ports ctld_port i
  host=$(hostname -s)
  # Both nodes share this host's cores; each advertises $NVTUTORIAL_SLURM_CPUS (default: the real
  # count, at least 4) so a few small jobs run side by side (SlurmdParameters=config_overrides).
  cpus=$(slurmd -C | sed -n 's/.*CPUs=\([0-9]*\).*/\1/p' | head -n 1)
  mem=$(slurmd -C | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' | head -n 1)
  cpus=${NVTUTORIAL_SLURM_CPUS:-$((cpus > 4 ? cpus : 4))}
  read -r -a ports <<<"$(free_ports $((1 + ${#NODES[@]})))"
  ctld_port=${ports[0]}
  # Job ids start from the controller's (free, so unique) port: two private Slurms on one host (CI runs the tests
  # and notebook 09 side by side) then give their jobs different ids, so the rendezvous ports the batch scripts derive
  # from the job id (20000 + id % 20000, as on a real cluster) do not collide. Ids stay below 12000, so those ports
  # stay below Linux's ephemeral range (32768-60999), where every free port the tests and kernels ask for comes from
  # (job 17931's port 37931 was taken by another process once, in CI).
  first_job=$((1 + 10 * (ctld_port % 1200)))
  cat >"$CONF" <<EOF
# Written by scripts/slurm-local.sh: a private one-host Slurm for nvtutorial's tests and notebook 09.
ClusterName=nvtutorial
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
FirstJobId=$first_job
SlurmUser=$(id -un)
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE_SOCKET
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool/%n
SlurmctldPidFile=$STATE/run/slurmctld.pid
SlurmdPidFile=$STATE/run/slurmd-%n.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd-%n.log
# no systemd, no cgroups, no accounting database
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SwitchType=switch/none
# schedule at once (the default waits up to a second or more per job)
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
SlurmdParameters=config_overrides
MailProg=/bin/true
KillWait=5
MinJobAge=600
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=60
EOF
  for i in "${!NODES[@]}"; do
    echo "NodeName=${NODES[$i]} NodeHostname=$host NodeAddr=127.0.0.1 Port=${ports[$((i + 1))]} CPUs=$cpus RealMemory=${mem:-1024} State=UNKNOWN" >>"$CONF"
  done
  local IFS=,
  echo "PartitionName=local Nodes=${NODES[*]} Default=YES MaxTime=INFINITE State=UP" >>"$CONF"
}

all_running() {
  local d
  for d in "${DAEMONS[@]}"; do
    pid_of "$d" || return 1
  done
}

nodes_idle() {  # every node answers and is idle (or busy with a job)
  local states
  states=$(SLURM_CONF=$CONF sinfo -h -N -o '%T' 2>/dev/null) || return 1
  [[ $(grep -cE '^(idle|mixed|allocated)' <<<"$states") -eq ${#NODES[@]} ]]
}

show_logs() {
  local f
  for f in "$STATE"/log/*; do
    [[ -s $f ]] || continue
    say "--- last lines of $f ---"
    tail -n 8 "$f" >&2
  done
}

start() {
  local missing=() c i
  for c in munged munge unmunge slurmctld slurmd sbatch srun scontrol sinfo squeue; do
    command -v "$c" >/dev/null || missing+=("$c")
  done
  if ((${#missing[@]})); then
    say "not installed: ${missing[*]}; install with: apt-get install -y --no-install-recommends slurmctld slurmd slurm-client munge"
    exit 2
  fi
  if all_running && nodes_idle; then
    echo "export SLURM_CONF=$CONF"
    return 0
  fi
  stop_daemons quiet
  rm -rf "$STATE/ctld" "$STATE/spool" "$STATE/run" "$STATE/pids"
  mkdir -p "$STATE"/{munge,ctld,run,pids,log} || exit 1
  for c in "${NODES[@]}"; do mkdir -p "$STATE/spool/$c"; done
  : >"$STATE/log/.keep"
  rm -f "$STATE"/log/*.log "$STATE"/log/*.out
  chmod 755 "$STATE/munge"   # clients of any user reach the socket; the key stays 0400
  if [[ ! -s $STATE/munge/munge.key ]]; then
    head -c 1024 /dev/urandom >"$STATE/munge/munge.key"
    chmod 400 "$STATE/munge/munge.key"
  fi
  write_conf

  launch munged munged --foreground --force --socket="$MUNGE_SOCKET" --key-file="$STATE/munge/munge.key" \
    --pid-file="$STATE/run/munged.pid" --log-file="$STATE/log/munged.log" --seed-file="$STATE/munge/seed"
  for i in $(seq 50); do
    munge -S "$MUNGE_SOCKET" -n 2>/dev/null | unmunge -S "$MUNGE_SOCKET" >/dev/null 2>&1 && break
    sleep 0.1
  done
  launch slurmctld slurmctld -D -f "$CONF"
  for c in "${NODES[@]}"; do
    launch "slurmd-$c" slurmd -D -N "$c" -f "$CONF"
  done
  for i in $(seq 200); do  # up to 20 s
    if nodes_idle; then
      all_running || break
      echo "export SLURM_CONF=$CONF"
      return 0
    fi
    all_running || break
    sleep 0.1
  done
  say "Slurm did not come up (nodes: $(SLURM_CONF=$CONF sinfo -h -N -o '%N=%T' 2>&1 | tr '\n' ' '))"
  show_logs
  stop_daemons quiet
  exit 1
}

cancel_jobs() {  # every job of this cluster, then wait until none is left (KillWait=5 s)
  local i
  pid_of slurmctld || return 0
  SLURM_CONF=$CONF scancel --quiet --full --user="$(id -un)" 2>/dev/null
  SLURM_CONF=$CONF squeue -h -o %i 2>/dev/null | xargs -r env SLURM_CONF="$CONF" scancel --quiet 2>/dev/null
  for i in $(seq 150); do
    [[ -z $(SLURM_CONF=$CONF squeue -h -t all -o '%i %T' 2>/dev/null | grep -vE ' (COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|PREEMPTED|BOOT_FAIL|DEADLINE)$') ]] && return 0
    sleep 0.1
  done
  say "jobs still ending after 15 s: $(SLURM_CONF=$CONF squeue -h -o '%i:%T' 2>/dev/null | tr '\n' ' ')"
}

stepd_pids() {  # slurmstepd processes serving this cluster (their spool sockets are in $STATE)
  local p
  for p in $(pgrep -x slurmstepd); do
    ls -l "/proc/$p/fd" 2>/dev/null | grep -q -- "$STATE/" && echo "$p"
  done
}

stop_daemons() {
  local quiet=${1:-} d pid pids=() i
  cancel_jobs
  pids+=($(stepd_pids))
  for d in "${NODES[@]/#/slurmd-}" slurmctld munged; do
    pid_of "$d" && pids+=("$(<"$STATE/pids/$d.pid")")
  done
  ((${#pids[@]})) || { [[ -n $quiet ]] || say "not running ($STATE)"; return 0; }
  kill -TERM "${pids[@]}" 2>/dev/null
  for i in $(seq 100); do  # up to 10 s
    local alive=()
    for pid in "${pids[@]}"; do
      [[ -d /proc/$pid && $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) != Z ]] && alive+=("$pid")
    done
    ((${#alive[@]})) || break
    sleep 0.1
  done
  if ((${#alive[@]})); then
    say "killing what did not stop in 10 s: ${alive[*]}"
    kill -KILL "${alive[@]}" 2>/dev/null
  fi
  wait 2>/dev/null
  rm -f "$STATE"/pids/*.pid
  [[ -n $quiet ]] || say "stopped ($STATE)"
}

status() {
  local d ok=0
  for d in "${DAEMONS[@]}"; do
    if pid_of "$d"; then echo "$d: running (pid $(<"$STATE/pids/$d.pid"))"; else echo "$d: not running"; ok=3; fi
  done
  if ((ok == 0)); then
    echo "SLURM_CONF=$CONF"
    SLURM_CONF=$CONF sinfo -N -o '%N %T %c' 2>&1
    SLURM_CONF=$CONF squeue 2>&1
  fi
  return $ok
}

case $cmd in
  start) start ;;
  stop) stop_daemons ;;
  status) status ;;
  *) echo "usage: $0 start|stop|status [STATE_DIR]" >&2; exit 2 ;;
esac
