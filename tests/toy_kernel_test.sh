#!/usr/bin/env bash
# Adding a kernel touches its .comp and its descriptor only (and adding a
# method its files plus one registry line: tests/toy_method_test.sh, run at the end). In a temporary
# copy of the checkout (its tracked files, committed in a repository of its
# own) a toy direct-method shape is added: shaders/toy.comp (the reference
# scan in two halves: another split of the candidates, the same winners)
# and lua/divgpu/kernels/toy.lua. The copy is built; the registry finds the
# shape (run --shape toy, which the CLI now lists); its cache verifies
# against the CPU mirror and equals the reference shape's byte for byte;
# and `git status` shows those two files and nothing else. The twin: the
# same descriptor with two push fields swapped is refused when the pipeline
# is made, naming both orders.
#
# The copy builds into the same CARGO_TARGET_DIR (shaderc is not rebuilt;
# the divgpu crate is, about a minute): the checkout's next `make build`
# builds its own again.
set -uo pipefail
cd "$(dirname "$0")/.."
source tests/lib.sh

copy=$tmp/copy
mkdir -p "$copy"
git ls-files -z | tar --null -T - -cf - | tar -xf - -C "$copy"
git -C "$copy" init -q && git -C "$copy" add -A \
    && git -C "$copy" -c user.name=toy -c user.email=toy@localhost commit -qm "the checkout" \
    || { echo "toy_kernel_test: cannot make the copy" >&2; exit 1; }

cat >"$copy/shaders/toy.comp" <<'GLSL'
#version 450
// A toy shape of the direct method: the reference scan in two halves.
#extension GL_GOOGLE_include_directive : require
#include "scan_header.glsl"

layout(push_constant) uniform Push {
    SCAN_PUSH_FIELDS
} pc;

#include "scan_common.glsl"

void main() {
    begin_step();
    float best = SCORE_NONE;
    uint best_j = INDEX_NONE;
    const uint half_way = pc.num_items / 2u;
    scan_range(half_way, pc.num_items, best, best_j);
    scan_range(0u, half_way, best, best_j);
    reduce_best(best, best_j);
    append(red_index[0]);
}
GLSL

descriptor() {  # descriptor PUSH_FIELDS: the toy's descriptor with those push fields
    cat <<LUA
-- A toy shape of the direct method (shaders/toy.comp).
local ceil = math.ceil
return {
    method = "direct",
    bindings = { "embeddings", "inv_norm", "centroids", "masks", "winners" },
    push = { $1 },
    constants = { workgroup_size = 0, max_dim = 1 },
    candidates_per_thread = function(n, wg) return 2 * ceil(n / (2 * wg)) + 1 end,
    record = function(k, rec, group, p)
        return k:dispatch(rec, group, { num_items = p.n, dim = p.dim, step = p.step, ring = p.ring }, p.groups)
    end,
}
LUA
}
descriptor '"num_items", "dim", "step", "ring"' >"$copy/lua/divgpu/kernels/toy.lua"

if make -C "$copy" --no-print-directory build >"$tmp/build.log" 2>&1; then ok "the copy with the toy kernel builds"
else not_ok "the copy with the toy kernel builds" "$(tail -20 "$tmp/build.log")"; fi

cd "$copy" || exit 1
$divgpu synth --n 300 --dim 24 --seed 7 --out "$tmp/e.json" >/dev/null
expect_ok "help lists the new shape" $divgpu run --help
grep -q "toy" "$tmp/stdout" && ok "run --help names the toy shape" || not_ok "run --help names the toy shape" "$(cat "$tmp/stdout")"
job=(--embeddings "$tmp/e.json" --method direct --layout rows --starts 0:24 --length 300 --quiet)
expect_ok "run --shape toy, found through the registry" $divgpu run "${job[@]}" --shape toy --out "$tmp/toy.json"
expect_ok "its sequences are the CPU mirror's" $divgpu verify --embeddings "$tmp/e.json" --cache "$tmp/toy.json" --quiet
expect_ok "run --shape baseline, the reference" $divgpu run "${job[@]}" --shape baseline --out "$tmp/baseline.json"
cmp -s "$tmp/toy.json" "$tmp/baseline.json" && ok "the toy's cache is the reference's, byte for byte" \
    || not_ok "the toy's cache is the reference's, byte for byte"
status=$(git status --porcelain --untracked-files=all)
want="?? lua/divgpu/kernels/toy.lua
?? shaders/toy.comp"
[ "$status" = "$want" ] && ok "git status: the kernel's .comp and descriptor, nothing else" \
    || not_ok "git status: the kernel's .comp and descriptor, nothing else" "$status"

# The twin: two push fields swapped in the descriptor.
descriptor '"num_items", "dim", "ring", "step"' >lua/divgpu/kernels/toy.lua
expect_fail "twin: a descriptor with two push fields swapped is refused at pipeline creation" \
    "kernel 'toy': the shader's push constants are [num_items, dim, step, ring] (16 bytes), the descriptor's [num_items, dim, ring, step]" \
    $divgpu run "${job[@]}" --shape toy --out "$tmp/twin.json"
[ ! -e "$tmp/twin.json" ] && ok "twin: nothing was written" || not_ok "twin: nothing was written"
cd - >/dev/null || exit 1

# Adding a method (its files plus one registry line): tests/toy_method_test.sh,
# run from here so that `make test` runs it beside the toy kernel.
if bash tests/toy_method_test.sh >"$tmp/method.log" 2>&1; then
    ok "toy method: $(tail -1 "$tmp/method.log") (tests/toy_method_test.sh)"
else
    not_ok "toy method (tests/toy_method_test.sh)" "$(grep -A3 '^not ok' "$tmp/method.log")"
fi
finish
