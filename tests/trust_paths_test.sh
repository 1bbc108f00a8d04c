#!/usr/bin/env bash
# Trust no path, no file and no caller (round 3 of docs/RELIABILITY.md,
# items 1, 2, 4, 5, 6, 10, 11, 12, 14, 15, 22, 25): each item has a section
# below named by its number; each failed on the code before its fix.
# Runs as root, and as an unprivileged user it makes (useradd) where
# ownership matters; it sets fs.protected_symlinks both ways and puts the
# setting back. A case that cannot get what it needs fails, never skips.
set -uo pipefail
cd "$(dirname "$0")/.."
source tests/lib.sh
source tests/trust_lib.sh
t0=$(millis)
chmod 755 "$tmp"  # the unprivileged user reads the table and reaches its folders
[ "$(id -u)" = 0 ] || not_ok "the test runs as root"
need_user || { finish; exit 1; }
rt=$rt_user

$divgpu synth --n 600 --dim 8 --seed 3 --out "$tmp/r.json" >/dev/null
job=(--embeddings "$tmp/r.json" --starts 0:48 --length 600 --batch 4 --target-ms 20 --quiet)
small=(--embeddings "$tmp/r.json" --starts 0:4 --length 20 --quiet)
expect_ok "the reference: an uninterrupted run" $divgpu run "${job[@]}" --out "$tmp/whole.json"
expect_ok "a small reference, with its stats" $divgpu run "${small[@]}" --out "$tmp/small.json" --stats "$tmp/small.jsonl"
fake_parts "$tmp/p" 200 40 30 2
expect_ok "a merge of two parts" $divgpu merge --quiet --out "$tmp/m.json" "$tmp/p-0.json" "$tmp/p-1.json"

# One checkpoint left by a kill -9, copied wherever a case needs one.
kill_after_commit "$tmp/q.json" $divgpu run "${job[@]}" --out "$tmp/q.json"
for c in four five five-part six six-victim six-batches rt-own twentyfive; do cp -a "$tmp/q.json.checkpoint" "$tmp/$c.checkpoint.keep"; done

## 1. A link planted by another user in a sticky world-writable folder is
## not followed (the kernel's rule, whatever fs.protected_symlinks says).
S=$tmp/sticky
mkdir "$S" && chmod 1777 "$S"
echo precious >"$tmp/V"
mkdir "$tmp/rtdir" && chown "$rt" "$tmp/rtdir"
for p in 0 1; do
    set_protected $p || continue
    rm -f "$S"/*
    as_rt ln -s "$tmp/V" "$S/c.json"
    as_rt ln -s "$tmp/new-$p" "$S/d.json"
    refused "1 (protected_symlinks=$p): synth --out $rt's link in a sticky folder" "$S/c.json" $divgpu synth --n 10 --dim 2 --out "$S/c.json"
    refused "1 (protected_symlinks=$p): run --out $rt's link" "$S/c.json" $divgpu run "${small[@]}" --out "$S/c.json"
    refused "1 (protected_symlinks=$p): merge --out $rt's link" "$S/c.json" $divgpu merge --quiet --out "$S/c.json" "$tmp/p-0.json" "$tmp/p-1.json"
    refused "1 (protected_symlinks=$p): convert --out $rt's link" "$S/c.json" $divgpu convert --quiet "$tmp/m.json" --out "$S/c.json"
    refused "1 (protected_symlinks=$p): run --stats $rt's link" "$S/c.json" $divgpu run "${small[@]}" --out "$tmp/one.json" --stats "$S/c.json"
    refused "1 (protected_symlinks=$p): synth --out $rt's dangling link" "$S/d.json" $divgpu synth --n 10 --dim 2 --out "$S/d.json"
    check "1 (protected_symlinks=$p): the victim is untouched" test "$(cat "$tmp/V")" = precious
    check "1 (protected_symlinks=$p): no file made through the dangling link" test ! -e "$tmp/new-$p"
    check "1 (protected_symlinks=$p): the links stay links" test -L "$S/c.json" -a -L "$S/d.json"
    # Twins: the links the kernel follows are followed.
    ln -s "$tmp/own-$p.json" "$S/own.json"
    expect_ok "1 twin (protected_symlinks=$p): root's own link in the sticky folder is written through" $divgpu synth --n 10 --dim 2 --out "$S/own.json"
    check "1 twin: its target got the table" test -s "$tmp/own-$p.json" -a -L "$S/own.json"
    ln -s "$tmp/rtdir/t-$p.json" "$S/folder-owners.json"
    expect_ok "1 twin (protected_symlinks=$p): $rt follows a link of the folder's owner" as_rt $divgpu synth --n 10 --dim 2 --out "$S/folder-owners.json"
    check "1 twin: its target got the table" test -s "$tmp/rtdir/t-$p.json"
    as_rt ln -s "$tmp/rt-target-$p.json" "$tmp/rtdir/link.json"
    expect_ok "1 twin (protected_symlinks=$p): $rt's link outside a sticky folder is followed" $divgpu synth --n 10 --dim 2 --out "$tmp/rtdir/link.json"
    check "1 twin: its target got the table" test -s "$tmp/rt-target-$p.json"
    rm -f "$tmp/rtdir/link.json"
    if [ $p = 1 ]; then
        check "1 twin: the kernel itself refuses the shell's write through $rt's link" bash -c "! echo x 2>/dev/null >'$S/c.json'"
    fi
done
set_protected "$protected_was" >/dev/null

## 2. /dev/stdout, /dev/stderr, /dev/fd/N and /proc/*/fd/N are written to the
## descriptor (appending where it was opened so), like -.
echo keep >"$tmp/log"
ino=$(stat -c %i "$tmp/log")
$divgpu run "${small[@]}" --out /dev/stdout >>"$tmp/log" 2>"$tmp/2.err"; rc=$?
{ echo keep; cat "$tmp/small.json"; } >"$tmp/want"
check "2: run --out /dev/stdout >> log: exit 0 ($rc)" test $rc -eq 0
check "2: the log is the same file" test "$(stat -c %i "$tmp/log")" = "$ino"
check "2: the log keeps its line and has the cache after it (as --out - gives)" cmp -s "$tmp/log" "$tmp/want"
$divgpu run "${small[@]}" --out /dev/stdout >"$tmp/log2" 2>"$tmp/2.err"; rc=$?
check "2: run --out /dev/stdout > file: exit 0 ($rc), the cache" bash -c "[ $rc -eq 0 ] && cmp -s '$tmp/log2' '$tmp/small.json'"
$divgpu run "${small[@]}" --out /dev/stdout 2>"$tmp/2.err" | cat >"$tmp/piped"; rc=${PIPESTATUS[0]}
check "2: run --out /dev/stdout into a pipe: exit 0 ($rc), the cache" bash -c "[ $rc -eq 0 ] && cmp -s '$tmp/piped' '$tmp/small.json'"
echo keep >"$tmp/err.log"
ino=$(stat -c %i "$tmp/err.log")
$divgpu run "${small[@]}" --out "$tmp/two.json" --stats /dev/stderr 2>>"$tmp/err.log" >/dev/null; rc=$?
check "2: run --stats /dev/stderr 2>> err.log: exit 0 ($rc), the same file" test $rc -eq 0 -a "$(stat -c %i "$tmp/err.log")" = "$ino"
check "2: err.log keeps its line, then the stats lines" bash -c "[ \"\$(head -n 1 '$tmp/err.log')\" = keep ] && [ \$(grep -c '^{' '$tmp/err.log') -ge 3 ]"
echo keep >"$tmp/f"
$divgpu merge --quiet --out /dev/fd/3 "$tmp/p-0.json" "$tmp/p-1.json" 3>>"$tmp/f"; rc=$?
{ echo keep; cat "$tmp/m.json"; } >"$tmp/want"
check "2: merge --out /dev/fd/3 3>> f: exit 0 ($rc), f keeps its line and has the merge after it" bash -c "[ $rc -eq 0 ] && cmp -s '$tmp/f' '$tmp/want'"
echo keep >"$tmp/g"
(exec 4>>"$tmp/g"; $divgpu convert --quiet "$tmp/m.json" --out /proc/self/fd/4 --format json); rc=$?
check "2: convert --out /proc/self/fd/4 4>> g: exit 0 ($rc), g keeps its line and has the cache after it" bash -c "[ $rc -eq 0 ] && cmp -s '$tmp/g' '$tmp/want'"
echo keep >"$tmp/h"
(exec 5>>"$tmp/h"; $divgpu merge --quiet --out "/proc/$BASHPID/fd/5" "$tmp/p-0.json" "$tmp/p-1.json"); rc=$?
check "2: merge --out /proc/PID/fd/5 (the shell's descriptor, appending): exit 0 ($rc), h keeps its line" bash -c "[ $rc -eq 0 ] && cmp -s '$tmp/h' '$tmp/want'"
refused "2 twin: a descriptor that is not open is refused" "/dev/fd/9" $divgpu synth --n 10 --dim 2 --out /dev/fd/9

## 4. An output inside OUT.checkpoint/, or a lock, is refused for every command.
q=$tmp/four.json
# fresh: the killed run's checkpoint again (a refusal that failed may have resumed it).
fresh() { rm -rf "$q" "$q.checkpoint" "$q.lock" && cp -a "$tmp/four.checkpoint.keep" "$q.checkpoint"; }
fresh
before=$(sums "$q.checkpoint"/*)
refused "4: run --stats OUT.checkpoint/sequences.part" "$q.checkpoint/sequences.part" $divgpu run "${job[@]}" --out "$q" --stats "$q.checkpoint/sequences.part"
check "4: no cache written, the checkpoint as it was" test ! -e "$q" -a "$(sums "$q.checkpoint"/*)" = "$before"
fresh; refused "4: synth --out OUT.checkpoint/x.json" "$q.checkpoint/x.json" $divgpu synth --n 10 --dim 2 --out "$q.checkpoint/x.json"
fresh; refused "4: merge --out OUT.checkpoint/state.json" "$q.checkpoint/state.json" $divgpu merge --quiet --out "$q.checkpoint/state.json" "$tmp/p-0.json" "$tmp/p-1.json"
fresh; refused "4: convert --out OUT.checkpoint/batches.jsonl" "$q.checkpoint/batches.jsonl" $divgpu convert --quiet "$tmp/m.json" --out "$q.checkpoint/batches.jsonl"
fresh; refused "4: plot --out OUT.checkpoint/p.png" "$q.checkpoint/p.png" $divgpu plot "$tmp/small.jsonl" --out "$q.checkpoint/p.png"
fresh; refused "4: run --out OUT.lock" "$q.lock" $divgpu run "${small[@]}" --out "$q.lock"
refused "4: merge --out x.lock" "$tmp/x.lock" $divgpu merge --quiet --out "$tmp/x.lock" "$tmp/p-0.json" "$tmp/p-1.json"
refused "4: convert --out m.json.lock" "$tmp/m.json.lock" $divgpu convert --quiet "$tmp/m.json" --out "$tmp/m.json.lock"
fresh; refused "4: run --stats OUT.lock" "$q.lock" $divgpu run "${small[@]}" --out "$tmp/one.json" --stats "$q.lock"
check "4: the last checkpoint is still as it was, nothing new in it" test "$(sums "$q.checkpoint"/*)" = "$before" -a ! -e "$q.checkpoint/x.json" -a ! -e "$q.lock" -a ! -e "$tmp/x.lock"
expect_ok "4 twin: the resume with --stats beside it" $divgpu run "${job[@]}" --out "$q" --stats "$tmp/four.jsonl"
check "4 twin: the cache is the uninterrupted one" cmp -s "$q" "$tmp/whole.json"

## 5. A checkpoint folder, part or lock not owned by the caller is refused,
## naming it and its owner; nothing is read from it or written into it.
f=$S/five.json
mv "$tmp/five.checkpoint.keep" "$f.checkpoint" && chown -R "$rt" "$f.checkpoint"
before=$(sums "$f.checkpoint"/*)
refused "5: $rt's checkpoint in a sticky folder" "$f.checkpoint|$rt" $divgpu run "${job[@]}" --out "$f"
check "5: no cache, $rt's files as they were and still $rt's" test ! -e "$f" -a "$(sums "$f.checkpoint"/*)" = "$before" -a "$(stat -c %U "$f.checkpoint/sequences.part")" = "$rt"
g=$tmp/five-part.json
mv "$tmp/five-part.checkpoint.keep" "$g.checkpoint" && chown "$rt" "$g.checkpoint/sequences.part"
refused "5: a part of $rt's in root's checkpoint" "$g.checkpoint/sequences.part|$rt" $divgpu run "${job[@]}" --out "$g"
check "5: no cache written" test ! -e "$g"
h=$S/five-lock.json
as_rt sh -c "printf '{\"host\":\"%s\",\"pid\":1,\"started\":1}\n' '$(this_host)' >'$h.lock'"
before=$(sums "$h.lock")
refused "5: a lock of $rt's" "$h.lock|$rt" $divgpu run "${small[@]}" --out "$h"
check "5: the lock as it was, no cache" test "$(sums "$h.lock")" = "$before" -a ! -e "$h"
k=$tmp/rtdir/k.json
mv "$tmp/rt-own.checkpoint.keep" "$k.checkpoint"
refused "5: as $rt, root's checkpoint in $rt's folder" "$k.checkpoint|root" as_rt $divgpu run "${job[@]}" --out "$k"
check "5: no cache written" test ! -e "$k"

## 6. Links planted inside the checkpoint are never followed.
six=$tmp/six.json
mkdir "$tmp/x"
mv "$tmp/six.checkpoint.keep" "$six.checkpoint"
rm -f "$six.checkpoint/state.json" && ln -s "$tmp/x/new" "$six.checkpoint/state.json"
$divgpu run "${job[@]}" --out "$six" 2>"$tmp/6.err"; rc=$?
check "6: state.json linked to a missing file: nothing made through it" test ! -e "$tmp/x/new"
check "6: exit 0 with the uninterrupted cache, or refused in one line (exit $rc)" \
    bash -c "{ [ $rc -eq 0 ] && cmp -s '$six' '$tmp/whole.json'; } || { [ $rc -ne 0 ] && [ \$(wc -l <'$tmp/6.err') -eq 1 ] && [ ! -e '$six' ]; }"
echo precious >"$tmp/x/victim"
for name in state.json batches.jsonl; do
    c=$tmp/six-$name.json
    [ $name = state.json ] && mv "$tmp/six-victim.checkpoint.keep" "$c.checkpoint" || mv "$tmp/six-batches.checkpoint.keep" "$c.checkpoint"
    rm -f "$c.checkpoint/$name" && ln -s "$tmp/x/victim" "$c.checkpoint/$name"
    $divgpu run "${job[@]}" --out "$c" 2>"$tmp/6.err"; rc=$?
    check "6: $name linked to a file: the file untouched (exit $rc)" test "$(cat "$tmp/x/victim")" = precious
    check "6: $name: exit 0 with the uninterrupted cache, or refused in one line" \
        bash -c "{ [ $rc -eq 0 ] && cmp -s '$c' '$tmp/whole.json'; } || { [ $rc -ne 0 ] && [ \$(wc -l <'$tmp/6.err') -eq 1 ] && [ ! -e '$c' ]; }"
done

## 10. An output's mode is kept by every command.
M=$tmp/modes
mkdir -p "$M/fp" && cp "$tmp/r.json" "$M/fp/embeddings.json"
for n in c.json s.jsonl t.json m.json m.bin p.png fp/embeddings_fp16.bin fp/embeddings_fp16.meta.json; do echo old >"$M/$n"; done
chmod 600 "$M/c.json" "$M/t.json" "$M/m.json" "$M/p.png" "$M/fp/embeddings_fp16.bin"
chmod 640 "$M/s.jsonl" "$M/m.bin" "$M/fp/embeddings_fp16.meta.json"
expect_ok "10: run --out c.json (600) --stats s.jsonl (640)" $divgpu run "${small[@]}" --out "$M/c.json" --stats "$M/s.jsonl"
expect_ok "10: synth --out t.json (600)" $divgpu synth --n 10 --dim 2 --out "$M/t.json"
expect_ok "10: merge --out m.json (600)" $divgpu merge --quiet --out "$M/m.json" "$tmp/p-0.json" "$tmp/p-1.json"
expect_ok "10: convert --out m.bin (640)" $divgpu convert --quiet "$tmp/m.json" --out "$M/m.bin"
expect_ok "10: plot --out p.png (600)" $divgpu plot "$tmp/small.jsonl" --out "$M/p.png"
expect_ok "10: convert-fp16 (600 and 640)" $divgpu convert-fp16 "$M/fp/embeddings.json"
for nm in c.json:600 s.jsonl:640 t.json:600 m.json:600 m.bin:640 p.png:600 fp/embeddings_fp16.bin:600 fp/embeddings_fp16.meta.json:640; do
    n=${nm%:*} want=${nm##*:}
    check "10: $n kept mode $want ($(stat -c %a "$M/$n")), new bytes" test "$(stat -c %a "$M/$n")" = "$want" -a "$(head -c 3 "$M/$n")" != old
done
check "10 twin: the run's cache is the reference" cmp -s "$M/c.json" "$tmp/small.json"

## 11. One lock for every writer: nothing replaces a running job's output.
A=$tmp/busy/A.json
mkdir "$tmp/busy"
$divgpu run "${job[@]}" --out "$A" 2>"$tmp/busy.err" >/dev/null &
apid=$!
wait_for "$A.lock" || not_ok "11: the run took its lock"
lock_before=$(sums "$A.lock")
refused "11: synth onto a running job's --out" "$A" $divgpu synth --n 10 --dim 2 --out "$A"
refused "11: merge onto it" "$A" $divgpu merge --quiet --out "$A" "$tmp/p-0.json" "$tmp/p-1.json"
refused "11: convert onto it" "$A" $divgpu convert --quiet "$tmp/m.json" --out "$A"
refused "11: plot onto it" "$A" $divgpu plot "$tmp/small.jsonl" --out "$A"
refused "11: run --stats onto it" "$A" $divgpu run "${small[@]}" --out "$tmp/one.json" --stats "$A"
refused "11: run --out its lock" "$A.lock" $divgpu run "${small[@]}" --out "$A.lock"
refused "11: a second run of the job" "another divgpu run" $divgpu run "${job[@]}" --out "$A"
check "11: the run was still running through all of it" kill -0 $apid
check "11: its lock is untouched" test "$(sums "$A.lock")" = "$lock_before"
wait $apid; rc=$?
check "11: the run ended (exit $rc) with its own cache" bash -c "[ $rc -eq 0 ] && cmp -s '$A' '$tmp/whole.json'"
check "11: its lock is gone" test ! -e "$A.lock"
# convert-fp16's outputs too, locked by a holder that flock keeps alive.
mkdir "$tmp/fp11" && cp "$tmp/r.json" "$tmp/fp11/embeddings.json"
printf '{"host":"%s","pid":%d,"started":1}\n' "$(this_host)" $$ >"$tmp/fp11/embeddings_fp16.bin.lock"
flock -x "$tmp/fp11/embeddings_fp16.bin.lock" sleep 20 &
fpid=$!
sleep 0.2
refused "11: convert-fp16 while its .bin is locked" "embeddings_fp16.bin" $divgpu convert-fp16 "$tmp/fp11/embeddings.json"
check "11: no .bin written" test ! -e "$tmp/fp11/embeddings_fp16.bin"
kill $fpid 2>/dev/null; wait $fpid 2>/dev/null

## 12 and 22. A live writer's temporary is kept by a command in another pid
## namespace (liveness by flock); the stats temporary is named as documented.
N=$tmp/ns
mkdir "$N"
$divgpu run "${job[@]}" --out "$N/c.json" --stats "$N/s.jsonl" 2>"$tmp/ns.err" >/dev/null &
npid=$!
temp=$(lasting_temp "$N")
check "12: the run streams its stats to a temporary" test -n "$temp"
expect_ok "12: synth in a second pid namespace, in the same folder" unshare --pid --fork --mount-proc $divgpu synth --n 10 --dim 2 --out "$N/x.json"
check "12: the live run's temporary is kept ($temp)" test -n "$temp" -a -e "$N/$temp"
wait $npid; rc=$?
check "12: the run ends (exit $rc), its stats and cache written" bash -c "[ $rc -eq 0 ] && [ -s '$N/s.jsonl' ] && cmp -s '$N/c.json' '$tmp/whole.json'"
[[ $temp =~ ^\.divgpu-tmp\.$(this_host)\.$npid\.[A-Za-z0-9]{10}$ ]] && ok "22: the stats temporary is .divgpu-tmp.HOST.PID.RANDOM ($temp)" \
    || not_ok "22: the stats temporary is .divgpu-tmp.HOST.PID.RANDOM" "$temp"
stats_doc=$(sed -n '/^## Stats file/,/^## /p' docs/formats.md)
check "22: formats.md's stats section names that temporary" grep -q 'divgpu-tmp\.HOST\.PID\.RANDOM' <<<"$stats_doc"
if grep -q 'PATH\.part' <<<"$stats_doc"; then not_ok "22: formats.md's stats section no longer says PATH.part"; else ok "22: formats.md's stats section no longer says PATH.part"; fi
# Twin: a killed writer's temporary is removed by the next write there.
$divgpu run "${job[@]}" --out "$N/k.json" --stats "$N/k.jsonl" >/dev/null 2>&1 &
kpid=$! polls=0
until ls -A "$N" | grep -q "^\.divgpu-tmp\.$(this_host)\.$kpid\." || [ $polls -ge 600 ]; do sleep 0.05; polls=$((polls + 1)); done
kill -9 $kpid; wait $kpid 2>/dev/null
expect_ok "12 twin: a write after a kill -9" $divgpu synth --n 10 --dim 2 --out "$N/y.json"
check "12 twin: the killed run's temporary is removed" bash -c "! ls -A '$N' | grep -q '^\.divgpu-tmp\.$(this_host)\.$kpid\.'"

## 14. Sidecars checked first: no partial output.
mkdir "$tmp/side" "$tmp/side/x.titles.json" "$tmp/side/y.titles.json"
refused "14: synth --out x.npy with x.titles.json a folder" "x.titles.json" $divgpu synth --n 10 --dim 2 --out "$tmp/side/x.npy"
check "14: no x.npy written" test ! -e "$tmp/side/x.npy"
echo old >"$tmp/side/y.npy"
refused "14: the same over an existing y.npy" "y.titles.json" $divgpu synth --n 10 --dim 2 --out "$tmp/side/y.npy"
check "14: y.npy as it was" bash -c "printf 'old\\n' | cmp -s - '$tmp/side/y.npy'"
mkdir "$tmp/side/fp" "$tmp/side/fp/embeddings_fp16.meta.json" && cp "$tmp/r.json" "$tmp/side/fp/embeddings.json"
refused "14: convert-fp16 with the meta file a folder" "embeddings_fp16.meta.json" $divgpu convert-fp16 "$tmp/side/fp/embeddings.json"
check "14: no .bin written" test ! -e "$tmp/side/fp/embeddings_fp16.bin"
expect_ok "14 twin: synth --out z.npy" $divgpu synth --n 10 --dim 2 --out "$tmp/side/z.npy"
check "14 twin: z.npy and its titles" test -s "$tmp/side/z.npy" -a -s "$tmp/side/z.titles.json"

## 15. A lock whose flock nobody holds is stale, whatever its pid.
l=$tmp/fifteen.json
printf '{"host":"%s","pid":1,"started":1}\n' "$(this_host)" >"$l.lock"
expect_ok "15: a run finds a lock of pid 1 (alive) that nobody flocks" $divgpu run "${small[@]}" --out "$l"
check "15: it took the lock over, saying so" grep -q "took over the stale lock" "$tmp/stderr"
check "15: the cache written, the lock gone" bash -c "cmp -s '$l' '$tmp/small.json' && [ ! -e '$l.lock' ]"
printf '{"host":"%s","pid":1,"started":1}\n' "$(this_host)" >"$l.lock"
flock -x "$l.lock" sleep 20 &
fpid=$!
sleep 0.2
refused "15 twin: the same record, flocked by a live process, is refused" "another divgpu run" $divgpu run "${small[@]}" --out "$tmp/fifteen.json"
kill $fpid 2>/dev/null; wait $fpid 2>/dev/null
unshare --pid --fork --mount-proc flock -x "$l.lock" sleep 20 &
fpid=$!
sleep 0.3
refused "15 twin: flocked from another pid namespace, refused" "another divgpu run" $divgpu run "${small[@]}" --out "$tmp/fifteen.json"
kill $fpid 2>/dev/null; wait $fpid 2>/dev/null

## 25. --restart names the foreign file that blocks it and deletes nothing.
r=$tmp/twentyfive.json
mv "$tmp/twentyfive.checkpoint.keep" "$r.checkpoint"
echo mine >"$r.checkpoint/notes.txt"
before=$(sums "$r.checkpoint"/*)
refused "25: --restart with a foreign file in the checkpoint" "notes.txt" $divgpu run "${job[@]}" --out "$r" --restart
check "25: every file of the checkpoint is still there, as it was" test "$(sums "$r.checkpoint"/*)" = "$before"
rm "$r.checkpoint/notes.txt"
expect_ok "25 twin: without it, --restart starts again" $divgpu run "${job[@]}" --out "$r" --restart
check "25 twin: the cache is the uninterrupted one, the checkpoint gone" bash -c "cmp -s '$r' '$tmp/whole.json' && [ ! -e '$r.checkpoint' ]"

echo "# $(( ($(millis) - t0) / 1000 )) s"
finish
