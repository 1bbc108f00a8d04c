#!/usr/bin/env bash
# A sharded run on a real Slurm: a single-node cluster on localhost (Debian's
# slurm-wlm and munge, installed if missing, configured in a temporary folder
# and started here, stopped at the end even on failure) runs a job's four
# shards as a job array and the merge as a job that depends on it, through
# deploy/slurm/submit.sh. The merged cache must be byte-identical (cmp) to a
# single run of the same job. Twins: cmp fails on a cache with one winner
# changed, and an array whose tasks fail never runs its merge.
#
# The job: the shipped poems, every start, --length 30 (DIVGPU_SLURM_LENGTH).
# DIVGPU_SLURM_TIMEOUT (default 600) bounds each wait for the cluster, in seconds.
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
t0=$(date +%s)
passed=0 failed=0
ok() { passed=$((passed + 1)); echo "ok - $1"; }
not_ok() { failed=$((failed + 1)); echo "not ok - $1"; [ -n "${2:-}" ] && sed 's/^/    /' <<<"$2"; }
export PATH="$PATH:/usr/sbin:/sbin"
length=${DIVGPU_SLURM_LENGTH:-30}
timeout=${DIVGPU_SLURM_TIMEOUT:-600}
embeddings=assets/embeddings/all-MiniLM-L6-v2/embeddings.json

# --- Debian's packages, installed when missing (sudo only when not root).
missing=()
for p in slurm-wlm munge; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "installing: ${missing[*]}"
    sudo=(); [ "$(id -u)" = 0 ] || sudo=(sudo)
    "${sudo[@]}" apt-get update -qq && "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null \
        || { echo "not ok - installing ${missing[*]} failed"; exit 1; }
fi
for cmd in munged slurmctld slurmd sbatch squeue scontrol sinfo scancel; do
    command -v "$cmd" >/dev/null || { echo "not ok - $cmd not found after installing slurm-wlm and munge"; exit 1; }
done

# --- A temporary folder for everything: keys, sockets, state, spool, logs, outputs.
tmp=$(mktemp -d /tmp/divgpu-slurm.XXXXXX)
chmod 755 "$tmp"  # munged wants every folder above its socket searchable by all
mkdir -p "$tmp/run" "$tmp/etc" "$tmp/state" "$tmp/spool" "$tmp/out" "$tmp/fail"
chmod 755 "$tmp/run"; chmod 700 "$tmp/etc"
pids=() jobs_submitted=()

# stop PID SECONDS: SIGTERM, then SIGKILL if it is still there after SECONDS.
stop() {
    kill "$1" 2>/dev/null || return 0
    for _ in $(seq $(($2 * 10))); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
    kill -9 "$1" 2>/dev/null
}

# Stops what this test started and removes the folder: the jobs first (until
# their step daemons have gone: each keeps a socket in the spool folder), then
# slurmd, slurmctld and munged, each by its process id, in that order.
cleanup() {
    if [ ${#jobs_submitted[@]} -gt 0 ]; then
        scancel "${jobs_submitted[@]}" 2>/dev/null
        for _ in $(seq 150); do
            if [ -z "$(squeue -h -j "$(IFS=,; echo "${jobs_submitted[*]}")" 2>/dev/null)" ] \
                && ! compgen -G "$tmp/spool/localhost_*" >/dev/null; then break; fi
            sleep 0.2
        done
    fi
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do stop "${pids[i]}" 15; done
    # A step daemon left behind (it outlived slurmd): ours have this test's SLURM_CONF.
    for env in /proc/[0-9]*/environ; do
        if grep -qsz "^SLURM_CONF=$tmp/slurm.conf$" "$env"; then
            pid=${env#/proc/}; pid=${pid%/environ}
            [ "$pid" != $$ ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = slurmstepd ] && kill -9 "$pid" 2>/dev/null
        fi
    done
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The end of each log, for a failure.
logs() {
    for f in "$tmp"/slurmctld.log "$tmp"/slurmd.log "$tmp"/etc/munged.log "$tmp"/out/slurm-*.log "$tmp"/fail/slurm-*.log; do
        [ -f "$f" ] && { echo "--- tail of $f"; tail -n 15 "$f"; }
    done
}
fail_now() { not_ok "$1" "$(logs)"; echo "$passed passed, $failed failed"; exit 1; }

# --- munge: a fresh key, the daemon on a socket in the folder.
dd if=/dev/urandom of="$tmp/etc/munge.key" bs=1024 count=1 status=none
chmod 400 "$tmp/etc/munge.key"
munged -F --key-file="$tmp/etc/munge.key" --socket="$tmp/run/munge.socket" --pid-file="$tmp/run/munged.pid" \
    --log-file="$tmp/etc/munged.log" --seed-file="$tmp/etc/munged.seed" >"$tmp/munged.out" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [ -S "$tmp/run/munge.socket" ] && break; sleep 0.1; done
munge -S "$tmp/run/munge.socket" -n </dev/null | unmunge -S "$tmp/run/munge.socket" >/dev/null 2>&1 \
    && ok "munged runs with a fresh key" || fail_now "munged runs with a fresh key: $(cat "$tmp/munged.out")"

# --- slurm.conf: one node, localhost, 4 CPUs whatever the hardware has
# (config_overrides), no cgroups, no accounting; two free ports.
read -r ctld_port slurmd_port < <(python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
user=$(id -un)
cat >"$tmp/slurm.conf" <<EOF
ClusterName=divgpu-test
SlurmctldHost=localhost
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=$user
SlurmdUser=$user
AuthType=auth/munge
AuthInfo=socket=$tmp/run/munge.socket
CredType=cred/munge
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/run/slurmctld.pid
SlurmdPidFile=$tmp/run/slurmd.pid
SlurmctldLogFile=$tmp/slurmctld.log
SlurmdLogFile=$tmp/slurmd.log
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
NodeName=localhost NodeAddr=127.0.0.1 CPUs=4 State=UNKNOWN
PartitionName=divgpu Nodes=localhost Default=YES MaxTime=INFINITE State=UP
EOF
export SLURM_CONF=$tmp/slurm.conf
slurmctld -D -f "$SLURM_CONF" >"$tmp/slurmctld.out" 2>&1 &
pids+=($!)
slurmd -D -f "$SLURM_CONF" -N localhost >"$tmp/slurmd.out" 2>&1 &
pids+=($!)
state=
for _ in $(seq 300); do
    state=$(sinfo -h -n localhost -o %T 2>/dev/null)
    [ "$state" = idle ] && break
    sleep 0.2
done
[ "$state" = idle ] && ok "slurmctld and slurmd are up: node localhost idle with 4 CPUs" \
    || fail_now "slurmctld and slurmd are up (node state '$state' after 60 s)"

# wait_jobs ID...: until no job is left in the queue (at most $timeout s).
wait_jobs() {
    local ids; ids=$(IFS=,; echo "$*")
    local deadline=$(($(date +%s) + timeout))
    while [ -n "$(squeue -h -j "$ids" 2>/dev/null)" ]; do
        [ "$(date +%s)" -ge $deadline ] && return 1
        sleep 1
    done
}
job_state() { scontrol show job "$1" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p' | sort -u | tr '\n' ' ' | sed 's/ $//'; }

# --- The sharded job through deploy/slurm: four array tasks, then the merge.
t_submit=$(date +%s)
ids=$(DIVGPU_EMBEDDINGS=$embeddings DIVGPU_OUT_DIR=$tmp/out DIVGPU_LENGTH=$length DIVGPU_RUN_ARGS=--quiet \
    deploy/slurm/submit.sh 2>"$tmp/submit.err") || fail_now "deploy/slurm/submit.sh submits: $(cat "$tmp/submit.err")"
read -r array merge <<<"$ids"
jobs_submitted+=("$array" "$merge")
ok "submitted the array (job $array) and the merge (job $merge)"
grep -q "Dependency=afterok:${array}_\*" <<<"$(scontrol show job "$merge")" \
    && ok "the merge depends on every task of the array (afterok)" \
    || not_ok "the merge depends on every task of the array (afterok)" "$(scontrol show job "$merge")"
wait_jobs "$array" "$merge" || fail_now "the array and the merge finish within $timeout s"
t_jobs=$(($(date +%s) - t_submit))
[ "$(job_state "$array")" = COMPLETED ] && [ "$(job_state "$merge")" = COMPLETED ] \
    && ok "the four tasks and the merge completed (${t_jobs} s)" \
    || fail_now "the four tasks and the merge completed (array: $(job_state "$array"), merge: $(job_state "$merge"))"
n_parts=$(ls "$tmp"/out/part-*-of-4.json 2>/dev/null | wc -l)
[ "$n_parts" -eq 4 ] && ok "four parts, part-0-of-4.json .. part-3-of-4.json" || not_ok "four parts ($n_parts found)" "$(ls "$tmp/out")"
if grep -qi "vulkan validation" "$tmp"/out/slurm-*.log; then
    not_ok "no validation-layer message in the jobs' logs" "$(grep -hi "vulkan validation" "$tmp"/out/slurm-*.log | head -5)"
else
    ok "no validation-layer message in the jobs' logs"
fi

# --- The same job in one run, here: the merged cache must have its bytes.
merged=$tmp/out/diversity_cache.json
bin/divgpu run --embeddings "$embeddings" --length "$length" --out "$tmp/single.json" --quiet >/dev/null 2>"$tmp/single.err" \
    || fail_now "the single run: $(cat "$tmp/single.err")"
cmp -s "$merged" "$tmp/single.json" && ok "the merged cache is byte-identical to a single run (cmp, $(wc -c <"$merged") bytes)" \
    || not_ok "the merged cache is byte-identical to a single run" "$(cmp "$merged" "$tmp/single.json" 2>&1)"
bin/divgpu verify --embeddings "$embeddings" --cache "$merged" --sequences 64 --quiet >/dev/null 2>"$tmp/verify.err" \
    && ok "verify: the merged cache's first 64 sequences match the CPU mirror" \
    || not_ok "verify: the merged cache's first 64 sequences match the CPU mirror" "$(cat "$tmp/verify.err")"

# Twin: a cache with one winner changed (two items of a sequence swapped) fails cmp.
python3 - "$merged" "$tmp/altered.json" <<'PY'
import sys
lines = open(sys.argv[1]).read().split("\n")
i = [k for k, l in enumerate(lines) if l.startswith("[")][1000]
body = lines[i].rstrip(",")
seq = body.strip("[]").split(",")
seq[7], seq[8] = seq[8], seq[7]
lines[i] = "[" + ",".join(seq) + "]" + lines[i][len(body):]
open(sys.argv[2], "w").write("\n".join(lines))
PY
cmp -s "$tmp/altered.json" "$tmp/single.json" && not_ok "twin: cmp fails on a cache with one winner changed" \
    || ok "twin: cmp fails on a cache with one winner changed"

# Twin of the dependency: tasks that fail (--length 0 is refused) leave the
# merge never run: cancelled, no merged cache.
ids=$(DIVGPU_EMBEDDINGS=$embeddings DIVGPU_OUT_DIR=$tmp/fail DIVGPU_LENGTH=0 deploy/slurm/submit.sh 2>"$tmp/submit.err") \
    || fail_now "deploy/slurm/submit.sh submits the failing array: $(cat "$tmp/submit.err")"
read -r array merge <<<"$ids"
jobs_submitted+=("$array" "$merge")
wait_jobs "$array" "$merge" || fail_now "the failing array and its merge leave the queue within $timeout s"
[ "$(job_state "$array")" = FAILED ] && [ "$(job_state "$merge")" = CANCELLED ] && [ ! -e "$tmp/fail/diversity_cache.json" ] \
    && ok "twin: failed tasks cancel the merge (array FAILED, merge CANCELLED, no cache)" \
    || not_ok "twin: failed tasks cancel the merge (array: $(job_state "$array"), merge: $(job_state "$merge"))" "$(logs)"
grep -q "divgpu: --length '0' is not a positive integer" "$tmp/fail/slurm-shard-0.log" \
    && ok "twin: the failed task's log has divgpu's one-line error" \
    || not_ok "twin: the failed task's log has divgpu's one-line error" "$(cat "$tmp/fail/slurm-shard-0.log" 2>&1)"

echo "slurm test: $(($(date +%s) - t0)) s in all, ${t_jobs} s from submitting to the merged cache"
echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
