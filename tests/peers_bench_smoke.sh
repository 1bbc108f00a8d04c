#!/usr/bin/env bash
# Every bench script that can run on lavapipe runs here on a tiny table
# (make test-peers, after tests/peers_test.sh), so a script that no longer
# runs against the current code fails a test instead of failing on the H200.
# Each check: the script exits 0 and prints what it prints when it works.
# Not here, and why: bench/tensor_paths.lua (int8 cooperative matrices,
# which lavapipe lacks), the device campaigns (campaign.sh, gram_campaign.sh,
# multi_gpu_campaign.sh, acceptance_campaign.sh, device_call.sh: an NVIDIA
# machine), serve_run.lua and peaks.lua (run by bench/protocol.py's smoke
# call in tests/peers_test.py), device_parity.lua and gram_parity.lua (the
# device campaigns' parity suites: over 5 minutes each on lavapipe, their
# checks the ones tests/*_spec.lua run there in make test; a quick mode for
# them is owed).
set -uo pipefail
cd "$(dirname "$0")/.."
source tests/lib.sh
export LUA_PATH='lua/?.lua;;' LUA_CPATH='build/?.so;;'
PY=${PEERS_PYTHON:-${PEERS_VENV:-$HOME/.cache/divgpu/peers-venv}/bin/python}
T=$tmp/t.json
bin/divgpu synth --n 300 --dim 64 --clusters 8 --seed 7 --out "$T" >/dev/null

# smoke NAME WANT CMD...: CMD exits 0 and its output contains WANT.
smoke() {
    local name=$1 want=$2; shift 2
    local out rc start=$SECONDS
    out=$(timeout 600 "$@" 2>&1); rc=$?
    if [ $rc -eq 0 ] && grep -qF -- "$want" <<<"$out"; then
        ok "$name ($((SECONDS - start)) s)"
    else
        not_ok "$name (exit $rc)" "$(tail -n 5 <<<"$out")"
    fi
}

smoke "fp16_divergence.lua" "identical" luajit bench/fp16_divergence.lua "$T" 4 10
smoke "gram_roofline.lua" '"mean_window"' luajit bench/gram_roofline.lua "$T" 0:4 10
smoke "gram_scaling.lua" '"n": 512' luajit bench/gram_scaling.lua 512 4 8 256 64
smoke "gram_tune.lua" '"config": "wg=256"' luajit bench/gram_tune.lua "$T" 0:4 10 wg=256
smoke "gram_stall_probe.lua" "identical to the mirror" luajit bench/gram_stall_probe.lua n=300 starts=4
smoke "gemm_tune.lua" "identical to the shipped tiling's" luajit bench/gemm_tune.lua 128 32 8 4 1
smoke "denormal_check.lua" "0 failed" luajit bench/denormal_check.lua 4 20
smoke "gram_diagnose.lua (SMALL=1)" "SAME gram, default placement" env SMALL=1 luajit bench/gram_diagnose.lua
smoke "device_parity.lua (SMALL=1)" "PASS twin: fp16-exact with a shrunk bound is caught" \
    env SMALL=1 luajit bench/device_parity.lua
smoke "gram_parity.lua (SMALL=1)" "PASS twin: dropped G row at a dispatch boundary fails" \
    env SMALL=1 luajit bench/gram_parity.lua
smoke "tensor_paths.lua (the plain path; no cooperative matrices here)" "plain against the CPU mirror: identical" \
    luajit bench/tensor_paths.lua synth:300:64 0:8 9
mkdir -p "$tmp/nogpu"
smoke "whole_run_pairs.py" "1 pairs: divgpu/torch_direct" "$PY" bench/whole_run_pairs.py --embeddings "$T" \
    --starts 0:4 --length 10 --pairs 1 --peer-device cpu --out-dir "$tmp/pairs"
smoke "no_gpu_pairs.sh (tiny)" "numpy_sgemm" bench/no_gpu_pairs.sh tiny 2 "$tmp/nogpu/raw.tsv"
finish
