# Sourced by the device campaigns (bench/gram_campaign.sh,
# bench/multi_gpu_campaign.sh): the device's paths, then helpers that make
# tables, time whole commands and compare outputs. Needs OUT and LOGS set.
# SMALL=1 (a dry run on this machine, lavapipe included) leaves the device's
# shim out, sets the paths as bin/divgpu does, runs the PyTorch peers on the
# CPU where torch sees no GPU and makes tables of dimension 64 (TABLE_DIM);
# each campaign picks sizes of a few hundred items then, and the parity
# suites their quick mode (SMALL is in their environment).
if [ "${SMALL:-0}" = 1 ]; then
    export SMALL LUA_PATH="./?.lua;lua/?.lua;;" LUA_CPATH="build/?.so;;"
    TABLE_DIM=${TABLE_DIM:-64}
    python3 -c "import torch, sys; sys.exit(not torch.cuda.is_available())" 2>/dev/null || export PEER_DEVICE=cpu
else
    source bench/device_env.sh
fi

table() {  # table N -> path of a clustered synthetic table (docs/contract.md#reference-tables), made here
    local dim=${TABLE_DIM:-768}  # SMALL: 64
    local dir=/tmp/synth_$1$([ "$dim" = 768 ] || echo "x$dim")
    mkdir -p "$dir"
    [ -f "$dir/embeddings.json" ] || bin/divgpu synth --n "$1" --dim "$dim" --clusters 16 --seed 1 --out "$dir/embeddings.json" >/dev/null
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
    rm -f "/tmp/$name.json"  # no earlier call's output compared in its place
    timed "$name" bin/divgpu run --embeddings "$tbl" --starts "$starts" --length "$length" --method "$method" \
        --out "/tmp/$name.json" "$@"
}

peer() {  # peer NAME SCRIPT TABLE STARTS LENGTH (PEER_TIMEOUT seconds at most, default 600; PEER_DEVICE, default cuda)
    local name=$1 script=$2 tbl=$3 starts=$4 length=$5
    rm -f "/tmp/$name.json" "$LOGS/$name.json"
    timed "$name" timeout "${PEER_TIMEOUT:-600}" python3 "bench/peers/$script" --embeddings "$tbl" --starts "$starts" --length "$length" \
        --out "/tmp/$name.json" --json "$LOGS/$name.json" \
        --device "${PEER_DEVICE:-cuda}"
    cat "$LOGS/$name.json" >>"$OUT/peers.jsonl"; echo >>"$OUT/peers.jsonl"
}

same() {  # same A B: share of identical sequences
    python3 bench/peers/compare.py "/tmp/$1.json" "/tmp/$2.json" | sed "s/^/  $1 vs $2: /" | tee -a "$OUT/compare.txt"
}

