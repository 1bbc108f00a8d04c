#!/usr/bin/env bash
# The acceptance measurements still owed, each mode fitting one device call
# (at most 10 minutes; predictions first: bench/notes/2026-12-01_acceptance.md):
#   bash bench/acceptance_campaign.sh seed      24 alternating pairs of gram on the seed batch against PyTorch
#   bash bench/acceptance_campaign.sh mid       gram on 65,536 x 4,096 x 1,025 against PyTorch
#   bash bench/acceptance_campaign.sh large     gram on 131,072 x 2,048 x 257 against PyTorch
#   bash bench/acceptance_campaign.sh diagnose  where gram leaves the contract on a large table (gram_diagnose.lua)
#   bash bench/acceptance_campaign.sh parity    the certified filters on this device: gram_parity.lua
#                                               (every placement, the instrumented bound, the twins) and
#                                               the tensor filter's two paths bit for bit (tensor_paths.lua)
#   bash bench/acceptance_campaign.sh real      the real table (25,000 texts) in full against PyTorch, all starts
#   bash bench/acceptance_campaign.sh gemm      the GEMM shape against PyTorch in pairs (seed batch
#                                               --length 501, 65,536 x 4,096 --length 201)
#   bash bench/acceptance_campaign.sh gemm_tune the GEMM shape's tilings (bench/gemm_tune.lua) at 65,536 x 768 x 4,096
#                                               and 1,048,576 x 384 x 1,024, alternating, against the shipped one
#   bash bench/acceptance_campaign.sh big       262,144 x 768 x 4,096 x 257: auto against PyTorch,
#                                               verify --sample on the mirror; tensor and gemm on 8 steps
#   bash bench/acceptance_campaign.sh tensor    the tensor filter on tensor cores: each tiling against the plain
#                                               path bit for bit (and the twin), the products' rate, then
#                                               262,144 x 768 x 4,096 x 257 against PyTorch, verify --sample
#   bash bench/acceptance_campaign.sh million   1,048,576 x 384 made here as .npy, 1,024 sequences,
#                                               --length 101, binary cache, the rows layout beside,
#                                               verify --sample, PyTorch beside
#   bash bench/acceptance_campaign.sh quick     one short call: the tensor filter's paths and rate on the seed
#                                               table, then the big job and the million by auto against PyTorch
#                                               (AUTO_MID=1: large_auto too)
#   bash bench/acceptance_campaign.sh large_auto  131,072 x 768 x 2,048 x 257 by auto, by gram and by tensor,
#                                               the outputs compared, PyTorch beside
#   bash bench/acceptance_campaign.sh stall     gram_parity.lua's third check in variants, each under a
#                                               timeout, a line a chunk (bench/gram_stall_probe.lua)
#   bash bench/acceptance_campaign.sh variants  the step kernel's forms (uniform barriers, warp-uniform branches) on the
#                                               stall table at 512 threads, then timed on the seed batch and 65,536
#   bash bench/acceptance_campaign.sh build     G's build, its tiles in row order against groups of tile-rows,
#                                               at 65,536 and 131,072 items (bench/gram_tune.lua; alternating)
# (gram = seed mid; direct = real gemm big.) Several modes may share a call.
# Every call measures the ceilings first (f32/f64 fma, copy, SGEMM), once,
# so each headline stands beside them from the same call. Each step runs
# under its own timeout and writes to $OUT as it goes. SMALL=1 runs every
# step on tables a few hundred items long and skips the PyTorch steps when
# torch is missing (on the CPU when torch sees no GPU): a dry run of the script itself on lavapipe, measuring nothing.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/divgpu-out}
LOGS=${LOGS:-/tmp/divgpu-logs}
mkdir -p "$OUT" "$LOGS"
if [ "${SMALL:-0}" = 1 ]; then
    # With torch but no CUDA here, the PyTorch steps run on the CPU (campaign_lib.sh): the dry run covers them too.
    have_torch() { python3 -c "import torch" 2>/dev/null; }
else
    have_torch() { true; }
fi
source bench/campaign_lib.sh

# Sizes: the acceptance's, or SMALL's stand-ins (N, D, sequences, lengths).
if [ "${SMALL:-0}" = 1 ]; then
    SEED_N=300 SEED_S=64 MID_N=512 MID_S=40 MID_L=60 GEMM_L=21 BIG_N=1024 BIG_D=64 BIG_S=48 BIG_L=9
    LARGE_N=700 LARGE_S=16 MILLION_N=4096 MILLION_S=32 PAIRS=${PAIRS:-2} REAL=${REAL:-}
else
    SEED_N=8359 SEED_S=3584 MID_N=65536 MID_S=4096 MID_L=1025 GEMM_L=201 BIG_N=262144 BIG_D=768 BIG_S=4096
    BIG_L=257 LARGE_N=131072 LARGE_S=2048 MILLION_N=1048576 MILLION_S=1024 PAIRS=${PAIRS:-24} REAL=${REAL:-.campaign/real20k.npy}
fi
WG=${WG:-256}  # the shipped default (512 was faster on the seed batch but stalls on some tables: bench/RESULTS.md)

npy_table() {  # npy_table N D -> path of the clustered synthetic table as .npy, made here
    local path=/tmp/npy_$1x$2/t.npy
    mkdir -p "$(dirname "$path")"
    [ -f "$path" ] || bin/divgpu synth --n "$1" --dim "$2" --clusters 16 --seed 1 --out "$path" >/dev/null
    echo "$path"
}

ceilings() {  # the rates every headline stands beside, measured in this call
    { nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv \
        2>/dev/null || bin/divgpu info | head -3; } | tee "$OUT/gpu.txt"
    timeout 60 luajit bench/peaks.lua $([ "${SMALL:-0}" = 1 ] && echo --quick) 2>"$LOGS/peaks.log" | tee "$OUT/peaks.jsonl"
    if have_torch && [ "${PEER_DEVICE:-cuda}" = cuda ]; then timeout 40 python3 bench/peers/ceilings.py | tee "$OUT/ceilings.jsonl"; fi
}

pairs() {  # pairs NAME TIMEOUT whole_run_pairs.py ARGS...: alternating pairs against PyTorch direct
    local name=$1 limit=$2; shift 2
    if ! have_torch; then echo "  $name: skipped (no torch here)" | tee -a "$OUT/summary.txt"; return; fi
    DIVGPU_WORKGROUP=${DIVGPU_WORKGROUP:-} timeout "$limit" python3 bench/whole_run_pairs.py "$@" \
        --peer-device "${PEER_DEVICE:-cuda}" --out-dir "/tmp/pairs_$name" --json "$OUT/pairs_$name.json" 2>"$LOGS/pairs_$name.log" \
        | tee "$LOGS/pairs_$name.txt" | tail -n 3 | sed "s/^/  $name: /" | tee -a "$OUT/summary.txt"
}

against_peer() {  # against_peer NAME TABLE STARTS LENGTH: PyTorch direct once, then compared with each divgpu cache given
    local name=$1 tbl=$2 starts=$3 length=$4; shift 4
    if ! have_torch; then echo "  $name: skipped (no torch here)" | tee -a "$OUT/summary.txt"; return; fi
    PEER_TIMEOUT=200 peer "$name" torch_direct.py "$tbl" "$starts" "$length"
    for ours in "$@"; do same "$ours" "$name"; done
}

seed() {
    SEED=$(npy_table "$SEED_N" 768)
    DIVGPU_WORKGROUP=$WG pairs seed "$((PAIRS * 16 + 60))" --embeddings "$SEED" --starts "0:$SEED_S" --length "$SEED_N" \
        --pairs "$PAIRS" --method gram
}

mid() {
    MID=$(npy_table "$MID_N" 768)
    divgpu_run mid_gram "$MID" "0:$MID_S" "$MID_L" gram --workgroup-size "$WG"
    against_peer mid_torch "$MID" "0:$MID_S" "$MID_L" mid_gram
}

large() {  # 131,072 x 2,048 x 257: G's build and the steps with the register page within budget
    LARGE=$(npy_table "$LARGE_N" 768)
    divgpu_run large_gram "$LARGE" "0:$LARGE_S" 257 gram --workgroup-size "$WG"
    against_peer large_torch "$LARGE" "0:$LARGE_S" 257 large_gram
}

diagnose() {  # where gram leaves the contract on a large table (bench/gram_diagnose.lua)
    timeout 300 luajit bench/gram_diagnose.lua $([ "${SMALL:-0}" = 1 ] || echo 20000 65536) >"$OUT/gram_diagnose.txt" 2>"$LOGS/gram_diagnose.log"
    echo "  gram_diagnose: exit $?" | tee -a "$OUT/summary.txt"
    cat "$OUT/gram_diagnose.txt" | sed 's/^/  /' | tee -a "$OUT/summary.txt"
}

parity() {
    # The certified filters on this device: every placement with the instrumented bound, the twins.
    timeout 200 luajit bench/gram_parity.lua >"$OUT/gram_parity.txt" 2>"$LOGS/gram_parity.log"
    echo "  gram_parity: exit $?, $(grep -c '^PASS' "$OUT/gram_parity.txt") passed, $(grep -c '^FAIL' "$OUT/gram_parity.txt") failed" \
        | tee -a "$OUT/summary.txt"
    # The tensor filter's products on the plain path and on cooperative matrices: the same integers.
    timeout 90 luajit bench/tensor_paths.lua "synth:$SEED_N:768" "0:$SEED_S" 9 >"$OUT/tensor_paths.jsonl" 2>"$LOGS/tensor_paths.log"
    echo "  tensor_paths: exit $?; $(tail -n 1 "$OUT/tensor_paths.jsonl")" | tee -a "$OUT/summary.txt"
}

stall() {  # where gram_parity.lua's third check stops making progress on this device
    local n=1000 starts=64 limit=${STALL_LIMIT:-12}
    [ "${SMALL:-0}" = 1 ] && n=300 starts=8
    # 2026-12-02 call 1: only wg=256 ended; every other variant stopped in its first dispatch of
    # several steps. These look for what else frees it.
    # 2026-12-02 afternoon: the barriers made the same in every step (uniform=1), and the
    # shipped source compiled at run time (runtime=1, the floor's path), beside the check itself.
    local variants=("" "runtime=1" "uniform=1" "uniform=1 n=1536" "wg=384 uniform=1" "floor=1")
    for variant in "${variants[@]}"; do
        # At the threads it stalled at (the default is 256 since): a variant's wg= comes after and wins.
        timeout "$limit" luajit bench/gram_stall_probe.lua n=$n starts=$starts wg=${STALL_WG:-512} $variant >"$LOGS/stall.out" 2>"$LOGS/stall.log"
        local rc=$?
        { echo "  stall [${variant:-as the check}]: exit $rc, $(grep -c '^chunk' "$LOGS/stall.out") chunks; $(tail -n 1 "$LOGS/stall.out")"
          tail -n 1 "$LOGS/stall.log" | sed 's/^/    err: /'; } | tee -a "$OUT/summary.txt"
        cat "$LOGS/stall.out" >>"$OUT/stall.txt"
    done
}

variants() {  # the step kernel's forms on the stall table at 512 threads, then timed on the seed batch and at 65,536
    local limit=${STALL_LIMIT:-12} small=${SMALL:-0}
    local stall_n=1000 seed_n=$SEED_N seed_s=$SEED_S mid_n=$MID_N mid_s=$MID_S mid_l=$MID_L
    [ "$small" = 1 ] && stall_n=300
    for variant in "warp=1" "warp=1 n=1536" "wg=384 warp=1" "uniform=1 n=1025" "wg=448"; do
        timeout "$limit" luajit bench/gram_stall_probe.lua n=$stall_n starts=64 wg=512 $variant >"$LOGS/variant.out" 2>"$LOGS/variant.log"
        echo "  stall table [wg=512 $variant]: exit $?, $(grep -c '^chunk' "$LOGS/variant.out") chunks; $(tail -n 1 "$LOGS/variant.out")" \
            | tee -a "$OUT/summary.txt"
        cat "$LOGS/variant.out" >>"$OUT/variants_stall.txt"
    done
    # Alternating, twice: GPU time and a checksum of the output (every variant must give the same).
    for round in 1 2; do
        for variant in "wg=256" "wg=256 uniform=1" "wg=512 uniform=1" "wg=512 warp=1"; do
            for job in "seed n=$seed_n dim=768 seed=1 starts=$seed_s" "mid n=$mid_n dim=768 seed=1 starts=$mid_s length=$mid_l"; do
                set -- $job; local name=$1; shift
                timeout 60 luajit bench/gram_stall_probe.lua "$@" check=0 $variant >"$LOGS/variant.out" 2>"$LOGS/variant.log"
                echo "  $name round $round [$variant]: exit $?; $(grep '^ran in' "$LOGS/variant.out"); $(tail -n 1 "$LOGS/variant.out")" \
                    | tee -a "$OUT/summary.txt"
            done
        done
    done
}

build() {  # G's build: the shipped tiling against its tiles in groups of 8 and 16 tile-rows, alternating
    local mid=$MID_N large=$LARGE_N
    [ "${SMALL:-0}" = 1 ] && mid=512 large=700
    local D=build=16x16x8x8x8,compiled,pad=4,group=0 G8=build=16x16x8x8x8,compiled,pad=4,group=8
    local G16=build=16x16x8x8x8,compiled,pad=4,group=16
    timeout 100 luajit bench/gram_tune.lua "synth:$mid:768" 0:64 2 "$D,checkg" "$G8,checkg" "$G16,checkg" \
        "$D" "$G8" "$G16" "$D" "$G8" "$G16" >"$OUT/build_mid.jsonl" 2>"$LOGS/build_mid.log"
    echo "  build at $mid: exit $?" | tee -a "$OUT/summary.txt"
    # One G' of 64 GiB at a time: a process each.
    for config in "$D,checkg" "$G8,checkg" "$G16,checkg" "$D" "$G8" "$G16"; do
        timeout 40 luajit bench/gram_tune.lua "synth:$large:768" 0:64 2 "$config" >>"$OUT/build_large.jsonl" 2>>"$LOGS/build_large.log"
    done
    echo "  build at $large: done" | tee -a "$OUT/summary.txt"
    python3 - "$OUT/build_mid.jsonl" "$OUT/build_large.jsonl" <<'PY' | tee -a "$OUT/summary.txt"
import json, sys
for path in sys.argv[1:]:
    for line in open(path):
        try: j = json.loads(line)
        except ValueError: continue
        print("   ", j.get("n"), j.get("config"), "error: " + j["error"] if "error" in j else
              "%.4f s GPU, %.2f TFLOP/s, G %s, %s" % (j["build_gpu_seconds"], j["build_tflops"], j.get("g_check"), j["parity"]))
PY
}

real() {
    if [ -n "$REAL" ] && [ -f "$REAL" ]; then
        # 4,096 starts in full: the length is the table's N.
        REAL_N=$(python3 -c "import numpy, sys; print(numpy.load(sys.argv[1], mmap_mode='r').shape[0])" "$REAL")
        divgpu_run real_gram "$REAL" 0:4096 "$REAL_N" gram --workgroup-size "$WG"
        against_peer real_torch "$REAL" 0:4096 "$REAL_N" real_gram
    else
        echo "  real: no real table at '$REAL'" | tee -a "$OUT/summary.txt"
    fi
    SEED=$(npy_table "$SEED_N" 768)
    divgpu_run all_gram "$SEED" "0:$SEED_N" "$SEED_N" gram --workgroup-size "$WG"
}

gemm() {
    SEED=$(npy_table "$SEED_N" 768)
    # The GEMM shape against PyTorch, whole runs in pairs.
    pairs gemm_seed 120 --embeddings "$SEED" --starts "0:$SEED_S" --length 501 --pairs 6 --method direct --shape gemm
    MID=$(npy_table "$MID_N" 768)
    pairs gemm_mid 150 --embeddings "$MID" --starts "0:$MID_S" --length "$GEMM_L" --pairs 4 --method direct --shape gemm
}

big() {
    # Past G: auto's choice against PyTorch, the mirror on a sample, then the tensor filter on
    # 8 steps only (2026-12-02: the whole job projected at 43 min, too long for a call).
    BIG=$(npy_table "$BIG_N" "$BIG_D")
    divgpu_run big_auto "$BIG" "0:$BIG_S" "$BIG_L" auto
    against_peer big_torch "$BIG" "0:$BIG_S" "$BIG_L" big_auto
    # The mirror on a sample fixed before the run (seed 20261201; the mirror runs a sequence a core).
    timeout 120 bin/divgpu verify --embeddings "$BIG" --cache /tmp/big_auto.json --sample 16 --seed 20261201 \
        >"$LOGS/big_verify.out" 2>"$LOGS/big_verify.log"
    echo "  big_auto verify --sample 16: exit $?; $(tail -n 1 "$LOGS/big_verify.out")" | tee -a "$OUT/summary.txt"
    TENSOR_L=${TENSOR_L:-9}
    divgpu_run big_tensor "$BIG" "0:$BIG_S" "$TENSOR_L" tensor --progress-interval 10
    divgpu_run big_gemm_short "$BIG" "0:$BIG_S" "$TENSOR_L" direct --shape gemm
    cmp /tmp/big_gemm_short.json /tmp/big_tensor.json && echo "  big_tensor vs big_gemm_short: cmp identical" | tee -a "$OUT/summary.txt" \
        || echo "  big_tensor vs big_gemm_short: DIFFER" | tee -a "$OUT/summary.txt"
}

gemm_tune() {  # the GEMM shape's tilings at 65,536 x 768 x 4,096 and 1,048,576 x 384 x 1,024, alternating
    timeout 120 luajit bench/gemm_tune.lua "$MID_N" 768 "$MID_S" 21 3 >"$OUT/gemm_tune_mid.jsonl" 2>"$LOGS/gemm_tune_mid.log"
    echo "  gemm_tune (mid): exit $?" | tee -a "$OUT/summary.txt"
    grep -v '"round"' "$OUT/gemm_tune_mid.jsonl" | sed 's/^/    /' | tee -a "$OUT/summary.txt"
    timeout 150 luajit bench/gemm_tune.lua "$MILLION_N" 384 "$MILLION_S" 11 3 >"$OUT/gemm_tune_million.jsonl" \
        2>"$LOGS/gemm_tune_million.log"
    echo "  gemm_tune (million): exit $?" | tee -a "$OUT/summary.txt"
    grep -v '"round"' "$OUT/gemm_tune_million.jsonl" | sed 's/^/    /' | tee -a "$OUT/summary.txt"
}

tensor() {  # the tensor filter on tensor cores: parity with the plain path, the products' rate, then the big job
    TILINGS=${TILINGS:-"4,2,2,4,2,1 2,2,2,2,1,2"}  # wr,wc,fr,fc,k,stages: the shipped one first
    timeout 150 luajit bench/tensor_paths.lua "synth:$SEED_N:768" "0:$SEED_S" 9 "$TILINGS" 1 \
        >"$OUT/tensor_paths.jsonl" 2>"$LOGS/tensor_paths.log"
    echo "  tensor_paths (seed table): exit $?" | tee -a "$OUT/summary.txt"
    sed 's/^/    /' "$OUT/tensor_paths.jsonl" | tee -a "$OUT/summary.txt"
    [ "${TENSOR_BIG:-1}" = 1 ] || return 0  # TENSOR_BIG=0: the seed table's paths and rates only
    BIG=$(npy_table "$BIG_N" "$BIG_D")
    # BIG_PATHS=0 leaves out the big table's check (the plain path's step there takes minutes).
    if [ "${BIG_PATHS:-1}" = 1 ]; then
        timeout 120 luajit bench/tensor_paths.lua "$BIG" "0:$((BIG_S / 2))" 3 "${BIG_TILINGS:-4,2,2,4,2,1}" 0 \
            >"$OUT/tensor_paths_big.jsonl" 2>"$LOGS/tensor_paths_big.log"
        echo "  tensor_paths (big table): exit $?" | tee -a "$OUT/summary.txt"
        sed 's/^/    /' "$OUT/tensor_paths_big.jsonl" | tee -a "$OUT/summary.txt"
    fi
    timed big_tensor timeout "${TENSOR_LIMIT:-150}" bin/divgpu run --embeddings "$BIG" --starts "0:$BIG_S" --length "$BIG_L" \
        --method tensor --progress-interval 10 --out /tmp/big_tensor.json
    against_peer big_torch "$BIG" "0:$BIG_S" "$BIG_L" big_tensor
    timeout 120 bin/divgpu verify --embeddings "$BIG" --cache /tmp/big_tensor.json --sample 16 --seed 20261201 \
        >"$LOGS/big_verify.out" 2>"$LOGS/big_verify.log"
    echo "  big_tensor verify --sample 16: exit $?; $(tail -n 1 "$LOGS/big_verify.out")" | tee -a "$OUT/summary.txt"
}

large_auto() {  # large()'s job by auto, beside gram and tensor asked for and PyTorch
    LARGE=$(npy_table "$LARGE_N" 768)
    for how in auto gram tensor; do
        timed "large_$how" timeout 90 bin/divgpu run --embeddings "$LARGE" --starts "0:$LARGE_S" --length 257 \
            --method "$how" --out "/tmp/large_$how.json" --progress-interval 10
    done
    for how in gram tensor; do
        cmp /tmp/large_auto.json "/tmp/large_$how.json" && echo "  large_$how vs large_auto: cmp identical" \
            | tee -a "$OUT/summary.txt" || echo "  large_$how vs large_auto: DIFFER" | tee -a "$OUT/summary.txt"
    done
    against_peer large_torch "$LARGE" "0:$LARGE_S" 257 large_auto
}

quick() {  # one short call: the tensor filter's paths and rate (seed table), the big job and the million by auto, PyTorch beside
    # (AUTO_MID=1: also large_auto, auto's pick at 131,072 x 768 x 2,048 x 257 against gram, tensor and PyTorch)
    TENSOR_BIG=0 tensor
    BIG=$(npy_table "$BIG_N" "$BIG_D")
    timed big_auto timeout 150 bin/divgpu run --embeddings "$BIG" --starts "0:$BIG_S" --length "$BIG_L" \
        --progress-interval 10 --out /tmp/big_auto.json
    against_peer big_torch "$BIG" "0:$BIG_S" "$BIG_L" big_auto
    if [ "${QUICK_VERIFY:-1}" = 1 ]; then  # the mirror on a sample fixed before the run (about 25 s)
        timeout 120 bin/divgpu verify --embeddings "$BIG" --cache /tmp/big_auto.json --sample 16 --seed 20261201 \
            >"$LOGS/big_verify.out" 2>"$LOGS/big_verify.log"
        echo "  big_auto verify --sample 16: exit $?; $(tail -n 1 "$LOGS/big_verify.out")" | tee -a "$OUT/summary.txt"
    fi
    if [ "${AUTO_MID:-0}" = 1 ]; then large_auto; fi
    M=$(npy_table "$MILLION_N" 384)
    timed million_run timeout 200 bin/divgpu run --embeddings "$M" --starts "0:$MILLION_S" --length 101 --format binary \
        --out /tmp/million.bin --progress-interval 5
    # Again: the driver's pipeline cache now warm, as on a user's second run (the same bytes).
    timed million_again timeout 200 bin/divgpu run --embeddings "$M" --starts "0:$MILLION_S" --length 101 --format binary \
        --out /tmp/million_again.bin --progress-interval 5
    cmp /tmp/million.bin /tmp/million_again.bin && echo "  million_again vs million_run: cmp identical" | tee -a "$OUT/summary.txt" \
        || echo "  million_again vs million_run: DIFFER" | tee -a "$OUT/summary.txt"
    timed million_convert timeout 60 bin/divgpu convert /tmp/million.bin --out /tmp/million_run.json
    against_peer million_torch "$M" "0:$MILLION_S" 101 million_run
}

million() {
    t0=$EPOCHREALTIME
    M=$(npy_table "$MILLION_N" 384)
    echo "  made $M ($(stat -c %s "$M") bytes) in $(awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }') s" \
        | tee -a "$OUT/summary.txt"
    timed million_run timeout 200 bin/divgpu run --embeddings "$M" --starts "0:$MILLION_S" --length 101 --format binary \
        --out /tmp/million.bin --progress-interval 5
    # The rows layout (no transpose on the host, loads strided by D) against the default, same bytes.
    timed million_rows timeout 120 bin/divgpu run --embeddings "$M" --starts "0:$MILLION_S" --length 101 --format binary \
        --method direct --shape gemm --layout rows --out /tmp/million_rows.bin --progress-interval 5
    cmp /tmp/million.bin /tmp/million_rows.bin && echo "  million_rows vs million_run: cmp identical" | tee -a "$OUT/summary.txt" \
        || echo "  million_rows vs million_run: DIFFER" | tee -a "$OUT/summary.txt"
    # The tensor filter on the same job, whatever auto chose.
    timed million_tensor timeout 120 bin/divgpu run --embeddings "$M" --starts "0:$MILLION_S" --length 101 --format binary \
        --method tensor --out /tmp/million_tensor.bin --progress-interval 5
    cmp /tmp/million.bin /tmp/million_tensor.bin && echo "  million_tensor vs million_run: cmp identical" | tee -a "$OUT/summary.txt" \
        || echo "  million_tensor vs million_run: DIFFER" | tee -a "$OUT/summary.txt"
    timed million_verify timeout 120 bin/divgpu verify --embeddings "$M" --cache /tmp/million.bin --sample 16 --seed 20261201
    timed million_convert timeout 60 bin/divgpu convert /tmp/million.bin --out /tmp/million_run.json
    against_peer million_torch "$M" "0:$MILLION_S" 101 million_run
    ls -l /tmp/million.bin /tmp/million_run.json | tee -a "$OUT/summary.txt"
}

for mode in "$@"; do
    case "$mode" in
    seed | mid | large | diagnose | parity | real | gemm | gemm_tune | big | tensor | million | quick | large_auto | stall | variants | build | gram | direct) ;;
    *) echo "unknown mode $mode (seed, mid, large, diagnose, parity, real, gemm, gemm_tune, big, tensor, million, quick, large_auto, stall, variants, build; gram, direct)" >&2; exit 2 ;;
    esac
done
echo "== ceilings ($(date -u +%FT%TZ))" | tee -a "$OUT/summary.txt"
ceilings
for mode in "$@"; do
    echo "== $mode ($(date -u +%FT%TZ))" | tee -a "$OUT/summary.txt"
    case "$mode" in
    gram) seed; mid ;;
    direct) real; gemm; big ;;
    *) "$mode" ;;
    esac
done
echo "== end ($(date -u +%FT%TZ))" | tee -a "$OUT/summary.txt"
