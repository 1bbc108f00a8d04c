"""Compares two diversity caches of the same job, sequence by sequence.

  python3 bench/peers/compare.py A.json B.json [--json]

Refuses (one line, exit 2) unless both caches come from the same table
(embeddings_sha256, num_items, dim) with the same length and the same starts
in the same order. Prints how many sequences are identical and, for the
others, the step of the first divergence (step t is the t-th item after the
start, 1 <= t < L): median, min and max. Exit 0 either way: a difference is a
measurement here, not an error.
"""

import argparse
import json
import statistics
import sys

import common


def compare(a_path, b_path):
    (ha, sa), (hb, sb) = common.read_cache(a_path), common.read_cache(b_path)
    for key in ("embeddings_sha256", "num_items", "dim", "length"):
        if ha.get(key) != hb.get(key):
            raise common.InputError(f"{a_path} and {b_path} differ in {key} "
                                    f"({ha.get(key)} vs {hb.get(key)}): not the same job")
    if [s[0] for s in sa] != [s[0] for s in sb]:
        raise common.InputError(f"{a_path} and {b_path} have different starts "
                                f"({len(sa)} vs {len(sb)} sequences): not the same job")
    firsts = []
    for x, y in zip(sa, sb):
        if x != y:
            firsts.append(next(t for t, (p, q) in enumerate(zip(x, y)) if p != q))
    same = len(sa) - len(firsts)
    return {"a": a_path, "b": b_path, "contracts": [ha.get("contract"), hb.get("contract")],
            "num_items": ha["num_items"], "length": ha["length"], "sequences": len(sa),
            "identical": same, "identical_share": same / len(sa),
            "first_divergence_median": statistics.median(firsts) if firsts else None,
            "first_divergence_min": min(firsts) if firsts else None,
            "first_divergence_max": max(firsts) if firsts else None}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    args = p.parse_args()
    try:
        r = compare(args.a, args.b)
    except common.InputError as e:
        print(f"compare: {e}", file=sys.stderr)
        sys.exit(2)
    if args.json:
        print(json.dumps(r))
        return
    line = (f"{r['identical']} of {r['sequences']} sequences identical "
            f"({100 * r['identical_share']:.1f}%), length {r['length']}, N = {r['num_items']}")
    if r["first_divergence_median"] is not None:
        line += (f"; the others first diverge at step {r['first_divergence_median']:g} (median; "
                 f"min {r['first_divergence_min']}, max {r['first_divergence_max']})")
    print(line)


if __name__ == "__main__":
    main()
