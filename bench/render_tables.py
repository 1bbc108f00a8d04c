"""Renders the headline tables from the results files; never typed.

  python3 bench/render_tables.py            # print the rendering
  python3 bench/render_tables.py --write    # rewrite the blocks in README.md, bench/RESULTS.md, docs/performance.md
  python3 bench/render_tables.py --check    # exit 1 if a tracked block differs from the rendering (make test)
  python3 bench/render_tables.py --selftest DIR   # render DIR/results.json (a protocol call), checks below

Each block sits between `<!-- BEGIN rendered: bench/render_tables.py -->` and
`<!-- END rendered -->`; nothing outside the markers is touched.

Rows come from two sources, and a row is rendered only from its raw files:

1. Calls made by bench/protocol.py: every `bench/results/*/results.json`
   (format "divgpu-campaign"), every job marked headline (the shipped
   configuration, enough alternating pairs). For each: divgpu's median and
   range, PyTorch direct's median, the per-pair ratio (median, range, pairs
   divgpu won), the strongest peer (the fastest whose every sequence equals
   divgpu's and which is not timing-only) with its ratio beside PyTorch
   direct's, the same-bytes count.
2. The H200 rows measured before the protocol (LEGACY below): each is read
   from the raw files its folder keeps (the pairs' lines, `done in` lines,
   peers.jsonl, compare.txt), and its protocol gaps are computed and written
   beside it: fewer pairs than the rule, one run a side, no strongest peer or
   no f64-Gram peer in the call, a configuration that is not the shipped one.
   A legacy row whose raw file is missing, or that has no peer time, is not
   rendered.
"""

import argparse
import glob
import json
import os
import re
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results")
BEGIN = "<!-- BEGIN rendered: bench/render_tables.py -->"
END = "<!-- END rendered -->"
TARGETS = [  # (file, the results folder as its links reach it)
    ("README.md", "bench/results"),
    ("bench/RESULTS.md", "results"),
    ("docs/performance.md", "../bench/results"),
]
MIN_PAIRS, MIN_PAIRS_LONG, LONG_SECONDS = 24, 6, 30.0


# ---- reading raw files ---------------------------------------------------

def read(folder, name):
    path = os.path.join(RESULTS, folder, name)
    with open(path) as f:
        return f.read()


def done_in(folder, name):
    """(wall, GPU) of the `done in` line of a divgpu log."""
    m = re.search(r"done in ([0-9.]+) s wall, ([0-9.]+) s GPU", read(folder, name))
    if not m:
        raise LookupError(f"{folder}/{name}: no 'done in' line")
    return float(m.group(1)), float(m.group(2))


def peers_jsonl(folder):
    """The JSON objects of peers.jsonl (pretty-printed one after another)."""
    text, out, dec, i = read(folder, "peers.jsonl"), [], json.JSONDecoder(), 0
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i >= len(text):
            return out
        obj, i = dec.raw_decode(text, i)
        out.append(obj)


def peer_seconds(folder, num_items, length, peer="torch_direct"):
    for r in peers_jsonl(folder):
        if r.get("peer") == peer and r.get("num_items") == num_items and r.get("length") == length:
            return r["seconds"]
    raise LookupError(f"{folder}/peers.jsonl: no {peer} run of N = {num_items}, L = {length}")


def identical(folder, name, pattern):
    """'k of n' from a compare line matching pattern."""
    for line in read(folder, name).splitlines():
        if re.search(pattern, line):
            m = re.search(r"(\d+) of (\d+) sequences identical", line)
            if m:
                return int(m.group(1)), int(m.group(2))
    raise LookupError(f"{folder}/{name}: no comparison matching {pattern!r}")


def pairs_txt(folder, name):
    """Rounds of bench/whole_run_pairs.py's printed lines: [(divgpu s, peer s)], same-bytes."""
    text = read(folder, name)
    rounds = [(float(d), float(t)) for d, t in
              re.findall(r"^pair +\d+ \(.*?\): divgpu ([0-9.]+) s .*?, torch_direct ([0-9.]+) s", text, re.M)]
    m = re.search(r"(\d+) of (\d+) sequences identical", text)
    return rounds, (int(m.group(1)), int(m.group(2)))


def pairs_json(folder, name):
    doc = json.loads(read(folder, name))
    rounds = [(r["divgpu_seconds"], r["torch_seconds"]) for r in doc["runs"]]
    m = re.search(r"(\d+) of (\d+) sequences identical", doc["summary"]["compare"])
    return rounds, (int(m.group(1)), int(m.group(2)))


# ---- the H200 rows measured before the protocol ---------------------------
# Each: the job's words, the folder, how its numbers are read, and what in its
# configuration is not the shipped one. The gaps are computed, not typed.

def legacy_pairs(job, folder, reader, name, method, config=()):
    rounds, same = reader(folder, name)
    return {"job": job, "folder": folder, "method": method, "rounds": rounds, "same": same,
            "config": list(config), "peers": ["torch_direct"], "ceilings": has_ceilings(folder)}


def has_ceilings(folder):
    return os.path.exists(os.path.join(RESULTS, folder, "ceilings.jsonl"))


def legacy_single(job, folder, log, n, length, same_file, same_pattern, method, config=(), peer_n=None):
    wall, gpu = done_in(folder, log)
    peer = peer_seconds(folder, peer_n or n, length)
    return {"job": job, "folder": folder, "method": method, "rounds": [(wall, peer)],
            "same": identical(folder, same_file, same_pattern), "gpu": gpu, "config": list(config),
            "peers": ["torch_direct"], "ceilings": has_ceilings(folder)}


LEGACY = [
    lambda: legacy_pairs("seed batch: 8,359 × 768, 3,584 starts, full length", "2026-12-02_h200_c0b759b",
                         pairs_txt, "pairs_seed.txt", "gram (asked)"),
    lambda: legacy_single("65,536 × 768, 4,096 starts, `--length 1025`", "2026-12-02_h200_a4efc45", "mid_gram.log",
                          65536, 1025, "compare.txt", "mid_gram vs mid_torch", "gram (asked)",
                          ["divgpu's span holds a shader compile and host preparation the peer's leaves out"]),
    lambda: legacy_single("131,072 × 768, 2,048 starts, `--length 257`", "2026-12-02_h200_c0b759b", "large_gram.log",
                          131072, 257, "compare.txt", "large_gram vs large_torch", "gram (asked)"),
    lambda: legacy_single("25,000 real texts × 384, 4,096 starts, full length", "2026-12-02_h200_d7ed206",
                          "real_gram.log", 25000, 25000, "compare.txt", "real_gram vs real_torch", "gram (asked)"),
    lambda: legacy_single("262,144 × 768, 4,096 starts, `--length 257`", "2026-12-04_h200_cea02fd", "logs/big_auto.log",
                          262144, 257, "compare.txt", "big_auto vs big_torch", "auto: tensor"),
    lambda: legacy_single("1,048,576 × 384 `.npy`, 1,024 starts, `--length 101`", "2026-12-04_h200_cea02fd",
                          "logs/million_run.log", 1048576, 101, "compare.txt", "million_run vs million_torch",
                          "auto: tensor", ["divgpu on a cold driver cache, the peer warmed up"]),
    lambda: legacy_pairs("seed batch, `--length 501`", "2026-12-03_h200_4b9dbbb", pairs_json,
                         "pairs_gemm_seed.json", "direct `gemm` (asked)", ["the `gemm` shape asked, not auto"]),
    lambda: legacy_pairs("65,536 × 768, 4,096 starts, `--length 201`", "2026-12-03_h200_4b9dbbb", pairs_json,
                         "pairs_gemm_mid.json", "direct `gemm` (asked)", ["the `gemm` shape asked, not auto"]),
]
NOT_RENDERED = [  # rows of the typed tables before, and why they are not rendered
    "all 8,359 starts on one H200 (`2026-12-02_h200_d7ed206`): no peer in its call",
    "all 8,359 starts on two H200s (`2026-11-30_h200x2_4a6e5bd`): its peer ran on one H200, one run",
    "the runs at 512 threads a sequence (`d1039a3`, `70e52b8`, `191c6c8`): not the shipped configuration",
    "rows of earlier kernels, superseded by the rows above (bench/RESULTS.md's history)",
]


def legacy_rows():
    rows, skipped = [], []
    for make in LEGACY:
        try:
            rows.append(make())
        except (OSError, LookupError, ValueError, KeyError) as e:
            skipped.append(str(e))
    return rows, skipped


def gaps(row):
    g = []
    n = len(row["rounds"])
    long_job = max(max(r) for r in row["rounds"]) > LONG_SECONDS
    need = MIN_PAIRS_LONG if long_job else MIN_PAIRS
    if n == 1:
        g.append("1 run a side")
    elif n < need:
        g.append(f"{n} pairs (rule: {need})")
    if "torch_gram" not in row["peers"] and "torch_tensor" not in row["peers"]:
        g.append("no strongest peer")
    if "torch_gram64" not in row["peers"]:
        g.append("no f64-Gram peer")
    if not row.get("ceilings"):
        g.append("no ceilings in the call")
    return g + [c for c in row["config"] if "fewer than the rule" not in c]


# ---- protocol calls ------------------------------------------------------

def protocol_rows(paths, headline_only=True):
    rows = []
    for path in paths:
        with open(path) as f:
            doc = json.load(f)
        if doc.get("format") != "divgpu-campaign":
            continue
        folder = os.path.basename(os.path.dirname(path))
        for job in doc["jobs"]:
            if headline_only and not job.get("headline"):
                continue
            if not job.get("rounds"):
                continue                                   # no pairs: not rendered
            rows.append(protocol_row(job, folder, doc))
    return rows


def protocol_row(job, folder, doc):
    t = job["table"]
    peers = list(job["peers"])
    row = {"job": f"{job['name']}: {t['num_items']:,} × {t['dim']}, starts {job['starts']}, `--length {job['length']}`",
           "folder": folder, "method": job.get("divgpu_method") or job["method"], "peers": peers,
           "ceilings": doc.get("ceilings") and doc.get("peaks"), "state": job["state"], "config": list(job.get("variant") or []),
           "rounds_all": job["rounds"], "peer_info": job["peers"]}
    direct = "torch_direct" if "torch_direct" in peers else None
    row["rounds"] = [(r["seconds"]["divgpu"], r["seconds"][direct]) for r in job["rounds"]] if direct else \
        [(r["seconds"]["divgpu"], float("nan")) for r in job["rounds"]]
    if direct:
        info = job["peers"][direct]
        row["same"] = (info["identical"], info["sequences"])
    best = None
    for p, info in job["peers"].items():
        if info["timing_only"] or info["identical"] != info["sequences"] or p == "torch_direct":
            continue
        med = statistics.median(r["seconds"][p] for r in job["rounds"])
        if best is None or med < best[1]:
            best = (p, med)
    if best:
        ratios = [r["seconds"]["divgpu"] / r["seconds"][best[0]] for r in job["rounds"]]
        row["strongest"] = (best[0], statistics.median(ratios), min(ratios), max(ratios),
                            sum(x < 1 for x in ratios), len(ratios))
    return row


# ---- rendering -----------------------------------------------------------

def fmt_s(x):
    return f"{x:.3f} s" if x < 100 else f"{x:.1f} s"


def render_row(row, link):
    ds = [d for d, _ in row["rounds"]]
    ps = [p for _, p in row["rounds"]]
    ratios = [d / p for d, p in row["rounds"]]
    n = len(ratios)
    if n > 1:
        dv = f"**{fmt_s(statistics.median(ds))}** ({min(ds):.3f}..{max(ds):.3f})"
        pv = f"{fmt_s(statistics.median(ps))} ({min(ps):.3f}..{max(ps):.3f})"
        rv = (f"**{statistics.median(ratios):.3f}** ({min(ratios):.3f}..{max(ratios):.3f}), "
              f"won {sum(x < 1 for x in ratios)} of {n}")
    else:
        dv, pv, rv = f"**{fmt_s(ds[0])}**", fmt_s(ps[0]), f"**{ratios[0]:.3f}**, 1 run a side"
    dv += f", {row['method']}"
    st = row.get("strongest")
    sv = (f"{st[0]}: {st[1]:.3f} ({st[2]:.3f}..{st[3]:.3f}), won {st[4]} of {st[5]}" if st else "–")
    same = f"{row['same'][0]:,} of {row['same'][1]:,}" if row.get("same") else "–"
    g = "; ".join(gaps(row)) or "none"
    raw = f"[`{row['folder']}`]({link}/{row['folder']}/MANIFEST.md)"
    return f"| {row['job']} | {dv} | {pv} | {rv} | {sv} | {same} | {g} | {raw} |"


def render(link, rows):
    out = [BEGIN,
           "",
           "| job (one H200) | divgpu: median (range), method | PyTorch direct: median (range) | "
           "ratio to PyTorch direct: median (range), pairs won | strongest peer with the same bytes: ratio | "
           "same sequences as PyTorch direct | protocol gaps | raw |",
           "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    out += [render_row(r, link) for r in rows]
    out += ["",
            "Rendered by `bench/render_tables.py` from the raw files of each row's folder (a ratio below 1: "
            "divgpu faster). The gaps are the measuring rules' ([docs/contract.md#measuring]"
            f"({'docs/contract.md' if link == 'bench/results' else '../docs/contract.md'}#measuring)) that "
            "the row's call did not meet; calls made with `bench/protocol.py` have none by construction. "
            "Not rendered: " + "; ".join(NOT_RENDERED) + ".",
            "", END]
    return "\n".join(out)


def all_rows():
    rows, skipped = legacy_rows()
    rows += protocol_rows(sorted(glob.glob(os.path.join(RESULTS, "*", "results.json"))))
    return rows, skipped


def blocks(text):
    i = text.find(BEGIN)
    j = text.find(END, i + 1) if i >= 0 else -1
    return (i, j + len(END)) if i >= 0 and j >= 0 else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--selftest", metavar="DIR")
    a = ap.parse_args()
    if a.selftest:
        return selftest(a.selftest)
    rows, skipped = all_rows()
    for s in skipped:
        print(f"render: not rendered: {s}", file=sys.stderr)
    bad = 0
    for name, link in TARGETS:
        path = os.path.join(ROOT, name)
        block = render(link, rows)
        if not (a.write or a.check):
            print(f"== {name}\n{block}")
            continue
        text = open(path).read()
        span = blocks(text)
        if span is None:
            print(f"render: {name} has no rendered block ({BEGIN} ... {END})", file=sys.stderr)
            bad += 1
            continue
        if a.check:
            if text[span[0]:span[1]] != block:
                print(f"render: {name}: the table differs from the rendering (bench/render_tables.py --write)",
                      file=sys.stderr)
                bad += 1
            continue
        new = text[:span[0]] + block + text[span[1]:]
        if new != text:
            tmp = path + ".tmp"
            with open(tmp, "w") as f:
                f.write(new)
            os.replace(tmp, path)
            print(f"render: wrote {name}")
    if a.check and not bad:
        print(f"render: {len(TARGETS)} tables equal the rendering ({len(rows)} rows)")
    sys.exit(1 if bad else 0)


def selftest(folder):
    """The protocol's smoke call renders (its jobs are variants: rendered here with
    headline_only off), and a job stripped of its rounds is not."""
    path = os.path.join(folder, "results.json")
    rows = protocol_rows([path], headline_only=False)
    doc = json.load(open(path))
    want = sum(1 for j in doc["jobs"] if j.get("rounds"))
    if len(rows) != want or want == 0:
        sys.exit(f"selftest: {len(rows)} rows from {want} jobs with rounds")
    text = render("results", rows)
    for job in doc["jobs"]:
        if job["name"] not in text:
            sys.exit(f"selftest: job {job['name']} is not in the rendering")
    if protocol_rows([path], headline_only=True):
        sys.exit("selftest: a variant was rendered as a headline")
    doc["jobs"][0]["rounds"] = []
    stripped = os.path.join(folder, "stripped.json")
    json.dump(doc, open(stripped, "w"))
    if len(protocol_rows([stripped], headline_only=False)) != want - 1:
        sys.exit("selftest: a job without pairs was rendered")
    print(f"selftest: {len(rows)} rows rendered from {path}; the job without pairs was not")
    print(text)


if __name__ == "__main__":
    main()
