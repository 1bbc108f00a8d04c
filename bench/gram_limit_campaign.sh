#!/usr/bin/env bash
# The Gram-limit campaign on an offline NVIDIA machine (bench/README.md says
# how to carry the Vulkan loader, LuaJIT and the built module there):
#   bash bench/gram_limit_campaign.sh explore   ceilings (fma f32/f64, copy, cooperative matrices),
#                                               G's build tilings, the step kernel's configurations
#                                               and its floor, the previous code beside the new
#   bash bench/gram_limit_campaign.sh MODE...   several modes in one call
# Results: one JSON line per measurement in $OUT/*.jsonl, a summary in
# $OUT/summary.txt, full logs in $LOGS. Needs .gl and build/divgpu.so carried
# along; the previous code's module and Lua tree in .campaign/old (optional).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/divgpu-out}
LOGS=${LOGS:-/tmp/divgpu-logs}
mkdir -p "$OUT" "$LOGS"
source bench/campaign_lib.sh

SEED=synth:8359:768   # the seed table (divgpu synth --n 8359 --dim 768 --clusters 16 --seed 1), in memory

tune() {  # tune NAME TABLE STARTS LENGTH CONFIG...: bench/gram_tune.lua, JSON lines to $OUT/NAME.jsonl
    local name=$1; shift
    luajit bench/gram_tune.lua "$@" 2>"$LOGS/$name.log" | tee -a "$OUT/$name.jsonl"
}

old_divgpu() {  # the previous code's CLI (from .campaign/old), if carried
    [ -f .campaign/old/build/divgpu.so ] || { mkdir -p .campaign/old/build && xz -dc .campaign/old/divgpu.so.xz >.campaign/old/build/divgpu.so; }
    LUA_PATH="/tmp/x/usr/share/lua/5.1/?.lua;;" LUA_CPATH=";;" .campaign/old/bin/divgpu "$@"
}

for mode in "$@"; do
echo "== $mode" | tee -a "$OUT/summary.txt"
case "$mode" in
explore)
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee "$LOGS/gpu.txt"
    luajit bench/peaks.lua 2>"$LOGS/peaks.log" | tee "$OUT/peaks.jsonl"
    python3 bench/peers/ceilings.py | tee "$OUT/ceilings.jsonl"
    # G's build: four tilings at N = 65,536 (a build and one step), G' checked against the host on one.
    tune build synth:65536:768 0:1 2 'build=16x16x8x8x8,checkg' 'build=16x16x4x4x8' 'build=16x16x8x8x16' \
        'build=32x8x16x4x8'
    tune build synth:131072:768 0:1 2 'build=16x16x8x8x8' 'build=32x8x16x4x8'
    # The step on the seed batch: threads per sequence, registers, the shared page; the floor beside each.
    tune seed $SEED 0:3584 8359 'wg=256' 'wg=256,floor' 'wg=512' 'wg=512,floor' 'wg=128' 'wg=128,floor' \
        'wg=1024' 'wg=256,reg=16' 'wg=256'
    # The previous code and the new, whole runs through the CLI, same table file.
    T=$(table 8359)
    timed old_seed old_divgpu run --embeddings "$T" --starts 0:3584 --out /tmp/old_seed.json
    divgpu_run new_seed "$T" 0:3584 8359 gram
    cmp /tmp/old_seed.json /tmp/new_seed.json && echo "  new_seed vs old_seed: cmp identical" | tee -a "$OUT/summary.txt" \
        || echo "  new_seed vs old_seed: DIFFER" | tee -a "$OUT/summary.txt"
    peer torch_direct_seed torch_direct.py "$T" 0:3584 8359
    same new_seed torch_direct_seed
    # Large tables, in memory: the build and the steps.
    tune large synth:65536:768 0:4096 1025 'wg=256'
    tune large synth:131072:768 0:2048 257 'wg=256'
    ;;
*)
    echo "unknown mode $mode" >&2
    exit 2
    ;;
esac
done
