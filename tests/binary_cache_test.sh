#!/usr/bin/env bash
# The binary cache from the command line (docs/formats.md#binary-cache,
# docs/cli.md#verify): run --format binary writes the bytes `convert` makes
# of the JSON run and back, byte for byte, the checkpoint too; convert refuses
# its input as --out; merge reads parts of either form and writes either;
# verify reads both, --sample checks the seeded positions and prints them,
# and every exit status (0 agrees, 1 differs, 2 unreadable or invalid) has a
# twin that must give another. Each check has a twin that must fail.
set -uo pipefail
cd "$(dirname "$0")/.."
source tests/lib.sh

# expect_status NAME STATUS WANT CMD...: exits STATUS; WANT (if not empty) in
# its output; a failure is one stderr line "divgpu: ..." without Lua file:line.
expect_status() {
    local name=$1 want_rc=$2 want=$3; shift 3
    local out err rc
    out=$("$@" 2>"$tmp/status_err"); rc=$?
    err=$(cat "$tmp/status_err")
    local text="$out$err"
    if [ "$rc" -ne "$want_rc" ]; then not_ok "$name: exit $want_rc (got $rc)" "$text"; return; fi
    if [ -n "$want" ] && [[ $text != *"$want"* ]]; then not_ok "$name: says '$want'" "$text"; return; fi
    if [ "$rc" -ne 0 ] && { [ "$(wc -l <<<"$err")" -ne 1 ] || [[ $err != divgpu:* ]] || [[ $err == *".lua:"* ]]; }; then
        not_ok "$name: one line starting divgpu:" "$err"; return
    fi
    ok "$name (exit $rc)"
}

# same NAME A B: the files are byte-identical; twin_differs NAME A B: they are not.
same() { if cmp -s "$2" "$3"; then ok "$1"; else not_ok "$1" "$(cmp "$2" "$3" 2>&1)"; fi; }
differs() { if cmp -s "$2" "$3"; then not_ok "$1 (twin: the comparison must see a change)"; else ok "$1"; fi; }

# change_item CACHE POSITION: the binary cache with the second item of the
# sequence at POSITION replaced by its third (still valid items).
change_item() {
    python3 - "$1" "$2" <<'EOF'
import json, struct, sys
path, k = sys.argv[1], int(sys.argv[2])
raw = bytearray(open(path, "rb").read())
h_len = struct.unpack_from("<I", raw, 12)[0]
h = json.loads(raw[16:16 + h_len])
row = h["rows_offset"] + 4 * h["length"] * k
raw[row + 4:row + 8] = raw[row + 8:row + 12]
open(path, "wb").write(raw)
EOF
}

$divgpu synth --n 100 --dim 6 --seed 5 --out "$tmp/t.json" >/dev/null
job=(--embeddings "$tmp/t.json" --length 6 --batch 16 --quiet)

## run --format: the same sequences, the binary bytes those of convert.
expect_ok "run --format json" $divgpu run "${job[@]}" --out "$tmp/run.json"
expect_ok "run --format binary" $divgpu run "${job[@]}" --format binary --out "$tmp/run.bin"
check "the binary run starts with the magic" test "$(head -c 7 "$tmp/run.bin")" = DIVGPUB
expect_ok "convert json -> binary (the default: the other form)" $divgpu convert "$tmp/run.json" --out "$tmp/conv.bin" --quiet
same "binary run = convert of the JSON run, byte for byte" "$tmp/run.bin" "$tmp/conv.bin"
expect_ok "convert binary -> json" $divgpu convert "$tmp/run.bin" --out "$tmp/conv.json" --quiet
same "JSON run = convert of the binary run, byte for byte" "$tmp/run.json" "$tmp/conv.json"
expect_ok "convert --format binary of a binary cache" $divgpu convert "$tmp/run.bin" --format binary --out "$tmp/again.bin" --quiet
same "binary -> binary is the same bytes" "$tmp/run.bin" "$tmp/again.bin"
cp "$tmp/run.bin" "$tmp/changed.bin"; change_item "$tmp/changed.bin" 40
differs "twin: a changed row is another file" "$tmp/run.bin" "$tmp/changed.bin"
expect_ok "convert of the changed binary" $divgpu convert "$tmp/changed.bin" --out "$tmp/changed.json" --quiet
differs "twin: its JSON form is not the run's" "$tmp/run.json" "$tmp/changed.json"

## The binary run goes through its checkpoint in several batches (--batch 16);
## resuming a binary checkpoint is tested in src/cache/cache_io/tests.rs.
expect_ok "a binary run of the first 40 starts" $divgpu run "${job[@]}" --format binary --starts 0:40 --out "$tmp/part40.bin"
expect_ok "the JSON run of the same" $divgpu run "${job[@]}" --starts 0:40 --out "$tmp/part40.json"
expect_ok "convert it" $divgpu convert "$tmp/part40.json" --out "$tmp/part40-conv.bin" --quiet
same "--starts 0:40: binary run = convert" "$tmp/part40.bin" "$tmp/part40-conv.bin"
expect_ok "run --out - --format binary (standard output)" bash -c "$divgpu run ${job[*]} --format binary --out - >'$tmp/stdout.bin'"
same "the binary stream is the binary file" "$tmp/run.bin" "$tmp/stdout.bin"

## convert's refusals.
expect_status "convert --out its input" 2 "never writes over its input" $divgpu convert "$tmp/run.bin" --out "$tmp/run.bin"
ln -s run.json "$tmp/link.json"
expect_status "convert --out a link to its input" 2 "never writes over its input" $divgpu convert "$tmp/run.json" --out "$tmp/link.json"
check "the input is unchanged" cmp -s "$tmp/run.json" "$tmp/conv.json"
expect_status "twin: convert --out another file" 0 "" $divgpu convert "$tmp/run.json" --out "$tmp/other.bin" --quiet
expect_status "convert --format xml" 2 "--format 'xml' is not one of: json, binary" $divgpu convert "$tmp/run.json" --out "$tmp/x" --format xml
expect_status "convert of a truncated binary cache" 1 "truncated" bash -c "head -c 900 '$tmp/run.bin' >'$tmp/trunc.bin'; $divgpu convert '$tmp/trunc.bin' --out '$tmp/trunc.json'"
check "a failed convert leaves no output" test ! -e "$tmp/trunc.json"
check "convert is listed beside convert-fp16 in --help" bash -c "$divgpu --help | grep -q '^   convert  ' && $divgpu --help | grep -q 'convert-fp16'"

## merge: parts of either form, mixed, into either form.
for i in 0 1 2; do
    form=json; [ $i -eq 1 ] && form=binary
    expect_ok "part $i/3 ($form)" $divgpu run "${job[@]}" --format $form --shard $i/3 --out "$tmp/p$i.$form"
done
parts=("$tmp/p0.json" "$tmp/p1.binary" "$tmp/p2.json")
expect_ok "merge mixed parts --format binary" $divgpu merge --quiet --format binary --out "$tmp/merged.bin" "${parts[@]}"
same "the binary merge = the unsharded binary run" "$tmp/run.bin" "$tmp/merged.bin"
expect_ok "merge mixed parts (default: the first part's form, json)" $divgpu merge --quiet --out "$tmp/merged.json" "${parts[@]}"
same "the JSON merge = the unsharded JSON run" "$tmp/run.json" "$tmp/merged.json"
cp "$tmp/p1.binary" "$tmp/p1-changed.binary"; change_item "$tmp/p1-changed.binary" 3
expect_ok "merge with a part changed (valid items)" $divgpu merge --quiet --format binary --out "$tmp/merged-changed.bin" "$tmp/p0.json" "$tmp/p1-changed.binary" "$tmp/p2.json"
differs "twin: a changed part gives another merge" "$tmp/run.bin" "$tmp/merged-changed.bin"
head -c 600 "$tmp/p1.binary" >"$tmp/p1-trunc.binary"
expect_status "merge refuses a truncated binary part" 1 "p1-trunc.binary" $divgpu merge --quiet --out "$tmp/m.bin" "$tmp/p0.json" "$tmp/p1-trunc.binary" "$tmp/p2.json"

## verify's exit statuses, each with its twin.
ver=(--embeddings "$tmp/t.json" --quiet)
expect_status "verify: a binary cache that agrees" 0 "100 of 100 sequences" $divgpu verify "${ver[@]}" --cache "$tmp/run.bin"
expect_status "verify: the JSON cache that agrees" 0 "json form" $divgpu verify "${ver[@]}" --cache "$tmp/run.json"
expect_status "verify: a changed row differs (1)" 1 "sequence 40 (start 40) differs at step 1" $divgpu verify "${ver[@]}" --cache "$tmp/changed.bin"
expect_status "verify: the changed row in the JSON form differs (1)" 1 "sequence 40 (start 40) differs at step 1" $divgpu verify "${ver[@]}" --cache "$tmp/changed.json"
$divgpu synth --n 100 --dim 6 --seed 6 --out "$tmp/other-table.json" >/dev/null
expect_status "verify: another table (1)" 1 "was made from another table" $divgpu verify --quiet --embeddings "$tmp/other-table.json" --cache "$tmp/run.bin"
expect_status "verify: a missing cache (2)" 2 "missing.bin" $divgpu verify "${ver[@]}" --cache "$tmp/missing.bin"
expect_status "verify: a missing table (2)" 2 "missing.json" $divgpu verify --quiet --embeddings "$tmp/missing.json" --cache "$tmp/run.bin"
expect_status "verify: a truncated binary cache (2)" 2 "truncated" $divgpu verify "${ver[@]}" --cache "$tmp/trunc.bin"
printf '{"format": "divgpu-diversity-cache", "version": 2, "sequences": [[1, 2' >"$tmp/bad.json"
expect_status "verify: bad JSON (2)" 2 "bad.json" $divgpu verify "${ver[@]}" --cache "$tmp/bad.json"
expect_status "verify: a table given as the cache (2)" 2 "not a cache" $divgpu verify "${ver[@]}" --cache "$tmp/t.json"
expect_status "verify: a bad option (2)" 2 "--sample 'x' is not a positive integer" $divgpu verify "${ver[@]}" --cache "$tmp/run.bin" --sample x
expect_status "verify: --sequences stops before the change (0)" 0 "40 of 100 sequences" $divgpu verify "${ver[@]}" --cache "$tmp/changed.bin" --sequences 40
expect_status "twin: --sequences 41 reaches it (1)" 1 "sequence 40" $divgpu verify "${ver[@]}" --cache "$tmp/changed.bin" --sequences 41

## verify --sample: the seeded positions (docs/formats.md's example), printed.
expect_status "verify --sample 5 --seed 7 names its positions" 0 "positions 33, 56, 74, 86, 87" $divgpu verify "${ver[@]}" --cache "$tmp/run.bin" --sample 5 --seed 7
expect_status "the same sample of the JSON form" 0 "positions 33, 56, 74, 86, 87" $divgpu verify "${ver[@]}" --cache "$tmp/run.json" --sample 5 --seed 7
cp "$tmp/run.bin" "$tmp/at56.bin"; change_item "$tmp/at56.bin" 56
expect_status "a change at a sampled position differs (1)" 1 "sequence 56 (start 56)" $divgpu verify "${ver[@]}" --cache "$tmp/at56.bin" --sample 5 --seed 7
expect_status "twin: the change at 40 is not in the sample (0)" 0 "5 of 100" $divgpu verify "${ver[@]}" --cache "$tmp/changed.bin" --sample 5 --seed 7
expect_status "another seed, other positions" 0 "seed 8" $divgpu verify "${ver[@]}" --cache "$tmp/run.bin" --sample 5 --seed 8
if grep -q "positions 33, 56, 74, 86, 87" <<<"$($divgpu verify "${ver[@]}" --cache "$tmp/run.bin" --sample 5 --seed 8)"; then
    not_ok "twin: seed 8 does not pick seed 7's positions"
else
    ok "twin: seed 8 does not pick seed 7's positions"
fi
expect_status "--seed without --sample (2)" 2 "--seed applies to --sample only" $divgpu verify "${ver[@]}" --cache "$tmp/run.bin" --seed 3

finish
