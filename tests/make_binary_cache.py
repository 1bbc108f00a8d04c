#!/usr/bin/python3
"""Writes a cache in both forms, for the viewer's tests: a stand-in for
`divgpu run --format binary` until that lands.

    tests/make_binary_cache.py --items 1048576 --dim 3 --starts 0,5,524288 --length 12 --out DIR

writes DIR/table.npy (a random N x D float32 table, whose sha256 the caches
name), DIR/cache.bin (docs/formats.md, "Binary cache") and DIR/cache.json
(the same cache in the JSON form of version 2, bytes as divgpu writes them),
then reads cache.bin back with the NumPy reader that docs/formats.md gives
and checks it against the JSON form. The sequences are not computed: each
is L distinct items from its start (start + k * stride mod N), which is all
a reader can check. A 1,048,576-item table takes about a second.
"""
import argparse
import hashlib
import json
import math
import os
import sys

import numpy as np

NO_SEQUENCE = 0xFFFFFFFF
DIVGPU_VERSION = "0.1.0"  # the header's divgpu_version: any string to a reader


def parse_starts(text, n):
    """`A:B` (A to B - 1) or `i,j,k`, as `run --starts`."""
    if ":" in text:
        a, b = (int(x) for x in text.split(":"))
        starts = list(range(a, b))
    else:
        starts = [int(x) for x in text.split(",")]
    if not starts or len(set(starts)) != len(starts) or not all(0 <= s < n for s in starts):
        sys.exit(f"make_binary_cache: --starts {text}: distinct items below {n} expected")
    return starts


def make_table(path, n, dim, seed):
    """A random table (no zero row, as a table must be); returns its sha256."""
    rows = np.random.default_rng(seed).standard_normal((n, dim), dtype=np.float32) + np.float32(0.5)
    np.save(path, np.ascontiguousarray(rows, dtype="<f4"))
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def make_rows(n, starts, length, seed):
    """S x L items: from each start, `length` distinct items (a stride prime to n)."""
    rng = np.random.default_rng(seed + 1)
    strides = []
    while len(strides) < len(starts):
        stride = int(rng.integers(1, n)) if n > 1 else 1
        if math.gcd(stride, n) == 1:
            strides.append(stride)
    steps = np.arange(length, dtype=np.int64)[None, :] * np.array(strides, dtype=np.int64)[:, None]
    return ((np.array(starts, dtype=np.int64)[:, None] + steps) % n).astype("<u4")


def header_fields(n, dim, length, table_sha256, starts):
    """The version 2 header, its fields in the order divgpu writes them."""
    return {
        "format": "divgpu-diversity-cache", "version": 2, "contract": "fp32",
        "num_items": n, "dim": dim, "length": length, "embeddings_sha256": table_sha256,
        "starts_count": len(starts),
        "starts_sha256": hashlib.sha256(np.asarray(starts, dtype="<u4").tobytes()).hexdigest(),
        "divgpu_version": DIVGPU_VERSION,
    }


def compact(obj):
    return json.dumps(obj, separators=(",", ":"))


def binary_header(fields, n, s, length):
    """The header text padded to H bytes. Its offsets depend on H, its own
    length: H starts at the length without them and grows until it fits
    (the smallest multiple of 8 that does)."""
    h = 8
    while True:
        starts_offset = 16 + h
        index_offset = starts_offset + 4 * s
        text = compact(dict(fields, form="binary", starts_offset=starts_offset, index_offset=index_offset,
                            rows_offset=index_offset + 4 * n)).encode()
        if len(text) <= h:
            return text.ljust(h, b" ")
        h = (len(text) + 7) // 8 * 8


def write_binary(path, fields, starts, rows, n):
    s, length = rows.shape
    header = binary_header(fields, n, s, length)
    index = np.full(n, NO_SEQUENCE, dtype="<u4")
    index[np.asarray(starts)] = np.arange(s, dtype="<u4")
    with open(path, "wb") as f:
        f.write(b"DIVGPUB\0" + np.array([1, len(header)], dtype="<u4").tobytes() + header)
        f.write(np.asarray(starts, dtype="<u4").tobytes())
        f.write(index.tobytes())
        f.write(rows.tobytes())


def write_json(path, fields, rows):
    """Bytes as src/cache/json.rs writes them: the header line, then one sequence a line."""
    head = compact(fields)
    lines = ",".join("\n[" + ",".join(map(str, row)) + "]" for row in rows.tolist())
    with open(path, "w", encoding="ascii") as f:
        f.write(head[:-1] + ',\n"sequences": [' + lines + "\n]}\n")


def read_binary(path):
    """docs/formats.md's NumPy reader, line for line."""
    raw = np.memmap(path, dtype=np.uint8, mode="r")
    assert bytes(raw[:8]) == b"DIVGPUB\0"
    h = int(raw[12:16].view("<u4")[0])
    header = json.loads(bytes(raw[16:16 + h]))
    n, s, L = header["num_items"], header["starts_count"], header["length"]  # n: as in the docs, unused here
    starts = raw[header["starts_offset"]:header["index_offset"]].view("<u4")
    index = raw[header["index_offset"]:header["rows_offset"]].view("<u4")
    rows = raw[header["rows_offset"]:].view("<u4").reshape(s, L)
    return header, starts, index, rows


def check_read_back(binary_path, json_path):
    """The binary form, read by the documented reader, is the JSON form."""
    header, starts, index, rows = read_binary(binary_path)
    with open(json_path, encoding="ascii") as f:
        cache = json.load(f)
    sequences = cache.pop("sequences")
    problems = []
    if {k: header[k] for k in cache} != cache:
        problems.append("the headers differ")
    if rows.tolist() != sequences or starts.tolist() != [seq[0] for seq in sequences]:
        problems.append("the sequences or the starts differ")
    if any(int(index[s]) != k for k, s in enumerate(starts.tolist())):
        problems.append("an index entry does not name its start's sequence")
    if int((index != NO_SEQUENCE).sum()) != len(sequences):
        problems.append("the index names sequences that are not there")
    return problems


def make(out, n, dim, starts, length, seed=1):
    """Writes DIR/table.npy, DIR/cache.bin and DIR/cache.json; returns their paths."""
    os.makedirs(out, exist_ok=True)
    paths = {name: os.path.join(out, name) for name in ("table.npy", "cache.bin", "cache.json")}
    fields = header_fields(n, dim, length, make_table(paths["table.npy"], n, dim, seed), starts)
    rows = make_rows(n, starts, length, seed)
    write_binary(paths["cache.bin"], fields, starts, rows, n)
    write_json(paths["cache.json"], fields, rows)
    problems = check_read_back(paths["cache.bin"], paths["cache.json"])
    if problems:
        sys.exit(f"make_binary_cache: {paths['cache.bin']}: " + "; ".join(problems))
    return paths


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--items", type=int, required=True, help="N, the table's rows")
    ap.add_argument("--dim", type=int, default=3, help="D, the table's columns")
    ap.add_argument("--starts", required=True, help="A:B or i,j,k")
    ap.add_argument("--length", type=int, required=True, help="L, items in each sequence")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", required=True, help="the folder to write")
    args = ap.parse_args()
    if args.items < 2 or args.dim < 1 or not 1 <= args.length <= args.items:
        sys.exit("make_binary_cache: --items >= 2, --dim >= 1 and 1 <= --length <= --items expected")
    for path in make(args.out, args.items, args.dim, parse_starts(args.starts, args.items), args.length,
                     args.seed).values():
        print(path)


if __name__ == "__main__":
    main()
