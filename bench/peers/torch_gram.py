"""The PyTorch peer of divgpu's `gram` method, with divgpu's certificate: the contract's bytes.

As a GPU programmer would write the Gram filter in PyTorch:

- G' once: G = E E^T by DGEMM (f64 products and sums, cuBLAS on a GPU) in
  blocks of rows, G'_ij = fl32(fl64(G_ij inv_j)), kept in f32 (N^2 * 4 bytes).
- The steps of a whole batch of sequences as batched tensor operations:
  approx [S, N] f64 (+inf once chosen), approx += G'[w] each step.
- divgpu's certificate, term by term (shaders/gram.md sections 2-4: P, Imax,
  rho |w o c|, u |csum|, eta sqrt(D), kappa T, ...), one bound B per sequence
  and step; the window { j : approx_j <= min approx + 2B } (section 5); every
  window of more than one member rescored with the contract's chain (exact.py,
  the fma emulated exactly in f64) and decided by the contract's order. Its
  G' and approx differ from divgpu's in the order of DGEMM's sums, which the
  bound's gamma(D) covers: the output is the contract's whenever the bound is
  valid (tests/peers_test.sh: against the mirror, the bound's ratio, twins).
- --no-certificate: TIMING ONLY, the argmin of approx each step (the
  roofline of the Gram steps in PyTorch); never in a ratio claiming the same
  bytes.

Levers, each the analogue of one divgpu has: on CUDA the steps without a
certificate run as CUDA graphs of --graph-steps steps (divgpu submits chunks
of steps); the chain over d (D dependent elementwise operations on the
window's pairs) is captured once per capacity bucket as a CUDA graph and
replayed (divgpu's chain is one loop in one kernel); the table is copied from
pinned host memory; the batch is divgpu's (--batch, default every start up
to what fits). One host synchronisation a certified step remains (the number
of window pairs sizes the chain's launch); triton_gram.py is the fused
kernel without it. The CUDA paths are UNVERIFIED until the H200 call: on a
CPU the same functions run without graphs.

`seconds` spans what divgpu's `done in` spans: the upload, G's build, every
step, the sequences back in host memory; not the JSON, inv_norm or the cache
write; the warm-up before it (context, cuBLAS, one tiny job) is not timed.

  python3 bench/peers/torch_gram.py --embeddings E.json --starts 0:3584 --length 8359 \\
      --out gram.json [--device cuda|cpu] [--batch S] [--no-certificate] [--json R.json]
"""

import math
import time

import numpy as np

import common
import exact
from exact import ETA, SLACK, U, gamma

G_BLOCK_BYTES = 2 ** 32  # f64 rows of G built at once


class Gram:
    def __init__(self, torch, device, e, inv, args):
        self.torch, self.device, self.args = torch, device, args
        self.ops = exact.Ops(torch)
        self.n, self.dim = e.shape
        self.e_host, self.inv_host = e, inv
        self.graphs = {}

    # ---- the job's preparation (timed) ----------------------------------
    def prepare(self):
        torch, dev = self.torch, self.device
        src = torch.from_numpy(self.e_host)
        if dev.type == "cuda":
            src = src.pin_memory()
        self.E = src.to(dev, non_blocking=True)
        self.inv = torch.from_numpy(self.inv_host).to(dev)
        self.inv64 = self.inv.double()
        E64 = self.E.double()
        n, dim = self.n, self.dim
        self.nu = torch.sqrt((E64 * E64).sum(1)) * (1.0 + (dim + 4) * exact.EPS64)  # nu_j >= |E_j|
        self.P = float((self.inv64 * self.nu).max()) * (1.0 + 4 * exact.EPS64)
        self.Imax = float(self.inv64.max())
        self.Gp = torch.empty((n, n), dtype=torch.float32, device=dev)
        rows = max(1, G_BLOCK_BYTES // (8 * n))
        for r in range(0, n, rows):                     # G' = fl32(fl64(G_ij inv_j)), block of rows
            blk = E64[r:r + rows] @ E64.T
            blk.mul_(self.inv64)
            self.Gp[r:r + rows] = blk.float()
        self.E64 = E64
        self.w = (dim - torch.arange(dim, device=dev)).double()

    # ---- the certificate (shaders/gram.md) ------------------------------
    def bound(self, csum, c, T, m):
        """B-hat [S] for a step with m items chosen (gram.md section 4)."""
        torch, dim = self.torch, self.dim
        cn = exact.norm_up(torch, csum, dim)
        wcn = exact.norm_up(torch, c.double() * self.w, dim)
        rho = U * (1 + 2 * dim * U)
        gd, gm = gamma(dim), gamma(m - 1)
        e64 = exact.E64
        kappa_gp = gd + e64 * (1 + gd) + U * (1 + e64) * (1 + gd)
        kappa_g = kappa_gp + gm * (1 + U) * (1 + e64) * (1 + gd)
        kappa = gm + kappa_g
        tail = m * ETA * (1 + gm)
        err = self.P * (rho * wcn + U * cn + ETA * math.sqrt(dim) + kappa * T) \
            + self.Imax * dim * ETA * (1 + 2 * dim * U) + tail
        amax = self.P * (cn + kappa * T) + tail
        return SLACK * ((1 + U) * err + U * amax + 2.0 ** -150) * self.args.bound_scale

    # ---- the chain on the window's pairs --------------------------------
    def chain_scores(self, c_rows, cand):
        """The contract's scores of pairs (centroid row, candidate); on CUDA a
        graph per power-of-two capacity, padded with pair 0."""
        torch = self.torch
        if self.device.type != "cuda":
            return exact.scores(self.ops, c_rows, self.E[cand], self.inv[cand])
        k = c_rows.shape[0]
        cap = 1 << max(6, (k - 1).bit_length())
        g = self.graphs.get(cap)
        if g is None:
            cin = torch.zeros((cap, self.dim), dtype=torch.float32, device=self.device)
            ein = torch.zeros_like(cin)
            iin = torch.ones(cap, dtype=torch.float32, device=self.device)
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                exact.scores(self.ops, cin, ein, iin, branchless=True)  # warm the kernels up
            torch.cuda.current_stream().wait_stream(s)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = exact.scores(self.ops, cin, ein, iin, branchless=True)
            g = self.graphs[cap] = (graph, cin, ein, iin, out)
        graph, cin, ein, iin, out = g
        cin[:k] = c_rows
        ein[:k] = self.E[cand]
        iin[:k] = self.inv[cand]
        graph.replay()
        return out[:k].clone()

    # ---- a batch -------------------------------------------------------
    def run_batch(self, starts, length, stats):
        torch = self.torch
        S = starts.numel()
        rows = torch.arange(S, device=self.device)
        out = torch.empty((S, length), dtype=torch.int64, device=self.device)
        out[:, 0] = starts
        approx = self.Gp.index_select(0, starts).double()
        self.inf_s = torch.full((S,), math.inf, dtype=torch.float64, device=self.device)
        approx.index_put_((rows, starts), self.inf_s)     # chosen: +inf for good (inf + x = inf)
        csum = self.E64.index_select(0, starts).clone()
        T = self.nu.index_select(0, starts).clone()
        last = self.args.tie == "last"
        if self.args.no_certificate and self.device.type == "cuda":
            return self.run_graphed(approx, out, rows, length)
        for t in range(1, length):
            if self.args.no_certificate:
                w = approx.argmin(1)
            else:
                w = self.certified_step(approx, csum, T, t, rows, last, stats)
            out[:, t] = w
            approx += self.Gp.index_select(0, w)
            approx.index_put_((rows, w), self.inf_s)
            csum += self.E64.index_select(0, w)
            T += self.nu.index_select(0, w)
        return out

    def run_graphed(self, approx, out, rows, length):
        """The steps without a certificate, --graph-steps of them a CUDA graph."""
        torch = self.torch
        chunk = max(1, self.args.graph_steps)
        wbuf = torch.empty((chunk, rows.numel()), dtype=torch.int64, device=self.device)

        def steps(state, k_steps):
            for k in range(k_steps):
                w = state.argmin(1)
                wbuf[k] = w
                state += self.Gp.index_select(0, w)
                state.index_put_((rows, w), self.inf_s)  # a device tensor: no host value in the graph

        t = 1
        if length - 1 >= chunk:
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                steps(approx.clone(), 1)                 # warm-up on a copy: the state stays
            torch.cuda.current_stream().wait_stream(s)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                steps(approx, chunk)                     # recorded, not run
            while t + chunk <= length:
                graph.replay()
                out[:, t:t + chunk] = wbuf.T
                t += chunk
        if t < length:
            steps(approx, length - t)
            out[:, t:] = wbuf[:length - t].T
        return out

    def certified_step(self, approx, csum, T, m, rows, last, stats):
        torch = self.torch
        c = csum.float()
        b = self.bound(csum, c, T, m)
        a1, w = approx.min(1)                            # first of equal minima
        if self.args.check_bound:
            check_ratio(self, stats, c, approx, b)
        win = approx <= (a1 + 2 * b)[:, None]
        count = win.sum(1)
        many = count > 1
        stats["steps"] += rows.numel()
        stats["members"] = stats["members"] + count.sum()  # stays on the device until the end
        if not bool(many.any()):                         # the one host sync of the step
            return w
        sidx, cidx = torch.nonzero(win & many[:, None], as_tuple=True)
        sc = self.chain_scores(c.index_select(0, sidx), cidx)
        S = rows.numel()
        best = torch.full((S,), math.inf, dtype=torch.float32, device=self.device)
        best = best.scatter_reduce(0, sidx, sc, "amin")
        tied = sc == best[sidx]                          # IEEE ==: -0 equals +0
        pick = torch.full((S,), -1 if last else self.n, dtype=torch.int64, device=self.device)
        pick = pick.scatter_reduce(0, sidx[tied], cidx[tied], "amax" if last else "amin")
        return torch.where(many, pick, w)


def check_ratio(job, stats, c, a, b):
    """The instrumented check (contract.md#instrumented-ratio-test): every unchosen
    candidate rescored; stats["ratio_max"] = max |score_j - a_j| / B."""
    torch = job.torch
    S, N, D = c.shape[0], job.n, job.dim
    full = exact.scores(job.ops, c[:, None, :].expand(S, N, D), job.E[None, :N].expand(S, N, D), job.inv[:N])
    live = torch.isfinite(a[:, :N])
    r = (full.double() - a[:, :N]).abs() / b[:, None]
    stats["ratio_max"] = max(stats.get("ratio_max", 0.0), float(r[live].max()) if bool(live.any()) else 0.0)


def main():
    p = common.peer_parser(__doc__.splitlines()[0])
    p.add_argument("--no-certificate", action="store_true", help="TIMING ONLY: the argmin of approx")
    p.add_argument("--bound-scale", type=float, default=1.0, help="the twin's lever; 1 is the proven bound")
    p.add_argument("--graph-steps", type=int, default=64, help="steps a CUDA graph (no certificate)")
    p.add_argument("--check-bound", action="store_true", help="rescore every candidate; report the ratio")
    args = p.parse_args()
    e, inv, sha, starts, length = common.load_job(args)
    torch, device, label = common.setup_torch(args.device)
    torch.set_grad_enabled(False)
    n, dim = e.shape
    per_seq = n * 26 + length * 8 + dim * 32 + 64
    batch = args.batch or common.auto_batch(torch, device, len(starts), per_seq, 4 * n * n + 16 * n * dim)
    gram = Gram(torch, device, e, inv, args)
    stats = {"steps": 0, "members": 0}

    def timed_job():
        stats.clear()
        stats.update(steps=0, members=0)
        common.sync(torch, device)
        t0 = time.perf_counter()
        gram.prepare()
        starts_t = torch.tensor(starts, dtype=torch.int64, device=device)
        seqs = [gram.run_batch(starts_t[b:b + batch], length, stats).cpu()
                for b in range(0, len(starts), batch)]
        common.sync(torch, device)
        return time.perf_counter() - t0, torch.cat(seqs).numpy()

    def result(seconds):
        cert = not args.no_certificate
        r = {"peer": "torch_gram", "variant": "certified" if cert else "no-certificate",
             "seconds": seconds, "contract_bytes": cert and args.bound_scale >= 1 and args.tie == "first",
             "timing_only": not cert, "bound_scale": args.bound_scale, "num_items": n, "dim": dim,
             "sequences": len(starts), "length": length, "batch": batch, "torch": torch.__version__,
             "device": label, "cuda_graphs": device.type == "cuda", "verified_on_cuda": False}
        if cert and stats["steps"]:
            r["window_mean"] = float(stats["members"]) / stats["steps"]
        if args.check_bound:
            r["bound_ratio_max"] = stats.get("ratio_max", 0.0)
        return r

    if args.serve:
        common.serve(timed_job, lambda s, q: common.finish(args, result(s), q, e, sha, length))
        return
    seconds, seqs = timed_job()
    common.finish(args, result(seconds), seqs, e, sha, length)


if __name__ == "__main__":
    main()
