"""Whole-run A/B in alternating pairs (docs/contract.md#measuring): divgpu against the
PyTorch direct peer, each in one long-lived process that loaded the table once.

  python3 bench/whole_run_pairs.py --embeddings E.json --starts 0:3584 --length 8359 \
      --pairs 24 [--method gram|direct|tensor|auto] [--shape gemm] [--out-dir DIR] [--json R.json]

Both sides start (bench/serve_run.lua and bench/peers/torch_direct.py --serve),
run the job once each as a warm-up (that run also writes their caches, which
compare.py puts side by side), then run it 2 x PAIRS more times, alternating,
the order reversed every other pair. A run's time is wall clock of the whole
job in its process: upload, G's build for gram, every step, the sequences back
in host memory. Every divgpu run's cache must equal its first run's bytes, and
every peer run's sequences its first's, or the script stops: a changing output
is not timed. Prints the median of per-pair ratios (divgpu / peer), their min and
max, and the pairs divgpu won.
"""

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


class Server:
    def __init__(self, name, argv):
        self.name = name
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline().strip()
        if line != "ready":
            sys.exit(f"error: {name} did not start (said {line!r}, exit {self.proc.poll()})")

    def run(self):
        self.proc.stdin.write("run\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            sys.exit(f"error: {self.name} stopped (exit {self.proc.wait()})")
        return json.loads(line)

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--embeddings", required=True)
    p.add_argument("--starts", required=True, help="A:B")
    p.add_argument("--length", type=int, required=True)
    p.add_argument("--pairs", type=int, default=24)
    p.add_argument("--method", default="gram", choices=["gram", "direct", "tensor", "auto"])
    p.add_argument("--shape", help="the direct method's shape (gemm, baseline, auto: the cost model's); default the reference")
    p.add_argument("--peer-device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--out-dir", default="/tmp/whole_run_pairs")
    p.add_argument("--json", help="write every run's time and the summary here")
    a = p.parse_args()
    os.makedirs(a.out_dir, exist_ok=True)
    prefix = os.path.join(a.out_dir, "divgpu")
    peer_cache = os.path.join(a.out_dir, "torch_direct.json")

    divgpu = Server("divgpu", ["luajit", os.path.join(HERE, "serve_run.lua"), a.embeddings, a.starts,
                               str(a.length), a.method, prefix] + ([a.shape] if a.shape else []))
    torch = Server("torch_direct", [sys.executable, os.path.join(HERE, "peers", "torch_direct.py"),
                                    "--embeddings", a.embeddings, "--starts", a.starts,
                                    "--length", str(a.length), "--out", peer_cache, "--serve",
                                    "--device", a.peer_device])
    first_d, first_t = divgpu.run(), torch.run()  # warm-up; writes both caches
    reference = sha256(first_d["out"])
    cmp = subprocess.run([sys.executable, os.path.join(HERE, "peers", "compare.py"), first_d["out"], peer_cache],
                         capture_output=True, text=True, check=True).stdout.strip()
    print(f"warm-up: divgpu ({first_d['method']}, shape {first_d.get('shape')}) {first_d['seconds']:.3f} s, "
          f"torch_direct {first_t['seconds']:.3f} s; {cmp}", flush=True)

    runs, ratios = [], []
    for k in range(a.pairs):
        order = [divgpu, torch] if k % 2 == 0 else [torch, divgpu]
        got = {}
        for side in order:
            got[side.name] = side.run()
        d, t = got["divgpu"], got["torch_direct"]
        if sha256(d["out"]) != reference:
            sys.exit(f"error: pair {k + 1}: divgpu's cache {d['out']} differs from its first run's")
        os.remove(d["out"])
        if not t["identical_to_first"]:
            sys.exit(f"error: pair {k + 1}: the peer's sequences differ from its first run's")
        ratio = d["seconds"] / t["seconds"]
        ratios.append(ratio)
        runs.append({"pair": k + 1, "first": order[0].name, "divgpu_seconds": d["seconds"],
                     "divgpu_gpu_seconds": d["gpu_seconds"], "torch_seconds": t["seconds"], "ratio": ratio})
        print(f"pair {k + 1:2d} ({order[0].name} first): divgpu {d['seconds']:.3f} s "
              f"(GPU {d['gpu_seconds']:.3f}), torch_direct {t['seconds']:.3f} s, ratio {ratio:.4f}", flush=True)
    divgpu.close()
    torch.close()

    ds = [r["divgpu_seconds"] for r in runs]
    ts = [r["torch_seconds"] for r in runs]
    summary = {
        "pairs": a.pairs, "method": first_d["method"], "shape": first_d.get("shape"), "compare": cmp,
        "ratio_median": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
        "divgpu_won": sum(r < 1 for r in ratios),
        "divgpu_median_seconds": statistics.median(ds), "divgpu_min": min(ds), "divgpu_max": max(ds),
        "torch_median_seconds": statistics.median(ts), "torch_min": min(ts), "torch_max": max(ts),
    }
    print(f"{a.pairs} pairs: divgpu/torch_direct median ratio {summary['ratio_median']:.4f} "
          f"({summary['ratio_min']:.4f}..{summary['ratio_max']:.4f}), divgpu won {summary['divgpu_won']}/{a.pairs}; "
          f"divgpu median {summary['divgpu_median_seconds']:.3f} s ({min(ds):.3f}..{max(ds):.3f}), "
          f"torch_direct median {summary['torch_median_seconds']:.3f} s ({min(ts):.3f}..{max(ts):.3f})")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"summary": summary, "runs": runs}, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
