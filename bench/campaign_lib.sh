# Sourced by the device campaigns (bench/gram_campaign.sh,
# bench/multi_gpu_campaign.sh): the device's paths, then helpers that make
# tables, time whole commands and compare outputs. Needs OUT and LOGS set.
# SMALL=1 (a dry run on this machine) leaves the device's shim out.
[ "${SMALL:-0}" = 1 ] || source bench/device_env.sh

table() {  # table N -> path of a clustered synthetic table (docs/contract.md#reference-tables), made here
    local dir=/tmp/synth_$1
    mkdir -p "$dir"
    [ -f "$dir/embeddings.json" ] || bin/divgpu synth --n "$1" --dim 768 --clusters 16 --seed 1 --out "$dir/embeddings.json" >/dev/null
    echo "$dir/embeddings.json"
}

# timed NAME CMD...: wall seconds of a whole command, its stderr in $OUT/NAME.log
timed() {
    local name=$1; shift
    local t0=$EPOCHREALTIME
    "$@" >"$LOGS/$name.out" 2>"$LOGS/$name.log"
    local rc=$?
    local wall
    wall=$(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.3f", b - a }')
    printf '{"job": "%s", "rc": %d, "wall_seconds": %s}\n' "$name" "$rc" "$wall" | tee -a "$OUT/results.jsonl"
    { grep -E "divgpu: (method|done|gram|device|wall time)|seconds|identical" "$LOGS/$name.log"; tail -n 2 "$LOGS/$name.out"; } \
        | sed "s/^/  $name: /" | tee -a "$OUT/summary.txt"
}

divgpu_run() {  # divgpu_run NAME TABLE STARTS LENGTH METHOD [extra...]
    local name=$1 tbl=$2 starts=$3 length=$4 method=$5; shift 5
    timed "$name" bin/divgpu run --embeddings "$tbl" --starts "$starts" --length "$length" --method "$method" \
        --out "/tmp/$name.json" "$@"
}

peer() {  # peer NAME SCRIPT TABLE STARTS LENGTH (PEER_TIMEOUT seconds at most, default 600; PEER_DEVICE, default cuda)
    local name=$1 script=$2 tbl=$3 starts=$4 length=$5
    timed "$name" timeout "${PEER_TIMEOUT:-600}" python3 "bench/peers/$script" --embeddings "$tbl" --starts "$starts" --length "$length" \
        --out "/tmp/$name.json" --json "$LOGS/$name.json" \
        --device "${PEER_DEVICE:-cuda}"
    cat "$LOGS/$name.json" >>"$OUT/peers.jsonl"; echo >>"$OUT/peers.jsonl"
}

same() {  # same A B: share of identical sequences
    python3 bench/peers/compare.py "/tmp/$1.json" "/tmp/$2.json" | sed "s/^/  $1 vs $2: /" | tee -a "$OUT/compare.txt"
}

