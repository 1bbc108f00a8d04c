#!/usr/bin/env bash
# verify and merge stream a cache of either form: their peak memory (the
# child's peak resident set, getrusage's ru_maxrss) on a cache ten times
# larger stays within 20%. The twin reads the whole cache into memory
# (divgpu.files.read_cache) and must grow by more than 20%: the measure sees
# a cache held in memory.
set -uo pipefail
cd "$(dirname "$0")/.."
source tests/lib.sh
export LUA_PATH="$PWD/lua/?.lua;$PWD/lua/?/init.lua;;" LUA_CPATH="$PWD/build/?.so;;"

SMALL=60000 LARGE=600000 LENGTH=16
$divgpu synth --n 16 --dim 2 --seed 4 --out "$tmp/t.json" >/dev/null

# The cache of COUNT sequences (starts k mod 16, the mirror's rows) in FORM at
# OUT, and its four parts OUT.partI, written through the checkpoint as a run
# would (no GPU needed: the rows are the mirror's).
make_caches() {
    luajit - "$tmp/t.json" "$1" "$2" "$3" "$LENGTH" <<'EOF'
local divgpu = require "divgpu"
local path, count, form, out, length = arg[1], tonumber(arg[2]), arg[3], arg[4], tonumber(arg[5])
local e = assert(divgpu.load_embeddings(path))
local base = assert(divgpu.mirror(e, divgpu.array("u32", { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15 }), length))
local starts, rows = divgpu.array("u32", count), divgpu.array("u32", count * length)
for k = 0, count - 1 do
    starts[k + 1] = k % 16
    for i = 1, length do rows[k * length + i] = base[(k % 16) * length + i] end
end
local function write(file, first, n, shard)
    local cp = assert(divgpu.files.checkpoint(file, { table = e, length = length, starts = starts:slice(first + 1, n),
                                                     format = form, shard = shard }))
    for b = 0, n - 1, 65536 do
        local m = math.min(65536, n - b)
        assert(cp:append(rows:slice((first + b) * length + 1, m * length)))
    end
    assert(cp:finish())
end
write(out, 0, count)
for i = 0, 3 do
    local first, n = divgpu.files.shard_block(count, i, 4)
    write(out .. ".part" .. i, first, n, { index = i, count = 4, starts = starts })
end
EOF
}

# peak CMD...: the command's peak resident set in kB (its exit status must be 0).
peak() {
    python3 -c '
import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
if r.returncode != 0:
    sys.exit("exit %d: %s" % (r.returncode, r.stderr.decode()[-500:]))
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)' "$@"
}

# within NAME A B: B (the large cache's peak) at most 1.2 A; grows NAME A B: more.
measured() { [[ $1 =~ ^[0-9]+$ && $2 =~ ^[0-9]+$ ]]; }
within() {
    if measured "$2" "$3" && [ "$3" -le $(( $2 * 12 / 10 )) ]; then ok "$1: $2 kB -> $3 kB"; else not_ok "$1: '$2' kB -> '$3' kB (over 20%)"; fi
}
grows() {
    if measured "$2" "$3" && [ "$3" -gt $(( $2 * 12 / 10 )) ]; then ok "$1: $2 kB -> $3 kB"; else not_ok "$1: '$2' kB -> '$3' kB (must grow over 20%)"; fi
}

echo 'local c = assert(require("divgpu").files.read_cache(arg[1])) assert(c.count > 0)' >"$tmp/read_whole.lua"
for form in json binary; do
    other=binary; [ $form = binary ] && other=json
    for n in $SMALL $LARGE; do
        make_caches "$n" $form "$tmp/c$n.$form" || not_ok "make the $form caches of $n sequences"
    done
    measure() { # measure SIZE -> "verify merge whole" peaks
        local c=$tmp/c$1.$form
        echo "$(peak $divgpu verify --quiet --embeddings "$tmp/t.json" --cache "$c") \
$(peak $divgpu merge --quiet --format $other --out "$tmp/merged.$other" "$c".part{0,1,2,3}) \
$(peak luajit "$tmp/read_whole.lua" "$c")"
    }
    read -r v1 m1 w1 <<<"$(measure $SMALL)"
    read -r v2 m2 w2 <<<"$(measure $LARGE)"
    check "the merge of the large $form parts is the large cache in the other form" \
        bash -c "$divgpu convert --quiet '$tmp/c$LARGE.$form' --out '$tmp/conv.$other' >/dev/null && cmp -s '$tmp/conv.$other' '$tmp/merged.$other'"
    within "verify, $form form, $SMALL -> $LARGE sequences" "$v1" "$v2"
    within "merge, $form parts, $SMALL -> $LARGE sequences" "$m1" "$m2"
    grows "twin: the whole $form cache read into memory" "$w1" "$w2"
done

finish
