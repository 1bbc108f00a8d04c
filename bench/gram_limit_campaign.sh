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

# The previous code's CLI (from .campaign/old, when carried): OLD_DIVGPU CMD...
if [ -f .campaign/old/divgpu.so.xz ] && [ ! -f .campaign/old/build/divgpu.so ]; then
    mkdir -p .campaign/old/build && xz -dc .campaign/old/divgpu.so.xz >.campaign/old/build/divgpu.so
fi
OLD_DIVGPU=(env "LUA_PATH=/tmp/x/usr/share/lua/5.1/?.lua;;" "LUA_CPATH=;;" .campaign/old/bin/divgpu)

for mode in "$@"; do
echo "== $mode" | tee -a "$OUT/summary.txt"
case "$mode" in
explore)
    # Every step bounded by its own timeout and writing to $OUT as it goes: a
    # slow or stuck kernel costs its step, never the call (call 2 lost all).
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee "$OUT/gpu.txt"
    timeout 60 luajit bench/peaks.lua 2>"$OUT/peaks.log" | tee "$OUT/peaks.jsonl"
    # G's build at N = 65,536 (a build and one step), G' checked against the host on one.
    timeout 60 luajit bench/gram_tune.lua synth:65536:768 0:1 2 'build=16x16x8x8x8,checkg' 'build=16x8x8x4x8' \
        2>>"$OUT/tune.log" | tee -a "$OUT/build.jsonl"
    # The step on the seed batch: threads per sequence; the floor beside.
    timeout 90 luajit bench/gram_tune.lua $SEED 0:3584 8359 'wg=256' 'wg=256,floor' 'wg=384' 'wg=512' 'wg=512,floor' \
        'wg=384,floor' 2>>"$OUT/tune.log" | tee -a "$OUT/seed.jsonl"
    # The previous code and the new, whole runs through the CLI, same table file.
    T=$(table 8359)
    timed old_seed timeout 40 "${OLD_DIVGPU[@]}" run --embeddings "$T" --starts 0:3584 --out /tmp/old_seed.json
    timed new_seed timeout 40 bin/divgpu run --embeddings "$T" --starts 0:3584 --method gram --out /tmp/new_seed.json
    cmp /tmp/old_seed.json /tmp/new_seed.json && echo "  new_seed vs old_seed: cmp identical" | tee -a "$OUT/summary.txt" \
        || echo "  new_seed vs old_seed: DIFFER" | tee -a "$OUT/summary.txt"
    # Large tables, in memory: the build and the steps.
    timeout 60 luajit bench/gram_tune.lua synth:65536:768 0:4096 1025 'wg=256' 2>>"$OUT/tune.log" | tee -a "$OUT/large.jsonl"
    timeout 60 luajit bench/gram_tune.lua synth:131072:768 0:2048 257 'wg=256' 2>>"$OUT/tune.log" | tee -a "$OUT/large.jsonl"
    ;;
final)
    # The acceptance measurements in one call, each step under its own timeout,
    # writing to $OUT as it goes. PAIRS (default 6) alternating whole-run pairs
    # against PyTorch direct on the seed batch.
    nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv | tee "$OUT/gpu.txt"
    timeout 60 luajit bench/peaks.lua 2>"$LOGS/peaks.log" | tee "$OUT/peaks.jsonl"
    timeout 40 python3 bench/peers/ceilings.py | tee "$OUT/ceilings.jsonl"
    # The step kernel's configurations on the seed batch; the fastest exact one runs the rest.
    timeout 70 luajit bench/gram_tune.lua $SEED 0:3584 8359 'wg=256' 'wg=512' 'wg=384' 'wg=256,floor' 'wg=512,floor' \
        2>>"$LOGS/tune.log" | tee -a "$OUT/tune.jsonl"
    BEST_WG=$(python3 -c "
import json
rows = [json.loads(l) for l in open('$OUT/tune.jsonl') if '\"steps_gpu_seconds\"' in l]
exact = [r for r in rows if r.get('parity') in ('reference', 'identical')]
print(int(min(exact, key=lambda r: r['steps_gpu_seconds'])['config'].split('=')[1]) if exact else 256)")
    echo "  fastest exact workgroup on the seed batch: $BEST_WG" | tee -a "$OUT/summary.txt"
    timeout 40 luajit bench/gram_tune.lua synth:65536:768 0:1 2 'build=16x16x8x8x8,checkg' 'build=16x8x8x4x8' \
        2>>"$LOGS/tune.log" | tee -a "$OUT/tune.jsonl"
    # Tables as .npy (made here), the same for divgpu, the previous code (JSON) and PyTorch.
    mkdir -p /tmp/seed && bin/divgpu synth --n 8359 --dim 768 --clusters 16 --seed 1 --out /tmp/seed/t.npy >/dev/null
    T=$(table 8359)
    timed old_seed timeout 40 "${OLD_DIVGPU[@]}" run --embeddings "$T" --starts 0:3584 --out /tmp/old_seed.json
    timed new_seed timeout 40 bin/divgpu run --embeddings "$T" --starts 0:3584 --method gram --workgroup-size "$BEST_WG" --out /tmp/new_seed.json
    cmp /tmp/old_seed.json /tmp/new_seed.json && echo "  new_seed vs old_seed: cmp identical" | tee -a "$OUT/summary.txt" \
        || echo "  new_seed vs old_seed: DIFFER" | tee -a "$OUT/summary.txt"
    DIVGPU_WORKGROUP=$BEST_WG timeout 170 python3 bench/whole_run_pairs.py --embeddings /tmp/seed/t.npy --starts 0:3584 \
        --length 8359 --pairs "${PAIRS:-6}" --method gram --json "$OUT/pairs.json" 2>"$LOGS/pairs.log" | tee "$OUT/pairs.txt"
    timed new_all timeout 40 bin/divgpu run --embeddings /tmp/seed/t.npy --method gram --workgroup-size "$BEST_WG" --out /tmp/new_all.json
    timeout 60 luajit bench/gram_tune.lua synth:65536:768 0:4096 1025 "wg=$BEST_WG" 2>>"$LOGS/tune.log" | tee -a "$OUT/large.jsonl"
    timeout 60 luajit bench/gram_tune.lua synth:131072:768 0:2048 257 "wg=$BEST_WG" 2>>"$LOGS/tune.log" | tee -a "$OUT/large.jsonl"
    # The real table (25,000 texts, all-MiniLM-L6-v2): 4,096 starts in full, and the previous code's bytes on 256.
    if [ -f .campaign/real20k.npy ]; then
        timed real_new timeout 60 bin/divgpu run --embeddings .campaign/real20k.npy --starts 0:4096 --method gram \
            --workgroup-size "$BEST_WG" --out /tmp/real_new.json
        /tmp/x/usr/bin/luajit -e 'package.path="lua/?.lua;"..package.path; package.cpath="build/?.so;"..package.cpath
            require("divgpu").load_embeddings(".campaign/real20k.npy"):write("/tmp/real.json")' 2>>"$LOGS/tune.log"
        timed real_old256 timeout 40 "${OLD_DIVGPU[@]}" run --embeddings /tmp/real.json --starts 0:256 --out /tmp/real_old256.json
        timed real_new256 timeout 40 bin/divgpu run --embeddings /tmp/real.json --starts 0:256 --method gram --out /tmp/real_new256.json
        cmp /tmp/real_old256.json /tmp/real_new256.json && echo "  real_new256 vs real_old256: cmp identical" | tee -a "$OUT/summary.txt" \
            || echo "  real_new256 vs real_old256: DIFFER" | tee -a "$OUT/summary.txt"
    fi
    ;;
*)
    echo "unknown mode $mode" >&2
    exit 2
    ;;
esac
done
