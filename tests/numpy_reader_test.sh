#!/usr/bin/env bash
# docs/formats.md's NumPy reader of the binary cache, taken from the doc as
# written (the python block after "Reading it with NumPy") and run on a
# binary cache that divgpu wrote: its starts, index, rows and the sequence
# of item 7 equal the JSON form of the same run. Twins: a changed row, and a
# truncated file, must make the comparison fail. Needs python3-numpy (make
# deps installs it); without it the test fails, it does not skip.
set -uo pipefail
cd "$(dirname "$0")/.."
source tests/lib.sh
# Debian's python3, where python3-numpy installs (not a python3 earlier on PATH).
py=/usr/bin/python3

# compare DIR: runs the doc's reader in DIR (on DIR/cache.bin) and compares
# what it read with DIR/cache.json; exit 0 when every part agrees.
compare() {
    $py - "$PWD/docs/formats.md" "$1" <<'EOF'
import json, os, re, sys
doc, folder = sys.argv[1], sys.argv[2]
text = open(doc, encoding="utf-8").read()
found = re.search(r"Reading it with NumPy.*?```python\n(.*?)\n```", text, re.S)
if not found:
    sys.exit("docs/formats.md: no python block after 'Reading it with NumPy'")
os.chdir(folder)
names = {}
exec(found.group(1), names)
cache = json.load(open("cache.json"))
sequences = cache["sequences"]
starts = [s[0] for s in sequences]
problems = []
if names["rows"].tolist() != sequences:
    problems.append("rows differ from the JSON form's sequences")
if names["starts"].tolist() != starts:
    problems.append("starts differ")
index, n = names["index"], cache["num_items"]
for item in range(n):
    first = starts.index(item) if item in starts else 0xFFFFFFFF
    if int(index[item]) != first:
        problems.append(f"index[{item}] is {int(index[item])}, the JSON form says {first}")
        break
if names["sequence_of_item_7"].tolist() != sequences[starts.index(7)]:
    problems.append("sequence_of_item_7 is not the JSON form's sequence from 7")
if problems:
    sys.exit("; ".join(problems))
print(f"{len(sequences)} sequences of length {cache['length']}: the reader agrees with the JSON form")
EOF
}

check "$py has numpy (python3-numpy, installed by make deps)" $py -c "import numpy"
$divgpu synth --n 30 --dim 4 --seed 9 --out "$tmp/t.json" >/dev/null
mkdir -p "$tmp/good" "$tmp/changed" "$tmp/truncated"
# Starts out of order, with a repeat and items never started (their index is 0xFFFFFFFF).
run=(--embeddings "$tmp/t.json" --starts 7,3,21,3,0,12 --length 5 --quiet)
expect_ok "a binary run" $divgpu run "${run[@]}" --format binary --out "$tmp/good/cache.bin"
expect_ok "its JSON form" $divgpu run "${run[@]}" --out "$tmp/good/cache.json"
check "the doc's reader reads the binary cache as the JSON form says" compare "$tmp/good"

cp "$tmp/good/cache.json" "$tmp/changed/" && cp "$tmp/good/cache.json" "$tmp/truncated/"
python3 - "$tmp/good/cache.bin" "$tmp/changed/cache.bin" <<'EOF'
import sys
raw = bytearray(open(sys.argv[1], "rb").read())
raw[-4:] = (int.from_bytes(raw[-4:], "little") ^ 1).to_bytes(4, "little")  # the last row's last item
open(sys.argv[2], "wb").write(raw)
EOF
if compare "$tmp/changed" >/dev/null 2>&1; then not_ok "twin: a changed row is seen"; else ok "twin: a changed row is seen"; fi
head -c -20 "$tmp/good/cache.bin" >"$tmp/truncated/cache.bin"
if compare "$tmp/truncated" >/dev/null 2>&1; then not_ok "twin: a truncated file is seen"; else ok "twin: a truncated file is seen"; fi

finish
