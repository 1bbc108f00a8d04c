"""The PyTorch peer of divgpu's `tensor` method: int8 slices on torch._int_mm, divgpu's bound and window.

As shaders/tensor.md, in PyTorch:

- section 1: the table's rows cut once into two int8 slices with a
  power-of-two scale (f64, exact), and each step the contract's own centroid
  c = (f32)csum cut the same way;
- section 2: A_2 = p_1 . q_1 and A_3 = p_1 . q_2 + p_2 . q_1 (one product of
  [p_1 | p_2] with [q_2 | q_1], D doubled) by torch._int_mm (cuBLASLt int8,
  int32 sums: exact whatever the order, as |A| < 2^31 for D <= 50,000), and
  a_j = fl64(fl64(sigma_c sigma_j (2^-14 A_2 + 2^-21 A_3)) inv_j);
- sections 3-5: the bound's terms (P, Imax, Q_2, E-hat, R per job; |w o c|,
  sigma_c |p_2|, |c-hat|, |delta c| per step), B-hat = (1 + 2^-20) B*;
- section 6: the window { j : a_j <= min a + 2 B-hat }, rescored with the
  contract's chain (exact.py) and order.

So the output is the contract's whenever the bound is valid; the test checks
it against the mirror, with twins (--bound-scale 0, --tie last) that must
differ. --no-certificate is TIMING ONLY (the argmin of a_j).

torch._int_mm wants M > 16 rows and K, N multiples of 8 on CUDA: the batch
is padded to 17 rows at least, D to a multiple of 8 (zero columns add
nothing), N to a multiple of 8 (zero rows, never candidates). Where
torch._int_mm is missing (an older torch on a CPU) --int-mm f64 computes the
same integers with an f64 matmul (products below 2^14, sums below 2^53:
exact in any order); the result JSON says which ran.

Levers: the table's slices cut once (divgpu cuts them on the host too,
inside its `done in`, and so here inside `seconds`), pinned host memory, the
batch divgpu runs (--batch), one host synchronisation a step where a window
holds more than one member. CUDA paths UNVERIFIED until the H200 call.

`seconds` spans what divgpu's `done in` spans: the slices' cut, the upload,
every step, the sequences in host memory; not the JSON, inv_norm or the write.

  python3 bench/peers/torch_tensor.py --embeddings E.json --starts 0:4096 --length 257 \\
      --out tensor.json [--device cuda|cpu] [--batch S] [--int-mm auto|int8|f64] [--json R.json]
"""

import math
import time

import numpy as np

import common
import exact
import torch_gram
from exact import ETA, SLACK, U

E64 = exact.E64


def scale_exponent(xp, amax):
    """s with 2^s the smallest power of two >= amax * 128/127 (tensor.md section 1), amax > 0, f64."""
    mant, ex = xp.frexp(amax)                      # amax = mant 2^ex, 0.5 <= mant < 1 (exact)
    over = mant * 128 > 127                        # exact comparison: mant 128/127 > 1
    return ex + (over.to(ex.dtype) if hasattr(over, "to") else over.astype(ex.dtype))


def cut(xp, x64, s):
    """Two slices of x64 [..., D] (f64 values of f32) with scale 2^s [...]; exact in f64.
    Returns q1, q2 (f64 integers) and the remainder r2."""
    r0 = xp.ldexp(x64, -s[..., None])              # a power-of-two scaling: exact
    y = r0 * 128
    q1 = xp.round(y)                               # half to even
    r1 = y - q1
    y = r1 * 128
    q2 = xp.round(y)
    r2 = y - q2
    return q1, q2, r2


class Tensor:
    def __init__(self, torch, device, e, inv, args):
        self.torch, self.device, self.args = torch, device, args
        self.ops = exact.Ops(torch)
        self.n, self.dim = e.shape
        self.e_host, self.inv_host = e, inv
        self.dpad = -(-self.dim // 8) * 8
        self.npad = -(-self.n // 8) * 8
        self.mode = args.int_mm
        if self.mode == "auto":
            self.mode = "int8" if hasattr(torch, "_int_mm") else "f64"

    def prepare(self):
        """The table's slices and the job's factors (tensor.md sections 1 and 5), on the host in f64."""
        torch, dev = self.torch, self.device
        e64 = self.e_host.astype(np.float64)
        inv64 = self.inv_host.astype(np.float64)
        n, dim = self.n, self.dim
        s = scale_exponent(np, np.abs(e64).max(1))
        q1, q2, r2 = cut(np, e64, s)
        sig = np.ldexp(1.0, s)
        up = 1.0 + (dim + 4) * exact.EPS64
        nu = exact.row_norm_bounds(e64)
        hat = sig[:, None] * (q1 * 2.0 ** -7 + q2 * 2.0 ** -14)
        dE = e64 - hat                                   # exact: sigma 2^-14 r_2
        self.P = float((inv64 * nu).max()) * (1 + 4 * exact.EPS64)
        self.Imax = float(inv64.max())
        self.Q2 = float((inv64 * sig * np.sqrt((q2 * q2).sum(1)) * up).max()) * (1 + 4 * exact.EPS64)
        self.Ehat = float((inv64 * np.sqrt((hat * hat).sum(1)) * up).max()) * (1 + 4 * exact.EPS64)
        self.R = float((inv64 * np.sqrt((dE * dE).sum(1)) * up).max()) * (1 + 4 * exact.EPS64)
        qa = np.zeros((self.npad, self.dpad), dtype=np.int8)
        qb = np.zeros((self.npad, 2 * self.dpad), dtype=np.int8)
        qa[:n, :dim] = q1
        qb[:n, :dim] = q2                                # [q_2 | q_1]: A_3 in one product
        qb[:n, self.dpad:self.dpad + dim] = q1

        def up_(a):
            t = torch.from_numpy(np.ascontiguousarray(a))
            return (t.pin_memory() if dev.type == "cuda" else t).to(dev, non_blocking=True)

        self.qa_t = up_(qa).T                            # [D, N] column-major, as _int_mm wants
        self.qb_t = up_(qb).T
        scale = np.zeros(self.npad)
        scale[:n] = sig * inv64                          # w_j = sigma_j inv_j, exact (tensor.md 2)
        self.colw = up_(scale)
        self.E = up_(self.e_host)
        self.inv = up_(self.inv_host)
        self.E64 = self.E.double()
        self.w = (dim - torch.arange(dim, device=dev)).double()

    def products(self, pa, pb):
        """A_2, A_3 [rows, npad]: int8 products, int32 sums (or their exact f64 values)."""
        torch = self.torch
        if self.mode == "int8":
            return torch._int_mm(pa, self.qa_t), torch._int_mm(pb, self.qb_t)   # int32 [rows, npad]
        return pa.double() @ self.qa_t.double(), pb.double() @ self.qb_t.double()  # exact: integers < 2^53

    def approx(self, c):
        """a [S, npad] f64 and the step's bound terms, from c = (f32)csum [S, D]."""
        torch, dim = self.torch, self.dim
        c64 = c.double()
        amax = c64.abs().max(1).values
        s = scale_exponent(torch, amax)
        p1, p2, r2 = cut(torch, c64, s)
        S = c.shape[0]
        rows = max(S, 17)
        pa = torch.zeros((rows, self.dpad), dtype=torch.int8, device=self.device)
        pb = torch.zeros((rows, 2 * self.dpad), dtype=torch.int8, device=self.device)
        pa[:S, :dim] = p1.to(torch.int8)
        pb[:S, :dim] = p1.to(torch.int8)
        pb[:S, self.dpad:self.dpad + dim] = p2.to(torch.int8)
        a2, a3 = self.products(pa, pb)
        tj = a2[:S].double() * 2.0 ** -14 + a3[:S].double() * 2.0 ** -21   # exact
        sig_c = torch.pow(2.0, s.double())
        a = (tj * sig_c[:, None]) * self.colw            # sigma_c sigma_j T_j inv_j, one rounding
        up = 1.0 + (dim + 4) * exact.EPS64
        chat = sig_c[:, None] * (p1 * 2.0 ** -7 + p2 * 2.0 ** -14)
        terms = {"wc": exact.norm_up(torch, c64 * self.w, dim), "c": exact.norm_up(torch, c64, dim),
                 "p2": sig_c * torch.sqrt((p2 * p2).sum(1)) * up,
                 "chat": exact.norm_up(torch, chat, dim), "dc": exact.norm_up(torch, c64 - chat, dim)}
        return a, terms

    def bound(self, t):
        dim = self.dim
        rho = U * (1 + 2 * dim * U)
        err = self.P * rho * t["wc"] + self.Imax * dim * ETA * (1 + 2 * dim * U) \
            + 2.0 ** -28 * t["p2"] * self.Q2 + t["chat"] * self.R + t["dc"] * self.Ehat + t["dc"] * self.R
        amax = (1 + E64) * (self.P * t["c"] + err)
        return SLACK * ((1 + U) * err + (U + 2 * E64) * amax + ETA) * self.args.bound_scale

    def run_batch(self, starts, length, stats):
        torch = self.torch
        S = starts.numel()
        rows = torch.arange(S, device=self.device)
        out = torch.empty((S, length), dtype=torch.int64, device=self.device)
        out[:, 0] = starts
        chosen = torch.zeros((S, self.npad), dtype=torch.bool, device=self.device)
        chosen[:, self.n:] = True                         # the padding is never a candidate
        chosen[rows, starts] = True
        csum = self.E64.index_select(0, starts).clone()
        last = self.args.tie == "last"
        for t in range(1, length):
            c = csum.float()
            a, terms = self.approx(c)
            a.masked_fill_(chosen, math.inf)
            a1, w = a.min(1)
            if not self.args.no_certificate:
                b = self.bound(terms)
                if self.args.check_bound:
                    torch_gram.check_ratio(self, stats, c, a, b)
                win = a <= (a1 + 2 * b)[:, None]
                count = win.sum(1)
                many = count > 1
                stats["steps"] += S
                stats["members"] = stats["members"] + count.sum()  # on the device until the end
                if bool(many.any()):
                    sidx, cidx = torch.nonzero(win & many[:, None], as_tuple=True)
                    sc = exact.scores(self.ops, c.index_select(0, sidx), self.E[cidx], self.inv[cidx])
                    best = torch.full((S,), math.inf, dtype=torch.float32, device=self.device)
                    best = best.scatter_reduce(0, sidx, sc, "amin")
                    tied = sc == best[sidx]
                    pick = torch.full((S,), -1 if last else self.n, dtype=torch.int64, device=self.device)
                    pick = pick.scatter_reduce(0, sidx[tied], cidx[tied], "amax" if last else "amin")
                    w = torch.where(many, pick, w)
            out[:, t] = w
            chosen[rows, w] = True
            csum += self.E64.index_select(0, w)
        return out


def main():
    p = common.peer_parser(__doc__.splitlines()[0])
    p.add_argument("--no-certificate", action="store_true", help="TIMING ONLY: the argmin of a_j")
    p.add_argument("--bound-scale", type=float, default=1.0, help="the twin's lever; 1 is the proven bound")
    p.add_argument("--int-mm", choices=["auto", "int8", "f64"], default="auto",
                   help="torch._int_mm, or the exact f64 fallback")
    p.add_argument("--check-bound", action="store_true", help="rescore every candidate; report the ratio")
    args = p.parse_args()
    e, inv, sha, starts, length = common.load_job(args)
    torch, device, label = common.setup_torch(args.device)
    torch.set_grad_enabled(False)
    n, dim = e.shape
    if dim > 50000:
        raise SystemExit("error: the tensor filter's int32 sums need D <= 50,000")
    per_seq = n * 40 + length * 8 + dim * 48 + 64
    batch = args.batch or common.auto_batch(torch, device, len(starts), per_seq, 3 * n * dim + 24 * n)
    job = Tensor(torch, device, e, inv, args)
    stats = {"steps": 0, "members": 0}

    def timed_job():
        stats.clear()
        stats.update(steps=0, members=0)
        common.sync(torch, device)
        t0 = time.perf_counter()
        job.prepare()
        starts_t = torch.tensor(starts, dtype=torch.int64, device=device)
        seqs = [job.run_batch(starts_t[b:b + batch], length, stats).cpu()
                for b in range(0, len(starts), batch)]
        common.sync(torch, device)
        return time.perf_counter() - t0, torch.cat(seqs).numpy()

    def result(seconds):
        cert = not args.no_certificate
        r = {"peer": "torch_tensor", "variant": "certified" if cert else "no-certificate",
             "seconds": seconds, "contract_bytes": cert and args.bound_scale >= 1 and args.tie == "first",
             "timing_only": not cert, "bound_scale": args.bound_scale, "int_mm": job.mode,
             "num_items": n, "dim": dim, "sequences": len(starts), "length": length, "batch": batch,
             "torch": torch.__version__, "device": label, "verified_on_cuda": False}
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
