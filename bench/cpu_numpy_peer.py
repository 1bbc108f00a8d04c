"""The numpy SGEMM peer of the CPU method: the direct method with
every sequence's centroid in one f32 matrix product a step (numpy's BLAS,
all cores), plain argmin (ties to the smallest index). Not the contract's
arithmetic (SGEMM splits the sums), so its output is compared, not assumed.

  python3 bench/cpu_numpy_peer.py TABLE.json STARTS_COUNT LENGTH [OUT.txt]

Starts are STARTS_COUNT evenly spaced items (floor(i * N / count)), as
bench/cpu_bench.lua takes them. Prints the wall and CPU seconds of the steps
(the table's load apart); OUT.txt gets the sequences, one a line.
"""

import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "peers"))
import numpy as np  # noqa: E402

from common import inv_norm, load_table  # noqa: E402


def run(e, inv, starts, length):
    s = len(starts)
    rows = np.arange(s)
    csum = e[starts].astype(np.float64)
    masked = np.zeros((s, e.shape[0]), dtype=bool)
    masked[rows, starts] = True
    out = np.empty((s, length), dtype=np.uint32)
    out[:, 0] = starts
    et = np.ascontiguousarray(e.T)
    for t in range(1, length):
        scores = (csum.astype(np.float32) @ et) * inv
        scores[masked] = np.inf
        w = np.argmin(scores, axis=1)
        masked[rows, w] = True
        out[:, t] = w
        csum += e[w]
    return out


def main():
    path, count, length = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    e, _ = load_table(path)
    inv = inv_norm(e, path)
    n = e.shape[0]
    length = n if length <= 0 else length
    starts = np.array([i * n // count for i in range(count)], dtype=np.int64)
    t0, c0 = time.perf_counter(), time.process_time()
    out = run(e, inv, starts, length)
    print(f"numpy n={n} dim={e.shape[1]} starts={count} length={length} "
          f"wall={time.perf_counter() - t0:.3f} cpu={time.process_time() - c0:.3f}")
    if len(sys.argv) > 4:
        np.savetxt(sys.argv[4], out, fmt="%d")


if __name__ == "__main__":
    main()
