#!/usr/bin/env bash
# Installs this checkout twice into a temporary folder, with `make install
# PREFIX=` and with `luarocks make --tree` (Debian's luarocks, installed here
# if missing), then from another folder, with no Lua path pointing at the
# checkout, runs `luajit -e 'require "divgpu"'`, `divgpu run` on the default
# (installed) poems and `divgpu verify`; nothing printed and nothing installed
# may name the checkout. Twins: an install missing its table, a Lua module or
# the native module fails with one line naming what is missing.
set -uo pipefail
cd "$(dirname "$0")/.."
checkout=$(pwd -P)
tmp=$(mktemp -d /tmp/divgpu-install.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
passed=0 failed=0
ok() { passed=$((passed + 1)); echo "ok - $1"; }
not_ok() { failed=$((failed + 1)); echo "not ok - $1"; [ -n "${2:-}" ] && sed 's/^/    /' <<<"$2"; }
check() { local name=$1; shift; if "$@"; then ok "$name"; else not_ok "$name"; fi; }
start=$SECONDS

# The rockspec's Lua dependencies are Debian's packages here, never fetched.
source tests/luarocks_debian.sh
ensure_luarocks
debian_luarocks "$tmp/luarocks-config.lua" "$tmp/no-rocks" argparse=lua-argparse dkjson=lua-dkjson

prefix=$tmp/prefix tree=$tmp/tree work=$tmp/elsewhere
mkdir -p "$work"
# Only Debian's own Lua libraries (argparse, dkjson) besides what the launcher
# or a test adds: no ./, no /usr/local (another install could hide a missing
# file), no checkout.
sys_path="/usr/share/lua/5.1/?.lua;/usr/share/lua/5.1/?/init.lua"
multiarch=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
sys_cpath="/usr/lib/$multiarch/lua/5.1/?.so;/usr/lib/lua/5.1/?.so"
# in_work CMD...: CMD from $work, Lua paths reset to the system's; output in $tmp/out.
in_work() {
    (cd "$work" && env -u LUA_INIT -u LUA_INIT_5_1 -u DIVGPU_DATA LUA_PATH="$sys_path" LUA_CPATH="$sys_cpath" "$@") \
        >"$tmp/out" 2>&1
}
names_checkout() { grep -qF "$checkout" "$tmp/out"; }

# expect_ok NAME CMD...: exit 0, no validation message, no mention of the checkout.
expect_ok() {
    local name=$1; shift
    if in_work "$@" && ! grep -q "vulkan validation" "$tmp/out" && ! names_checkout; then
        ok "$name"
    else
        not_ok "$name" "$(cat "$tmp/out")"
    fi
}
# expect_fail NAME TEXT CMD...: non-zero exit, one line "divgpu: ..." containing TEXT.
expect_fail() {
    local name=$1 want=$2; shift 2
    if ! in_work "$@" && [ "$(wc -l <"$tmp/out")" -eq 1 ] && [[ $(cat "$tmp/out") == divgpu:*"$want"* ]]; then
        ok "$name"
        echo "    # $(cat "$tmp/out")"
    else
        not_ok "$name" "$(cat "$tmp/out")"
    fi
}

if make --no-print-directory install PREFIX="$prefix" >"$tmp/log" 2>&1; then ok "make install PREFIX=$prefix"
else not_ok "make install PREFIX=$prefix" "$(tail -20 "$tmp/log")"; fi
if "${luarocks[@]}" make --tree "$tree" divgpu-scm-1.rockspec >"$tmp/log" 2>&1; then ok "luarocks make --tree $tree"
else not_ok "luarocks make --tree $tree" "$(tail -20 "$tmp/log")"; fi
echo "# luarocks and both installs: $((SECONDS - start)) s"

# Where each tree keeps its pieces (the luarocks tree keeps the data in its rock folder).
rockdir=$tree/lib/luarocks/rocks-5.1/divgpu/scm-1
for t in "$prefix:$prefix/share/divgpu" "$tree:$rockdir/share/divgpu"; do
    root=${t%%:*} data=${t#*:}
    for f in lib/lua/5.1/divgpu.so share/lua/5.1/divgpu/cli.lua share/lua/5.1/divgpu/kernels/gram.lua bin/divgpu; do
        check "$root/$f installed" test -f "$root/$f"
    done
    check "$data holds the poems" test -s "$data/embeddings/all-MiniLM-L6-v2/embeddings.json"
    check "$root/share/lua/5.1/divgpu/installed.lua records $data" grep -qF "[==[$data]==]" "$root/share/lua/5.1/divgpu/installed.lua"
done
hits=$(grep -rlF "$checkout" "$prefix" "$tree")
[ -z "$hits" ] && ok "no installed file names the checkout" || not_ok "no installed file names the checkout" "$hits"

# require "divgpu" with each tree's paths: the modules come from the tree, and
# a shipped shader's #includes resolve without shaders/include on disk.
lua_check='local d = require "divgpu"
print(package.searchpath("divgpu", package.cpath), package.searchpath("divgpu.driver", package.path))
local src, defines = d.shaders.source("baseline")
assert(assert(d.shaders.compile(src, { name = "installed", defines = defines })).words > 0)
print(require("divgpu.data").default_embeddings())'
expect_ok "make install: luajit -e 'require \"divgpu\"' from $work" \
    env LUA_PATH="$prefix/share/lua/5.1/?.lua;$sys_path" LUA_CPATH="$prefix/lib/lua/5.1/?.so;$sys_cpath" luajit -e "$lua_check"
want="$prefix/lib/lua/5.1/divgpu.so	$prefix/share/lua/5.1/divgpu/driver.lua
$prefix/share/divgpu/embeddings/all-MiniLM-L6-v2/embeddings.json	the installed copy"
[ "$(cat "$tmp/out")" = "$want" ] && ok "make install: modules and data from $prefix" \
    || not_ok "make install: modules and data from $prefix" "$(cat "$tmp/out")"
expect_ok "luarocks: luajit -e 'require \"divgpu\"' after luarocks path --tree" \
    bash -c 'eval "$1"; luajit -e "$2"' _ "$("${luarocks[@]}" path --tree "$tree")" "$lua_check"
grep -qF "$tree/lib/lua/5.1/divgpu.so	$tree/share/lua/5.1/divgpu/driver.lua" "$tmp/out" \
    && grep -qF "$rockdir/share/divgpu/embeddings/all-MiniLM-L6-v2/embeddings.json" "$tmp/out" \
    && ok "luarocks: modules and data from $tree" || not_ok "luarocks: modules and data from $tree" "$(cat "$tmp/out")"
# Twin: without the tree's paths the same require fails.
if in_work luajit -e 'require "divgpu"'; then not_ok "twin: require fails without the tree's paths" "$(cat "$tmp/out")"
else ok "twin: require fails without the tree's paths"; fi
# PREFIX=/usr/local needs no set-up: Debian's luajit searches there by default.
check "luajit's default paths include /usr/local/share/lua/5.1 and /usr/local/lib/lua/5.1" \
    env -u LUA_PATH -u LUA_CPATH luajit -e 'assert(package.path:find("/usr/local/share/lua/5.1/?.lua", 1, true)
        and package.cpath:find("/usr/local/lib/lua/5.1/?.so", 1, true))'

# The installed command, from $work, on its default (installed) table.
for t in "$prefix:$prefix/share/divgpu" "$tree:$rockdir/share/divgpu"; do
    root=${t%%:*} data=${t#*:}
    expect_ok "$root/bin/divgpu run --help" "$root/bin/divgpu" run --help
    grep -qF "(default: $data/embeddings/all-MiniLM-L6-v2/embeddings.json)" "$tmp/out" \
        && ok "its default --embeddings is the installed table" \
        || not_ok "its default --embeddings is the installed table" "$(grep -A2 -- '--embeddings <' "$tmp/out")"
    rm -f "$work/x.json"
    expect_ok "$root/bin/divgpu run --length 5 --starts 0:4 --out x.json" \
        "$root/bin/divgpu" run --length 5 --starts 0:4 --out x.json --quiet
    check "x.json holds 4 sequences of the 2,103 poems" python3 -c '
import json, sys
c = json.load(open(sys.argv[1]))
assert c["num_items"] == 2103 and c["length"] == 5 and [s[0] for s in c["sequences"]] == [0, 1, 2, 3]' "$work/x.json"
    expect_ok "$root/bin/divgpu verify --cache x.json" "$root/bin/divgpu" verify --cache x.json --quiet
done
# Twin of the checks above: the checkout's own launcher, run from $work, names
# the checkout (its table is the checkout's copy), and the same check sees it.
in_work "$checkout/bin/divgpu" run --help
names_checkout && grep -qF "(default: $checkout/assets/embeddings/all-MiniLM-L6-v2/embeddings.json)" "$tmp/out" \
    && ok "twin: the checkout's launcher uses the checkout's table, and the check sees it" \
    || not_ok "twin: the checkout's launcher uses the checkout's table, and the check sees it" "$(cat "$tmp/out")"

# Twins: incomplete installs (copies, or the original once the checks above passed).
cp -a "$tree" "$tmp/tree-no-driver" && rm "$tmp/tree-no-driver/share/lua/5.1/divgpu/driver.lua"
expect_fail "twin: a tree without divgpu/driver.lua fails in one line" "module 'divgpu.driver' not found" \
    "$tmp/tree-no-driver/bin/divgpu" run --length 5 --starts 0:4 --out y.json --quiet
cp -a "$tree" "$tmp/tree-no-cli" && rm "$tmp/tree-no-cli/share/lua/5.1/divgpu/cli.lua"
expect_fail "twin: a tree without divgpu/cli.lua fails in one line" "module 'divgpu.cli' not found" \
    "$tmp/tree-no-cli/bin/divgpu" run --help
cp -a "$prefix" "$tmp/prefix-no-so" && rm "$tmp/prefix-no-so/lib/lua/5.1/divgpu.so"
expect_fail "twin: a prefix without divgpu.so fails in one line" "$tmp/prefix-no-so/lib/lua/5.1/divgpu.so is missing" \
    "$tmp/prefix-no-so/bin/divgpu" run --length 5 --starts 0:4 --out y.json --quiet
# The table's folder is recorded, not found beside the copy: remove the original's.
mv "$prefix/share/divgpu/embeddings" "$prefix/share/divgpu/embeddings.gone"
expect_fail "twin: a prefix without its table fails in one line naming it" \
    "$prefix/share/divgpu/embeddings/all-MiniLM-L6-v2/embeddings.json: No such file" \
    "$prefix/bin/divgpu" run --length 5 --starts 0:4 --out y.json --quiet
check "no output written by the failed runs" test ! -e "$work/y.json"
mv "$prefix/share/divgpu/embeddings.gone" "$prefix/share/divgpu/embeddings"
expect_fail "DIVGPU_DATA overrides the data folder" "/nonexistent/embeddings/all-MiniLM-L6-v2/embeddings.json" \
    env DIVGPU_DATA=/nonexistent "$prefix/bin/divgpu" verify --cache x.json --quiet

# DESTDIR stages the files but records the final paths; uninstall removes every file.
make --no-print-directory install DESTDIR="$tmp/stage" PREFIX=/opt/divgpu >"$tmp/log" 2>&1 \
    && test -f "$tmp/stage/opt/divgpu/lib/lua/5.1/divgpu.so" \
    && grep -qF "[==[/opt/divgpu/share/divgpu]==]" "$tmp/stage/opt/divgpu/share/lua/5.1/divgpu/installed.lua" \
    && ok "make install DESTDIR= stages under it and records /opt/divgpu" \
    || not_ok "make install DESTDIR= stages under it and records /opt/divgpu" "$(tail -5 "$tmp/log")"
make --no-print-directory uninstall PREFIX="$prefix" >"$tmp/log" 2>&1 && [ -z "$(find "$prefix" -type f)" ] \
    && ok "make uninstall leaves no file in $prefix" \
    || not_ok "make uninstall leaves no file in $prefix" "$(find "$prefix" -type f | head)"
"${luarocks[@]}" remove --tree "$tree" divgpu >"$tmp/log" 2>&1 \
    && [ "$(find "$tree" -type f)" = "$tree/lib/luarocks/rocks-5.1/manifest" ] \
    && ok "luarocks remove leaves only the tree's manifest" \
    || not_ok "luarocks remove leaves only the tree's manifest" "$(tail -3 "$tmp/log"; find "$tree" -type f | head)"

echo "# install_test: $passed passed, $failed failed, $((SECONDS - start)) s"
[ "$failed" -eq 0 ]
