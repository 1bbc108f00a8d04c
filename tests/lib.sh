# Shared by the shell tests (sourced): a temporary folder $tmp removed on
# exit, counters, and the checks every test line uses. Each check prints
# "ok - NAME" or "not ok - NAME" (with what it saw, indented); `finish` prints
# "N passed, M failed" and fails the script if anything failed.
divgpu=bin/divgpu
# The shell tests exercise the Vulkan kernels on lavapipe: the run's device
# is named (docs/cli.md: DIVGPU_DEVICE is --device's default), so auto does
# not move their jobs to the host's cores; tests/cpu_method_test.sh unsets
# it to check that default.
export DIVGPU_DEVICE=${DIVGPU_DEVICE-0}
tmp=$(mktemp -d)
cleanups=()
# on_exit CMD: run CMD (a string, eval'd) when the script ends, before $tmp is removed.
on_exit() { cleanups+=("$1"); }
run_cleanups() { local c; for c in "${cleanups[@]}"; do eval "$c"; done; rm -rf "$tmp"; }
trap run_cleanups EXIT
passed=0 failed=0

ok() { passed=$((passed + 1)); echo "ok - $1"; }
not_ok() { failed=$((failed + 1)); echo "not ok - $1"; [ -n "${2:-}" ] && sed 's/^/    /' <<<"$2"; }
# check NAME CMD...: ok when CMD succeeds.
check() { local name=$1; shift; if "$@"; then ok "$name"; else not_ok "$name"; fi; }

# expect_fail NAME EXPECTED_TEXT CMD...: non-zero exit, one stderr line
# "divgpu: ..." containing EXPECTED_TEXT and no Lua file:line, no validation
# message, no Rust panic.
expect_fail() {
    local name=$1 want=$2; shift 2
    local err rc
    err=$("$@" 2>&1 >/dev/null); rc=$?
    if [ $rc -ne 0 ] && [ "$(wc -l <<<"$err")" -eq 1 ] && [[ $err == divgpu:* ]] && [[ $err == *"$want"* ]] \
        && [[ $err != *".lua:"* ]] && [[ $err != *"panicked"* ]]; then
        ok "$name"
    else
        not_ok "$name (exit $rc)" "$err"
    fi
}

# expect_ok NAME CMD...: exit 0 and no validation message on stderr; stdout
# in $tmp/stdout, stderr in $tmp/stderr.
expect_ok() {
    local name=$1; shift
    local out rc
    out=$("$@" 2>"$tmp/stderr"); rc=$?
    if [ $rc -eq 0 ] && ! grep -q "vulkan validation" "$tmp/stderr"; then
        ok "$name"
    else
        not_ok "$name (exit $rc)" "$(cat "$tmp/stderr")"
    fi
    printf '%s' "$out" >"$tmp/stdout"
}

# committed CHECKPOINT_DIR: the sequences its batch records prove (0 if none).
committed() {
    local n=0 c
    for c in $(sed -n 's/.*"sequences":\([0-9]*\).*/\1/p' "$1/batches.jsonl" 2>/dev/null); do n=$((n + c)); done
    echo $n
}

# millis: the time in milliseconds.
millis() { echo $(( $(date +%s%N) / 1000000 )); }

finish() {
    echo "$passed passed, $failed failed"
    [ "$failed" -eq 0 ]
}
