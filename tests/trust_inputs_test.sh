#!/usr/bin/env bash
# The adversary's round 3, the inputs' half: trust no input file, no option value and no
# caller's descriptor. Each section guards one of the round's holes
# (docs/RELIABILITY.md, round 3: 3, 7, 8, 9, 13, 16, 17, 18, 19, 20, 21, 24):
#   verify proves the whole file (five damaged caches, every verify mode, both
#   forms), a header's sizes checked before any allocation, hashes compared
#   case-insensitively; the gram and tensor kernels' workgroup sizes on
#   lavapipe's subgroup of 8 (a refusal with the reason, or a cache that
#   verifies); device limits before any work with the validation layer on; the
#   fp16 meta against the table's real shape; bounded reads of small files;
#   exit codes (2 for usage refused before work, 130 on SIGINT, a failed write
#   of --version/--help); control characters escaped; internal messages
#   replaced by one-line errors; convert to '-' as JSON.
# No validation message may appear in any run of this file (checked at the
# end over every run's stderr). Small inputs: about a minute on 2 cores.
set -uo pipefail
cd "$(dirname "$0")/.."
source tests/lib.sh
abs=$PWD/$divgpu
files=(python3 "$PWD/tests/trust_inputs_files.py")
: >"$tmp/all.err"

# dg ARGS...: runs divgpu with stdout in $tmp/out; sets rc, ms (milliseconds)
# and err (stderr), and keeps every stderr in $tmp/all.err.
dg() {
    local t0; t0=$(millis)
    "$abs" "$@" >"$tmp/out" 2>"$tmp/err"; rc=$?
    ms=$(( $(millis) - t0 )); err=$(cat "$tmp/err"); cat "$tmp/err" >>"$tmp/all.err"
}
# bounded ARGS...: dg under 10 s and 4 GB of address space.
bounded() {
    local t0; t0=$(millis)
    ( ulimit -v 4000000; exec timeout 10 "$abs" "$@" ) >"$tmp/out" 2>"$tmp/err"; rc=$?
    ms=$(( $(millis) - t0 )); err=$(cat "$tmp/err"); cat "$tmp/err" >>"$tmp/all.err"
}
# one_line: $err is one line "divgpu: ..." with no Lua position, panic,
# backtrace, internal wording or control character.
one_line() {
    [ -n "$err" ] && [ "$(wc -l <<<"$err")" -eq 1 ] && [[ $err == divgpu:* ]] && [[ $err != *".lua:"* ]] \
        && [[ $err != *panicked* ]] && [[ $err != *backtrace* ]] && [[ $err != *"bad argument"* ]] \
        && [[ $err != *"attempt to"* ]] && [[ $err != *"error converting"* ]] && [[ $err != *"interrupted!"* ]] \
        && [[ $err != *"is not a u32"* ]] && ! LC_ALL=C grep -q '[[:cntrl:]]' <<<"$err"
}
# judge NAME RCS TEXT: rc matches the pattern RCS (e.g. 2 or "1|2"), one_line, and err contains TEXT.
judge() {
    local name=$1 rcs=$2 want=$3
    if [[ $rc =~ ^($rcs)$ ]] && one_line && [[ $err == *"$want"* ]]; then ok "$name"; else not_ok "$name (exit $rc, want $rcs and '$want')" "$err"; fi
}
# refused NAME RCS TEXT ARGS...: divgpu ARGS, bounded, then judge.
refused() { local name=$1 rcs=$2 want=$3; shift 3; bounded "$@"; judge "$name" "$rcs" "$want"; }
# passes NAME ARGS...: divgpu ARGS exits 0.
passes() {
    local name=$1; shift; bounded "$@"
    [ $rc -eq 0 ] && ok "$name" || not_ok "$name (exit $rc)" "$err"
}

cd "$tmp" || exit 1
dg synth --n 300 --dim 16 --out t.json
small=(--embeddings t.json --starts 0:6 --length 20 --quiet)
dg run "${small[@]}" --out c.json
dg run --embeddings t.json --starts 0:7 --length 20 --quiet --out c7.json
dg convert c.json --out c.bin --quiet
mkdir d && "${files[@]}" damage c.json c7.json d && "${files[@]}" damage_bin c.bin d && "${files[@]}" upper c.json upper.json \
    || not_ok "the damaged caches are made"

## Items 3, 9, 21: verify proves the whole file, in every mode, before any allocation.
modes=("" "--sequences 6" "--sequences 2" "--sample 3 --seed 2" "--sample 6")
for mode in "${modes[@]}"; do
    # shellcheck disable=SC2086
    passes "twin: verify $mode of the good cache passes" verify --embeddings t.json --cache c.json $mode --quiet
    passes "twin: verify $mode of the good binary cache passes" verify --embeddings t.json --cache c.bin $mode --quiet
    for bad in truncated huge huge-count; do
        refused "verify $mode refuses d/$bad.json (exit 2, one line)" 2 "d/$bad.json" \
            verify --embeddings t.json --cache d/$bad.json $mode --quiet
        [ "$ms" -lt 5000 ] && ok "verify $mode: d/$bad.json refused in $ms ms" || not_ok "verify $mode: d/$bad.json refused quickly ($ms ms)"
    done
    for bad in duplicate swapped extra; do
        refused "verify $mode refuses d/$bad.json (a start missing, out of order or extra)" "1|2" "d/$bad.json" \
            verify --embeddings t.json --cache d/$bad.json $mode --quiet
    done
    for bad in truncated extra huge huge-count huge-items; do
        refused "verify $mode refuses d/$bad.bin" 2 "d/$bad.bin" verify --embeddings t.json --cache d/$bad.bin $mode --quiet
    done
    passes "verify $mode: an upper-case sha256 in the header is the same hash" \
        verify --embeddings t.json --cache upper.json $mode --quiet
done
refused "verify: a header naming 2^40 items is another table, said in one line" 1 "another table" \
    verify --embeddings t.json --cache d/huge-items.json --quiet
passes "convert: an upper-case sha256 is read" convert upper.json --out upper.bin --quiet

## Item 7: the gram (and tensor) kernels at workgroup sizes that are not a
## multiple of lavapipe's subgroup of 8: refused with the reason, or exact.
for method in gram tensor; do
    for wg in 99 100 101 104; do
        out=wg-$method-$wg.json
        bounded run --embeddings t.json --method $method --workgroup-size $wg --starts 0:2 --length 300 --quiet --out $out
        if [ $rc -eq 0 ]; then
            dg verify --embeddings t.json --cache $out --quiet
            [ $rc -eq 0 ] && ok "$method --workgroup-size $wg: accepted, and its cache verifies" \
                || not_ok "$method --workgroup-size $wg: accepted, and its cache verifies (verify exit $rc)" "$err"
        else
            judge "$method --workgroup-size $wg: refused before any work, naming the option and the reason" 2 "--workgroup-size"
            [[ $err == *subgroup* ]] && ok "$method --workgroup-size $wg: the reason names the subgroup" \
                || not_ok "$method --workgroup-size $wg: the reason names the subgroup" "$err"
        fi
        [ -e $out.lock ] && not_ok "$method --workgroup-size $wg: no lock left" || ok "$method --workgroup-size $wg: no lock left"
    done
    # Twin: a multiple of 8 is accepted (and verified above).
    [ -s wg-$method-104.json ] && ok "twin: $method --workgroup-size 104 runs" || not_ok "twin: $method --workgroup-size 104 runs"
done

## Item 8: device limits before any work, the validation layer on.
for method in direct gram tensor; do
    for wg in 2048 1000000000; do
        DIVGPU_VALIDATION=1 refused "$method --workgroup-size $wg: refused naming the option and the device's limit" 2 \
            "--workgroup-size $wg" run --embeddings t.json --method $method --workgroup-size $wg --starts 0:2 --length 20 --quiet \
            --out lim.json
        [[ $err == *1024* ]] && ok "$method --workgroup-size $wg: the device's maximum (1024) is named" \
            || not_ok "$method --workgroup-size $wg: the device's maximum (1024) is named" "$err"
        [ -e lim.json ] && not_ok "$method --workgroup-size $wg: nothing written" || ok "$method --workgroup-size $wg: nothing written"
    done
done
DIVGPU_VALIDATION=1 passes "twin: direct --workgroup-size 1024 runs" run --embeddings t.json --method direct --workgroup-size 1024 \
    --starts 0:2 --length 20 --quiet --out lim.json
grep -q "vulkan validation" "$tmp/err" && not_ok "twin: no validation message at 1024" "$err" || ok "twin: no validation message at 1024"

## Item 13: an fp16 meta edited to another shape, its checksum recomputed.
mkdir f && cp t.json f/embeddings.json && dg convert-fp16 f/embeddings.json
passes "twin: the fp16 run on the untouched meta" run --embeddings f/embeddings.json --precision fp16 --starts 0:2 --length 10 \
    --quiet --out f16.json
cp f/embeddings_fp16.meta.json good.meta.json
"${files[@]}" fp16_shape f/embeddings_fp16.meta.json f/embeddings_fp16.bin 600 8
refused "fp16: a meta of 600 x 8 for a 300 x 16 table is refused" 1 "embeddings_fp16.meta.json" \
    run --embeddings f/embeddings.json --precision fp16 --starts 0:2 --length 10 --quiet --out f16-edited.json
[[ $err == *"300"* ]] && ok "fp16: the table's real shape is named" || not_ok "fp16: the table's real shape is named" "$err"
[ -e f16-edited.json ] && not_ok "fp16: no cache of the edited shape" || ok "fp16: no cache of the edited shape"

## Item 17: bounded reads of small files; what is not a regular file is refused.
refused "plot /dev/zero is refused quickly" "1|2" "/dev/zero" plot /dev/zero --out z.png
[ "$ms" -lt 3000 ] && ok "plot /dev/zero: refused in $ms ms" || not_ok "plot /dev/zero: refused in under 3 s ($ms ms)"
mkfifo fifo.jsonl
refused "plot a FIFO is refused, not waited on" "1|2" "fifo.jsonl" plot fifo.jsonl --out z.png
ln -sf /dev/zero f/embeddings_fp16.meta.json
refused "fp16: a meta that is /dev/zero is refused quickly" 1 "embeddings_fp16.meta.json" \
    run --embeddings f/embeddings.json --precision fp16 --starts 0:2 --length 10 --quiet --out f16-zero.json
[ "$ms" -lt 5000 ] && ok "fp16 meta /dev/zero: refused in $ms ms" || not_ok "fp16 meta /dev/zero: refused in under 5 s ($ms ms)"
rm -f f/embeddings_fp16.meta.json && mkfifo f/embeddings_fp16.meta.json
refused "fp16: a meta that is a FIFO is refused, not waited on" 1 "embeddings_fp16.meta.json" \
    run --embeddings f/embeddings.json --precision fp16 --starts 0:2 --length 10 --quiet --out f16-fifo.json
rm -f f/embeddings_fp16.meta.json && cp good.meta.json f/embeddings_fp16.meta.json
ln -s /dev/zero zlock.json.lock
refused "run: a lock that is /dev/zero is refused quickly" "1|2" "zlock.json.lock" run "${small[@]}" --out zlock.json
[ "$ms" -lt 5000 ] && ok "lock /dev/zero: refused in $ms ms" || not_ok "lock /dev/zero: refused in under 5 s ($ms ms)"

## Item 18: usage refused before any work: exit 2, quickly, nothing written.
refused "synth --out y.txt is refused before the work" 2 "y.txt" synth --n 3000000 --dim 16 --out y.txt
[ "$ms" -lt 2000 ] && ok "synth --out y.txt: refused in $ms ms" || not_ok "synth --out y.txt: refused before the work ($ms ms)"
[ -e y.txt ] && not_ok "synth --out y.txt: nothing written" || ok "synth --out y.txt: nothing written"
refused "bench --synth 1,1 is a usage error" 2 "--synth" bench baseline gram --synth 1,1

## Item 19: --version and --help fail when their output cannot be written.
for args in "--version" "--help" "run --help" "verify --help"; do
    # shellcheck disable=SC2086
    "$abs" $args >/dev/full 2>"$tmp/err"; rc=$?; err=$(cat "$tmp/err")
    [ $rc -ne 0 ] && one_line && ok "divgpu $args > /dev/full fails in one line (exit $rc)" \
        || not_ok "divgpu $args > /dev/full fails in one line (exit $rc)" "$err"
    # shellcheck disable=SC2086
    "$abs" $args >/dev/null 2>&1 && ok "twin: divgpu $args > /dev/null exits 0" || not_ok "twin: divgpu $args > /dev/null exits 0"
done

## Item 20: control characters in messages are escaped.
refused "synth --out with a newline: one line" "1|2" "such/x.json" synth --n 10 --dim 2 --out $'no\nsuch/x.json'
refused "verify --cache with an escape sequence: one line, no control character" 2 "b.json" \
    verify --embeddings t.json --cache $'a\e[31mb.json'
refused "run --embeddings with a tab and a carriage return: one line" "1|2" "e.json" \
    run --embeddings $'t\tx\re.json' --starts 0:2 --length 3 --quiet --out ctl.json

## Item 16: internal messages become one line naming the option or the file.
refused "--l2-bytes 2^53-1 is refused naming the option" 2 "--l2-bytes" \
    run "${small[@]}" --shape tiled --l2-bytes 9007199254740991 --out l2.json
cp t.json $'\xff.json'
bounded bench baseline gram --embeddings $'\xff.json' --sequences 2 --steps 3 --pairs 1 --parity-sequences 1
[ $rc -eq 0 ] && ok "bench --embeddings with a non-UTF-8 name runs" || judge "bench --embeddings with a non-UTF-8 name: one line" "1|2" ".json"
bounded run --embeddings $'\xff.json' --starts 0:2 --length 3 --quiet --out ff.json
[ $rc -eq 0 ] && ok "run --embeddings with a non-UTF-8 name runs" || judge "run --embeddings with a non-UTF-8 name: one line" "1|2" ".json"
dg run --embeddings t.json --starts 0:2 --length 10 --quiet --method gram --stats g.jsonl --out g.json
bounded plot g.jsonl --title $'\xff' --out title.png
[ $rc -eq 0 ] && [ -s title.png ] && ok "plot --title with a non-UTF-8 byte draws" \
    || judge "plot --title with a non-UTF-8 byte: one line naming --title" "1|2" "--title"
"${files[@]}" stats_gram g.jsonl g5.jsonl
refused "plot: a chunk whose gram is 5 is refused as FILE:LINE" "1|2" "g5.jsonl:" plot g5.jsonl --out g5.png

## Items 16 and the exit codes: SIGINT ends every command with 130 and one
## line, leaving no output and no temporary.
dg run --embeddings t.json --starts 0:6 --length 300 --quiet --out c300.json
"${files[@]}" big_cache c300.json big.json 60000 && "${files[@]}" big_cache c300.json part.json 60000 shard
# interrupt NAME OUT ARGS...: starts divgpu ARGS, sends SIGINT after 0.6 s.
interrupt() {
    local name=$1 out=$2; shift 2
    mkdir -p "int-$name" && cd "int-$name" || return
    "$abs" "$@" >stdout 2>stderr &
    local pid=$!
    sleep 0.6; kill -INT $pid; { wait $pid; rc=$?; } 2>/dev/null
    err=$(cat stderr); cat stderr >>"$tmp/all.err"
    if [ $rc -eq 130 ] && { [ -z "$err" ] || one_line; }; then ok "$name: SIGINT exits 130 in at most one line"
    else not_ok "$name: SIGINT exits 130 in at most one line (exit $rc)" "$err"; fi
    [ -n "$out" ] && { [ -e "$out" ] && not_ok "$name: no output after SIGINT" || ok "$name: no output after SIGINT"; }
    [ -z "$(ls -A | grep -v '^std\(out\|err\)$')" ] && ok "$name: nothing left in the folder" \
        || not_ok "$name: nothing left in the folder" "$(ls -A)"
    cd "$tmp" || exit 1
}
interrupt convert out.bin convert ../big.json --out out.bin --quiet
interrupt merge out.json merge --out out.json ../part.json --quiet
interrupt verify "" verify --embeddings ../t.json --cache ../big.json --quiet
interrupt synth out.json synth --n 3000000 --dim 16 --out out.json

## Item 24: convert to standard output writes the other form: a binary cache as JSON.
bounded convert c.bin --out -
[ $rc -eq 0 ] && cmp -s "$tmp/out" c.json && ok "convert c.bin --out - writes the JSON cache" \
    || not_ok "convert c.bin --out - writes the JSON cache (exit $rc)" "$err"

## No validation message in any run above.
grep -q "vulkan validation" "$tmp/all.err" && not_ok "no validation message in any run" "$(grep -m 5 "vulkan validation" "$tmp/all.err")" \
    || ok "no validation message in any run"
cd /
finish
