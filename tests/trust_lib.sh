# Helpers of tests/trust_paths_test.sh and tests/trust_soak_test.sh (sourced
# after tests/lib.sh): an unprivileged user made by the test, the kernel's
# fs.protected_symlinks saved and restored, a checkpoint left by a kill -9,
# a command refused in one line that leaves named files as they were.

# The unprivileged user the tests run as (made with useradd when missing; a
# test that cannot make it fails: `need_user` says so and returns 1).
rt_user=divgpu-trust-rt
need_user() {
    id -u "$rt_user" >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin "$rt_user" 2>/dev/null
    if id -u "$rt_user" >/dev/null 2>&1; then return 0; fi
    not_ok "an unprivileged user made with useradd ($rt_user): the test runs as root"
    return 1
}
# as_rt CMD...: CMD as the unprivileged user (its own group, no others).
as_rt() { setpriv --reuid="$(id -u "$rt_user")" --regid="$(id -g "$rt_user")" --clear-groups env HOME=/nonexistent "$@"; }

# fs.protected_symlinks: set_protected 0|1; the value found is put back on exit.
protected_was=$(cat /proc/sys/fs/protected_symlinks 2>/dev/null)
[ -n "$protected_was" ] && on_exit "echo $protected_was >/proc/sys/fs/protected_symlinks 2>/dev/null"
set_protected() {
    if echo "$1" >/proc/sys/fs/protected_symlinks 2>/dev/null && [ "$(cat /proc/sys/fs/protected_symlinks)" = "$1" ]; then
        return 0
    fi
    not_ok "set fs.protected_symlinks=$1 (the test runs as root)"
    return 1
}

# This machine's name as divgpu records it in locks and temporaries.
this_host() { hostname | sed 's/[^A-Za-z0-9_-]/_/g'; }

# sums FILE...: one line of sha256s (a missing file counts as "-"), to tell
# that files were left as they were.
sums() {
    local f
    for f in "$@"; do
        if [ -e "$f" ] || [ -L "$f" ]; then sha256sum <"$f" 2>/dev/null | cut -c1-16 || echo "?"; else echo "-"; fi
    done | tr '\n' ' '
}

# kill_after_commit OUT CMD...: starts CMD (a run writing OUT) in the
# background, waits for its first committed batch (30 s at most), kill -9s it;
# OUT.checkpoint/ then holds at least one batch (not_ok if not).
kill_after_commit() {
    local out=$1; shift
    "$@" >/dev/null 2>&1 &
    local pid=$! polls=0
    until [ "$(committed "$out.checkpoint")" -gt 0 ] || [ $polls -ge 600 ]; do sleep 0.05; polls=$((polls + 1)); done
    kill -9 $pid 2>/dev/null; wait $pid 2>/dev/null
    [ "$(committed "$out.checkpoint")" -gt 0 ] || { not_ok "a checkpoint with a committed batch for $out"; return 1; }
}

# wait_for PATH [TRIES]: until PATH exists (0.05 s a try, 600 tries by default).
wait_for() {
    local polls=0
    until [ -e "$1" ] || [ $polls -ge "${2:-600}" ]; do sleep 0.05; polls=$((polls + 1)); done
    [ -e "$1" ]
}

# temp_of FOLDER: the name of divgpu's temporary in FOLDER (empty if none).
temp_of() { ls -A "$1" 2>/dev/null | grep '^\.divgpu-tmp\.' | head -n 1; }
# lasting_temp FOLDER: waits (30 s at most) for a temporary in FOLDER that is
# still there 0.2 s later (not a lock's, which lives a moment), and names it.
lasting_temp() {
    local polls=0 t
    while [ $polls -lt 150 ]; do
        t=$(temp_of "$1")
        if [ -n "$t" ]; then sleep 0.2; [ -e "$1/$t" ] && { echo "$t"; return 0; }; else sleep 0.05; fi
        polls=$((polls + 1))
    done
    return 1
}

# refused NAME WANTS CMD...: CMD fails with one stderr line "divgpu: ..."
# holding every part of WANTS (separated by '|'), no Lua file:line, no Rust
# panic; the line is kept in $tmp/refused.err.
refused() {
    local name=$1 wants=$2; shift 2
    local err rc w missing=""
    err=$("$@" 2>&1 >/dev/null); rc=$?
    printf '%s\n' "$err" >"$tmp/refused.err"
    IFS='|' read -r -a parts <<<"$wants"
    for w in "${parts[@]}"; do [[ $err == *"$w"* ]] || missing="$missing '$w'"; done
    if [ $rc -ne 0 ] && [ "$(wc -l <<<"$err")" -eq 1 ] && [[ $err == divgpu:* ]] && [ -z "$missing" ] \
        && [[ $err != *".lua:"* ]] && [[ $err != *"panicked"* ]]; then
        ok "$name"
    else
        not_ok "$name (exit $rc${missing:+; lacks$missing})" "$err"
    fi
}

# fake_parts PREFIX N M L PARTS: the PARTS parts (PREFIX-I.json) of a sharded
# cache of M starts (0..M-1) of length L over a table of N items whose
# sha256 is that of "fake" (merge checks headers, not winners): fast, and as
# large as a kill needs.
fake_parts() {
    python3 - "$@" <<'PY'
import hashlib, json, struct, sys
out, n, m, L, parts = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
def sha(xs): return hashlib.sha256(b"".join(struct.pack("<I", x) for x in xs)).hexdigest()
starts = list(range(m))
for i in range(parts):
    block = starts[i * m // parts:(i + 1) * m // parts]
    head = {"format": "divgpu-diversity-cache", "version": 2, "contract": "fp32", "num_items": n, "dim": 4, "length": L,
            "embeddings_sha256": hashlib.sha256(b"fake").hexdigest(), "starts_count": len(block),
            "starts_sha256": sha(block), "divgpu_version": "0.1.0",
            "shard": {"index": i, "count": parts, "starts": m, "starts_sha256": sha(starts)}}
    with open(f"{out}-{i}.json", "w") as f:
        f.write(json.dumps(head, separators=(",", ":"))[:-1] + ",\n\"sequences\": [\n")
        f.write(",\n".join("[" + ",".join(str((s + k * 7) % n) for k in range(L)) + "]" for s in block))
        f.write("\n]}")
PY
}
