#!/usr/bin/env bash
# Several GPUs in one process, on the two-H200 device machine (kind
# nvidia-h200-x2; bench/README.md's recipe for an offline NVIDIA machine):
#   bash bench/multi_gpu_campaign.sh sanity   info; 2 devices vs 1 on a small job (cmp)
#   bash bench/multi_gpu_campaign.sh gram     all 8,359 starts, full length, gram: 1 device vs
#                                             --device all, PAIRS alternating pairs (default 3)
#   bash bench/multi_gpu_campaign.sh final    gram pairs as above, the first with --stats (files in $OUT)
#   bash bench/multi_gpu_campaign.sh peer     PyTorch direct (one H200), all starts; after gram, compared with it
#   bash bench/multi_gpu_campaign.sh batchsize default batches against --batch 4180, 1 and 2 devices
#   bash bench/multi_gpu_campaign.sh bigbatch  one device: one batch of 8,359 against two of 4,180
#   bash bench/multi_gpu_campaign.sh overhead the wall time's breakdown, 1 and 2 devices (and
#                                             OLD_LUA=dir: an older driver's Lua, alternating)
#   bash bench/multi_gpu_campaign.sh direct   seed batch (3,584 starts), full length, direct:
#                                             1 device vs --device all, DIRECT_PAIRS pairs (default 1)
# Every 2-device cache is compared byte for byte (cmp) with its 1-device one.
# Scaling efficiency = T(1 device) / (2 x T(2 devices)) from each run's own
# "done in S s wall" (from driver.run's start: jobs made, G built, every batch
# written; the table's loading apart), per pair; summary in $OUT/scaling.txt.
# SMALL=1: a dry run of the same steps on lavapipe (tests/peers_bench_smoke.sh;
# "all" is its one device there): tables of a few hundred items, measuring nothing.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/divgpu-out}
LOGS=${LOGS:-/tmp/divgpu-logs}
mkdir -p "$OUT" "$LOGS"
source bench/campaign_lib.sh
# Sizes (N, the direct pairs' starts, the half batch): the campaign's, or SMALL's stand-ins.
if [ "${SMALL:-0}" = 1 ]; then N=300 SEED_S=64 B=150; else N=8359 SEED_S=3584 B=4180; fi

identical() {  # identical A B: cmp of the two caches
    if cmp -s "/tmp/$1.json" "/tmp/$2.json"; then r="byte-identical"; else r="DIFFERENT"; fi
    echo "  $1 vs $2: $r" | tee -a "$OUT/compare.txt"
}

pairs() {  # pairs NAME STARTS METHOD COUNT [extra...]: alternating 1-device / all-device runs
    local name=$1 starts=$2 method=$3 count=$4; shift 4
    for p in $(seq 1 "$count"); do
        divgpu_run "${name}_1dev_$p" "$SEED" "$starts" "$N" "$method" --device 0 "$@"
        divgpu_run "${name}_2dev_$p" "$SEED" "$starts" "$N" "$method" --device all "$@"
        identical "${name}_1dev_$p" "${name}_2dev_$p"
    done
}

for mode in "${@:-sanity}"; do
echo "== $mode"
case "$mode" in
sanity)
    { nvidia-smi --query-gpu=index,name,driver_version,clocks.sm,temperature.gpu --format=csv 2>/dev/null \
        || echo "no nvidia-smi"; } | tee "$OUT/gpus.txt"
    bin/divgpu info | tee "$LOGS/info.txt"
    SEED=$(table "$N")
    divgpu_run small_1dev "$SEED" 0:64 300 gram --device 0
    divgpu_run small_2dev "$SEED" 0:64 300 gram --device all --batch 16
    identical small_1dev small_2dev
    divgpu_run small_direct_2dev "$SEED" 0:64 300 direct --device all --batch 16
    identical small_1dev small_direct_2dev
    ;;
gram)
    SEED=$(table "$N")
    pairs gram_all "0:$N" gram "${PAIRS:-3}"
    ;;
direct)
    SEED=$(table "$N")
    pairs direct_seed "0:$SEED_S" direct "${DIRECT_PAIRS:-1}" --layout columns
    ;;
final)
    # The final code: PAIRS gram all-starts pairs, the first pair with --stats
    # (per-chunk figures, copied to $OUT for `divgpu plot`).
    SEED=$(table "$N")
    divgpu_run gram_all_1dev_1 "$SEED" "0:$N" "$N" gram --device 0 --stats "$OUT/gram_all_1dev.jsonl"
    divgpu_run gram_all_2dev_1 "$SEED" "0:$N" "$N" gram --device all --stats "$OUT/gram_all_2dev.jsonl"
    identical gram_all_1dev_1 gram_all_2dev_1
    for p in $(seq 2 "${PAIRS:-3}"); do
        divgpu_run "gram_all_1dev_$p" "$SEED" "0:$N" "$N" gram --device 0
        divgpu_run "gram_all_2dev_$p" "$SEED" "0:$N" "$N" gram --device all
        identical "gram_all_1dev_$p" "gram_all_2dev_$p"
    done
    ;;
peer)
    # PyTorch's direct peer on one H200 beside gram on one and two, same call.
    SEED=$(table "$N")
    peer torch_direct_all torch_direct.py "$SEED" "0:$N" "$N"
    same gram_all_2dev_1 torch_direct_all
    ;;
batchsize)
    # Batch size against the default's (one device: 3 of 2,787; two: 4 of 2,090),
    # gram all starts: --batch 4180 (B) gives one device 2 batches, two devices 1 each.
    SEED=$(table "$N")
    for p in $(seq 1 "${PAIRS:-2}"); do
        divgpu_run "gram_all_1dev_b$p" "$SEED" "0:$N" "$N" gram --device 0
        divgpu_run "gram_all_1dev_b4180_$p" "$SEED" "0:$N" "$N" gram --device 0 --batch "$B"
        divgpu_run "gram_all_2dev_b$p" "$SEED" "0:$N" "$N" gram --device all
        divgpu_run "gram_all_2dev_b4180_$p" "$SEED" "0:$N" "$N" gram --device all --batch "$B"
        identical "gram_all_1dev_b$p" "gram_all_2dev_b4180_$p"
    done
    ;;
bigbatch)
    # One device: one batch of all 8,359 against two of 4,180 (gram, all starts).
    SEED=$(table "$N")
    for p in $(seq 1 "${PAIRS:-2}"); do
        divgpu_run "gram_all_1dev_b8359_$p" "$SEED" "0:$N" "$N" gram --device 0 --batch "$N"
        divgpu_run "gram_all_1dev_b4180_$p" "$SEED" "0:$N" "$N" gram --device 0 --batch "$B"
        divgpu_run "gram_all_2dev_b4180_$p" "$SEED" "0:$N" "$N" gram --device all --batch "$B"
        identical "gram_all_1dev_b8359_$p" "gram_all_2dev_b4180_$p"
    done
    ;;
overhead)
    # Where the wall time goes (the "wall time:" line), the driver before
    # several devices (its Lua in $OLD_LUA, if given) against this one, alternating.
    SEED=$(table "$N")
    for p in $(seq 1 "${OVERHEAD_PAIRS:-2}"); do
        if [ -n "${OLD_LUA:-}" ]; then
            timed "old_gram_all_$p" env LUA_PATH="$OLD_LUA/?.lua;lua/?.lua;$LUA_PATH" luajit -e \
                'os.exit(require("divgpu.cli").main(arg))' /dev/null run --embeddings "$SEED" --starts "0:$N" \
                --method gram --device 0 --out "/tmp/old_gram_all_$p.json"
        fi
        divgpu_run "gram_all_1dev_o$p" "$SEED" "0:$N" "$N" gram --device 0
        divgpu_run "gram_all_2dev_o$p" "$SEED" "0:$N" "$N" gram --device all
    done
    grep -h "wall time" "$LOGS"/*_o*.log "$LOGS"/old_*.log 2>/dev/null | tee -a "$OUT/overhead.txt"
    ;;
esac
done

# Per pair: T1 / (2 T2) from each run's "done in" line.
python3 - "$LOGS" <<'PY' | tee "$OUT/scaling.txt"
import glob, os, re, statistics, sys
logs = sys.argv[1]
done = {}
for path in glob.glob(os.path.join(logs, "*.log")):
    m = re.search(r"done in ([0-9.]+) s wall, ([0-9.]+) s GPU", open(path).read())
    if m:
        done[os.path.basename(path)[:-4]] = (float(m.group(1)), float(m.group(2)))
for job in ("gram_all", "direct_seed"):
    rows = []
    p = 1
    while f"{job}_1dev_{p}" in done and f"{job}_2dev_{p}" in done:
        (w1, g1), (w2, g2) = done[f"{job}_1dev_{p}"], done[f"{job}_2dev_{p}"]
        rows.append((w1, w2, w1 / (2 * w2)))
        print(f"{job} pair {p}: 1 device {w1:.3f} s wall ({g1:.3f} GPU), 2 devices {w2:.3f} s wall "
              f"({g2:.3f} GPU summed), speed-up {w1 / w2:.3f}, efficiency {w1 / (2 * w2):.3f}")
        p += 1
    if rows:
        eff = [r[2] for r in rows]
        print(f"{job}: {len(rows)} pair(s), efficiency median {statistics.median(eff):.3f} "
              f"(range {min(eff):.3f}..{max(eff):.3f})")
PY
