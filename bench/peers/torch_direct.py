"""The PyTorch peer of divgpu's `direct` method: what a user would write.

Every sequence of a batch at once. Each step rounds the f64 centroid sum to
f32, scores every candidate with one cuBLAS SGEMM (TF32 off) times inv_norm
(an f32 multiply), sets chosen items to +inf and takes the argmin (torch
documents that argmin returns the first of equal minima: the contract's
smallest-j rule). The SGEMM sums each dot product in its own order (blocked,
maybe split-K), so the output is not guaranteed to equal the fp32 contract:
compare.py measures how often it does. See README.md.

  python3 bench/peers/torch_direct.py --embeddings E.json --starts 0:3584 \
      --length 500 --out direct.json [--device cuda|cpu] [--batch S] [--json R.json]
"""

import time

import common


def run_batch(torch, E, inv, starts, length):
    """E f32 [N, D], inv f32 [N], starts int64 [S] -> sequences int64 [S, length]."""
    S, N = starts.numel(), E.shape[0]
    rows = torch.arange(S, device=E.device)
    out = torch.empty((S, length), dtype=torch.int64, device=E.device)
    out[:, 0] = starts
    mask = torch.zeros((S, N), dtype=torch.bool, device=E.device)
    mask[rows, starts] = True
    csum = E.index_select(0, starts).double()                 # centroid sums, f64
    for t in range(1, length):
        scores = csum.float() @ E.T                           # c = (f32) csum; c . E_j, SGEMM
        scores.mul_(inv)                                      # * inv_norm[j], f32
        scores.masked_fill_(mask, float("inf"))
        w = scores.argmin(dim=1)                              # first of equal minima
        out[:, t] = w
        mask[rows, w] = True
        csum += E.index_select(0, w).double()
    return out


def timed_job(torch, device, e, inv, starts, length, batch, progress):
    """The timed part: upload, every batch, the sequences back in host memory."""
    sequences = []
    common.sync(torch, device)
    t0 = time.perf_counter()
    E = torch.from_numpy(e).to(device)
    inv_t = torch.from_numpy(inv).to(device)
    starts_t = torch.tensor(starts, dtype=torch.int64, device=device)
    for b in range(0, len(starts), batch):
        part = starts_t[b:b + batch]
        sequences.append(run_batch(torch, E, inv_t, part, length).cpu())
        progress.add(part.numel() * (length - 1), f"({b + part.numel()}/{len(starts)} sequences)")
    common.sync(torch, device)
    return time.perf_counter() - t0, torch.cat(sequences).numpy()


def main():
    args = common.peer_args(__doc__.splitlines()[0])
    e, inv, sha, starts, length = common.load_job(args)
    torch, device, label = common.setup_torch(args.device)
    n, dim = e.shape
    per_seq = n * 5 + length * 8 + dim * 24 + 64              # scores, mask, out, csum/c/gather
    table_bytes = e.nbytes + inv.nbytes
    batch = args.batch or common.auto_batch(torch, device, len(starts), per_seq, table_bytes)

    def result(seconds):
        return {"peer": "torch_direct", "seconds": seconds, "num_items": n, "dim": dim,
                "sequences": len(starts), "length": length, "batch": batch,
                "torch": torch.__version__, "device": label,
                "tf32": bool(torch.backends.cuda.matmul.allow_tf32)}

    if args.serve:
        common.serve(lambda: timed_job(torch, device, e, inv, starts, length, batch, common.Progress(0)),
                     lambda seconds, seqs: common.finish(args, result(seconds), seqs, e, sha, length))
        return
    progress = common.Progress(len(starts) * (length - 1))
    seconds, sequences = timed_job(torch, device, e, inv, starts, length, batch, progress)
    progress.close()
    common.finish(args, result(seconds), sequences, e, sha, length)

if __name__ == "__main__":
    main()
