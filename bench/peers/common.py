"""Shared parts of the PyTorch peers (docs/contract.md: the sequence, the fp32 chain, the files), numpy only.

- load_table: `embeddings.json` as divgpu reads it (a bare array of rows, or an
  object with an "embeddings" array); every number parsed to the nearest f64
  (Python's json uses a correctly rounding float()) and then rounded to f32.
  Validated like divgpu's loader: N >= 2, D >= 1, no ragged rows, finite
  values, no zero row, dot products that cannot overflow f32.
- inv_norm: (f32)(1 / sqrt(sum_d (f64)E[j][d]^2)), the f64 sum strictly in
  ascending d (one column added at a time, never numpy's pairwise sum).
- parse_starts / check_length: the --starts and --length rules of `divgpu run`.
- write_cache: `diversity_cache.json` in the byte layout of src/cache/json.rs
  (header, then one sequence per line), through a temporary file in the same
  folder that is renamed into place.
- the command line shared by torch_direct.py and torch_gram64.py.
"""

import argparse
import contextlib
import hashlib
import json
import os
import sys

import numpy as np

FORMAT = "divgpu-diversity-cache"
VERSION = 1           # what the peers write
READ_VERSIONS = (1, 2)  # what they read: divgpu writes version 2 (docs/formats.md#cache-version-2)


class InputError(Exception):
    """A problem with the user's input; the message names the file."""


def _no_constants(name):
    raise ValueError(f"'{name}' is not a JSON number")


def load_table(path):
    """Returns (E as f32 [N, D] C-contiguous, sha256 hex of the file's bytes)."""
    with open(path, "rb") as f:
        raw = f.read()
    sha = hashlib.sha256(raw).hexdigest()
    if not raw.strip():
        raise InputError(f"{path}: the file is empty")
    if path.lower().endswith(".npy"):
        # float32, C order, N x D (divgpu's .npy input; docs/formats.md): the
        # same bits divgpu reads, and the file's sha256 as divgpu's.
        import io
        e = np.load(io.BytesIO(raw), allow_pickle=False)
        if e.dtype != np.dtype("<f4") or e.ndim != 2 or not e.flags.c_contiguous:
            raise InputError(f"{path}: expected float32 (little-endian), C order, N x D; got {e.dtype}, {e.shape}")
        return check_values(path, np.ascontiguousarray(e)), sha
    try:
        doc = json.loads(raw, parse_constant=_no_constants)
    except ValueError as e:
        raise InputError(f"{path}: {e}") from None
    if isinstance(doc, dict):
        if "embeddings" not in doc:
            raise InputError(f'{path}: the object has no "embeddings" array')
        rows = doc["embeddings"]
    else:
        rows = doc
    if not isinstance(rows, list) or not all(isinstance(r, list) for r in rows):
        raise InputError(f"{path}: expected an array of rows (arrays of numbers)")
    n = len(rows)
    if n < 2:
        raise InputError(f"{path}: the table has {n} row(s); at least 2 are needed")
    dim = len(rows[0])
    for j, r in enumerate(rows):
        if len(r) != dim:
            raise InputError(f"{path}: row {j} has {len(r)} values but row 0 has {dim} (ragged rows)")
    if dim == 0:
        raise InputError(f"{path}: rows are empty (dimension 0)")
    try:
        e64 = np.array(rows, dtype=np.float64)  # int -> f64 and float are both round-to-nearest
    except (TypeError, ValueError, OverflowError) as e:
        raise InputError(f"{path}: a value is not a number ({e})") from None
    del rows, doc
    with np.errstate(over="ignore"):
        e = e64.astype(np.float32)  # one round-to-nearest-even; too large -> inf, rejected below
    del e64
    return check_values(path, e), sha


def check_values(path, e):
    """The loader's checks of an f32 [N, D] table; returns it C-contiguous."""
    n, dim = e.shape
    bad = ~np.isfinite(e)
    if bad.any():
        j, d = np.argwhere(bad)[0]
        raise InputError(f"{path}: row {j}, column {d}: value is not finite")
    zero = ~e.any(axis=1)
    if zero.any():
        j = int(np.argmax(zero))
        raise InputError(f"{path}: row {j} is all zeros: its norm is 0 and its cosine distance undefined")
    max_abs = float(np.abs(e).max())
    if dim * n * max_abs * max_abs * 1.01 >= float(np.finfo(np.float32).max):
        raise InputError(f"{path}: values up to {max_abs} are too large: "
                         f"dot products of {n} rows of {dim} values could overflow f32")
    return np.ascontiguousarray(e)


def inv_norm(e, path="<table>"):
    """(f32)(1/sqrt(sum_d (f64)E[j][d]^2)), sum over d ascending, f64 sqrt and division."""
    cols = np.ascontiguousarray(e.T, dtype=np.float64)  # [D, N]
    s = np.zeros(e.shape[0], dtype=np.float64)
    for d in range(e.shape[1]):  # one column at a time: every row's sum is strictly ascending in d
        x = cols[d]
        s += x * x  # f64 multiply, then f64 add (numpy never fuses them)
    with np.errstate(divide="ignore", over="ignore"):
        inv = (1.0 / np.sqrt(s)).astype(np.float32)
    bad = ~np.isfinite(inv) | (inv == 0)
    if bad.any():
        j = int(np.argmax(bad))
        raise InputError(f"{path}: row {j}: its norm is outside what f32 can invert (1/norm = {inv[j]})")
    return inv


def parse_starts(spec, n):
    """--starts "A:B" (half-open, A <= s < B) or "i,j,k"; None -> every item."""
    if spec is None:
        return list(range(n))
    if ":" in spec:
        try:
            a, b = (int(x) for x in spec.split(":"))
        except ValueError:
            raise InputError(f"--starts '{spec}': expected A:B (half-open range) or a list i,j,k") from None
        if a < 0 or a >= b:
            raise InputError(f"--starts '{spec}' is empty: A must be at least 0 and less than B")
        if b > n:
            raise InputError(f"--starts '{spec}' is out of range: the table has {n} items (0..{n - 1})")
        return list(range(a, b))
    starts = []
    for item in spec.split(","):
        try:
            s = int(item.strip())
        except ValueError:
            raise InputError(f"--starts: '{item}' is not an item index") from None
        if s < 0:
            raise InputError(f"--starts: '{item}' is not an item index")
        if s >= n:
            raise InputError(f"--starts: {s} is out of range: the table has {n} items (0..{n - 1})")
        starts.append(s)
    return starts


def check_length(length, n):
    if length is None:
        return n
    if not 1 <= length <= n:
        raise InputError(f"--length {length} is out of range: 1 <= L <= N = {n}")
    return length


def write_cache(path, *, num_items, dim, length, sha256, sequences, contract="fp32"):
    """Writes diversity_cache.json like cache.rs does, atomically."""
    header = {"format": FORMAT, "version": VERSION, "contract": contract, "num_items": num_items,
              "dim": dim, "length": length, "embeddings_sha256": sha256}
    head = json.dumps(header, separators=(",", ":"))
    parts = [head[:-1], ',\n"sequences": [']
    for i, seq in enumerate(sequences):
        if len(seq) != length:
            raise ValueError(f"sequence {i} has {len(seq)} items, not {length}")
        seq = seq.tolist() if hasattr(seq, "tolist") else seq
        parts.append(("\n[" if i == 0 else ",\n[") + ",".join(map(str, seq)) + "]")
    parts.append("\n]}\n")
    folder = os.path.dirname(path) or "."
    tmp = os.path.join(folder, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w") as f:
            f.write("".join(parts))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def read_cache(path):
    """Returns (header dict, list of sequences); checks format, version and lengths."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except (OSError, ValueError) as e:
        raise InputError(f"{path}: {e}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("version") not in READ_VERSIONS:
        raise InputError(f"{path}: not a divgpu cache of version 1 or 2")
    seqs = doc.pop("sequences", None)
    if not isinstance(seqs, list) or not seqs:
        raise InputError(f'{path}: no "sequences" array, or an empty one')
    for i, s in enumerate(seqs):
        if not isinstance(s, list) or len(s) != doc.get("length"):
            raise InputError(f"{path}: sequence {i} does not have the header's length {doc.get('length')}")
    if doc["version"] == 2 and doc.get("starts_count") != len(seqs):
        raise InputError(f"{path}: {len(seqs)} sequences, but its header says starts_count {doc.get('starts_count')}")
    return doc, seqs


# ---- the command line of the two torch peers ---------------------------------

def peer_args(description):
    return peer_parser(description).parse_args()


def peer_parser(description):
    """The options every peer takes; a peer adds its own and parses."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--embeddings", required=True, help="embeddings.json (docs/formats.md#embeddings-table)")
    p.add_argument("--starts", help="A:B (A <= s < B) or i,j,k; default: every item")
    p.add_argument("--length", type=int, help="sequence length L (default N)")
    p.add_argument("--out", required=True, help="the diversity_cache.json to write")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--batch", type=int, help="sequences at once (default: as many as fit)")
    p.add_argument("--json", help="write the timing result here as JSON")
    p.add_argument("--tie", choices=["first", "last"], default="first",
                   help="of equal scores the smallest index (the contract) or the largest (the twin)")
    p.add_argument("--serve", action="store_true",
                   help="load once, then run the job once per line 'run' on stdin, printing one JSON "
                        "line per run (for bench/whole_run_pairs.py); --out is written by the first run")
    return p


def load_job(args):
    """Loads the table and the job; exits with one line on an input error."""
    try:
        e, sha = load_table(args.embeddings)
        inv = inv_norm(e, args.embeddings)
        starts = parse_starts(args.starts, e.shape[0])
        length = check_length(args.length, e.shape[0])
    except (InputError, OSError) as err:
        sys.exit(f"error: {err}")
    if args.batch is not None and args.batch < 1:
        sys.exit("error: --batch must be at least 1")
    return e, inv, sha, starts, length


class Progress:
    """A one-line progress display on stderr, only when stderr is a terminal."""

    def __init__(self, total):
        self.on = sys.stderr.isatty()
        self.total = total
        self.done = 0

    def add(self, k, what=""):
        self.done += k
        if self.on:
            sys.stderr.write(f"\r{self.done}/{self.total} sequence-steps {what}   ")
            sys.stderr.flush()

    def close(self):
        if self.on:
            sys.stderr.write("\n")


def finish(args, result, sequences, e, sha, length):
    """Writes the cache and the JSON result, prints the summary line."""
    n, dim = e.shape
    write_cache(args.out, num_items=n, dim=dim, length=length, sha256=sha, sequences=sequences)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
    extra = f", G build {result['build_seconds']:.3f} s" if "build_seconds" in result else ""
    print(f"{result['peer']}: {result['sequences']} sequences x {length} items of {n}x{dim} "
          f"on {result['device']} (torch {result['torch']}, batch {result['batch']}) "
          f"in {result['seconds']:.3f} s{extra} -> {args.out}")


def auto_batch(torch, device, count, per_seq_bytes, fixed_bytes=0):
    """Sequences per batch: all of them, or what fits in ~80% of free GPU memory."""
    if device.type != "cuda":
        return count
    free, _ = torch.cuda.mem_get_info(device)
    fit = int((0.8 * free - fixed_bytes) // per_seq_bytes)
    if fit < 1:
        sys.exit(f"error: not enough GPU memory: {free / 2**30:.1f} GiB free, "
                 f"{(fixed_bytes + per_seq_bytes) / 2**30:.1f} GiB needed for one sequence")
    return max(1, min(count, fit))



def setup_torch(device_name):
    """Imports torch, turns TF32 off, warms the device up (context, cuBLAS handle,
    kernels) so the timed part is the job. Returns (torch, device, device label)."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False  # SGEMM is IEEE f32, not TF32 tensor cores
    torch.backends.cudnn.allow_tf32 = False
    if device_name == "cuda" and not torch.cuda.is_available():
        sys.exit("error: torch sees no CUDA device (use --device cpu to run on the CPU)")
    device = torch.device(device_name)
    label = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    for dtype in (torch.float32, torch.float64):
        a = torch.ones((8, 8), dtype=dtype, device=device)
        (a @ a.T).mul_(a[0]).masked_fill_(a > 2, float("inf")).argmin(dim=1).cpu()
    sync(torch, device)
    return torch, device, label


def sync(torch, device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def serve(run_once, write_first):
    """The --serve loop: "ready", then per line "run" on stdin one timed run and
    one JSON line {"seconds", "identical_to_first"} on stdout. The first run's
    sequences are written with write_first(seconds, sequences) (after the
    timing); later runs are compared with them in memory."""
    import numpy as np

    print("ready", flush=True)
    first = None
    for line in sys.stdin:
        if line.strip() != "run":
            sys.exit(f"error: unknown command {line.strip()!r} (expected 'run')")
        seconds, seqs = run_once()
        if first is None:
            first = seqs
            with contextlib.redirect_stdout(sys.stderr):  # finish() prints a summary line
                write_first(seconds, seqs)
        same = bool(np.array_equal(first, seqs))
        print(json.dumps({"seconds": seconds, "identical_to_first": same}), flush=True)
