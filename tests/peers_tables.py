"""Small tables for the peers' byte tests (tests/peers_test.sh), written as divgpu reads them.

  python3 tests/peers_tables.py near-tie OUT.json [--n 160] [--dim 512] [--seed 3]
  python3 tests/peers_tables.py duplicates OUT.json [--n 240] [--dim 48] [--seed 5]

near-tie: a few centres, every row a centre plus relative noise of about
3e-7 (a few f32 ulps), so scores differ in their last bits and any
reassociation of the dot product (SGEMM, an unfused chain, a filter without
its certificate) changes winners.
duplicates: clustered rows, and a third of them exact copies of others, so
scores tie exactly and only the contract's order (smallest score, then
smallest index) decides.

Each value is written with repr() of its f32 value widened to f64, which
parses back (nearest f64, then f32) to the same bits.
"""

import argparse
import json

import numpy as np


def near_tie(n, dim, seed):
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((4, dim))
    rows = centres[rng.integers(0, 4, n)]
    rows = rows * (1 + 3e-7 * rng.standard_normal((n, dim)))
    return rows.astype(np.float32)


def duplicates(n, dim, seed):
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((6, dim))
    rows = centres[rng.integers(0, 6, n)] + 0.3 * rng.standard_normal((n, dim))
    k = n // 3
    src = rng.integers(0, n - k, k)
    rows[n - k:] = rows[src]
    perm = rng.permutation(n)
    return rows[perm].astype(np.float32)


def write(path, e):
    with open(path, "w") as f:
        f.write("[\n")
        f.write(",\n".join("[" + ",".join(repr(float(x)) for x in row) + "]" for row in e))
        f.write("\n]\n")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("kind", choices=["near-tie", "duplicates"])
    p.add_argument("out")
    p.add_argument("--n", type=int)
    p.add_argument("--dim", type=int)
    p.add_argument("--seed", type=int)
    a = p.parse_args()
    if a.kind == "near-tie":
        e = near_tie(a.n or 160, a.dim or 512, 3 if a.seed is None else a.seed)
    else:
        e = duplicates(a.n or 240, a.dim or 48, 5 if a.seed is None else a.seed)
    write(a.out, e)
    back = np.array(json.load(open(a.out)), dtype=np.float64).astype(np.float32)
    assert np.array_equal(back.view(np.int32), e.view(np.int32)), "the table did not round-trip"
    print(a.out)


if __name__ == "__main__":
    main()
