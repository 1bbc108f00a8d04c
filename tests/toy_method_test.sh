#!/usr/bin/env bash
# Adding a method is its files plus one registry line. In a temporary copy
# of the checkout (its tracked files, committed in a repository of its own)
# a toy method is added: lua/divgpu/methods/toy.lua (the direct method's
# reference scan under a name of its own, whose estimate claims it is the
# cheapest), its proof shaders/toy.md, and the line "toy" in
# lua/divgpu/methods/registry.lua. Then: run --help documents it (its doc
# line, from the registry); auto weighs it and plans it (run --plan-only
# prints why); a run reports it (the plan's line, its own summary line, the
# --stats header) and its cache verifies against the CPU mirror and equals
# the reference shape's byte for byte; and `git status` shows those three
# files and nothing else. The twin: without its registry line, nothing
# knows it (--method toy is refused, auto does not weigh it).
#
# The method is Lua only (no shader of its own), so the copy uses this
# checkout's build/divgpu.so (tests/toy_kernel_test.sh adds a kernel, and builds).
set -uo pipefail
cd "$(dirname "$0")/.."
source tests/lib.sh

[ -f build/divgpu.so ] || { echo "toy_method_test: run 'make build' first" >&2; exit 1; }
copy=$tmp/copy
mkdir -p "$copy/build"
git ls-files -z | tar --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -xf - -C "$copy"
ln -s "$PWD/build/divgpu.so" "$copy/build/divgpu.so"
git -C "$copy" init -q && git -C "$copy" add -A \
    && git -C "$copy" -c user.name=toy -c user.email=toy@localhost commit -qm "the checkout" \
    || { echo "toy_method_test: cannot make the copy" >&2; exit 1; }
cd "$copy" || exit 1

cat >lua/divgpu/methods/toy.lua <<'LUA'
-- A toy method (tests/toy_method_test.sh): the direct method's reference
-- scan under a name of its own, whose estimate says it is the cheapest.
local direct = require "divgpu.methods.direct"

local _M = { name = "toy", preference = -2, default_layout = "rows",
             doc = "a toy: the reference scan under its own name (shaders/toy.md)" }
_M.options = { layout = "layout", workgroup_size = "workgroup_size" }

function _M.serves(request)
    if request.plain then return true end
    return nil, "the toy runs the plain fp32 job only"
end
function _M.fits(ctx, e, opts) return direct.fits(ctx, e, opts) end
function _M.may_fit(ctx, e) return direct.fits(ctx, e, {}) end
function _M.estimate() return { { seconds = 1e-9 } } end
function _M.memory(job) return direct.memory(job) end
function _M.job(ctx, e, opts)
    local job, err = direct.job(ctx, e, { shape = direct.default_shape(), layout = opts.layout,
                                          workgroup_size = opts.workgroup_size })
    if job then job.method = "toy" end
    return job, err
end
function _M.totals() return {} end
function _M.summary(_, stats) return string.format("toy: %d sequences by the reference scan", stats.sequences) end
return _M
LUA
cat >shaders/toy.md <<'MD'
# The toy method's proof

It runs the direct method's reference kernel (shaders/baseline.comp) on the
same table and starts: its sequences are the reference's, bit for bit.
MD
sed -i 's/^    "tensor",$/&\n    "toy",/' lua/divgpu/methods/registry.lua

$divgpu synth --n 300 --dim 24 --seed 7 --out "$tmp/e.json" >/dev/null
job=(--embeddings "$tmp/e.json" --starts 0:24 --length 300)
expect_ok "run --help" $divgpu run --help
grep -q "toy (a toy: the reference scan under its own name" "$tmp/stdout" \
    && ok "run --help documents the toy method (its doc line)" || not_ok "run --help documents the toy method" "$(cat "$tmp/stdout")"
expect_ok "run --plan-only" $divgpu run "${job[@]}" --out "$tmp/plan.json" --plan-only
grep -q "^method toy (auto: estimated .*toy 1e-06 ms" "$tmp/stdout" && [ ! -e "$tmp/plan.json" ] \
    && ok "auto weighs the toy and plans it; --plan-only writes nothing" || not_ok "auto weighs the toy and plans it" "$(cat "$tmp/stdout")"
expect_ok "run (auto)" $divgpu run "${job[@]}" --out "$tmp/toy.json" --stats "$tmp/toy.jsonl"
grep -q "^divgpu: method toy (auto: estimated " "$tmp/stderr" && grep -q "^divgpu: toy: 24 sequences by the reference scan" "$tmp/stderr" \
    && ok "the run reports the toy: the plan's line and its summary line" || not_ok "the run reports the toy" "$(cat "$tmp/stderr")"
head -1 "$tmp/toy.jsonl" | grep -q '"method":"toy"' && ok "the --stats header names the toy" \
    || not_ok "the --stats header names the toy" "$(head -1 "$tmp/toy.jsonl")"
expect_ok "its sequences are the CPU mirror's" $divgpu verify --embeddings "$tmp/e.json" --cache "$tmp/toy.json" --quiet
expect_ok "run --method direct --shape baseline, the reference" $divgpu run "${job[@]}" --method direct --shape baseline \
    --out "$tmp/baseline.json" --quiet
cmp -s "$tmp/toy.json" "$tmp/baseline.json" && ok "the toy's cache is the reference's, byte for byte" \
    || not_ok "the toy's cache is the reference's, byte for byte"
status=$(git status --porcelain --untracked-files=all)
want=" M lua/divgpu/methods/registry.lua
?? lua/divgpu/methods/toy.lua
?? shaders/toy.md"
[ "$status" = "$want" ] && ok "git status: the method's files and its registry line, nothing else" \
    || not_ok "git status: the method's files and its registry line, nothing else" "$status"
[ "$(git diff --numstat lua/divgpu/methods/registry.lua)" = "$(printf '1\t0\tlua/divgpu/methods/registry.lua')" ] \
    && ok "the registry's change is one line" || not_ok "the registry's change is one line" "$(git diff lua/divgpu/methods/registry.lua)"

# The twin: the module without its registry line is no method.
git checkout -q lua/divgpu/methods/registry.lua
expect_fail "twin: without its registry line --method toy is refused" "--method 'toy' is not one of" \
    $divgpu run "${job[@]}" --out "$tmp/twin.json" --method toy
expect_ok "twin: run --plan-only without the line" $divgpu run "${job[@]}" --out "$tmp/twin.json" --plan-only
! grep -q "toy" "$tmp/stdout" && ok "twin: auto does not weigh it" || not_ok "twin: auto does not weigh it" "$(cat "$tmp/stdout")"
cd - >/dev/null || exit 1
finish
