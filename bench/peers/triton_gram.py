"""The Triton peer of divgpu's `gram` method: the certified step as one fused kernel a step.

UNVERIFIED ON A GPU: written and reviewed on a machine without one; its bytes
are checked against the mirror in the H200 call before any of its times is
used (VERIFIED_ON_CUDA stays False until then, and the result JSON says so).
On a CPU it runs under Triton's interpreter (TRITON_INTERPRET=1), slowly,
which checks the kernel's logic, not its compiled code.

Per sequence and step, one program (one CTA) of `step_kernel`:
1. approx += G'[w_prev] (f32 widened to f64, exact), approx[w_prev] = +inf,
   and the least approx a1 (one pass over the row);
2. the window { j : approx_j <= a1 + 2B } collected in index order into a
   scratch list of --capacity entries (B is torch_gram's bound, from
   shaders/gram.md, computed in PyTorch for the whole batch before the launch);
3. a window of one is the winner; otherwise every member rescored with the
   contract's chain, `tl.fma` d ascending (one fused multiply-add, one
   rounding), times inv_norm in one f32 multiply, and the contract's order
   (smallest score, then smallest index) decides;
4. a window over the capacity sets the sequence's flag: the run stops with
   an error naming the capacity (never a wrong winner).

The csum update, the bound's terms and G' come from torch_gram.Gram (the same
code the CPU tests check). The flags are read after each step (one host
synchronisation a step); capturing a chunk of steps (the bound's PyTorch
operations and the kernel) in a CUDA graph, with the flags read after each
chunk, is the next lever, not yet written.

To check on the H200, before timing: the bytes against the mirror on
tests/peers_tables.py's near-tie and duplicate tables and on the seed batch;
the subnormal witness table (docs/contract.md#subnormals: Triton may flush
f32 denormals in the chain's fma or the final multiply); the twins
(--bound-scale 0, --tie last) must differ.

`seconds` spans what divgpu's `done in` spans (as torch_gram).

  python3 bench/peers/triton_gram.py --embeddings E.json --starts 0:3584 --length 8359 \\
      --out gram.json [--device cuda] [--capacity 64] [--json R.json]
"""

import math
import time

import common
import torch_gram

VERIFIED_ON_CUDA = False

try:  # importable without Triton or a GPU: the kernel is defined only where Triton is
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover
    triton = tl = None

if triton is not None:
    @triton.jit
    def step_kernel(approx_ptr, gp_ptr, wprev_ptr, twob_ptr, c_ptr, e_ptr, inv_ptr, w_ptr, flag_ptr,
                    members_ptr, N, D, stride_a, stride_g, stride_c, stride_e,
                    BLOCK: tl.constexpr, CAP: tl.constexpr, TIE_LAST: tl.constexpr):
        s = tl.program_id(0)
        wprev = tl.load(wprev_ptr + s)
        twob = tl.load(twob_ptr + s)
        row = approx_ptr + s * stride_a
        best = tl.full([BLOCK], float("inf"), tl.float64)
        for start in range(0, N, BLOCK):                     # 1: add G'[w_prev], the least approx
            offs = start + tl.arange(0, BLOCK)
            m = offs < N
            a = tl.load(row + offs, mask=m, other=float("inf"))
            g = tl.load(gp_ptr + tl.maximum(wprev, 0) * stride_g + offs, mask=m, other=0.0)
            a = a + tl.where(wprev >= 0, g.to(tl.float64), 0.0)      # step 1: no row to add
            a = tl.where(offs == wprev, float("inf"), a)
            tl.store(row + offs, a, mask=m)
            best = tl.minimum(best, a)
        a1 = tl.min(best, axis=0)
        tau = a1 + twob
        tl.debug_barrier()
        count = 0
        for start in range(0, N, BLOCK):                     # 2: the window, in index order
            offs = start + tl.arange(0, BLOCK)
            m = offs < N
            a = tl.load(row + offs, mask=m, other=float("inf"))
            inw = (a <= tau) & m
            pos = count + tl.cumsum(inw.to(tl.int32), axis=0) - 1
            tl.store(members_ptr + s * CAP + pos, offs, mask=inw & (pos < CAP))
            count += tl.sum(inw.to(tl.int32), axis=0)
        tl.debug_barrier()
        k = tl.arange(0, CAP)
        mk = k < count
        idx = tl.load(members_ptr + s * CAP + k, mask=mk, other=0)
        acc = tl.zeros([CAP], dtype=tl.float32)
        if count > 1:                                        # 3: the contract's chain, d ascending
            for d in range(0, D):
                cd = tl.load(c_ptr + s * stride_c + d + k * 0)
                ed = tl.load(e_ptr + idx * stride_e + d, mask=mk, other=0.0)
                acc = tl.fma(cd, ed, acc)
        inv = tl.load(inv_ptr + idx, mask=mk, other=1.0)
        score = tl.where(mk, acc * inv, float("inf"))
        smin = tl.min(score, axis=0)
        tied = mk & (score == smin)
        if TIE_LAST:
            winner = tl.max(tl.where(tied, idx, -1), axis=0)
        else:
            winner = tl.min(tl.where(tied, idx, N), axis=0)
        tl.store(w_ptr + s, winner)
        tl.store(flag_ptr + s, (count > CAP).to(tl.int32))  # 4: over capacity


class TritonGram(torch_gram.Gram):
    def run_batch(self, starts, length, stats):
        torch = self.torch
        S = starts.numel()
        rows = torch.arange(S, device=self.device)
        out = torch.empty((S, length), dtype=torch.int64, device=self.device)
        out[:, 0] = starts
        approx = self.Gp.index_select(0, starts).double()
        approx[rows, starts] = math.inf
        csum = self.E64.index_select(0, starts).clone()
        T = self.nu.index_select(0, starts).clone()
        cap = self.args.capacity
        wprev = torch.full((S,), -1, dtype=torch.int64, device=self.device)
        w = torch.empty_like(wprev)
        flags = torch.zeros(S, dtype=torch.int32, device=self.device)
        members = torch.empty((S, cap), dtype=torch.int64, device=self.device)
        for t in range(1, length):
            if t > 1:
                csum += self.E64.index_select(0, wprev)
                T += self.nu.index_select(0, wprev)
            c = csum.float()
            twob = 2 * self.bound(csum, c, T, t)
            step_kernel[(S,)](approx, self.Gp, wprev, twob, c, self.E, self.inv, w, flags, members,
                              self.n, self.dim, approx.stride(0), self.Gp.stride(0), c.stride(0),
                              self.E.stride(0), BLOCK=min(1024, triton.next_power_of_2(self.n)), CAP=cap,
                              TIE_LAST=self.args.tie == "last")
            if bool(flags.any()):
                raise SystemExit(f"error: a window over --capacity {cap} at step {t}: rerun with a larger one")
            out[:, t] = w
            wprev = w.clone()
        return out


def main():
    p = common.peer_parser(__doc__.splitlines()[0])
    p.add_argument("--bound-scale", type=float, default=1.0, help="the twin's lever; 1 is the proven bound")
    p.add_argument("--capacity", type=int, default=64, help="window members a sequence (a power of two)")
    args = p.parse_args()
    args.no_certificate = False
    if triton is None:
        raise SystemExit("error: triton is not installed")
    e, inv, sha, starts, length = common.load_job(args)
    torch, device, label = common.setup_torch(args.device)
    torch.set_grad_enabled(False)
    n, dim = e.shape
    batch = args.batch or common.auto_batch(torch, device, len(starts), n * 26 + length * 8 + 64,
                                            4 * n * n + 16 * n * dim)
    job = TritonGram(torch, device, e, inv, args)

    def timed_job():
        common.sync(torch, device)
        t0 = time.perf_counter()
        job.prepare()
        starts_t = torch.tensor(starts, dtype=torch.int64, device=device)
        seqs = [job.run_batch(starts_t[b:b + batch], length, {}).cpu() for b in range(0, len(starts), batch)]
        common.sync(torch, device)
        return time.perf_counter() - t0, torch.cat(seqs).numpy()

    def result(seconds):
        return {"peer": "triton_gram", "variant": "certified", "seconds": seconds,
                "contract_bytes": VERIFIED_ON_CUDA and args.bound_scale >= 1 and args.tie == "first",
                "timing_only": False, "verified_on_cuda": VERIFIED_ON_CUDA, "bound_scale": args.bound_scale,
                "num_items": n, "dim": dim, "sequences": len(starts), "length": length, "batch": batch,
                "torch": torch.__version__, "triton": triton.__version__, "device": label}

    if args.serve:
        common.serve(timed_job, lambda s, q: common.finish(args, result(s), q, e, sha, length))
        return
    seconds, seqs = timed_job()
    common.finish(args, result(seconds), seqs, e, sha, length)


if __name__ == "__main__":
    main()
