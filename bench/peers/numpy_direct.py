"""The numpy peer of divgpu's `direct` method on a CPU: the contract's chain for every candidate.

Every sequence of a batch at once, as [S, N] arrays. Each step rounds the f64
centroid sum to f32 (the contract's c), scores every unchosen candidate with
the fma chain d ascending, one accumulator a pair, the fma emulated exactly
(exact.py: an f64 product, TwoSum, round to odd, one rounding to f32), times
inv_norm in one f32 multiply, and takes the smallest score, then the smallest
index (numpy's argmin returns the first of equal minima; -0 == +0). So its
output is the contract's, by construction: the test checks it against the
mirror and its twin (--chain unfused: an f32 multiply then an f32 add, two
roundings) must differ on the near-tie tables, and so must --tie last (the
largest of equal indices) on the table of duplicate rows.

--chain sgemm is what a numpy user would write (c @ E.T, one BLAS SGEMM a
step, in the BLAS's own order): TIMING ONLY, not the contract's arithmetic;
its output is compared, never claimed equal.

  python3 bench/peers/numpy_direct.py --embeddings E.json --starts 0:64 --length 64 \\
      --out direct.json [--chain exact|unfused|sgemm] [--batch S] [--json R.json]

`seconds` spans what divgpu's `done in` spans on a CPU device: the table's
preparation (its f64 columns, the transposed copy) and every step, to the
sequences in host memory; not reading the JSON, inv_norm or the cache write
(divgpu's `done in` excludes its load and write too).
"""

import time

import numpy as np

import common
import exact

CHAINS = ("exact", "unfused", "sgemm")


def run_batch(cols, e, inv, starts, length, chain, tie="first"):
    """cols f32 [D, N] (the table by columns), e f32 [N, D]; -> int64 [S, length]."""
    ops = exact.Ops(np)
    S, N = len(starts), e.shape[0]
    rows = np.arange(S)
    out = np.empty((S, length), dtype=np.int64)
    out[:, 0] = starts
    mask = np.zeros((S, N), dtype=bool)
    mask[rows, starts] = True
    csum = e[starts].astype(np.float64)
    for t in range(1, length):
        c = csum.astype(np.float32)                            # c = (f32) csum
        if chain == "sgemm":
            acc = c @ cols                                     # BLAS, its own order
        else:
            acc = np.zeros((S, N), dtype=np.float32)
            for d in range(cols.shape[0]):                     # d ascending
                acc = exact.fma_f32(ops, c[:, d:d + 1], cols[d][None, :], acc, chain == "exact")
        score = acc * inv                                      # f32 multiply
        score[mask] = np.inf
        if tie == "first":
            w = score.argmin(axis=1)                           # first of equal minima
        else:                                                  # the twin: the last of them
            w = N - 1 - score[:, ::-1].argmin(axis=1)
        out[:, t] = w
        mask[rows, w] = True
        csum += e[w].astype(np.float64)
    return out


def main():
    p = common.peer_parser(__doc__.splitlines()[0])
    p.add_argument("--chain", choices=CHAINS, default="exact",
                   help="exact (the contract), unfused (the twin), sgemm (timing only)")
    args = p.parse_args()
    e, inv, sha, starts, length = common.load_job(args)
    n, dim = e.shape
    batch = args.batch or len(starts)

    def timed_job():
        t0 = time.perf_counter()
        cols = np.ascontiguousarray(e.T)
        seqs = [run_batch(cols, e, inv, starts[b:b + batch], length, args.chain, args.tie)
                for b in range(0, len(starts), batch)]
        return time.perf_counter() - t0, np.concatenate(seqs)

    def result(seconds):
        return {"peer": "numpy_direct", "variant": args.chain, "seconds": seconds,
                "contract_bytes": args.chain == "exact" and args.tie == "first", "timing_only": args.chain == "sgemm",
                "num_items": n, "dim": dim, "sequences": len(starts), "length": length,
                "batch": batch, "torch": None, "numpy": np.__version__, "device": "cpu"}

    if args.serve:
        common.serve(timed_job, lambda s, q: common.finish(args, result(s), q, e, sha, length))
        return
    seconds, seqs = timed_job()
    common.finish(args, result(seconds), seqs, e, sha, length)


if __name__ == "__main__":
    main()
