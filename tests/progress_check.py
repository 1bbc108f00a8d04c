#!/usr/bin/env python3
"""Checks the progress a divgpu command wrote to a log (its stderr).

Usage: tests/progress_check.py MODE LOG [--interval S] [--unit U]
  plain  at least two plain lines (docs/cli.md#progress; the rate "?" until
         one is measured), none redrawn (no
         carriage return or escape code anywhere in the log), done <= total,
         the percentage never falling
  json   the same with JSON lines: every field of the page, in its order,
         elapsed_s at least S apart, nothing else that looks like progress
  live   a terminal's: the line redrawn in place (carriage return, erase), and
         no plain or JSON progress line
  none   no progress of any kind (--quiet)
Exit status 0 when the log is what MODE says, 1 (with the reason) when not.
"""

import argparse
import json
import re
import sys

PLAIN = re.compile(r"^divgpu: progress: (\d+)/(\d+) (\w+)(?: \(\d+ resumed\))?, ([\d.]+)%"
                   r"(?: \(batch \d+/\d+, step \d+/\d+\))?, (?:[\d.]+|\?) \w+/s, elapsed \S+, ETA \S+$")
JSON_KEYS = ["event", "unit", "done", "total", "resumed", "percent", "batch", "batches", "step", "length",
             "elapsed_s", "rate_per_s", "eta_s"]
TERMINAL = re.compile(r"\r(?!\n)|\x1b")  # a line ending \r\n (a pty's) redraws nothing


def fail(why):
    print("progress_check: " + why)
    sys.exit(1)


def progress_lines(lines):
    return [l for l in lines if l.startswith("divgpu: progress") or l.startswith('{"event":"progress"')]


def check_counts(rows, unit):
    """rows: (done, total, unit, percent) in order."""
    if len(rows) < 2:
        fail(f"{len(rows)} progress line(s); expected at least two")
    last = -1.0
    for done, total, u, percent in rows:
        if u != unit or not 0 <= done <= total or percent + 1e-9 < last:
            fail(f"a line off the count: {done}/{total} {u} at {percent}% after {last}%")
        last = percent


def check_plain(lines, unit):
    rows = []
    for line in progress_lines(lines):
        m = PLAIN.match(line)
        if not m:
            fail(f"not a plain progress line: {line!r}")
        rows.append((int(m[1]), int(m[2]), m[3], float(m[4])))
    check_counts(rows, unit)


def check_json(lines, unit, interval):
    rows, elapsed = [], []
    for line in progress_lines(lines):
        try:
            p = json.loads(line)
        except ValueError:
            fail(f"not a JSON line: {line!r}")
        present = [k for k in JSON_KEYS if k in p]
        if list(p) != present or not {"event", "unit", "done", "total", "elapsed_s", "rate_per_s"} <= set(p):
            fail(f"fields {list(p)}; expected {JSON_KEYS} in that order")
        rows.append((p["done"], p["total"], p["unit"], p["percent"]))
        elapsed.append(p["elapsed_s"])
    check_counts(rows, unit)
    gaps = [b - a for a, b in zip(elapsed, elapsed[1:])]
    if min(gaps) < interval * 0.999:
        fail(f"lines {min(gaps):.3f} s apart; the interval is {interval} s")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["plain", "json", "live", "none"])
    ap.add_argument("log")
    ap.add_argument("--interval", type=float, default=0.0)
    ap.add_argument("--unit", default="sequences")
    a = ap.parse_args()
    text = open(a.log, encoding="utf-8", errors="replace", newline="").read()
    lines = text.split("\n")
    redrawn = TERMINAL.search(text)
    if a.mode == "live":
        if not re.search(r"\r\x1b\[K" + a.unit + r" \d+/\d+", text):
            fail("no line redrawn in place")
        if progress_lines(lines):
            fail("a plain or JSON progress line on a terminal")
    elif redrawn:
        fail(f"a carriage return or escape code in a log at byte {redrawn.start()}")
    elif a.mode == "none" and progress_lines(lines):
        fail(f"progress with --quiet: {progress_lines(lines)[0]!r}")
    elif a.mode == "plain":
        check_plain(lines, a.unit)
    elif a.mode == "json":
        check_json(lines, a.unit, a.interval)


if __name__ == "__main__":
    main()
