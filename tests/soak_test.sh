#!/usr/bin/env bash
# Soak: one job killed with kill -9 at random moments, at least
# SOAK_KILLS times (default 20), each kill followed by the same command, which
# resumes; the last run ends, and its cache must be byte-identical (cmp) to an
# uninterrupted run's. A kill lands anywhere: opening the device, mid-batch,
# mid-commit, while the cache is renamed; each resume takes over the killed
# run's stale lock. SOAK_SEED makes the delays repeatable (printed).
set -uo pipefail
cd "$(dirname "$0")/.."
source tests/lib.sh
kills_wanted=${SOAK_KILLS:-20}
seed=${SOAK_SEED:-$(date +%s)}
RANDOM=$seed
echo "# soak: $kills_wanted kills, SOAK_SEED=$seed"

$divgpu synth --n 1000 --dim 8 --seed 3 --out "$tmp/r.json" >/dev/null
# About 12 s of work on lavapipe here, 200 batches: far more than the kills take.
job=(--embeddings "$tmp/r.json" --starts 0:800 --length 600 --batch 4 --target-ms 20 --quiet)
expect_ok "the uninterrupted run" $divgpu run "${job[@]}" --out "$tmp/whole.json"

out=$tmp/soak.json
kills=0 finished=0 took_over=0 progress=() runs=0
while [ $kills -lt "$kills_wanted" ] && [ $runs -lt $((3 * kills_wanted)) ]; do
    runs=$((runs + 1))
    $divgpu run "${job[@]}" --out "$out" >/dev/null 2>>"$tmp/soak.err" &
    pid=$!
    # 50 ms .. 1.3 s: startup takes about half a second, so some kills land
    # before the first commit, most in the middle of the work.
    sleep "$(printf '0.%03d' $((RANDOM % 1000)))"
    sleep "0.$(( (RANDOM % 3) * 15 + 5 ))"
    if kill -9 $pid 2>/dev/null; then
        wait $pid 2>/dev/null
        kills=$((kills + 1))
        progress+=("$(committed "$out.checkpoint")")
    else
        # It ended first: the next run starts the job again (a failure ends the soak).
        wait $pid || { not_ok "a run of the soak failed" "$(tail -n 3 "$tmp/soak.err")"; break; }
        finished=$((finished + 1))
    fi
done
took_over=$(grep -c "took over the stale lock" "$tmp/soak.err")
echo "# committed after each kill: ${progress[*]}"
check "$kills kill -9s landed, at least $kills_wanted ($finished runs ended before their kill)" test $kills -ge "$kills_wanted"
expect_ok "the last run, uninterrupted" $divgpu run "${job[@]}" --out "$out"
check "after $kills kills and resumes, the cache is the uninterrupted one" cmp -s "$out" "$tmp/whole.json"
check "the stale lock of a killed run was taken over ($took_over times)" test "$took_over" -ge $((kills - 1))
check "the checkpoint and the lock are gone" test ! -e "$out.checkpoint" -a ! -e "$out.lock"
ls -A "$tmp" | grep -q '^\.divgpu-tmp' && not_ok "no temporary is left" "$(ls -A "$tmp")" || ok "no temporary is left"
check "no error but the kills" test -z "$(grep -v 'took over the stale lock' "$tmp/soak.err")"
# Twin of the comparison: one winner changed is another file.
python3 - "$out" "$tmp/altered.json" <<'PY'
import sys
t = open(sys.argv[1]).read()
i = t.index("\n[5,") + 4
j = t.index(",", i)
open(sys.argv[2], "w").write(t[:i] + str(int(t[i:j]) ^ 1) + t[j:])
PY
check "twin: cmp sees one altered winner" bash -c "! cmp -s '$tmp/altered.json' '$tmp/whole.json'"

finish
