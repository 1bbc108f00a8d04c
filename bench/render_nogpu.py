#!/usr/bin/env python3
"""Renders the "No GPU?" table (README.md) from bench/no_gpu_pairs.sh's raw
files: per job, each side's median wall and CPU seconds with their range,
the CPU method's ratios against divgpu on lavapipe and the numpy SGEMM peer
(the median of the rounds' ratios: each round runs every side once, in
alternating order), and how many of each side's runs gave the CPU method's
sequences. A job without two rounds of every side is not rendered.

  python3 bench/render_nogpu.py [--check]

The block sits between `<!-- BEGIN rendered: bench/render_nogpu.py -->` and
`<!-- END rendered -->`; --check fails where the tracked block differs.
"""
import csv
import pathlib
import statistics
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "2026-12-05_nogpu"
BEGIN, END = "<!-- BEGIN rendered: bench/render_nogpu.py -->", "<!-- END rendered -->"
JOBS = {"poems": "the shipped poems, every start in full (`make run`'s job: 2,103 x 2,103 steps)",
        "synth": "`synth` 4,000 x 384 (16 clusters), 512 starts x 200 steps"}
SIDES = [("cpu", "divgpu, CPU method"), ("lavapipe", "divgpu on lavapipe"), ("numpy_sgemm", "numpy SGEMM peer")]


def rows_of(raw):
    with open(raw) as f:
        return list(csv.DictReader(f, delimiter="\t"))


def span(values):
    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"


def job_lines(job, rows):
    by = {(r["round"], r["side"]): r for r in rows if r["job"] == job}
    rounds = sorted({k[0] for k in by}, key=int)
    complete = [r for r in rounds if all((r, s) in by for s, _ in SIDES)]
    if len(complete) < 2:
        return []
    lines = []
    for side, label in SIDES:
        walls = [float(by[r, side]["wall_s"]) for r in complete]
        cpus = [float(by[r, side]["cpu_s"]) for r in complete]
        same = sum(by[r, side]["sha256"] == by[r, "cpu"]["sha256"] for r in complete)
        if side == "cpu":
            ratio = "1"
        else:
            ratios = [float(by[r, side]["wall_s"]) / float(by[r, "cpu"]["wall_s"]) for r in complete]
            ratio = f"{statistics.median(ratios):.1f}x ({min(ratios):.1f}-{max(ratios):.1f})"
        lines.append(f"| {JOBS[job]} | {label} | {span(walls)} | {span(cpus)} | {ratio} | {same}/{len(complete)} |")
    return lines


def render():
    raw = RESULTS / "raw.tsv"
    rows = rows_of(raw)
    machine = (RESULTS / "machine.txt").read_text().strip().replace("\n", "; ")
    body = ["| job | side | wall s, median (range) | CPU s, median (range) | its wall / the CPU method's | the CPU method's sequences |",
            "|---|---|---|---|---|---|"]
    for job in JOBS:
        body += job_lines(job, rows)
    body.append("")
    body.append(f"Raw: [`{raw.relative_to(ROOT)}`]({raw.relative_to(ROOT)}) (`bench/no_gpu_pairs.sh JOB ROUNDS RAW`); "
                f"machine: {machine}. Each side is a whole command (process start, table load, set-up, writing).")
    return "\n".join(body)


def main():
    readme = ROOT / "README.md"
    text = readme.read_text()
    if BEGIN not in text or END not in text[text.index(BEGIN):]:
        print(f"{readme}: no {BEGIN} block", file=sys.stderr)
        return 1
    a = text.index(BEGIN) + len(BEGIN)
    b = text.index(END, a)
    rendered = "\n" + render() + "\n"
    if "--check" in sys.argv:
        if text[a:b] != rendered:
            print(f"{readme}: the No GPU table differs from its rendering (python3 bench/render_nogpu.py)", file=sys.stderr)
            return 1
        print("render_nogpu: README's No GPU table equals the rendering")
        return 0
    readme.write_text(text[:a] + rendered + text[b:])
    return 0


if __name__ == "__main__":
    sys.exit(main())
