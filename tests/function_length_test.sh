#!/usr/bin/env bash
# No function in src/ or lua/ runs over 80 lines, tests apart, and no file in
# src/ over 500 lines (tests/function_length_check.py). The twins: files made here with a
# function of 81 lines (Rust and Lua) must fail the check, naming the file
# and the lines; one of 80 lines, a long test module, braces in strings and
# comments, and a long main chunk must pass.
set -uo pipefail
cd "$(dirname "$0")/.."
source tests/lib.sh
check_py=tests/function_length_check.py

# expect NAME STATUS WANT FILE...: the check on FILEs (under $tmp) exits STATUS, its report containing WANT.
expect() {
    local name=$1 status=$2 want=$3; shift 3
    local out rc
    out=$(python3 "$check_py" --root "$tmp" "$@" 2>&1); rc=$?
    if [ $rc -eq "$status" ] && grep -qF -- "$want" <<<"$out"; then ok "$name"; else not_ok "$name (exit $rc)" "$out"; fi
}

out=$(python3 "$check_py" 2>&1) && ok "every function in src/ and lua/ is at most 80 lines, every file in src/ at most 500" \
    || not_ok "every function in src/ and lua/ is at most 80 lines, every file in src/ at most 500" "$out"

body() {  # body N: N lines of a function body
    local i
    for ((i = 0; i < $1; i++)); do echo "    let _x$i = \"{ not a brace }\"; // }"; done
}
{ echo "fn long() {"; body 79; echo "}"; } >"$tmp/long.rs"
expect "twin: a Rust function of 81 lines fails, naming its file and lines" 1 "long.rs:1-81: long has 81 lines" long.rs
{ echo "fn fine() {"; body 78; echo "}"; } >"$tmp/fine.rs"
expect "a Rust function of 80 lines passes (braces in strings and comments ignored)" 0 "0 function(s) over" fine.rs
{ echo "#[cfg(test)]"; echo "mod tests {"; echo "    fn long_test() {"; body 100; echo "    }"; echo "}"; } >"$tmp/tested.rs"
expect "a long function in a test module passes" 0 "0 function(s) over" tested.rs
{ echo "local function long()"; for i in $(seq 79); do echo "    local x$i = $i"; done; echo "end"; } >"$tmp/long.lua"
expect "twin: a Lua function of 81 lines fails" 1 "long.lua:1-81: function has 81 lines" long.lua
{ for i in $(seq 200); do echo "local y$i = $i"; done; } >"$tmp/chunk.lua"
expect "a long main chunk is no function" 0 "0 function(s) over" chunk.lua
{ for i in $(seq 167); do echo "fn f$i() {"; echo "    let _ = $i;"; echo "}"; done; } >"$tmp/big.rs"
expect "twin: a Rust file of 501 lines fails, naming it" 1 "big.rs: the file has 501 lines (at most 500)" big.rs
head -n 500 "$tmp/big.rs" >"$tmp/full.rs"
expect "a Rust file of 500 lines passes" 0 "0 function(s) over" full.rs
finish
