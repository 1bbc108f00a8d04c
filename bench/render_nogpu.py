#!/usr/bin/env python3
"""Renders the "No GPU?" table (README.md) from bench/no_gpu_pairs.sh's raw
file: per job, each side's median wall and CPU seconds with their range
(min-max over the rounds), its wall and CPU seconds over the CPU method's
(the median of the rounds' ratios, with their min-max: each round runs every
side once, in alternating order), how many of its runs gave the CPU method's
sequences, and the issue's target where one applies (met only if every
round's wall ratio meets it). Under the table, per job, the mirror's word on
the CPU method's cache (the raw file's `mirror` row) and the load the
machine carried (load.tsv beside the raw file, sampled while the rounds
ran). Under each job's sides, its two floors on this machine, from the
ceilings measured in the same rounds (ceilings.tsv beside the raw file:
PyTorch's copy, SGEMM and DGEMM rates): the direct algorithm's (every
score's S (L-1) N D products at the SGEMM rate: no SGEMM-per-step peer can
be faster) and the Gram filter's (G's N (N+1)/2 D products at the DGEMM
rate, then 4 bytes of G read a candidate-step at the copy rate). A job is rendered with its complete rounds (every side run), their
count in its first cell; one without any is not.

  python3 bench/render_nogpu.py [--check]

The block sits between `<!-- BEGIN rendered: bench/render_nogpu.py -->` and
`<!-- END rendered -->`; --check fails where the tracked block differs.
"""
import csv
import pathlib
import statistics
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results" / "2026-12-05c_nogpu"
BEGIN, END = "<!-- BEGIN rendered: bench/render_nogpu.py -->", "<!-- END rendered -->"
JOBS = {"poems": "the shipped poems, every start in full (`make run`'s job: 2,103 x 2,103 steps)",
        "fortunes": "Debian's fortunes, 4,000 x 384 (`bench/tables/fortunes.py`), 512 starts (`sample:512:1`) x 200 steps",
        "synth": "`synth` 4,000 x 384 (16 clusters), 512 starts x 200 steps"}
SIDES = [("cpu", "divgpu, CPU method"),
         ("lavapipe", "divgpu on lavapipe"),
         ("numpy_filtered", "numpy: SGEMM + proven bound + the chain in the window (`numpy_filtered.py`; the contract's bytes)"),
         ("numpy_sgemm", "numpy: plain SGEMM (`numpy_direct.py --chain sgemm`; **timing only**)"),
         ("torch_gram", "PyTorch: the Gram filter with divgpu's certificate (`torch_gram.py --device cpu`; the contract's bytes)"),
         ("torch_direct", "PyTorch direct: one SGEMM a step (`torch_direct.py --device cpu`; **timing only**)")]
# The floors (seconds) from a ceilings.tsv row: (label, function of the row).
FLOORS = [("floor of the direct algorithm: S (L-1) N D products at the SGEMM rate measured in the round",
           lambda c: 2 * c["sequences"] * (c["length"] - 1) * c["n"] * c["dim"] / c["sgemm_flops"]),
          ("floor of the Gram filter: G's N (N+1)/2 D products at the DGEMM rate, 4 bytes of G a candidate-step "
           "at the copy rate",
           lambda c: c["n"] * (c["n"] + 1) * c["dim"] / c["dgemm_flops"]
           + 4 * c["sequences"] * (c["length"] - 1) * c["n"] / c["copy_bytes_per_s"])]
# The no-GPU acceptance's targets (the CPU method at least this much faster): (job, side) -> the least ratio of its wall to the CPU method's.
TARGETS = {("poems", "lavapipe"): 10, ("poems", "numpy_filtered"): 2, ("fortunes", "numpy_filtered"): 3}


def rows_of(raw):
    with open(raw) as f:
        return list(csv.DictReader(f, delimiter="\t"))


def span(values):
    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})"


def ratio_span(ratios):
    return f"{statistics.median(ratios):.1f}x ({min(ratios):.1f}-{max(ratios):.1f})"


def ceilings_of(job):
    """The job's ceilings.tsv rows by round, their numbers as floats."""
    path = RESULTS / "ceilings.tsv"
    if not path.exists():
        return {}
    return {r["round"]: {k: float(v) for k, v in r.items() if k not in ("job", "round", "torch")}
            for r in rows_of(path) if r["job"] == job}


def floor_lines(job, complete, by):
    """The job's floors, each round's over that round's CPU-method wall."""
    ceilings = ceilings_of(job)
    rounds = [r for r in complete if r in ceilings]
    lines = []
    for label, floor in FLOORS if rounds else []:
        secs = [floor(ceilings[r]) for r in rounds]
        ratios = [floor(ceilings[r]) / float(by[r, "cpu"]["wall_s"]) for r in rounds]
        lines.append(f"|  | {label} | {span_fine(secs)} |  | {ratio_span_fine(ratios)} |  |  |  |")
    return lines


def span_fine(values):
    return f"{statistics.median(values):.3g} ({min(values):.3g}-{max(values):.3g})"


def ratio_span_fine(ratios):
    return f"{statistics.median(ratios):.3g}x ({min(ratios):.3g}-{max(ratios):.3g})"


def job_lines(job, rows):
    by = {(r["round"], r["side"]): r for r in rows if r["job"] == job}
    rounds = sorted({k[0] for k in by if k[0] != "0"}, key=int)
    complete = [r for r in rounds if all((r, s) in by for s, _ in SIDES)]
    if not complete:
        return [], None
    name = f"{JOBS[job]}; {len(complete)} round{'s' if len(complete) > 1 else ''}"
    lines = []
    for side, label in SIDES:
        walls = [float(by[r, side]["wall_s"]) for r in complete]
        cpus = [float(by[r, side]["cpu_s"]) for r in complete]
        same = sum(by[r, side]["sha256"] == by[r, "cpu"]["sha256"] for r in complete)
        if side == "cpu":
            wall_ratio = cpu_ratio = "1"
            target = ""
        else:
            wr = [float(by[r, side]["wall_s"]) / float(by[r, "cpu"]["wall_s"]) for r in complete]
            cr = [float(by[r, side]["cpu_s"]) / float(by[r, "cpu"]["cpu_s"]) for r in complete]
            wall_ratio, cpu_ratio = ratio_span(wr), ratio_span(cr)
            want = TARGETS.get((job, side))
            met = sum(x >= want for x in wr) if want else 0
            target = "" if not want else (f">= {want}x: met ({met}/{len(wr)} rounds)" if met == len(wr)
                                          else f">= {want}x: **missed** (met in {met}/{len(wr)} rounds)")
        lines.append(f"| {name if side == 'cpu' else ''} | {label} | {span(walls)} | {span(cpus)} | {wall_ratio} | {cpu_ratio} "
                     f"| {same}/{len(complete)} | {target} |")
    lines += floor_lines(job, complete, by)
    mirror = [r for (rnd, side), r in by.items() if rnd == "0" and side.startswith("mirror")]
    note = None
    if mirror:
        m = mirror[-1]
        scope = m["side"][len("mirror"):].strip(" ()") or "every sequence"
        agreed = m["same_as_cpu"] == "yes"
        every = sum(by[r, "cpu"]["sha256"] == m["sha256"] for r in complete)
        note = (f"{job}: the CPU mirror (`bin/divgpu verify`, {scope}) "
                + (f"agreed with the CPU method's sequences (sha256 `{m['sha256'][:8]}...`, "
                   f"the CPU method's in {every} of {len(complete)} rounds)" if agreed
                   else "**differed from** the CPU method's cache"))
    return lines, note


def render():
    raw = RESULTS / "raw.tsv"
    rows = rows_of(raw)
    machine = (RESULTS / "machine.txt").read_text().strip().replace("\n", "; ")
    body = ["| job | side | wall s, median (min-max) | CPU s, median (min-max) | its wall / the CPU method's "
            "| its CPU s / the CPU method's | the CPU method's sequences | the acceptance's target (wall) |",
            "|---|---|---|---|---|---|---|---|"]
    notes = []
    for job in JOBS:
        lines, note = job_lines(job, rows)
        body += lines
        if note:
            notes.append(note)
    body.append("")
    if notes:
        body.append("; ".join(notes) + ".")
        body.append("")
    load = RESULTS / "load.tsv"
    if load.exists():
        l1 = [float(r["load1"]) for r in rows_of(load)]
        body.append(f"The machine's 1-minute load average while the rounds ran (2 cores; the rounds themselves load "
                    f"both): median {statistics.median(l1):.1f}, {min(l1):.1f}-{max(l1):.1f} "
                    f"([`{load.relative_to(ROOT)}`]({load.relative_to(ROOT)})); above 2, other work shared the "
                    f"cores, which the walls carry and the CPU seconds and their ratios carry less.")
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
