#!/usr/bin/env bash
# Soak of merge and convert (round 3 of docs/RELIABILITY.md; tests/soak_test.sh does run): each
# command killed with kill -9 at random moments, at least SOAK_KILLS times
# (default 20) each, then run again. After every kill the output is the old
# file or the whole new one (cmp), never a part; the last command ends and
# writes the bytes of an uninterrupted one; a killed command's stale lock is
# taken over and its temporary removed by the next one; nothing is left.
# SOAK_SEED makes the delays repeatable (printed).
set -uo pipefail
cd "$(dirname "$0")/.."
source tests/lib.sh
source tests/trust_lib.sh
kills_wanted=${SOAK_KILLS:-20}
seed=${SOAK_SEED:-$(date +%s)}
RANDOM=$seed
echo "# soak of merge and convert: $kills_wanted kills each, SOAK_SEED=$seed"

# Four parts of 1,600 sequences of length 1,500 (about 14 MB): a merge or a
# convert takes a few tenths of a second here, longer than most delays below.
fake_parts "$tmp/p" 4001 1600 1500 4
parts=("$tmp/p-0.json" "$tmp/p-1.json" "$tmp/p-2.json" "$tmp/p-3.json")
t0=$(millis)
expect_ok "the uninterrupted merge" $divgpu merge --quiet --out "$tmp/whole.json" "${parts[@]}"
merge_ms=$(( $(millis) - t0 ))
t0=$(millis)
expect_ok "the uninterrupted convert" $divgpu convert --quiet "$tmp/whole.json" --out "$tmp/whole.bin"
convert_ms=$(( $(millis) - t0 ))
echo "# an uninterrupted merge took $merge_ms ms, a convert $convert_ms ms"

# soak NAME MS OUT CMD...: CMD (which takes about MS milliseconds) writes
# OUT; kill -9 it after a random 0 to 1.2 MS ms (at least 50) until kills_wanted
# kills landed; after each, OUT is "old" or the whole file.
soak() {
    local name=$1 ms=$2 out=$3; shift 3
    ms=$(( ms * 6 / 5 )); [ "$ms" -ge 50 ] || ms=50
    local want=$tmp/whole.${out##*.} kills=0 finished=0 runs=0 torn=0 pid d
    echo old >"$out"
    : >"$tmp/soak.err"
    while [ $kills -lt "$kills_wanted" ] && [ $runs -lt $((5 * kills_wanted)) ]; do
        runs=$((runs + 1))
        "$@" >/dev/null 2>>"$tmp/soak.err" &
        pid=$!
        d=$(( (RANDOM * 32768 + RANDOM) % ms ))
        sleep "$(printf '%d.%03d' $((d / 1000)) $((d % 1000)))"
        if kill -9 $pid 2>/dev/null; then
            wait $pid 2>/dev/null
            kills=$((kills + 1))
        else
            wait $pid || { not_ok "$name: a command of the soak failed" "$(tail -n 3 "$tmp/soak.err")"; break; }
            finished=$((finished + 1))
        fi
        if ! { printf 'old\n' | cmp -s - "$out"; } && ! cmp -s "$out" "$want"; then torn=$((torn + 1)); fi
        # The next command starts from the old file again, but after a kill keeps what the killed one left.
        [ $((runs % 3)) -eq 0 ] && echo old >"$out"
    done
    check "$name: $kills kill -9s landed, at least $kills_wanted ($finished commands ended first)" test $kills -ge "$kills_wanted"
    check "$name: after every kill the output was the old file or the whole new one ($torn torn)" test $torn -eq 0
    expect_ok "$name: the last one, uninterrupted" "$@"
    check "$name: its output is the uninterrupted one" cmp -s "$out" "$want"
    check "$name: no lock left" test ! -e "$out.lock"
    [ -z "$(temp_of "$(dirname "$out")")" ] && ok "$name: no temporary left" || not_ok "$name: no temporary left" "$(ls -A "$(dirname "$out")")"
    local took; took=$(grep -c "took over the stale lock" "$tmp/soak.err")
    check "$name: the stale lock of a killed one was taken over ($took times)" test "$took" -ge 1
    check "$name: no error but stale locks taken over" test -z "$(grep -v 'took over the stale lock' "$tmp/soak.err")"
}
mkdir "$tmp/m" "$tmp/c"
soak "merge" "$merge_ms" "$tmp/m/merged.json" $divgpu merge --quiet --out "$tmp/m/merged.json" "${parts[@]}"
soak "convert" "$convert_ms" "$tmp/c/converted.bin" $divgpu convert --quiet "$tmp/whole.json" --out "$tmp/c/converted.bin"
# Twin of the comparison: one item changed is another file.
python3 - "$tmp/whole.json" "$tmp/altered.json" <<'PY'
import sys
t = open(sys.argv[1]).read()
i = t.index("\n[5,") + 4
j = t.index(",", i)
open(sys.argv[2], "w").write(t[:i] + str(int(t[i:j]) ^ 1) + t[j:])
PY
check "twin: cmp sees one altered item" bash -c "! cmp -s '$tmp/altered.json' '$tmp/whole.json'"

finish
