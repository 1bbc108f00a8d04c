#!/usr/bin/env bash
# The habits of the field, end to end: progress in a log (plain lines every
# --progress-interval seconds, --progress json, the live line only on a
# terminal, nothing with --quiet, no carriage return from bench in a pipe),
# --starts @FILE and sample:K:SEED (the documented algorithm run in Python),
# --version in every cache, the rockspec's dependencies, and a Makefile whose
# build installs nothing while run and test reach deps. Every check has a
# twin fed a wrong variant, which must fail.
set -uo pipefail
cd "$(dirname "$0")/.."
source tests/lib.sh
progress_check() { python3 tests/progress_check.py "$@" >"$tmp/why" 2>&1; }
# no_redraw LOG: no escape code and no carriage return but at a line's end (a pty's \r\n).
no_redraw() { ! grep -qP '\r(?!$)|\x1b' "$1"; }
# twin NAME CMD...: ok when CMD fails (a check fed a wrong variant).
twin() { local name=$1; shift; if "$@"; then not_ok "twin: $name (the check passed)"; else ok "twin: $name"; fi; }

# A job of a few seconds on lavapipe.
$divgpu synth --n 1000 --dim 16 --seed 3 --out "$tmp/e.json" >/dev/null
job=(run --embeddings "$tmp/e.json" --starts 0:32 --method direct)

# --- progress ---------------------------------------------------------------
$divgpu "${job[@]}" --out "$tmp/plain.json" --progress-interval 0.4 2>"$tmp/plain.log" >/dev/null
progress_check plain "$tmp/plain.log" && ok "a log gets plain progress lines, no carriage return" \
    || not_ok "a log gets plain progress lines, no carriage return" "$(cat "$tmp/why"; head -5 "$tmp/plain.log")"
$divgpu "${job[@]}" --out "$tmp/json.json" --progress json --progress-interval 0.4 2>"$tmp/json.log" >/dev/null
progress_check json "$tmp/json.log" --interval 0.4 && ok "--progress json: JSON lines with the documented fields, an interval apart" \
    || not_ok "--progress json: JSON lines with the documented fields, an interval apart" "$(cat "$tmp/why"; head -5 "$tmp/json.log")"
cmp -s "$tmp/plain.json" "$tmp/json.json" && ok "the progress shown does not change the cache" || not_ok "the progress shown does not change the cache"
# On a terminal (script(1) gives the command a pty) the live line stays.
script -qec "$divgpu ${job[*]} --out $tmp/tty.json" /dev/null >"$tmp/tty.log" 2>&1 </dev/null
progress_check live "$tmp/tty.log" && ok "on a terminal the line is redrawn in place" \
    || not_ok "on a terminal the line is redrawn in place" "$(cat "$tmp/why")"
$divgpu "${job[@]}" --out "$tmp/quiet.json" --quiet 2>"$tmp/quiet.log" >/dev/null
progress_check none "$tmp/quiet.log" && ok "--quiet: no progress" || not_ok "--quiet: no progress" "$(cat "$tmp/why")"
# Twins: a terminal's output is not a log's; a redrawn line among plain ones; a
# JSON line cut short; lines closer than the interval; progress where --quiet was given.
twin "the terminal's output checked as a log" progress_check plain "$tmp/tty.log"
{ head -3 "$tmp/plain.log"; printf '\r\033[Ksequences 0/32 (50%%)\n'; tail -n +4 "$tmp/plain.log"; } >"$tmp/mixed.log"
twin "a line with a carriage return in a log" progress_check plain "$tmp/mixed.log"
sed '0,/"event":"progress"/s/,"eta_s".*$//' "$tmp/json.log" >"$tmp/cut.log"
twin "a JSON progress line cut short" progress_check json "$tmp/cut.log" --interval 0.4
twin "JSON lines checked against a longer interval" progress_check json "$tmp/json.log" --interval 60
twin "plain lines checked as JSON" progress_check json "$tmp/plain.log" --interval 0.4
twin "a log with progress checked as --quiet's" progress_check none "$tmp/plain.log"
twin "a log checked as a terminal's" progress_check live "$tmp/plain.log"

# verify and bench in a log.
$divgpu verify --embeddings "$tmp/e.json" --cache "$tmp/plain.json" --progress json --progress-interval 0.01 \
    2>"$tmp/verify.log" >/dev/null
grep -q '^{"event":"progress","unit":"sequences","done":32,"total":32' "$tmp/verify.log" \
    && no_redraw "$tmp/verify.log" \
    && ok "verify --progress json" || not_ok "verify --progress json" "$(cat "$tmp/verify.log")"
$divgpu bench direct:baseline direct:baseline:columns --synth 200,16 --sequences 8 --steps 20 --pairs 3 \
    --parity-sequences 2 2>"$tmp/bench.log" >/dev/null
no_redraw "$tmp/bench.log" && grep -q "^divgpu: progress: 1/3 pairs" "$tmp/bench.log" \
    && ok "bench in a pipe: plain lines, no carriage return" || not_ok "bench in a pipe: plain lines, no carriage return" "$(cat -A "$tmp/bench.log" | head)"
script -qec "$divgpu bench direct:baseline direct:baseline:columns --synth 200,16 --sequences 8 --steps 20 --pairs 3 --parity-sequences 2" \
    /dev/null >"$tmp/bench-tty.log" 2>&1 </dev/null
twin "bench on a terminal checked as a log" no_redraw "$tmp/bench-tty.log"

# Refused with one line naming the option, before any work.
keep=(run --embeddings "$tmp/e.json" --out "$tmp/keep.json")
for bad in 0 -1 abc inf nan 1e999 ""; do
    expect_fail "--progress-interval '$bad' refused" "--progress-interval '$bad' is not a positive number" \
        $divgpu "${keep[@]}" --progress-interval="$bad"
done
expect_fail "--progress xml refused" "--progress 'xml' is not one of: auto, plain, json" $divgpu "${keep[@]}" --progress xml
expect_fail "--progress with --quiet" "--progress does not apply with --quiet" $divgpu "${keep[@]}" --progress json --quiet
expect_fail "verify --progress-interval 0" "--progress-interval '0' is not a positive number" \
    $divgpu verify --embeddings "$tmp/e.json" --cache "$tmp/plain.json" --progress-interval 0
[ ! -e "$tmp/keep.json" ] && ok "nothing written by a refused option" || not_ok "nothing written by a refused option"

# --- --starts @FILE and sample:K:SEED ---------------------------------------
starts_of() { python3 -c 'import json,sys; print(",".join(str(s[0]) for s in json.load(open(sys.argv[1]))["sequences"]))' "$1"; }
short=(run --embeddings "$tmp/e.json" --length 5 --quiet)
printf '7\n\n  3 \r\n999\n3' >"$tmp/starts.txt"
expect_ok "--starts @FILE" $divgpu "${short[@]}" --starts "@$tmp/starts.txt" --out "$tmp/file.json"
[ "$(starts_of "$tmp/file.json")" = "7,3,999,3" ] && ok "the file's starts, in its order" \
    || not_ok "the file's starts, in its order" "$(starts_of "$tmp/file.json")"
expect_ok "the same starts as a list" $divgpu "${short[@]}" --starts 7,3,999,3 --out "$tmp/list.json"
cmp -s "$tmp/file.json" "$tmp/list.json" && ok "@FILE = the list, byte for byte" || not_ok "@FILE = the list, byte for byte"
printf '7\n3\n\nx1\n' >"$tmp/bad.txt"
expect_fail "a bad line named by file and line" "--starts: $tmp/bad.txt: line 4: 'x1' is not an item index" \
    $divgpu "${short[@]}" --starts "@$tmp/bad.txt" --out "$tmp/keep.json"
printf '7\n1000\n' >"$tmp/range.txt"
expect_fail "an index out of range named" "$tmp/range.txt: line 2: 1000 is out of range: the table has 1000 items (0..999)" \
    $divgpu "${short[@]}" --starts "@$tmp/range.txt" --out "$tmp/keep.json"
printf '\n\n' >"$tmp/empty.txt"
expect_fail "a file without starts" "$tmp/empty.txt: holds no start" $divgpu "${short[@]}" --starts "@$tmp/empty.txt" --out "$tmp/keep.json"
expect_fail "a missing file" "$tmp/nope.txt" $divgpu "${short[@]}" --starts "@$tmp/nope.txt" --out "$tmp/keep.json"
expect_fail "--starts @ without a file" "--starts @FILE: name the file" $divgpu "${short[@]}" --starts @ --out "$tmp/keep.json"
expect_fail "--out over the starts file" "is the same file as --starts" $divgpu "${short[@]}" --starts "@$tmp/starts.txt" --out "$tmp/starts.txt"
[ "$(cat "$tmp/starts.txt")" = "$(printf '7\n\n  3 \r\n999\n3')" ] && ok "the starts file left as it was" || not_ok "the starts file left as it was"

# The algorithm docs/cli.md#starts gives in Python, run as the page prints it.
sed -n '/^## Starts/,/^## Progress/p' docs/cli.md | sed -n '/^```python/,/^```$/p' | sed '1d;$d' >"$tmp/sample.py"
documented() { python3 -c 'import runpy,sys; f = runpy.run_path(sys.argv[1])["sample_starts"]; print(",".join(map(str, f(*map(int, sys.argv[2:])))))' "$tmp/sample.py" "$@"; }
expect_ok "--starts sample:40:11" $divgpu "${short[@]}" --starts sample:40:11 --out "$tmp/sample.json"
got=$(starts_of "$tmp/sample.json")
[ "$got" = "$(documented 1000 40 11)" ] && ok "sample:K:SEED is the documented algorithm" \
    || not_ok "sample:K:SEED is the documented algorithm" "divgpu: $got"$'\n'"docs:   $(documented 1000 40 11)"
python3 -c 'import sys; s = list(map(int, sys.argv[1].split(","))); sys.exit(not (len(set(s)) == 40 and s == sorted(s)))' "$got" \
    && ok "40 distinct starts, ascending" || not_ok "40 distinct starts, ascending" "$got"
[ "$(documented 1000 1000 5)" = "$(seq -s, 0 999)" ] && ok "K = N: every item" || not_ok "K = N: every item"
[ "$(documented 4294967296 4 9007199254740991)" = "192833784,415750028,875825862,1575109798" ] \
    && ok "the documented algorithm gives the Rust unit test's known answer" || not_ok "the documented algorithm gives the Rust unit test's known answer"
# Twins: another seed, and the page's algorithm with a biased draw, give other starts.
twin "another seed gives the same starts" test "$got" = "$(documented 1000 40 12)"
sed 's/if x >= M % m:/if True:/; s/chosen.add(j if t in chosen else t)/chosen.add(t if t not in chosen else (j + 1) % n)/' \
    "$tmp/sample.py" >"$tmp/sample.py.new" && mv "$tmp/sample.py.new" "$tmp/sample.py"
twin "a changed algorithm gives divgpu's starts" test "$got" = "$(documented 1000 40 11)"
expect_fail "K > N refused" "--starts sample:1001:1: K = 1001 is more than the table's 1000 items" \
    $divgpu "${short[@]}" --starts sample:1001:1 --out "$tmp/keep.json"
for bad in sample:3 sample:a:1 sample:3:-1 sample:3:1:2; do
    expect_fail "--starts $bad refused" "expected sample:K:SEED" $divgpu "${short[@]}" --starts $bad --out "$tmp/keep.json"
done
expect_fail "--starts sample:0:1 refused" "K is out of range" $divgpu "${short[@]}" --starts sample:0:1 --out "$tmp/keep.json"
expect_fail "a seed past 2^53 refused" "SEED is out of range" $divgpu "${short[@]}" --starts sample:3:9007199254740992 --out "$tmp/keep.json"
expect_fail "--shard N > K of a sample" "4 parts of 3 starts" $divgpu "${short[@]}" --starts sample:3:1 --shard 0/4 --out "$tmp/keep.json"

# --- the version in every cache ---------------------------------------------
expect_ok "divgpu --version" $divgpu --version
cargo_version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)
[ "$(cat "$tmp/stdout")" = "divgpu $cargo_version" ] && ok "--version prints Cargo.toml's version" \
    || not_ok "--version prints Cargo.toml's version" "$(cat "$tmp/stdout")"
version=${cargo_version}
$divgpu "${short[@]}" --starts 0:6 --out - >"$tmp/stdout.json"
for i in 0 1; do $divgpu "${short[@]}" --starts 0:6 --shard $i/2 --out "$tmp/part$i.json" >/dev/null; done
$divgpu merge --quiet --out "$tmp/merged.json" "$tmp/part0.json" "$tmp/part1.json" >/dev/null
written_by() { python3 -c 'import json,sys; sys.exit(json.loads(open(sys.argv[1]).readline().rstrip().rstrip(",") + "}").get("divgpu_version") != sys.argv[2])' "$@"; }
for c in file.json sample.json stdout.json part0.json part1.json merged.json; do
    written_by "$tmp/$c" "$version" && ok "$c records divgpu $version" || not_ok "$c records divgpu $version" "$(head -c 400 "$tmp/$c")"
done
sed "1s/\"divgpu_version\":\"$version\"/\"divgpu_version\":\"0.0.0-other\"/" "$tmp/merged.json" >"$tmp/other.json"
twin "a cache written by another version" written_by "$tmp/other.json" "$version"

# --- the rockspec and the Makefile ------------------------------------------
rockspec=$(ls ./*.rockspec)
# declares FILE: its dependencies name LuaJIT (lua 5.1 and luajit), argparse and dkjson; busted for tests.
cat >"$tmp/declares.lua" <<'LUA'
local env = {}
assert(setfenv(assert(loadfile(arg[1])), env))()
local function has(list, pattern)
    for _, d in ipairs(list or {}) do if d:match(pattern) then return true end end
end
local deps = env.dependencies
local ok = has(deps, "^lua == 5%.1$") and has(deps, "^luajit >= 2%.1") and has(deps, "^argparse ")
    and has(deps, "^dkjson ") and has(env.test_dependencies, "^busted")
os.exit(ok and 0 or 1)
LUA
declares() { luajit "$tmp/declares.lua" "$1"; }
check "the rockspec declares LuaJIT, argparse, dkjson (and busted for tests)" declares "$rockspec"
for drop in luajit argparse dkjson; do
    sed "/\"$drop /d" "$rockspec" >"$tmp/no-$drop.rockspec"
    twin "a rockspec without $drop" declares "$tmp/no-$drop.rockspec"
done
# luarocks itself holds to them: without dkjson provided (and no server) it refuses.
source tests/luarocks_debian.sh
ensure_luarocks
if command -v luarocks >/dev/null; then
    debian_luarocks "$tmp/lr-config.lua" "$tmp/no-rocks" argparse=lua-argparse
    "${luarocks[@]}" make --tree "$tmp/tree" "$rockspec" >"$tmp/lr.log" 2>&1
    grep -q "Could not satisfy dependency dkjson" "$tmp/lr.log" && [ ! -e "$tmp/tree/bin/divgpu" ] \
        && ok "twin: luarocks make without dkjson provided refuses" \
        || not_ok "twin: luarocks make without dkjson provided refuses" "$(tail -5 "$tmp/lr.log")"
    grep -q "depends on luajit >= 2.1.0-beta3 (.* provided by VM)" "$tmp/lr.log" \
        && ok "luarocks sees its LuaJIT as the luajit dependency" || not_ok "luarocks sees its LuaJIT as the luajit dependency" "$(head -5 "$tmp/lr.log")"
else
    not_ok "luarocks is installed (ensure_luarocks could not install it)"
fi

# build_installs_nothing MAKEFILE: `make -n build` has no apt, dpkg or sudo line.
# (make's output is read whole before grep -q: under pipefail a grep that stops at its first match
# can end make with SIGPIPE, and the check then fails or passes by timing.)
build_installs_nothing() { ! grep -Eq '(^|[ ;])(sudo|apt-get|apt|dpkg)( |$)' <<<"$(make -nB -f "$1" build 2>&1)"; }
# reaches_deps MAKEFILE TARGET: `make -n TARGET` runs deps' apt-get.
reaches_deps() { grep -q 'apt-get install' <<<"$(make -nB -f "$1" "$2" 2>&1)"; }
check "make -n build installs nothing" build_installs_nothing Makefile
check "make -n test reaches deps" reaches_deps Makefile test
check "make -n run reaches deps" reaches_deps Makefile run
sed 's/^build: check-cargo$/build: deps check-cargo/' Makefile >"$tmp/Makefile.apt-in-build"
twin "a Makefile whose build runs deps" build_installs_nothing "$tmp/Makefile.apt-in-build"
sed 's/^test: deps build/test: build/' Makefile >"$tmp/Makefile.test-without-deps"
twin "a Makefile whose test skips deps" reaches_deps "$tmp/Makefile.test-without-deps" test
grep -qx 'make test' .ci/run && bash -n .ci/run && ok "CI runs the README's make test" || not_ok "CI runs the README's make test"

finish
