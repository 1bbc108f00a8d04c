#!/usr/bin/env bash
# "Nothing ever lost or overwritten", end to end through bin/divgpu:
# what is not a regular file is refused and kept (FIFO, device node, folder),
# links are written through, planted links at temporary names are never
# followed, an output that is an input is refused, one writer per output,
# every checkpoint tampering is caught (recomputed, never a short cache with
# exit 0), the FP16 meta file is checked, full disks and read-only folders
# fail in one line and leave the old file, temporaries of killed commands are
# removed, errors up front. Runs as root (mknod, mount, an unprivileged user
# made with setpriv); a case that cannot get what it needs fails, never skips.
set -uo pipefail
cd "$(dirname "$0")/.."
source tests/lib.sh
abs=$PWD/$divgpu

$divgpu synth --n 600 --dim 8 --seed 3 --out "$tmp/r.json" >/dev/null
job=(--embeddings "$tmp/r.json" --starts 0:48 --length 600 --batch 4 --target-ms 20)
expect_ok "the reference: an uninterrupted run" $divgpu run "${job[@]}" --out "$tmp/whole.json" --quiet
small_loud=(--embeddings "$tmp/r.json" --starts 0:4 --length 20)
small=("${small_loud[@]}" --quiet)
expect_ok "a small reference" $divgpu run "${small[@]}" --out "$tmp/small.json"

# fast_fail NAME WANT CMD...: refused in one line (expect_fail), in under a second.
fast_fail() {
    local name=$1 t0; t0=$(millis)
    expect_fail "$@"
    local spent=$(( $(millis) - t0 ))
    [ $spent -lt 1000 ] && ok "$name: refused in $spent ms" || not_ok "$name: refused in under a second ($spent ms)"
}

## What is not a regular file is refused before any work, and kept.
mkfifo "$tmp/fifo" || not_ok "mkfifo"
fast_fail "run --out FIFO" "--out $tmp/fifo: a FIFO (named pipe), not a regular file" $divgpu run "${small[@]}" --out "$tmp/fifo"
fast_fail "merge --out FIFO" "a FIFO (named pipe), not a regular file" $divgpu merge --out "$tmp/fifo" "$tmp/small.json"
check "the FIFO is still a FIFO" test -p "$tmp/fifo"
mknod "$tmp/null" c 1 3 || not_ok "mknod (the test runs as root)"
fast_fail "synth --out a device node" "--out $tmp/null: a device node, not a regular file" $divgpu synth --n 10 --dim 2 --out "$tmp/null"
fast_fail "run --out a device node" "a device node" $divgpu run "${small[@]}" --out "$tmp/null"
check "the device node is still a character device" test -c "$tmp/null"
ln -s fifo "$tmp/to-fifo"
fast_fail "run --out a link to a FIFO" "--out $tmp/to-fifo (a link to $tmp/fifo): a FIFO" $divgpu run "${small[@]}" --out "$tmp/to-fifo"
check "the link to the FIFO stays a link" test -L "$tmp/to-fifo"
# /dev/stdout on a pipe is a link to /proc/PID/fd/pipe:[N]: a descriptor, written as - is
# (tests/trust_paths_test.sh section 2 has the rest).
$divgpu run "${small[@]}" --out /dev/stdout 2>"$tmp/stdout.err" | cat >"$tmp/stdout.out"; rc=${PIPESTATUS[0]}
[ $rc -eq 0 ] && cmp -s "$tmp/stdout.out" "$tmp/small.json" \
    && ok "run --out /dev/stdout on a pipe streams the cache into it, as --out - does" || not_ok "run --out /dev/stdout on a pipe streams the cache into it (exit $rc)" "$(cat "$tmp/stdout.err")"
mkdir "$tmp/dir"
fast_fail "run --out a folder" "--out $tmp/dir: a folder, not a regular file" $divgpu run "${small[@]}" --out "$tmp/dir"
fast_fail "run --out under a missing folder" "folder $tmp/missing does not exist" $divgpu run "${small[@]}" --out "$tmp/missing/c.json"
fast_fail "plot --out a folder" "a folder, not a regular file" $divgpu plot "$tmp/whole.json" --out "$tmp/dir"
# Twin: a regular file at such a name is written.
expect_ok "twin: run --out a regular file" $divgpu run "${small[@]}" --out "$tmp/regular.json"
check "twin: the regular file got the cache" cmp -s "$tmp/regular.json" "$tmp/small.json"

## A linked output is written through: the link stays, its target gets the bytes.
mkdir "$tmp/real"
echo old >"$tmp/real/cache.json"
ln -s real/cache.json "$tmp/link.json"
expect_ok "run --out a link" $divgpu run "${small[@]}" --out "$tmp/link.json"
check "run: the link stays a link" test -L "$tmp/link.json"
check "run: the link's target has the cache" cmp -s "$tmp/real/cache.json" "$tmp/small.json"
ln -s real/table.json "$tmp/table-link.json"
expect_ok "synth --out a dangling link" $divgpu synth --n 10 --dim 2 --out "$tmp/table-link.json"
check "synth: the link stays and its target is made" test -L "$tmp/table-link.json" -a -s "$tmp/real/table.json"
# Twin of the byte comparison: another job's cache is another file.
check "twin: cmp tells another cache apart" bash -c "! cmp -s '$tmp/real/cache.json' '$tmp/whole.json'"

## A planted link at a temporary name is never followed. The old names were
## .NAME.PID.tmp, opened following links: plant them for the next 300 pids.
echo precious >"$tmp/victim"
plant() {  # plant FOLDER NAME...: links at the old temporary names of each NAME for the next 3000 pids
    python3 - "$tmp/victim" "$@" <<'PY'
import os, sys
victim, folder, names = sys.argv[1], sys.argv[2], sys.argv[3:]
last = int(open("/proc/sys/kernel/ns_last_pid").read())
for name in names:
    for pid in range(last + 1, last + 3001):
        os.symlink(victim, f"{folder}/.{name}.{pid}.tmp")
open(f"{folder}/.first-planted", "w").write(f".s.json.{last + 1}.tmp")
PY
}
mkdir "$tmp/planted"
cp "$tmp/r.json" "$tmp/planted/embeddings.json"
$divgpu run --embeddings "$tmp/r.json" --starts 0:4 --length 20 --shard 0/2 --out "$tmp/planted-p0.json" --quiet >/dev/null
$divgpu run --embeddings "$tmp/r.json" --starts 0:4 --length 20 --shard 1/2 --out "$tmp/planted-p1.json" --quiet >/dev/null
plant "$tmp/planted" s.json m.json c.png embeddings_fp16.bin embeddings_fp16.meta.json
expect_ok "synth beside planted links" $divgpu synth --n 10 --dim 2 --out "$tmp/planted/s.json"
expect_ok "merge beside planted links" $divgpu merge --out "$tmp/planted/m.json" "$tmp/planted-p0.json" "$tmp/planted-p1.json" --quiet
expect_ok "convert-fp16 beside planted links" $divgpu convert-fp16 "$tmp/planted/embeddings.json"
$divgpu run "${small[@]}" --out "$tmp/planted-c.json" --stats "$tmp/planted.jsonl" >/dev/null 2>&1
expect_ok "plot beside planted links" $divgpu plot "$tmp/planted.jsonl" --out "$tmp/planted/c.png"
check "the planted links' target is untouched" test "$(cat "$tmp/victim")" = precious
check "the planted links are still links" test -L "$tmp/planted/$(cat "$tmp/planted/.first-planted")"
# Twin: a writer that follows a link (as the old code did) changes the victim.
cp "$tmp/victim" "$tmp/victim.bak"
printf 'overwritten' >"$tmp/planted/$(cat "$tmp/planted/.first-planted")"
check "twin: writing through a planted link is seen" test "$(cat "$tmp/victim")" != precious
cp "$tmp/victim.bak" "$tmp/victim"

## An output that is an input (or another output) is refused before any work.
cp "$tmp/r.json" "$tmp/t.json"
sha_before=$(sha256sum <"$tmp/t.json")
ln "$tmp/t.json" "$tmp/t-hard.json"
ln -s t.json "$tmp/t-sym.json"
for out in "$tmp/t.json" "$tmp/t-hard.json" "$tmp/dir/../t.json" "$tmp/t-sym.json"; do
    fast_fail "run --out $out is --embeddings" "is the same file as --embeddings $tmp/t.json" \
        $divgpu run --embeddings "$tmp/t.json" --starts 0:4 --length 20 --out "$out"
done
fast_fail "--stats is --embeddings" "--stats $tmp/t-hard.json is the same file as --embeddings" \
    $divgpu run --embeddings "$tmp/t.json" --starts 0:4 --length 20 --out "$tmp/o.json" --stats "$tmp/t-hard.json"
fast_fail "--stats is --out through a link" "is the same file as --out" \
    $divgpu run --embeddings "$tmp/t.json" --starts 0:4 --length 20 --out "$tmp/real/cache.json" --stats "$tmp/link.json"
ln "$tmp/planted-p0.json" "$tmp/p0-hard.json"
fast_fail "merge --out is a part (a hard link)" "--out $tmp/p0-hard.json is the same file as part $tmp/planted-p0.json" \
    $divgpu merge --out "$tmp/p0-hard.json" "$tmp/planted-p0.json" "$tmp/planted-p1.json"
fast_fail "plot --out is a stats file" "is the same file as stats file" $divgpu plot "$tmp/planted.jsonl" --out "$tmp/planted.jsonl"
check "the table is untouched" test "$(sha256sum <"$tmp/t.json")" = "$sha_before"
check "no output was written" test ! -e "$tmp/o.json"

## One writer per output: a second run on the same --out is refused at once,
## naming the holder, and the first's cache is a lone run's.
long=(--embeddings "$tmp/r.json" --starts 0:200 --length 600 --batch 8 --target-ms 20)
expect_ok "the lone run of the long job" $divgpu run "${long[@]}" --out "$tmp/lone.json" --quiet
$divgpu run "${long[@]}" --out "$tmp/two.json" --quiet >/dev/null 2>"$tmp/first.err" &
first=$! polls=0
until [ -e "$tmp/two.json.lock" ] || [ $polls -ge 200 ]; do sleep 0.05; polls=$((polls + 1)); done
fast_fail "a second run on the same --out (another --batch)" "two.json.lock: another divgpu run is writing this output (host $(hostname | tr -c 'A-Za-z0-9_\n-' _), pid $first" \
    $divgpu run "${long[@]}" --batch 5 --out "$tmp/two.json"
check "the first run was still running when the second was refused" kill -0 $first
wait $first; rc=$?
check "the first run ends well" test $rc -eq 0
check "the first run's cache is the lone run's" cmp -s "$tmp/two.json" "$tmp/lone.json"
check "the lock is released" test ! -e "$tmp/two.json.lock"
# Twin: with --wait the second waits for the first, then runs (the same bytes).
$divgpu run "${long[@]}" --out "$tmp/wait.json" --quiet >/dev/null &
first=$! polls=0
until [ -e "$tmp/wait.json.lock" ] || [ $polls -ge 200 ]; do sleep 0.05; polls=$((polls + 1)); done
expect_ok "a second run with --wait" $divgpu run "${long[@]}" --batch 5 --out "$tmp/wait.json" --wait
wait $first
grep -q "^divgpu: waiting for $tmp/wait.json.lock, held by host .*, pid $first" "$tmp/stderr" \
    && ok "--wait said whom it waited for" || not_ok "--wait said whom it waited for" "$(cat "$tmp/stderr")"
check "after the wait, the cache is the lone run's" cmp -s "$tmp/wait.json" "$tmp/lone.json"
# A stale lock (a killed run's) is taken over, saying so.
sh -c 'exit 0' & dead=$!; wait $dead
printf '{"host":"%s","pid":%d,"started":1}\n' "$(hostname | tr -c 'A-Za-z0-9_\n-' _)" $dead >"$tmp/stale.json.lock"
expect_ok "a run over a stale lock" $divgpu run "${small_loud[@]}" --out "$tmp/stale.json"
grep -q "^divgpu: took over the stale lock $tmp/stale.json.lock of pid $dead on host" "$tmp/stderr" \
    && ok "the stale lock was taken over with a line saying so" || not_ok "the stale lock was taken over with a line saying so" "$(cat "$tmp/stderr")"

## Every checkpoint tampering is caught: the resume recomputes what does not
## match and ends in the uninterrupted bytes (never a short cache, exit 0).
# interrupted OUT: the job stopped by SIGINT once at least 3 batches are committed.
interrupted() {
    $divgpu run "${job[@]}" --out "$1" --quiet 2>/dev/null &
    local pid=$! polls=0
    until [ "$(committed "$1.checkpoint")" -ge 12 ] || [ $polls -ge 600 ]; do sleep 0.02; polls=$((polls + 1)); done
    kill -INT $pid; wait $pid 2>/dev/null
}
# tampered NAME EDIT WANT: interrupt, apply EDIT (python, on the checkpoint folder), resume.
tampered() {
    local name=$1 edit=$2 want=$3 out="$tmp/tamper-$1.json"
    interrupted "$out"
    python3 - "$out.checkpoint" <<<"$edit" || not_ok "$name: the edit applies"
    expect_ok "$name: the resume ends well" $divgpu run "${job[@]}" --out "$out"
    grep -q "$want" "$tmp/stderr" && ok "$name: noticed ($want)" || not_ok "$name: noticed ($want)" "$(cat "$tmp/stderr")"
    check "$name: the cache is the uninterrupted one" cmp -s "$out" "$tmp/whole.json"
}
py_head='import json, re, sys; d = sys.argv[1]; R = lambda n: open(d + "/" + n).read(); W = lambda n, t: open(d + "/" + n, "w").write(t)'
tampered done-up "$py_head
W('state.json', re.sub(r'\"done\": [0-9]+', '\"done\": 40', R('state.json')))" "state.json says 40 sequences are done, but its batch records prove"
tampered done-past "$py_head
W('state.json', re.sub(r'\"done\": [0-9]+', '\"done\": 560', R('state.json')))" "state.json says 560 sequences are done"
tampered done-down "$py_head
W('state.json', re.sub(r'\"done\": [0-9]+', '\"done\": 1', R('state.json')))" "resuming from"
tampered flipped-winner "$py_head
t = R('sequences.part'); a = t.index('\n[4,') + 2; b = t.index(']', a); s = t[a:b].split(','); s[1], s[2] = s[2], s[1]
W('sequences.part', t[:a] + ','.join(s) + t[b:])" \
    "the batch from sequence 4 failed its check (its bytes do not match their sha256): recomputing from sequence 4"
tampered flipped-start "$py_head
t = R('sequences.part'); W('sequences.part', t.replace('\n[8,', '\n[9,', 1))" "the batch from sequence 8 failed its check (sequence 8 starts at 9"
tampered cut-part "$py_head
t = R('sequences.part'); W('sequences.part', t[:len(t) // 2])" "failed its check"
tampered dropped-record "$py_head
l = R('batches.jsonl').splitlines(True); W('batches.jsonl', ''.join(l[:1] + l[2:]))" "the batch from sequence 4 failed its check (it says sequences 8..12"
tampered torn-record "$py_head
t = R('batches.jsonl'); W('batches.jsonl', t[:-20])" "its record was cut short"
tampered record-sha "$py_head
t = R('batches.jsonl'); W('batches.jsonl', t.replace('\"sha256\":\"', '\"sha256\":\"f', 1))" "the batch from sequence 0 failed its check (its bytes do not match their sha256)"
# A damaged state.json cannot tell which job it is: refused (the work kept), never a short cache.
interrupted "$tmp/tamper-state.json"
echo '{' >"$tmp/tamper-state.json.checkpoint/state.json"
expect_fail "a damaged state.json is refused" "state.json is damaged" $divgpu run "${job[@]}" --out "$tmp/tamper-state.json"
check "a refused checkpoint leaves no cache" test ! -e "$tmp/tamper-state.json"
# Twin: an untouched checkpoint resumes with no note at all.
interrupted "$tmp/tamper-none.json"
expect_ok "twin: an untouched checkpoint resumes" $divgpu run "${job[@]}" --out "$tmp/tamper-none.json"
grep -q "failed its check\|batch records prove" "$tmp/stderr" && not_ok "twin: no note for an untouched checkpoint" "$(cat "$tmp/stderr")" \
    || ok "twin: no note for an untouched checkpoint"
check "twin: the untouched resume is the uninterrupted cache" cmp -s "$tmp/tamper-none.json" "$tmp/whole.json"
# A linked checkpoint folder is refused, even with --restart, and its target left alone.
mkdir "$tmp/elsewhere"; echo precious >"$tmp/elsewhere/state.json"
ln -s elsewhere "$tmp/linked.json.checkpoint"
fast_fail "--restart through a linked checkpoint folder" "is not a checkpoint folder divgpu made" \
    $divgpu run "${small[@]}" --out "$tmp/linked.json" --restart
check "the linked folder's files are untouched" test "$(cat "$tmp/elsewhere/state.json")" = precious

## The cache says what it must contain (format 2), and verify holds it to that.
python3 - "$tmp/whole.json" "$tmp/short.json" "$tmp/empty.json" <<'PY'
import sys
lines = open(sys.argv[1]).read().split("\n")
# Drop the last sequence (the line before the closing "]}"), fix the comma.
seqs = [i for i, l in enumerate(lines) if l.startswith("[")]
del lines[seqs[-1]]
lines[seqs[-2]] = lines[seqs[-2]].rstrip(",")
open(sys.argv[2], "w").write("\n".join(lines))
head = open(sys.argv[1]).read().split('"sequences"')[0]
v1 = head.replace('"version":2', '"version":1').split(',"starts_count"')[0] + ',\n"sequences": []}\n'
open(sys.argv[3], "w").write(v1)
PY
expect_fail "verify: a version 2 cache missing a sequence" "has 47 sequences, but its header says starts_count 48" \
    $divgpu verify --embeddings "$tmp/r.json" --cache "$tmp/short.json"
expect_fail 'verify: "sequences": [] fails' "has no sequences: there is nothing to verify" \
    $divgpu verify --embeddings "$tmp/r.json" --cache "$tmp/empty.json"
expect_ok "twin: verify passes the whole cache" $divgpu verify --embeddings "$tmp/r.json" --cache "$tmp/whole.json" --quiet

## The FP16 meta file binds the shape to the .bin.
mkdir "$tmp/fp16"
cp "$tmp/r.json" "$tmp/fp16/embeddings.json"
expect_ok "convert-fp16" $divgpu convert-fp16 "$tmp/fp16/embeddings.json"
fp16=(--embeddings "$tmp/fp16/embeddings.json" --precision fp16 --starts 0:4 --length 20 --quiet)
expect_ok "twin: the fp16 files as written run" $divgpu run "${fp16[@]}" --out "$tmp/fp16.json"
cp "$tmp/fp16/embeddings_fp16.meta.json" "$tmp/meta.bak"
sed -i 's/"num_items": 600/"num_items": 1200/; s/"dim": 8/"dim": 4/' "$tmp/fp16/embeddings_fp16.meta.json"
expect_fail "a meta file saying 1200 x 4 for a 600 x 8 table" \
    "$tmp/fp16/embeddings_fp16.meta.json: the shape it records (1200 x 4) and $tmp/fp16/embeddings_fp16.bin do not match" \
    $divgpu run "${fp16[@]}" --out "$tmp/fp16-bad.json"
cp "$tmp/meta.bak" "$tmp/fp16/embeddings_fp16.meta.json"
printf '\x01' | dd of="$tmp/fp16/embeddings_fp16.bin" bs=1 seek=100 conv=notrunc status=none
expect_fail "a flipped byte in the .bin" "do not match its shape_and_bin_sha256" $divgpu run "${fp16[@]}" --out "$tmp/fp16-bad.json"
check "no cache from a tampered fp16 file" test ! -e "$tmp/fp16-bad.json"

## Full disks: the run fails in one line, the old file stays, no temporary is left.
full=$tmp/full
mkdir "$full"
if mount -t tmpfs -o size=64k tmpfs "$full"; then
    on_exit "umount '$full'"
    # fill BYTES: a filler of BYTES (all there is room for when BYTES is more).
    fill() { rm -f "$full/fill"; head -c "$1" /dev/zero >"$full/fill" 2>/dev/null; }
    for f in c.json s.jsonl m.json; do echo precious >"$full/$f"; done
    fill 40000  # about 20 KiB left: the first batches commit, a later one finds the disk full
    expect_fail "a full disk for the cache" "No space left on device" $divgpu run "${job[@]}" --quiet --out "$full/c.json"
    check "full disk: the old cache is untouched" test "$(cat "$full/c.json")" = precious
    rm -rf "$full/c.json.checkpoint"
    fill 100000
    expect_fail "a full disk for --stats (its lock or its lines)" "No space left on device" \
        $divgpu run "${job[@]}" --quiet --out "$tmp/stats-cache.json" --stats "$full/s.jsonl"
    check "full disk: the old stats file is untouched" test "$(cat "$full/s.jsonl")" = precious
    expect_fail "a full disk for merge" "No space left on device" $divgpu merge --out "$full/m.json" "$tmp/planted-p0.json" "$tmp/planted-p1.json"
    expect_fail "a full disk for synth" "No space left on device" $divgpu synth --n 2000 --dim 40 --out "$full/m.json"
    check "full disk: the old merge output is untouched" test "$(cat "$full/m.json")" = precious
    ls -A "$full" | grep -q '^\.divgpu-tmp' && not_ok "full disk: no temporary left" "$(ls -A "$full")" || ok "full disk: no temporary left"
    # Twin: with room, the same small write succeeds and replaces the file.
    rm -f "$full/fill"
    expect_ok "twin: with room the run writes" $divgpu run "${small[@]}" --out "$full/c.json"
    check "twin: the cache replaced the old file" cmp -s "$full/c.json" "$tmp/small.json"
else
    not_ok "mount a 64 KiB tmpfs (the test runs as root)"
fi

## A read-only folder, as an unprivileged user (root ignores the mode bits).
user=nobody
if ! id -u "$user" >/dev/null 2>&1; then
    user=divgpu-test-user
    id -u "$user" >/dev/null 2>&1 || useradd --system --no-create-home "$user"
fi
if id -u "$user" >/dev/null 2>&1; then
    # A copy the user can read: the launcher, the Lua modules and the native module.
    co=$tmp/co
    mkdir -p "$co/bin" "$co/build" "$co/ro" "$co/rw"
    cp bin/divgpu "$co/bin/" && cp -R lua "$co/lua" && cp build/divgpu.so "$co/build/" && cp "$tmp/r.json" "$co/r.json"
    chmod -R a+rX "$co" && chmod 755 "$tmp" && chmod 555 "$co/ro" && chown "$user" "$co/rw"
    as_user() { setpriv --reuid="$(id -u "$user")" --regid="$(id -g "$user")" --clear-groups "$@"; }
    fast_fail "run --out in a read-only folder (as $user)" "folder $co/ro is not writable (permission denied)" \
        as_user "$co/bin/divgpu" run --embeddings "$co/r.json" --out "$co/ro/c.json"
    fast_fail "synth --out in a read-only folder (as $user)" "is not writable" \
        as_user "$co/bin/divgpu" synth --n 10 --dim 2 --out "$co/ro/t.json"
    check "nothing was written in the read-only folder" test -z "$(ls -A "$co/ro")"
    expect_ok "twin: synth in a writable folder (as $user)" as_user "$co/bin/divgpu" synth --n 10 --dim 2 --out "$co/rw/t.json"
    chmod 700 "$tmp"
else
    not_ok "an unprivileged user to run as (nobody, or one made with useradd)"
fi

## Temporaries of a killed command are removed by the next command that writes there.
mkdir "$tmp/killed"
$divgpu synth --n 60000 --dim 64 --out "$tmp/killed/big.json" >/dev/null &
pid=$! polls=0
# A temporary with bytes in it: the empty probe temporary that proves the
# folder takes a file comes and goes before the table is made (killed
# between the two, under load, nothing was left to clean).
until [ -n "$(find "$tmp/killed" -maxdepth 1 -name '.divgpu-tmp*' -size +0 2>/dev/null)" ] || [ $polls -ge 1500 ]; do
    sleep 0.02; polls=$((polls + 1))
done
kill -9 $pid; wait $pid 2>/dev/null
leftover=$(ls -A "$tmp/killed" | grep '^\.divgpu-tmp')
check "kill -9 mid-write left a temporary (the case to clean)" test -n "$leftover"
check "kill -9 mid-write left no output" test ! -e "$tmp/killed/big.json"
touch "$tmp/killed/.divgpu-tmp.$(hostname | tr -c 'A-Za-z0-9_\n-' _).$$.livelivelv"
expect_ok "the next write in that folder" $divgpu synth --n 10 --dim 2 --out "$tmp/killed/small.json"
check "the dead command's temporary is removed" test ! -e "$tmp/killed/$leftover"
check "twin: a live process's temporary stays" test -e "$tmp/killed/.divgpu-tmp.$(hostname | tr -c 'A-Za-z0-9_\n-' _).$$.livelivelv"

## Standard output where a command streams: run, merge, synth.
$divgpu run "${small[@]}" --out - >"$tmp/streamed.json"
check "run --out - streams the cache" cmp -s "$tmp/streamed.json" "$tmp/small.json"
$divgpu merge --out - "$tmp/planted-p0.json" "$tmp/planted-p1.json" --quiet >"$tmp/merged-stdout.json"
check "merge --out - streams the merge" cmp -s "$tmp/merged-stdout.json" "$tmp/small.json"
check "synth --out - streams the table" bash -c "'$abs' synth --n 10 --dim 2 --out - | python3 -c 'import json,sys; assert len(json.load(sys.stdin)[\"embeddings\"]) == 10'"
to_full() { "$@" >/dev/full; }
expect_fail "run --out - into a full device" "standard output" to_full $divgpu run "${small[@]}" --out -
expect_fail "synth --out - into a full device" "standard output" to_full $divgpu synth --n 2000 --dim 40 --out -
fast_fail "plot --out -" "--out -: standard output is not an output of this command" $divgpu plot "$tmp/planted.jsonl" --out -

## Errors up front, in one line, naming the option and its range.
fast_fail "--target-ms 901" "--target-ms 901 is out of range: more than 0 and at most 900" $divgpu run "${small[@]}" --out "$tmp/x.json" --target-ms 901
fast_fail "--tile-size 4294967296" "--tile-size '4294967296' is out of range: 1..4294967295" \
    $divgpu run "${small[@]}" --out "$tmp/x.json" --shape tiled --tile-size 4294967296
fast_fail "synth --seed 1e300" "--seed '1e300' is out of range: 0..9007199254740991" $divgpu synth --n 10 --dim 2 --seed 1e300 --out "$tmp/x.json"
fast_fail "synth --clusters 1e9" "--clusters '1e9' is out of range: 1..16" $divgpu synth --n 10 --dim 2 --clusters 1e9 --out "$tmp/x.json"
fast_fail "a non-UTF-8 --out" "--out '$tmp/x\\xff.json': the path is not valid UTF-8" $divgpu run "${small[@]}" --out "$tmp/x"$'\xff'.json
fast_fail "a non-UTF-8 --embeddings" "the path is not valid UTF-8" $divgpu run --embeddings "$tmp/r"$'\xfe'.json --out "$tmp/x.json"
expect_fail "a start past 2^63 is printed as given" "--starts: 99999999999999999999 is out of range" \
    $divgpu run "${small[@]}" --starts 1,99999999999999999999 --out "$tmp/x.json"
expect_fail "--in-flight 1e9" "--in-flight '1e9' is out of range: 1..64" $divgpu run "${small[@]}" --out "$tmp/x.json" --in-flight 1e9
check "no Rust backtrace reaches the user" bash -c "! '$abs' synth --n 10 --dim 2 --clusters 1e9 --out '$tmp/x.json' 2>&1 | grep -q 'panicked\|backtrace'"
check "nothing was written by a refused command" test ! -e "$tmp/x.json"
# Twins: the edges of the ranges are accepted.
expect_ok "twin: --target-ms 900" $divgpu run "${small[@]}" --out "$tmp/edge.json" --target-ms 900
expect_ok "twin: --seed 9007199254740991" $divgpu synth --n 10 --dim 2 --seed 9007199254740991 --out "$tmp/edge-table.json"
expect_ok "twin: --clusters 16 on 10 items" $divgpu synth --n 10 --dim 2 --clusters 16 --out "$tmp/edge-table.json"

finish
