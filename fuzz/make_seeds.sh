#!/usr/bin/env bash
# Writes the seed inputs of the fuzz targets to fuzz/seeds/<target>/ from the
# repository's own files, made by bin/divgpu as a user would: the first rows
# of the shipped embeddings (and the rest of its fields), a synthetic table,
# their caches (divgpu run), their fp16 files (divgpu convert-fp16), their
# .npy forms (table:write), the files numpy wrote in tests/data/npy, and the
# binary form of caches (a Rust test, below).
# `make fuzz-seeds` runs it; `make fuzz-cmin` then folds the seeds into the
# kept corpus fuzz/corpus/<target>/.
set -euo pipefail
cd "$(dirname "$0")/.."
out=fuzz/seeds
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rm -rf "$out"
mkdir -p "$out"/{embeddings_json,cache,fp16,npy} "$tmp"/{real,synth}

# The first 3 items of the shipped table, every field kept (model, dim, ids,
# titles, texts), values written as the file writes them.
python3 - assets/embeddings/all-MiniLM-L6-v2/embeddings.json "$tmp/real/embeddings.json" <<'PY'
import json, sys
src = open(sys.argv[1]).read()
d = json.loads(src)
keep = {k: (v[:3] if isinstance(v, list) else v) for k, v in d.items()}
with open(sys.argv[2], "w") as f:
    f.write(json.dumps({k: v for k, v in keep.items() if k != "embeddings"})[:-1])
    f.write(', "embeddings": [\n' + ",\n".join("[" + ",".join(repr(x) for x in r) + "]" for r in keep["embeddings"]) + "]}\n")
PY
bin/divgpu synth --n 6 --dim 3 --out "$tmp/synth/embeddings.json" >/dev/null
for t in real synth; do
    bin/divgpu run --embeddings "$tmp/$t/embeddings.json" --length 3 --out "$tmp/$t/cache.json" --quiet
    bin/divgpu convert-fp16 "$tmp/$t/embeddings.json" >/dev/null
    cp "$tmp/$t/embeddings.json" "$out/embeddings_json/$t.json"
    cp "$tmp/$t/cache.json" "$out/cache/$t.json"
    # The fp16 target's input: meta, NUL, .bin. The meta names the sha256 the
    # target's JSON has (src/fuzz.rs), so the checks past it are
    # reached, and its shape_and_bin_sha256 is the slot the target fills
    # (@CHECKSUM@, src/fuzz.rs); the unedited meta is kept too (the
    # stale-file path).
    sha=$(sha256sum "$tmp/$t/embeddings.json" | cut -d' ' -f1)
    { sed -e "s/$sha/e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855/" \
          -e 's/"shape_and_bin_sha256": "[0-9a-f]*"/"shape_and_bin_sha256": "@CHECKSUM@"/' "$tmp/$t/embeddings_fp16.meta.json"
      printf '\0'; cat "$tmp/$t/embeddings_fp16.bin"; } >"$out/fp16/$t.bin"
    { cat "$tmp/$t/embeddings_fp16.meta.json"; printf '\0'; cat "$tmp/$t/embeddings_fp16.bin"; } >"$out/fp16/$t-stale.bin"
done
# The npy target's input: sidecar, NUL, .npy. A synthetic table as divgpu
# writes it (with and without its sidecar), the first 3 shipped items with
# their titles and ids, and the files numpy wrote (tests/data/npy), each
# without a sidecar.
bin/divgpu synth --n 6 --dim 3 --out "$tmp/synth/six.json" >/dev/null
luajit - "$tmp/synth/six.json" "$tmp/synth/six.npy" "$tmp/real/embeddings.json" "$tmp/real/three.npy" <<'LUA'
package.path = "lua/?.lua;" .. package.path
package.cpath = "build/?.so;" .. package.cpath
local divgpu = require "divgpu"
divgpu.load_embeddings(arg[1]):write(arg[2])
divgpu.load_embeddings(arg[3]):write(arg[4])
LUA
for t in synth/six real/three; do
    { cat "$tmp/$t.titles.json"; printf '\0'; cat "$tmp/$t.npy"; } >"$out/npy/${t#*/}.bin"
    { printf '\0'; cat "$tmp/$t.npy"; } >"$out/npy/${t#*/}-bare.bin"
done
for f in tests/data/npy/*.npy; do
    { printf '\0'; cat "$f"; } >"$out/npy/numpy-$(basename "$f" .npy).bin"
done
# The binary target's seeds: the binary form of every cache of the kept cache
# corpus that reads, and a few caches made in Rust (a repeated start, no
# sequence, a part, fp16, sequences of one item, the longest version).
cargo test --release --locked --no-default-features --features gpu,plot --lib \
    fuzz::tests::write_binary_seeds -- --ignored --exact >/dev/null
# The bare-array shape of docs/formats.md#embeddings-table, and numeric ids.
printf '[[1, 0.5], [-2e-3, 4]]\n' >"$out/embeddings_json/bare.json"
printf '{"ids": [7, "b"], "titles": ["x", "y"], "embeddings": [[1e-40, 2], [3, 4]]}\n' >"$out/embeddings_json/ids.json"
ls -l "$out"/*
