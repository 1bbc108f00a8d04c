#!/usr/bin/env bash
# The repository stands on its own (tests/links_check.py): every relative
# Markdown link resolves inside it, anchors included, and no tracked file
# refers outside it. Each check has twins: a temporary copy of the checkout
# with one deliberate fault must fail it, naming the file.
#   tests/links_test.sh               both halves, then the twins
#   tests/links_test.sh --links-only  the link half and its twins only
set -uo pipefail
cd "$(dirname "$0")/.."
check=tests/links_check.py
links_only=false
case "${1:-}" in
    "") ;;
    --links-only) links_only=true ;;
    *) echo "usage: tests/links_test.sh [--links-only]" >&2; exit 2 ;;
esac
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0 failed=0

ok() { passed=$((passed + 1)); echo "ok - $1"; }
not_ok() { failed=$((failed + 1)); echo "not ok - $1"; [ -n "${2:-}" ] && sed 's/^/    /' <<<"$2"; }

# expect NAME STATUS WANT ARGS...: the checker exits STATUS and, when WANT is
# not empty, its report contains WANT.
expect() {
    local name=$1 status=$2 want=$3; shift 3
    local out rc
    out=$(python3 "$check" "$@" 2>&1); rc=$?
    if [ $rc -eq "$status" ] && { [ -z "$want" ] || grep -qF -- "$want" <<<"$out"; }; then
        ok "$name"
    else
        not_ok "$name (exit $rc, wanted $status)" "$out"
    fi
}

expect "every relative Markdown link resolves inside the repository" 0 "" --links-only
if ! $links_only; then
    expect "no tracked file refers outside the repository" 0 "" --outside-only
fi

# The twins run on a copy of the tracked files, in a repository of its own.
copy=$tmp/copy
mkdir -p "$copy"
git ls-files -z | tar --null -T - -cf - | tar -xf - -C "$copy"
git -C "$copy" init -q && git -C "$copy" add -A || { echo "links_test: cannot make the copy" >&2; exit 1; }
# The copy's own link check must pass first, or the twins below prove nothing.
expect "the copy's links pass before any fault" 0 "" --root "$copy" --links-only

# Appends LINE to FILE of the copy; run_twin restores it afterwards.
with_line() { cp "$copy/$1" "$tmp/saved"; printf '\n%s\n' "$2" >>"$copy/$1"; }
restore() { cp "$tmp/saved" "$copy/$1"; }

with_line README.md "[gone](docs/no-such-file.md)"
expect "twin: a link to a missing file fails, naming its file" 1 "README.md:" --root "$copy" --links-only
restore README.md

with_line README.md "[gone](docs/contract.md#no-such-anchor)"
expect "twin: a link to a missing anchor fails" 1 "#no-such-anchor: no heading" --root "$copy" --links-only
restore README.md

with_line docs/contract.md "[gone](#no-such-heading)"
expect "twin: an anchor missing from the same file fails" 1 "docs/contract.md:" --root "$copy" --links-only
restore docs/contract.md

# A file that exists, but outside the repository.
echo "outside" >"$tmp/outside.md"
with_line README.md "[out](../outside.md)"
expect "twin: a link leading outside the repository fails" 1 "leads outside the repository" --root "$copy" --links-only
restore README.md

touch "$copy/untracked.md"
with_line README.md "[new](untracked.md)"
expect "twin: a link to an untracked file fails" 1 "tracked files only" --root "$copy" --links-only
restore README.md
rm -f "$copy/untracked.md"

if $links_only; then
    echo "$passed passed, $failed failed"
    [ $failed -eq 0 ]
    exit
fi

# References outside: a clean file of the copy passes, then fails with each
# kind of reference added (a code comment and a Markdown line).
clean_code=tests/api_doc_spec.lua
expect "the clean files pass the outside check" 0 "" --root "$copy" --outside-only "$clean_code" docs/contract.md
shared=".."/"shared/NOTES.md"
with_line "$clean_code" "-- see $shared"
expect "twin: a path into the shared folder fails, naming its file and line" 1 "$clean_code:" \
    --root "$copy" --outside-only "$clean_code"
restore "$clean_code"
spec="SP""EC section 2"
with_line docs/contract.md "As $spec says."
expect "twin: the specification's old name fails" 1 "docs/contract.md:" --root "$copy" --outside-only docs/contract.md
restore docs/contract.md
with_line "$clean_code" "-- built in /""work/main/build"
expect "twin: an absolute path into the work folder fails" 1 "absolute path" --root "$copy" --outside-only "$clean_code"
restore "$clean_code"
with_line docs/contract.md "Fixed in is""sue 7."
expect "twin: an issue number fails" 1 "issue number" --root "$copy" --outside-only docs/contract.md
restore docs/contract.md

echo "$passed passed, $failed failed"
[ $failed -eq 0 ]
