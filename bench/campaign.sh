#!/usr/bin/env bash
# The measurement campaign on the H200 device machine (bench/README.md#running-a-campaign-on-an-offline-nvidia-machine):
#   bash bench/campaign.sh probe    parity, info, one short timing per configuration
#   bash bench/campaign.sh seed TAG CONFIG...   A/B pairs on the seed shape (docs/contract.md#reference-tables)
#   bash bench/campaign.sh full     a full seed ordering, FP16-vs-FP32 divergence
#   bash bench/campaign.sh large CONFIG...       A/B pairs on the large shape
# Needs .gl (Debian debs of the Vulkan loader, libglvnd, LuaJIT, lua-argparse)
# and build/divgpu.so carried along. Full logs go to $OUT.
# SMALL=1: a dry run of the same steps on lavapipe (tests/peers_bench_smoke.sh):
# no shim, device_parity.lua's quick mode, tables of a few hundred items
# (the poems' job on a stand-in), measuring nothing.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/divgpu-out}
mkdir -p "$OUT"

if [ "${SMALL:-0}" = 1 ]; then
    export SMALL LUA_PATH="./?.lua;lua/?.lua;;" LUA_CPATH="build/?.so;;"
    SEED_N=300 SEED_S=64 LARGE_N=700 LARGE_S=64 DIM=64 T=/tmp/campaign_small
    POEMS=$T/poems/embeddings.json
    mkdir -p "$T/poems"
    [ -f "$POEMS" ] || bin/divgpu synth --n 200 --dim 64 --clusters 8 --seed 5 --out "$POEMS" >/dev/null
    POEMS_ARGS=(--embeddings "$POEMS")
else
    source bench/device_env.sh
    SEED_N=8359 SEED_S=3584 LARGE_N=65536 LARGE_S=4096 DIM=768 T=/tmp POEMS_ARGS=()
fi

SEED=$T/seed/embeddings.json
LARGE=$T/large/embeddings.json
make_tables() {
    mkdir -p "$T/seed" "$T/large"
    [ -f "$SEED" ] || bin/divgpu synth --n "$SEED_N" --dim "$DIM" --clusters 16 --seed 1 --out "$SEED" >/dev/null
    [ "${1:-}" = large ] && { [ -f "$LARGE" ] || bin/divgpu synth --n "$LARGE_N" --dim "$DIM" --clusters 16 --seed 1 --out "$LARGE" >/dev/null; }
    return 0
}

case "${1:-probe}" in
probe)
    { nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv 2>/dev/null \
        || echo "no nvidia-smi"; } | tee "$OUT/gpu.txt"
    bin/divgpu info | tee "$OUT/info.txt"
    luajit bench/device_parity.lua 2>&1 | tee "$OUT/parity.txt" | grep -v '^PASS'
    # make run's job on the shipped poems, then verify it.
    /usr/bin/time -f "make-run job: %e s wall" bin/divgpu run "${POEMS_ARGS[@]}" --quiet --out /tmp/poems_cache.json 2>&1 | tee "$OUT/poems.txt"
    bin/divgpu verify "${POEMS_ARGS[@]}" --cache /tmp/poems_cache.json --quiet | tee -a "$OUT/poems.txt"
    cmp /tmp/poems_cache.json "${POEMS_CACHE_HERE:-/dev/null}" >/dev/null 2>&1 && echo "cache identical to lavapipe's" | tee -a "$OUT/poems.txt"
    cp /tmp/poems_cache.json "$OUT/poems_cache_h200.json"
    make_tables
    bin/divgpu convert-fp16 "$SEED" >/dev/null
    for cfg in "baseline fp32 1" "baseline fp32 2" "tiled fp32 1" "tile-dispatch fp32 1" \
               "baseline fp16 1" "baseline fp16-exact 1" "tile-dispatch fp16-exact 2" "tiled fp16 2"; do
        set -- $cfg
        printf '%-32s ' "$cfg"
        bin/divgpu run --embeddings "$SEED" --starts "0:$SEED_S" --length 21 --method direct --shape $1 --precision $2 --in-flight $3 \
            --out /tmp/c.json 2>&1 | grep -E "done in|tile size" | tr '\n' ' '
        echo
    done | tee "$OUT/probe_seed.txt"
    bin/divgpu info --measure-l2 $([ "${SMALL:-0}" = 1 ] && echo --max-mib 1) | tee "$OUT/l2.txt"
    ;;
seed)
    # bash bench/campaign.sh seed TAG CONFIG...   (A/B on the seed shape)
    make_tables
    tag=$2; shift 2
    bin/divgpu bench --method direct --embeddings "$SEED" --sequences "$SEED_S" --steps "${STEPS:-100}" --pairs "${PAIRS:-24}" "$@" \
        > "$OUT/seed_$tag.txt" 2> "$OUT/seed_$tag.err"
    cat "$OUT/seed_$tag.txt" "$OUT/seed_$tag.err"
    ;;
full)
    # One full ordering of a seed batch with LAYOUT/PRECISION/SHAPE, 16 sequences verified.
    make_tables
    /usr/bin/time -f "full seed batch: %e s wall" bin/divgpu run --embeddings "$SEED" --starts "0:$SEED_S" \
        --layout "${LAYOUT:-columns}" --precision "${PRECISION:-fp32}" --shape "${SHAPE:-baseline}" \
        --out /tmp/seed_cache.json 2>&1 | tee "$OUT/full_seed.txt"
    bin/divgpu verify --embeddings "$SEED" --cache /tmp/seed_cache.json --sequences 16 --quiet | tee -a "$OUT/full_seed.txt"
    luajit bench/fp16_divergence.lua "$SEED" "$SEED_S" "$((SEED_N < 500 ? SEED_N : 500))" columns | tee "$OUT/fp16_seed.txt"
    if [ "${SMALL:-0}" = 1 ]; then luajit bench/fp16_divergence.lua "$POEMS" 64 100; else
    luajit bench/fp16_divergence.lua assets/embeddings/all-MiniLM-L6-v2/embeddings.json 520 519; fi | tee "$OUT/fp16_poems.txt"
    ;;
large)
    make_tables large
    shift
    # 8 pairs, not the 24 of docs/contract.md#measuring: a pair of the direct method on the
    # large table takes about 20 s of the session's 30 device minutes.
    bin/divgpu bench --method direct --embeddings "$LARGE" --sequences "$LARGE_S" --steps "${STEPS:-50}" --pairs "${PAIRS:-8}" "$@" \
        > "$OUT/large.txt" 2> "$OUT/large.err"
    cat "$OUT/large.txt" "$OUT/large.err"
    ;;
esac
