#!/usr/bin/env python3
"""Damaged and edited inputs for tests/trust_inputs_test.sh (round 3's inputs).

    damage CACHE.json EXTRA.json OUTDIR   the five damaged JSON caches
    damage_bin CACHE.bin OUTDIR           damaged binary caches
    upper CACHE.json OUT.json             the header's sha256s in upper case
    fp16_shape META.json BIN N D          the meta edited to N x D, checksum recomputed
    big_cache CACHE.json OUT.json COUNT [shard]
                                          a valid cache of COUNT sequences (the
                                          first sequence's table, length and
                                          starts repeated), optionally a part 0/1
    stats_gram STATS.jsonl OUT.jsonl      every gram chunk's "gram" replaced by 5
"""
import hashlib
import json
import re
import struct
import sys


def lines_of(path):
    text = open(path).read()
    lines = text.split("\n")
    assert lines[-1] == "" and lines[-2] == "]}", "a cache as divgpu writes it"
    return lines[0], lines[1], [l.rstrip(",") for l in lines[2:-2]]


def write_cache(path, header, opener, sequences):
    body = [header, opener] + [s + "," for s in sequences[:-1]] + [sequences[-1], "]}", ""]
    open(path, "w").write("\n".join(body))


def damage(cache, extra, outdir):
    header, opener, seqs = lines_of(cache)
    assert len(seqs) >= 3
    _, _, more = lines_of(extra)
    # The last line ("]}") cut off, as `head -n -1` does.
    text = open(cache).read()
    open(f"{outdir}/truncated.json", "w").write(text[: text.rstrip("\n").rfind("\n") + 1])
    write_cache(f"{outdir}/duplicate.json", header, opener, [seqs[0], seqs[0]] + seqs[2:])
    write_cache(f"{outdir}/swapped.json", header, opener, [seqs[1], seqs[0]] + seqs[2:])
    write_cache(f"{outdir}/extra.json", header, opener, seqs + [more[len(seqs)]])
    huge = re.sub(r'"length":\d+', '"length":1099511627776', header)
    write_cache(f"{outdir}/huge.json", huge, opener, seqs)
    many = re.sub(r'"starts_count":\d+', '"starts_count":1099511627776', header)
    write_cache(f"{outdir}/huge-count.json", many, opener, seqs)
    items = re.sub(r'"num_items":\d+', '"num_items":1099511627776', header)
    write_cache(f"{outdir}/huge-items.json", items, opener, seqs)


def damage_bin(cache, outdir):
    data = open(cache, "rb").read()
    magic, layout, hlen = data[:8], *struct.unpack("<II", data[8:16])
    header = data[16 : 16 + hlen]
    open(f"{outdir}/truncated.bin", "wb").write(data[:-4])
    open(f"{outdir}/extra.bin", "wb").write(data + b"\0\0\0\0")
    text = header.decode().rstrip(" ")
    for name, field, value in (("huge", "length", 1099511627776), ("huge-count", "starts_count", 1099511627776),
                               ("huge-items", "num_items", 1099511627776)):
        edited = re.sub(rf'"{field}":\d+', f'"{field}":{value}', text)
        # A longer header moves what follows it: the offsets follow (H stays
        # the smallest multiple of 8 that holds the header).
        offsets = {k: int(v) for k, v in re.findall(r'"(\w+_offset)":(\d+)', text)}
        base, new_len = edited, hlen
        for _ in range(3):
            new_len = (len(edited) + 7) // 8 * 8
            edited = base
            for k, v in offsets.items():
                edited = edited.replace(f'"{k}":{v}', f'"{k}":{v + new_len - hlen}')
        head = edited.encode().ljust(new_len, b" ")
        open(f"{outdir}/{name}.bin", "wb").write(magic + struct.pack("<II", layout, new_len) + head + data[16 + hlen :])


def upper(cache, out):
    text = open(cache).read()
    first, rest = text.split("\n", 1)
    first = re.sub(r'"(embeddings_sha256|starts_sha256)":"([0-9a-f]{64})"',
                   lambda m: f'"{m.group(1)}":"{m.group(2).upper()}"', first)
    open(out, "w").write(first + "\n" + rest)


def fp16_shape(meta_path, bin_path, n, d):
    meta = json.load(open(meta_path))
    halves = open(bin_path, "rb").read()
    meta["num_items"], meta["dim"] = n, d
    meta["shape_and_bin_sha256"] = hashlib.sha256(struct.pack("<QQ", n, d) + halves).hexdigest()
    json.dump(meta, open(meta_path, "w"), indent=2)


def big_cache(cache, out, count, shard=False):
    header, opener, seqs = lines_of(cache)
    h = json.loads(header.rstrip(",") + "}")
    starts = [int(s[1:].split(",", 1)[0]) for s in seqs]
    every = [starts[i % len(starts)] for i in range(count)]
    sha = hashlib.sha256(struct.pack(f"<{count}I", *every)).hexdigest()
    header = re.sub(r'"starts_count":\d+', f'"starts_count":{count}', header)
    header = re.sub(r'"starts_sha256":"[0-9a-f]{64}"', f'"starts_sha256":"{sha}"', header)
    if shard:
        header += f'"shard":{{"index":0,"count":1,"starts":{count},"starts_sha256":"{sha}"}},'
    with open(out, "w") as f:
        f.write(header + "\n" + opener + "\n")
        for i in range(count):
            f.write(seqs[i % len(seqs)] + (",\n" if i + 1 < count else "\n"))
        f.write("]}\n")
    del h


def stats_gram(stats, out):
    rows = [json.loads(l) for l in open(stats)]
    n = 0
    for r in rows:
        if r.get("record") == "chunk" and "gram" in r:
            r["gram"] = 5
            n += 1
    assert n, "a gram run's stats"
    open(out, "w").write("".join(json.dumps(r) + "\n" for r in rows))


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    if cmd == "damage":
        damage(*args)
    elif cmd == "damage_bin":
        damage_bin(*args)
    elif cmd == "upper":
        upper(*args)
    elif cmd == "fp16_shape":
        fp16_shape(args[0], args[1], int(args[2]), int(args[3]))
    elif cmd == "big_cache":
        big_cache(args[0], args[1], int(args[2]), len(args) > 3 and args[3] == "shard")
    elif cmd == "stats_gram":
        stats_gram(*args)
    else:
        raise SystemExit(f"unknown command {cmd}")
