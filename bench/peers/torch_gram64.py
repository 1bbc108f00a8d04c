"""The PyTorch peer of divgpu's `gram` method: an f64 Gram matrix, no rescoring.

G = E E^T from the f64 table (one cuBLAS DGEMM); each sequence keeps
approx_j = sum over its chosen items w of G[w, j] in f64 (the centroid sum's
dot with E_j, without ever rounding the centroid to f32); each step scores
approx * (f64)inv_norm, sets chosen items to +inf, takes the argmin (first of
equal minima) and adds the winner's row of G. This is a different arithmetic
from the fp32 contract (f64 products and sums, no f32 centroid), so its output
is expected to differ; compare.py measures how much. See README.md.

  python3 bench/peers/torch_gram64.py --embeddings E.json --starts 0:3584 \
      --length 1024 --out gram.json [--device cuda|cpu] [--batch S] [--json R.json]

"seconds" covers upload, the G build and the steps; "build_seconds" is the
G build alone. G takes 8 N^2 bytes (34 GB at N = 65,536; N = 131,072 does not
fit an H200 and is refused before the build).
"""

import sys
import time

import common


def run_batch(torch, G, inv64, starts, length):
    """G f64 [N, N], inv64 f64 [N], starts int64 [S] -> sequences int64 [S, length]."""
    S, N = starts.numel(), G.shape[0]
    rows = torch.arange(S, device=G.device)
    out = torch.empty((S, length), dtype=torch.int64, device=G.device)
    out[:, 0] = starts
    mask = torch.zeros((S, N), dtype=torch.bool, device=G.device)
    mask[rows, starts] = True
    approx = G.index_select(0, starts)                        # [S, N] f64: csum . E_j
    for t in range(1, length):
        score = approx * inv64
        score.masked_fill_(mask, float("inf"))
        w = score.argmin(dim=1)                               # first of equal minima
        out[:, t] = w
        mask[rows, w] = True
        approx += G.index_select(0, w)
    return out


def main():
    args = common.peer_args(__doc__.splitlines()[0])
    e, inv, sha, starts, length = common.load_job(args)
    torch, device, label = common.setup_torch(args.device)
    n, dim = e.shape
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        need = 8 * n * n + 16 * n * dim
        if need > 0.9 * free:
            sys.exit(f"error: G ({n} x {n} f64) and the f64 table need {need / 2**30:.1f} GiB, more than "
                     f"90% of the {free / 2**30:.1f} GiB free on {label} (the batch state needs the rest)")
    per_seq = n * 25 + length * 8 + 64                         # approx, score, G-row gather, mask, out
    batch = args.batch or common.auto_batch(torch, device, len(starts), per_seq, 8 * n * n + 16 * n * dim)
    build = [0.0]

    def timed_job(progress):
        sequences = []
        common.sync(torch, device)
        t0 = time.perf_counter()
        E64 = torch.from_numpy(e).to(device).double()
        inv64 = torch.from_numpy(inv).to(device).double()
        starts_t = torch.tensor(starts, dtype=torch.int64, device=device)
        common.sync(torch, device)
        tb = time.perf_counter()
        G = E64 @ E64.T
        common.sync(torch, device)
        build[0] = time.perf_counter() - tb
        del E64
        for b in range(0, len(starts), batch):
            part = starts_t[b:b + batch]
            sequences.append(run_batch(torch, G, inv64, part, length).cpu())
            progress.add(part.numel() * (length - 1), f"({b + part.numel()}/{len(starts)} sequences)")
        common.sync(torch, device)
        return time.perf_counter() - t0, torch.cat(sequences).numpy()

    def result(seconds):
        return {"peer": "torch_gram64", "seconds": seconds, "build_seconds": build[0],
                "num_items": n, "dim": dim, "sequences": len(starts), "length": length,
                "batch": batch, "torch": torch.__version__, "device": label,
                "contract_bytes": False, "timing_only": False}

    if args.serve:
        common.serve(lambda: timed_job(common.Progress(0)),
                     lambda seconds, seqs: common.finish(args, result(seconds), seqs, e, sha, length))
        return
    progress = common.Progress(len(starts) * (length - 1))
    seconds, sequences = timed_job(progress)
    progress.close()
    common.finish(args, result(seconds), sequences, e, sha, length)


if __name__ == "__main__":
    main()
