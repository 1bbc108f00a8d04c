#!/usr/bin/env bash
# No import circle in the Rust module (between files, and between rooms:
# the folders of src/) or in the Lua driver (tests/import_cycles.py).
#
#   tests/import_cycles_test.sh [--rust] [--lua]
#
# Without an argument it checks both. The twins: copies of the tree with one
# import added against the grain (a Rust file, a Rust room, a Lua module
# closing a circle through a run-time name) must fail, naming the circle.
set -uo pipefail
cd "$(dirname "$0")/.."
source tests/lib.sh
check_py=tests/import_cycles.py
want_rust=1 want_lua=1
case "${1:-}" in
    --rust) want_lua=0 ;;
    --lua) want_rust=0 ;;
    "") ;;
    *) echo "usage: $0 [--rust|--lua]" >&2; exit 2 ;;
esac

# expect NAME STATUS WANT ARGS...: the check with ARGS exits STATUS, its report containing WANT.
expect() {
    local name=$1 status=$2 want=$3; shift 3
    local out rc
    out=$(python3 "$check_py" "$@" 2>&1); rc=$?
    if [ $rc -eq "$status" ] && grep -qF -- "$want" <<<"$out"; then ok "$name"; else not_ok "$name (exit $rc)" "$out"; fi
}

if [ $want_rust = 1 ]; then
    expect "no import circle in src/ (files and rooms)" 0 "import_cycles: rust rooms:" --rust
    mkdir -p "$tmp/rust" && cp -r src "$tmp/rust/"
    # twin: util.rs (which contract/table.rs uses for hex) uses the table back.
    echo "pub use crate::contract::table::Table;" >>"$tmp/rust/src/util.rs"
    expect "twin: a file importing back fails, naming the circle" 1 \
        "rust files: import circle: src/contract/table.rs -> src/util.rs -> src/contract/table.rs" --rust --root "$tmp/rust"
    cp src/util.rs "$tmp/rust/src/util.rs"
    # twin: the arithmetic reaching for an input file closes contract -> table -> contract.
    printf '%s\n' "#[allow(unused_imports)]" "use crate::table::synth::clustered;" >>"$tmp/rust/src/contract/gram.rs"
    expect "twin: a room importing back fails, naming the rooms" 1 "rust rooms: import circle: contract -> table -> contract" \
        --rust --root "$tmp/rust"
    cp src/contract/gram.rs "$tmp/rust/src/contract/gram.rs"
    # braces, `self`, `super::` and test modules: a use only a test makes is no circle.
    printf '%s\n' "#[cfg(test)]" "mod tests {" "    use crate::table::{synth::{self, clustered}};" "}" >>"$tmp/rust/src/contract/gram.rs"
    expect "a test module's import is left out" 0 "import_cycles: rust rooms:" --rust --root "$tmp/rust"
fi

if [ $want_lua = 1 ]; then
    mkdir -p "$tmp/lua/lua/divgpu/kernels"
    printf '%s\n' 'local a = require "divgpu.b"' >"$tmp/lua/lua/divgpu/a.lua"
    printf '%s\n' '-- require "divgpu.a" (a comment)' 'return { f = function(n) return require("divgpu.kernels." .. n) end }' \
        >"$tmp/lua/lua/divgpu/b.lua"
    printf '%s\n' 'return {}' >"$tmp/lua/lua/divgpu/kernels/k.lua"
    expect "Lua: a tree without a circle passes" 0 "lua files: 3 modules, 2 imports, 0 circle(s)" --lua --root "$tmp/lua"
    printf '%s\n' 'return { job = function() return require("divgpu.a") end }' >"$tmp/lua/lua/divgpu/kernels/k.lua"
    expect "twin: Lua: a lazy require through a run-time name closes a circle" 1 \
        "lua files: import circle: lua/divgpu/a.lua -> lua/divgpu/b.lua -> lua/divgpu/kernels/k.lua -> lua/divgpu/a.lua" \
        --lua --root "$tmp/lua"
    expect "no import circle in lua/" 0 "lua files: " --lua
fi
finish
