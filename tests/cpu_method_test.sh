#!/usr/bin/env bash
# The CPU method through the command line: with no device named on a machine
# whose only Vulkan device is a CPU one (lavapipe), auto weighs the host's
# cores beside it and takes them, saying why; --device cpu and --method cpu
# name the host. Every cache is the bytes of the Vulkan methods' and
# verifies against the CPU mirror. Twins: with a device named (DIVGPU_DEVICE
# or --device 0), auto stays on the Vulkan device; a cache with one winner
# changed is refused by verify.
set -uo pipefail
cd "$(dirname "$0")/.."
source tests/lib.sh
unset DIVGPU_DEVICE

# 64 starts x 200 steps: enough work that the estimates favour the host (on a
# job of a few milliseconds the fixed costs decide, and auto may stay on lavapipe).
t=$tmp/t.json
$divgpu synth --n 400 --dim 24 --clusters 6 --seed 3 --out "$t" >/dev/null

expect_ok "auto on lavapipe: the host" $divgpu run --embeddings "$t" --starts 0:64 --length 200 --out "$tmp/auto.json"
check "auto says it took the host's cores, and why" grep -q "method cpu (auto: the only devices are CPU ones; estimated cpu" "$tmp/stderr"
expect_ok "--device cpu" $divgpu run --device cpu --embeddings "$t" --starts 0:64 --length 200 --out "$tmp/device.json" --quiet
expect_ok "--method cpu" $divgpu run --method cpu --embeddings "$t" --starts 0:64 --length 200 --out "$tmp/method.json" --quiet
expect_ok "--device 0 --method gram (lavapipe)" $divgpu run --device 0 --method gram --embeddings "$t" --starts 0:64 --length 200 --out "$tmp/gram.json" --quiet
expect_ok "--device 0 --method direct (lavapipe)" $divgpu run --device 0 --method direct --embeddings "$t" --starts 0:64 --length 200 --out "$tmp/direct.json" --quiet
for c in auto device method; do
    check "$c: the same bytes as gram on lavapipe" cmp -s "$tmp/$c.json" "$tmp/gram.json"
done
check "gram and direct on lavapipe agree" cmp -s "$tmp/gram.json" "$tmp/direct.json"
expect_ok "the CPU method's cache verifies against the mirror" $divgpu verify --embeddings "$t" --cache "$tmp/auto.json"

# All starts in full: several batches of the CPU method, against the mirror.
expect_ok "every start in full (several batches)" $divgpu run --method cpu --embeddings "$t" --out "$tmp/full.json" --quiet
expect_ok "every start in full verifies (a sample of 40)" $divgpu verify --embeddings "$t" --cache "$tmp/full.json" --sample 40

# Twins.
DIVGPU_DEVICE=0 $divgpu run --embeddings "$t" --starts 0:4 --length 10 --out "$tmp/named.json" 2>"$tmp/named.err" >/dev/null
check "twin: DIVGPU_DEVICE=0 keeps auto on the Vulkan device" bash -c "grep -q '^divgpu: method ' '$tmp/named.err' && ! grep -q 'method cpu' '$tmp/named.err'"
$divgpu run --device 0 --embeddings "$t" --starts 0:4 --length 10 --out "$tmp/zero.json" 2>"$tmp/zero.err" >/dev/null
check "twin: --device 0 keeps auto on the Vulkan device" bash -c "grep -q '^divgpu: method ' '$tmp/zero.err' && ! grep -q 'method cpu' '$tmp/zero.err'"
# A Vulkan kernel's option (the CPU method would ignore it) keeps auto on the device too.
$divgpu run --workgroup-size 64 --embeddings "$t" --starts 0:64 --length 200 --out "$tmp/wg.json" 2>"$tmp/wg.err" >/dev/null
check "twin: --workgroup-size keeps auto on the Vulkan device" bash -c "grep -q '^divgpu: method ' '$tmp/wg.err' && ! grep -q 'method cpu' '$tmp/wg.err'"
python3 - "$tmp/auto.json" "$tmp/bad.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
s = c["sequences"][3]
s[5], s[6] = s[6], s[5]
json.dump(c, open(sys.argv[2], "w"), separators=(",", ":"))
PY
check "twin: a cache with two winners swapped fails verify" bash -c "! $divgpu verify --embeddings '$t' --cache '$tmp/bad.json' --quiet 2>/dev/null"
finish
