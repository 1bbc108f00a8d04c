#!/usr/bin/env bash
# The Gram method's campaign on the H200 device machine (bench/README.md#running-a-campaign-on-an-offline-nvidia-machine),
# with the PyTorch peers (bench/peers/) in the same run:
#   bash bench/gram_campaign.sh sanity    info, gram parity on the device, seed batch by gram
#   bash bench/gram_campaign.sh seed      seed batch, full length: gram, direct (columns), torch direct, torch f64 Gram
#   bash bench/gram_campaign.sh all       all 8,359 starts, full length: gram, torch direct
#   bash bench/gram_campaign.sh large     65,536 x 768, 4,096 sequences x 1,024 steps: gram, direct, torch direct
#   bash bench/gram_campaign.sh roofline  seed batch: G bytes/s and window histogram beside copy bandwidth, same call
#   bash bench/gram_campaign.sh pairs     seed batch, full length: gram vs torch direct, 24 alternating whole-run pairs
#   bash bench/gram_campaign.sh scaling   N = 8,192 * 2^k up to 131,072, 4,096 sequences x 256 steps: gram
# Several modes in one call: bash bench/gram_campaign.sh sanity seed all
# Needs .gl (Debian debs of the Vulkan loader, libglvnd, LuaJIT, lua-argparse)
# and build/divgpu.so carried along. Results go to $OUT (one JSON line per job
# in $OUT/results.jsonl, full logs beside it).
# SMALL=1: a dry run of the same steps on lavapipe (tests/peers_bench_smoke.sh):
# tables of a few hundred items, gram_parity.lua's quick mode, the PyTorch
# peers on the CPU where torch sees no GPU (campaign_lib.sh), measuring nothing.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/divgpu-out}
LOGS=${LOGS:-/tmp/divgpu-logs}  # full logs; $OUT keeps the summaries (the device tool returns 8 files)
mkdir -p "$OUT" "$LOGS"

source bench/campaign_lib.sh
# Sizes (N, starts, lengths): the campaign's, or SMALL's stand-ins.
if [ "${SMALL:-0}" = 1 ]; then
    SEED_N=300 SEED_S=64 LARGE_N=700 LARGE_S=16 LARGE_L=101 SCALING_ARGS=(1024 64 16 256 64)
else
    SEED_N=8359 SEED_S=3584 LARGE_N=65536 LARGE_S=4096 LARGE_L=1025 SCALING_ARGS=("${MAX_N:-131072}" 4096 256)
fi

for mode in "${@:-sanity}"; do
echo "== $mode"
case "$mode" in
sanity)
    { nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv 2>/dev/null \
        || echo "no nvidia-smi"; } | tee "$LOGS/gpu.txt"
    bin/divgpu info | tee "$LOGS/info.txt"
    luajit bench/gram_parity.lua 2>&1 | tee "$OUT/gram_parity.txt"
    SEED=$(table "$SEED_N")
    divgpu_run gram_seed "$SEED" "0:$SEED_S" "$SEED_N" gram
    ;;
seed)
    SEED=$(table "$SEED_N")
    divgpu_run gram_seed "$SEED" "0:$SEED_S" "$SEED_N" gram
    peer torch_direct_seed torch_direct.py "$SEED" "0:$SEED_S" "$SEED_N"
    peer torch_gram64_seed torch_gram64.py "$SEED" "0:$SEED_S" "$SEED_N"
    divgpu_run direct_seed "$SEED" "0:$SEED_S" "$SEED_N" direct --layout columns
    divgpu_run gram_seed_2 "$SEED" "0:$SEED_S" "$SEED_N" gram
    divgpu_run gram_seed_columns "$SEED" "0:$SEED_S" "$SEED_N" gram --layout columns
    same gram_seed direct_seed; same gram_seed torch_direct_seed; same gram_seed torch_gram64_seed
    same gram_seed gram_seed_columns
    ;;
layout)
    # gram's table layout, alternating pairs on the seed batch, full length.
    SEED=$(table "$SEED_N")
    for pair in 1 2 3; do
        divgpu_run "gram_rows_$pair" "$SEED" "0:$SEED_S" "$SEED_N" gram --layout rows
        divgpu_run "gram_columns_$pair" "$SEED" "0:$SEED_S" "$SEED_N" gram --layout columns
    done
    same gram_rows_1 gram_columns_1
    ;;
workgroup)
    # Threads per sequence, alternating: 128, 256 (default), 512.
    SEED=$(table "$SEED_N")
    for pair in 1 2; do
        for wg in 128 256 512; do divgpu_run "gram_wg${wg}_$pair" "$SEED" "0:$SEED_S" "$SEED_N" gram --workgroup-size $wg; done
    done
    same gram_wg128_1 gram_wg512_1
    ;;
roofline)
    # G's bytes per second and the window histogram (seed batch, full length)
    # beside the copy bandwidth and SGEMM rate measured in the same call.
    SEED=$(table "$SEED_N")
    CEILINGS=(--device "${PEER_DEVICE:-cuda}"); [ "${SMALL:-0}" = 1 ] && CEILINGS+=(--small)
    python3 bench/peers/ceilings.py "${CEILINGS[@]}" | tee "$OUT/ceilings.json"
    luajit bench/gram_roofline.lua "$SEED" "0:$SEED_S" | tee "$OUT/gram_roofline.json"
    python3 bench/peers/ceilings.py "${CEILINGS[@]}" | tee -a "$OUT/ceilings.json"
    ;;
pairs)
    # Whole runs, gram against the PyTorch direct peer, 24 alternating pairs on
    # the seed batch, full length (bench/whole_run_pairs.py; predictions in NOTES.md).
    SEED=$(table "$SEED_N")
    python3 bench/whole_run_pairs.py --embeddings "$SEED" --starts "0:$SEED_S" --length "$SEED_N" --pairs "${PAIRS:-24}" \
        --method gram --peer-device "${PEER_DEVICE:-cuda}" --json "$OUT/whole_run_pairs.json" 2>"$LOGS/whole_run_pairs.log" | tee "$OUT/whole_run_pairs.txt"
    ;;
final)
    # The final build beside the PyTorch peer in the same call: the seed batch, all starts.
    SEED=$(table "$SEED_N")
    divgpu_run gram_seed "$SEED" "0:$SEED_S" "$SEED_N" gram
    peer torch_direct_seed torch_direct.py "$SEED" "0:$SEED_S" "$SEED_N"
    divgpu_run gram_all "$SEED" "0:$SEED_N" "$SEED_N" gram
    peer torch_direct_all torch_direct.py "$SEED" "0:$SEED_N" "$SEED_N"
    same gram_seed torch_direct_seed; same gram_all torch_direct_all
    ;;
all)
    SEED=$(table "$SEED_N")
    divgpu_run gram_all "$SEED" "0:$SEED_N" "$SEED_N" gram
    peer torch_direct_all torch_direct.py "$SEED" "0:$SEED_N" "$SEED_N"
    same gram_all torch_direct_all
    ;;
large)
    LARGE=$(table "$LARGE_N")
    divgpu_run gram_large "$LARGE" "0:$LARGE_S" "$LARGE_L" gram
    peer torch_direct_large torch_direct.py "$LARGE" "0:$LARGE_S" "$LARGE_L"
    divgpu_run direct_large "$LARGE" "0:$LARGE_S" "${DIRECT_STEPS:-$LARGE_L}" direct --layout columns
    same gram_large torch_direct_large
    ;;
scaling)
    luajit bench/gram_scaling.lua "${SCALING_ARGS[@]}" 2>&1 | tee "$OUT/scaling.jsonl"
    ;;
esac
done
