"""The numpy peer of divgpu's filters on a CPU: SGEMM scores, a proven bound, the contract's chain in the window.

Each step: c = (f32)csum; s_hat = c @ E^T by the BLAS SGEMM (f32, in whatever
order and blocking the BLAS picks); a_j = s_hat_j * inv_j in f64 (exact: a
product of two f32); a bound B_j on |score_j - a_j| for every unchosen j;
the window W = { j : a_j - B_j <= min_k (a_k + B_k) }; every member of W
rescored with the contract's chain (exact.py) and the contract's order
(smallest score, then smallest index) decides. So the output is the
contract's whenever the bound is valid; the proof:

1. SGEMM. Whatever the order of its additions (a tree, blocks, several
   accumulators, split-K) and whether its products are fused, every product
   c_d E_jd reaches s_hat_j through at most D roundings, so
   |s_hat_j - X_j| <= gamma32(D) sum_d |c_d E_jd| + 2 D eta (1 + 2 D u)
   with X_j = c . E_j exact, gamma32(D) = D u / (1 - D u) <= D u (1 + 2 D u)
   (D u <= 1/4), and eta = 2^-150 per rounding in gradual underflow (at most
   2D roundings, each grown by at most (1+u)^D afterwards). Cauchy-Schwarz:
   sum_d |c_d E_jd| <= |c| nu_j, nu_j >= |E_j| (exact.row_norm_bounds).
2. The contract's chain (shaders/gram.md section 2(a)):
   |acc_j - X_j| <= rho |w o c| nu_j + D eta (1 + 2 D u), rho = u (1 + 2 D u),
   w_d = D - d.
3. Score level (gram.md section 4): score_j = fl32(acc_j inv_j), so
   |score_j - a_j| <= (1+u) inv_j |acc_j - s_hat_j| + u |a_j| + eta
   <= B*_j := (1+u) inv_j [(gamma32(D) |c| + rho |w o c|) nu_j + 3 D eta (1 + 2 D u)]
              + u |a_j| + eta.
   The peer uses B_j = (1 + 2^-20) B*_j evaluated in f64: |c| and |w o c| are
   f64 sums of exact squares (relative error below (D+4) 2^-52 < 2^-21), and
   the few further f64 roundings of non-negative terms are covered by the
   2^-20 slack, as in gram.md section 4.
4. Window (gram.md section 5 with a bound per candidate): the winner w* has
   score_w* <= score_k <= a_k + B*_k for every k, so score_w* <= U* :=
   min_k (a_k + B*_k); any j tied with w* has a_j - B*_j <= score_j <= U*.
   The f64 roundings of a_k + B_k and a_j - B_j are each at most
   2^-53 (|a| + B) < 2^-21 B* (as B* >= u |a|), inside the slack of B.

--bound-scale X multiplies B (the twin: 0 keeps only the SGEMM's argmin,
which must fail on near-tie tables; a valid run keeps 1). --no-certificate is
TIMING ONLY: the argmin of a_j, no window, no chain.

  python3 bench/peers/numpy_filtered.py --embeddings E.json --starts 0:64 --length 64 \\
      --out filtered.json [--bound-scale 1] [--no-certificate] [--check-bound] [--json R.json]

--check-bound rescores every candidate of every step with the chain and
reports max |score_j - a_j| / B_j (must be <= 1; a bound scaled by 0.01 must
exceed it): output parity alone cannot catch a bound that is too small.

`seconds` spans what divgpu's `done in` spans on a CPU device: the table's
preparation (norm bounds, the transposed copy) and every step, to the
sequences in host memory; not the JSON, inv_norm or the cache write.
"""

import time

import numpy as np

import common
import exact
from exact import ETA, SLACK, U


def prepare(e, inv):
    n, dim = e.shape
    e64 = e.astype(np.float64)
    nu = exact.row_norm_bounds(e64)
    w = (dim - np.arange(dim)).astype(np.float64)               # w_d = D - d
    return {"cols": np.ascontiguousarray(e.T), "e": e, "inv": inv, "inv64": inv.astype(np.float64),
            "nu": nu, "w": w, "dim": dim}


def step_bounds(prep, c, a):
    """B_j [S, N] (section 3 of the docstring)."""
    dim = prep["dim"]
    c64 = c.astype(np.float64)
    cn = exact.norm_up(np, c64, dim)[:, None]                    # |c|
    wcn = exact.norm_up(np, c64 * prep["w"], dim)[:, None]       # |w o c|
    g32 = dim * U * (1 + 2 * dim * U)
    rho = U * (1 + 2 * dim * U)
    under = 3 * dim * ETA * (1 + 2 * dim * U)
    b = (1 + U) * prep["inv64"] * ((g32 * cn + rho * wcn) * prep["nu"] + under) + U * np.abs(a) + ETA
    return SLACK * b


def run_batch(prep, starts, length, scale, certify, check, tie="first"):
    ops = exact.Ops(np)
    e, inv, cols = prep["e"], prep["inv"], prep["cols"]
    S, N = len(starts), e.shape[0]
    rows = np.arange(S)
    out = np.empty((S, length), dtype=np.int64)
    out[:, 0] = starts
    mask = np.zeros((S, N), dtype=bool)
    mask[rows, starts] = True
    csum = e[starts].astype(np.float64)
    stats = {"windows": 0, "window_members": 0, "ratio_max": 0.0}
    for t in range(1, length):
        c = csum.astype(np.float32)
        a = (c @ cols).astype(np.float64) * prep["inv64"]       # SGEMM, then exact f64 product
        a[mask] = 0.0                                            # (chosen: never in the window)
        if not certify:
            w = np.where(mask, np.inf, a).argmin(axis=1)
        else:
            b = scale * step_bounds(prep, c, a)
            upper = np.where(mask, np.inf, a + b).min(axis=1)
            win = (a - b <= upper[:, None]) & ~mask
            if check:
                full = exact.scores(ops, np.repeat(c[:, None, :], N, 1), np.broadcast_to(e, (S, N, e.shape[1])), inv)
                r = np.abs(full.astype(np.float64) - a)[~mask] / b[~mask]
                stats["ratio_max"] = max(stats["ratio_max"], float(r.max()))
            w = np.empty(S, dtype=np.int64)
            count = win.sum(axis=1)
            one = count == 1
            w[one] = win[one].argmax(axis=1)
            seq, cand = np.nonzero(win & ~one[:, None])             # by sequence, then index
            stats["windows"] += S
            stats["window_members"] += int(count.sum())
            if len(seq):
                sc = exact.scores(ops, c[seq], e[cand], inv[cand])
                for s in np.unique(seq):
                    k = seq == s
                    best = sc[k].min()
                    tied = cand[k][sc[k] == best]
                    w[s] = tied.min() if tie == "first" else tied.max()  # smallest score, then index
        out[:, t] = w
        mask[rows, w] = True
        csum += e[w].astype(np.float64)
    return out, stats


def main():
    p = common.peer_parser(__doc__.splitlines()[0])
    p.add_argument("--bound-scale", type=float, default=1.0, help="the twin's lever; 1 is the proven bound")
    p.add_argument("--no-certificate", action="store_true", help="TIMING ONLY: the SGEMM's argmin")
    p.add_argument("--check-bound", action="store_true", help="rescore every candidate; report the ratio")
    args = p.parse_args()
    e, inv, sha, starts, length = common.load_job(args)
    n, dim = e.shape
    batch = args.batch or len(starts)
    certify = not args.no_certificate
    totals = {}

    def timed_job():
        t0 = time.perf_counter()
        prep = prepare(e, inv)
        seqs = []
        totals.clear()
        for b in range(0, len(starts), batch):
            q, st = run_batch(prep, starts[b:b + batch], length, args.bound_scale, certify, args.check_bound,
                                  args.tie)
            seqs.append(q)
            for k, v in st.items():
                totals[k] = max(totals.get(k, 0), v) if k == "ratio_max" else totals.get(k, 0) + v
        return time.perf_counter() - t0, np.concatenate(seqs)

    def result(seconds):
        r = {"peer": "numpy_filtered", "variant": "certified" if certify else "no-certificate",
             "seconds": seconds, "contract_bytes": certify and args.bound_scale >= 1 and args.tie == "first",
             "timing_only": not certify, "bound_scale": args.bound_scale,
             "num_items": n, "dim": dim, "sequences": len(starts), "length": length,
             "batch": batch, "torch": None, "numpy": np.__version__, "device": "cpu"}
        if certify and totals.get("windows"):
            r["window_mean"] = totals["window_members"] / totals["windows"]
        if args.check_bound:
            r["bound_ratio_max"] = totals.get("ratio_max", 0.0)
        return r

    if args.serve:
        common.serve(timed_job, lambda s, q: common.finish(args, result(s), q, e, sha, length))
        return
    seconds, seqs = timed_job()
    common.finish(args, result(seconds), seqs, e, sha, length)
    if args.check_bound:
        print(f"bound ratio max {totals.get('ratio_max', 0.0):.6g}")


if __name__ == "__main__":
    main()
