#!/usr/bin/env bash
# docs/architecture.md names every module and shader of the tree, and its
# files section is its rendering from the files' own header comments
# (tests/architecture_check.py). Twins: a name not in the tree is reported
# missing; a section edited by hand is reported stale.
set -uo pipefail
cd "$(dirname "$0")/.."
source tests/lib.sh

check "every module and shader named, the files section as rendered" python3 tests/architecture_check.py
fails() { ! "$@" 2>/dev/null; }
check "twin: a name that is not in the tree is reported" fails python3 tests/architecture_check.py --extra no_such_module.lua
doc=$tmp/architecture.md
sed 's/^| `src\/lib.rs` | .*/| `src\/lib.rs` | typed by hand |/' docs/architecture.md >"$doc"
check "twin: a files section edited by hand is reported" fails python3 tests/architecture_check.py --doc "$doc"
finish
