#!/usr/bin/env bash
# Work kept on interrupt, on lavapipe: with --checkpoint-interval the batch
# is capped so that a batch is estimated to take at most that long (the
# bytes do not depend on the batch size), so a run stopped by
# `timeout -s INT` (a signal to the process and then its group: two within
# a second, which count as one) keeps finished batches, prints its
# "interrupted" line, exits 130 and leaves no OUT.lock; a signal during the
# set-up (G's build) stops it the same way; several tries at different
# moments; resuming gives the bytes of the CPU method's uninterrupted run.
# Twin: --checkpoint-interval 600 on the same job is one batch (nothing kept
# by an early stop), so the cap is what keeps the work.
set -uo pipefail
cd "$(dirname "$0")/.."
source tests/lib.sh
# The rates auto estimates by are measured afresh, on this machine now, in a
# cache of the test's own: a cache measured under another load (rates are
# kept per machine) would make the estimates those of another machine.
export XDG_CACHE_HOME=$tmp/cache
E=assets/embeddings/all-MiniLM-L6-v2/embeddings.json
# Long enough (about 15 s of steps on an idle 2-core machine) that the signals
# at 5-7 s land inside it, however fast the machine.
job=(--embeddings $E --starts 0:128 --length 2103)

$divgpu run "${job[@]}" --method cpu --device cpu --out "$tmp/whole.json" --quiet >/dev/null

# try NAME SECONDS INTERVAL: a run stopped by timeout -s INT after SECONDS;
# its stderr in $tmp/try.err, its exit status in $rc.
try() {
    local name=$1 after=$2 interval=$3
    rm -rf "$tmp/o.json" "$tmp/o.json.checkpoint" "$tmp/o.json.lock"
    timeout --preserve-status -s INT "$after" $divgpu run "${job[@]}" --checkpoint-interval "$interval" --out "$tmp/o.json" \
        --progress plain 2>"$tmp/try.err" >/dev/null
    rc=$?
    if [ $rc -eq 130 ] && grep -q "^divgpu: interrupted by SIGINT" "$tmp/try.err" && [ ! -e "$tmp/o.json.lock" ] \
        && ! grep -q "vulkan validation" "$tmp/try.err"; then
        ok "$name: exit 130, the interrupted line, no lock left"
    else
        not_ok "$name: exit $rc, lock $( [ -e "$tmp/o.json.lock" ] && echo left || echo gone)" "$(cat "$tmp/try.err")"
    fi
}

# During the set-up (the table read, G's build: about 2.5 s here).
try "SIGINT during the set-up" 1 1
check "set-up: nothing was kept, and it says so" grep -q "no batch had finished" "$tmp/try.err"

for after in 5 6 7; do
    try "SIGINT after ${after} s (batches of about 1 s)" "$after" 1
    kept=$(committed "$tmp/o.json.checkpoint")
    if [ "$kept" -gt 0 ] && [ "$kept" -lt 128 ] && grep -q "$kept of 128 sequences are kept" "$tmp/try.err"; then
        ok "after ${after} s: $kept of 128 sequences kept in the checkpoint"
    else
        not_ok "after ${after} s: kept $kept" "$(cat "$tmp/try.err")"
    fi
    check "after ${after} s: the batches were capped (several)" grep -q "(batch [0-9]*/[1-9][0-9]*, step" "$tmp/try.err"
done

expect_ok "the same command resumes" $divgpu run "${job[@]}" --checkpoint-interval 1 --out "$tmp/o.json" --quiet
check "resumed: the bytes of an uninterrupted run (the CPU method's)" cmp -s "$tmp/o.json" "$tmp/whole.json"
check "resumed: no lock, no checkpoint left" bash -c "[ ! -e '$tmp/o.json.lock' ] && [ ! -e '$tmp/o.json.checkpoint' ]"

# Two signals 0.01 s apart count as one (the second does not exit at once).
# The check counts only where the second signal reached a running process:
# a run that had already stopped after the first proves nothing, so it is
# tried again (three runs at most; none reached is a failure, not a pass).
landed=0
for attempt in 1 2 3; do
    rm -rf "$tmp/o.json" "$tmp/o.json.checkpoint"
    $divgpu run "${job[@]}" --checkpoint-interval 1 --out "$tmp/o.json" --quiet 2>"$tmp/two.err" >/dev/null &
    pid=$!
    sleep 4
    kill -INT $pid; sleep 0.01
    kill -INT $pid 2>/dev/null && landed=1
    wait $pid
    rc=$?
    [ $landed = 1 ] && break
done
if [ $landed = 0 ]; then
    not_ok "two signals 0.01 s apart: the second never reached a running process (3 runs)"
elif [ $rc -eq 130 ] && grep -q "^divgpu: interrupted by SIGINT" "$tmp/two.err" && [ ! -e "$tmp/o.json.lock" ]; then
    ok "two signals 0.01 s apart (run $attempt): one stop, the interrupted line, no lock"
else
    not_ok "two signals 0.01 s apart: exit $rc" "$(cat "$tmp/two.err")"
fi

# Twin: without the cap (an interval longer than the job) the job is one batch.
rm -rf "$tmp/o.json" "$tmp/o.json.checkpoint"
timeout --preserve-status -s INT 5 $divgpu run "${job[@]}" --checkpoint-interval 600 --out "$tmp/o.json" --progress plain \
    2>"$tmp/twin.err" >/dev/null
check "twin: --checkpoint-interval 600 is one batch, and an early stop keeps nothing" \
    bash -c "grep -q '(batch 1/1, step' '$tmp/twin.err' && grep -q 'no batch had finished' '$tmp/twin.err'"

finish
