"""The campaign protocol in code (docs/contract.md#measuring): one call, one results file.

  python3 bench/protocol.py job --out DIR --name NAME --embeddings E.json --starts A:B --length L
        [--method auto] [--shape S] [--peers torch_direct,torch_gram,torch_tensor,torch_gram64]
        [--peer-device cuda|cpu] [--state warm|cold] [--pairs P] [--variant TEXT] [--no-ceilings]
  python3 bench/protocol.py smoke --out DIR      # a tiny table on lavapipe, the peers on the CPU

What it enforces, so no campaign script can forget it:

- **The shipped configuration for headline rows.** A job is a headline only
  when divgpu runs as shipped: no --variant and none of the environment
  variables that change its configuration (VARIANT_ENV below: threads a
  sequence, bound scale, kernel switches). Anything else is written as a
  variant, with what differed; the renderer never puts a variant in a headline.
- **Alternating pairs.** After one warm-up run of every side (not timed into
  the pairs; its caches give the same-bytes counts), rounds of divgpu and
  every peer, the order reversed every other round: each round gives one pair
  (divgpu, peer) for every peer. At least 24 rounds for a headline job, at
  least 6 when the warm-up of either side took over 30 s. Asking for fewer
  makes the job a variant ("P pairs, fewer than the rule's R").
- **Warm or cold, the same for both sides.** warm: each side is one
  long-lived process that loaded the table once (bench/serve_run.lua, the
  peers' --serve), every run after the warm-up; cold: every run a fresh
  process (bin/divgpu run, the peer's command line), divgpu's time its
  `done in`. The state is written into the file. Warm is the default and
  the fairer: cold, divgpu's `done in` holds its pipelines' compile (where
  the driver's cache misses), while a peer's span starts after its warm-up
  of tiny kernels (CUDA context, cuBLAS handle), and only its own kernels'
  lazy loading falls inside it.
- **The same span on both sides**: from the table in host memory to the
  sequences back in host memory, uploads and every preparation included
  (divgpu's `done in` / driver.run; each peer's `seconds`, see its docstring).
- **Same bytes.** Every run of a side must give its warm-up's output, or the
  call stops. Each peer's warm-up cache is compared with divgpu's
  (compare.py): the count of identical sequences is recorded; a peer labelled
  timing-only is never counted as the same bytes.
- **Ceilings in the same call** unless --no-ceilings: bench/peers/ceilings.py
  on the peers' device (copy, SGEMM, DGEMM, int8 products) and bench/peaks.lua
  on divgpu's (f32 and f64 fma, copy, int8 cooperative matrices).
- **One machine-readable file per call**: DIR/results.json, rewritten after
  every job (format "divgpu-campaign", version 1), with the call's commit,
  date, host, the ceilings and every job's runs.
"""

import argparse
import datetime
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
PEERS = os.path.join(HERE, "peers")
sys.path.insert(0, PEERS)
import compare  # noqa: E402  (bench/peers/compare.py)

FORMAT, VERSION = "divgpu-campaign", 1
MIN_PAIRS, MIN_PAIRS_LONG, LONG_SECONDS = 24, 6, 30.0
VARIANT_ENV = ("DIVGPU_WORKGROUP", "WG", "DIVGPU_BOUND_SCALE", "DIVGPU_GRAM_UNIFORM", "DIVGPU_GRAM_CHECK",
               "DIVGPU_TENSOR_CHECK", "CM_TILE_CONSTANTS", "TILINGS", "FUSED_SUMS")
TIMING_ONLY_FLAGS = ("--no-certificate", "--chain sgemm")
LUA_ENV = {"LUA_PATH": "lua/?.lua;;", "LUA_CPATH": "build/?.so;;"}


def git(*args):
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


class Server:
    """One side kept warm: a process that prints "ready", then one JSON line a "run"."""

    def __init__(self, name, argv, env=None):
        self.name = name
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     cwd=ROOT, env=env)
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


def peer_spec(text):
    """"torch_gram" or "torch_gram --no-certificate" -> (label, script, extra args)."""
    parts = shlex.split(text)
    script, extra = parts[0], parts[1:]
    label = " ".join(parts)
    return label, script, extra


class Job:
    def __init__(self, a, workdir):
        self.a, self.dir = a, workdir
        self.env = dict(os.environ, **LUA_ENV)
        self.peers = [peer_spec(p) for p in a.peers]

    # ---- one run of each side -------------------------------------------
    def divgpu_cold(self, k):
        out = os.path.join(self.dir, f"divgpu.{k}.json")
        cmd = [os.path.join(ROOT, "bin", "divgpu"), "run", "--embeddings", self.a.embeddings, "--starts",
               self.a.starts, "--length", str(self.a.length), "--method", self.a.method, "--out", out]
        p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        if p.returncode != 0:
            sys.exit(f"error: divgpu run failed: {p.stderr.strip()[-400:]}")
        done = [ln for ln in p.stderr.splitlines() if "done in" in ln]
        if not done:
            sys.exit("error: divgpu run printed no 'done in' line")
        words = done[-1].split()
        seconds = float(words[words.index("in") + 1])
        gpu = float(words[words.index("GPU,") - 2]) if "GPU," in words else None
        return {"seconds": seconds, "gpu_seconds": gpu, "out": out}

    def peer_cold(self, label, script, extra, k):
        out = os.path.join(self.dir, f"{script}.{k}.json")
        rj = out + ".result"
        cmd = [sys.executable, os.path.join(PEERS, script + ".py"), "--embeddings", self.a.embeddings, "--starts",
               self.a.starts, "--length", str(self.a.length), "--out", out, "--json", rj,
               "--device", self.a.peer_device, *extra]
        p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        if p.returncode != 0:
            sys.exit(f"error: {label} failed: {p.stderr.strip()[-400:]}")
        with open(rj) as f:
            r = json.load(f)
        return {"seconds": r["seconds"], "out": out, "result": r}

    # ---- the job --------------------------------------------------------
    def run(self):
        a = self.a
        warm = a.state == "warm"
        servers = {}
        if warm:
            argv = ["luajit", os.path.join(HERE, "serve_run.lua"), a.embeddings, a.starts, str(a.length),
                    a.method, os.path.join(self.dir, "divgpu")] + ([a.shape] if a.shape else [])
            servers["divgpu"] = Server("divgpu", argv, self.env)
            for label, script, extra in self.peers:
                out = os.path.join(self.dir, f"{script}{'_' + '_'.join(x.strip('-') for x in extra) if extra else ''}.json")
                rj = out + ".result"
                servers[label] = Server(label, [sys.executable, os.path.join(PEERS, script + ".py"),
                                                "--embeddings", a.embeddings, "--starts", a.starts,
                                                "--length", str(a.length), "--out", out, "--json", rj,
                                                "--device", a.peer_device, "--serve", *extra])
                servers[label].cache, servers[label].result_path = out, rj

        def one(side, k):
            if side == "divgpu":
                return servers["divgpu"].run() if warm else self.divgpu_cold(k)
            label, script, extra = next(p for p in self.peers if p[0] == side)
            if warm:
                r = servers[side].run()
                if not r["identical_to_first"]:
                    sys.exit(f"error: run {k}: {side}'s sequences differ from its first run's")
                return r
            return self.peer_cold(label, script, extra, k)

        sides = ["divgpu"] + [p[0] for p in self.peers]
        t0 = time.perf_counter()
        first = {s: one(s, 0) for s in sides}                  # the warm-up: not in the pairs
        reference = read_seqs(first["divgpu"]["out"])
        same, results = {}, {}
        for label, script, extra in self.peers:
            cache = servers[label].cache if warm else first[label]["out"]
            rp = servers[label].result_path if warm else None
            results[label] = json.load(open(rp)) if rp else first[label]["result"]
            cmp = compare.compare(first["divgpu"]["out"], cache)
            timing_only = bool(results[label].get("timing_only")) or any(f in label for f in TIMING_ONLY_FLAGS)
            same[label] = {"identical": cmp["identical"], "sequences": cmp["sequences"], "timing_only": timing_only,
                           "contract_bytes_claimed": bool(results[label].get("contract_bytes"))}
        long_job = max(first[s]["seconds"] for s in sides) > LONG_SECONDS
        required = MIN_PAIRS_LONG if long_job else MIN_PAIRS
        pairs = a.pairs if a.pairs is not None else required
        rounds = []
        for k in range(1, pairs + 1):
            order = sides if k % 2 == 1 else list(reversed(sides))
            got = {s: one(s, k) for s in order}
            if read_seqs(got["divgpu"]["out"]) != reference:
                sys.exit(f"error: round {k}: divgpu's output differs from its warm-up's")
            rounds.append({"round": k, "order": order,
                           "seconds": {s: got[s]["seconds"] for s in sides},
                           "divgpu_gpu_seconds": got["divgpu"].get("gpu_seconds")})
            if got["divgpu"]["out"] != first["divgpu"]["out"]:
                os.remove(got["divgpu"]["out"])
        for s in servers.values():
            s.close()
        variant = list(a.variant or [])
        changed = [f"{k}={os.environ[k]}" for k in VARIANT_ENV if os.environ.get(k)]
        variant += changed
        if a.shape:
            variant.append(f"shape {a.shape}")
        if pairs < required:
            variant.append(f"{pairs} pairs, fewer than the rule's {required}")
        job = {"name": a.name, "headline": not variant, "variant": variant, "state": a.state,
               "embeddings": a.embeddings, "table": table_info(first["divgpu"]["out"]),
               "starts": a.starts, "length": a.length, "method": a.method,
               "divgpu_method": first["divgpu"].get("method"), "peer_device": a.peer_device,
               "pairs_required": required, "pairs": pairs,
               "warmup_seconds": {s: first[s]["seconds"] for s in sides},
               "peers": {p[0]: {"script": p[1], "args": p[2], "torch": results[p[0]].get("torch"),
                                "device": results[p[0]].get("device"), "batch": results[p[0]].get("batch"),
                                **same[p[0]]} for p in self.peers},
               "rounds": rounds, "summary": summarise(rounds, [p[0] for p in self.peers], same),
               "call_seconds": time.perf_counter() - t0}
        return job


def read_seqs(path):
    with open(path) as f:
        return json.load(f)["sequences"]


def table_info(cache):
    with open(cache) as f:
        h = json.load(f)
    return {"num_items": h["num_items"], "dim": h["dim"], "embeddings_sha256": h["embeddings_sha256"]}


def summarise(rounds, peers, same):
    out = {}
    ds = [r["seconds"]["divgpu"] for r in rounds]
    for p in peers:
        ps = [r["seconds"][p] for r in rounds]
        ratios = [d / q for d, q in zip(ds, ps)]
        out[p] = {"ratio_median": statistics.median(ratios), "ratio_min": min(ratios), "ratio_max": max(ratios),
                  "divgpu_won": sum(x < 1 for x in ratios), "pairs": len(ratios),
                  "peer_median_seconds": statistics.median(ps), "peer_min": min(ps), "peer_max": max(ps),
                  "same_bytes": same[p]["identical"] == same[p]["sequences"] and not same[p]["timing_only"]}
    out["divgpu"] = {"median_seconds": statistics.median(ds), "min": min(ds), "max": max(ds)} if ds else {}
    return out


def ceilings(device, workdir):
    extra = ["--small"] if device == "cpu" else ["--repeats", "20"]
    p = subprocess.run([sys.executable, os.path.join(PEERS, "ceilings.py"), "--device", device, *extra],
                       capture_output=True, text=True, cwd=ROOT)
    if p.returncode != 0:
        sys.exit(f"error: ceilings.py failed: {p.stderr.strip()[-400:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def peaks(quick):
    """divgpu's side of the ceilings through Vulkan (bench/peaks.lua: f32 and f64 fma,
    copy, int8 cooperative matrices where the device has them), one dict a line."""
    p = subprocess.run(["luajit", os.path.join(HERE, "peaks.lua"), *(["--quick"] if quick else [])],
                       capture_output=True, text=True, cwd=ROOT, env=dict(os.environ, **LUA_ENV))
    if p.returncode != 0:
        sys.exit(f"error: peaks.lua failed: {p.stderr.strip()[-400:]}")
    return [json.loads(ln) for ln in p.stdout.splitlines() if ln.startswith("{")]


def write(path, doc):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)


def device_line(embeddings):
    """The Vulkan device divgpu runs on, from `bin/divgpu info`."""
    p = subprocess.run([os.path.join(ROOT, "bin", "divgpu"), "info"], capture_output=True, text=True, cwd=ROOT)
    lines = [ln.strip() for ln in (p.stdout + p.stderr).splitlines() if ln.strip()]
    return lines[:3]


def call(a, jobs_args):
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "results.json")
    doc = {"format": FORMAT, "version": VERSION,
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
           "host": platform.node(), "command": " ".join(shlex.quote(x) for x in sys.argv),
           "divgpu_info": device_line(None), "ceilings": None, "jobs": []}
    if not a.no_ceilings:
        doc["ceilings"] = ceilings(a.peer_device, a.out)
        doc["peaks"] = peaks(quick=a.peer_device == "cpu")
    write(path, doc)
    for ja in jobs_args:
        work = os.path.join(a.out, ja.name)
        os.makedirs(work, exist_ok=True)
        job = Job(ja, work).run()
        doc["jobs"].append(job)
        write(path, doc)
        print_job(job)
    print(f"protocol: {path}")
    return doc


def print_job(job):
    s = job["summary"]
    head = "headline" if job["headline"] else "variant (" + "; ".join(job["variant"]) + ")"
    print(f"{job['name']}: {head}, {job['state']}, {job['pairs']} pairs, divgpu median "
          f"{s['divgpu']['median_seconds']:.3f} s")
    for p, v in s.items():
        if p == "divgpu":
            continue
        sb = job["peers"][p]
        print(f"  {p}: median {v['peer_median_seconds']:.3f} s, ratio {v['ratio_median']:.4f} "
              f"({v['ratio_min']:.4f}..{v['ratio_max']:.4f}), divgpu won {v['divgpu_won']}/{v['pairs']}, "
              f"{sb['identical']} of {sb['sequences']} identical{' (timing only)' if sb['timing_only'] else ''}")


def job_parser(p):
    p.add_argument("--name", required=True)
    p.add_argument("--embeddings", required=True)
    p.add_argument("--starts", required=True, help="A:B")
    p.add_argument("--length", type=int, required=True)
    p.add_argument("--method", default="auto", help="divgpu's --method (auto is the shipped default)")
    p.add_argument("--shape", help="the direct method's shape (a variant)")
    p.add_argument("--peers", type=lambda s: [x.strip() for x in s.split(",") if x.strip()],
                   default=["torch_direct", "torch_gram64", "torch_gram", "torch_tensor", "triton_gram",
                            "torch_gram --no-certificate"])
    p.add_argument("--peer-device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--state", default="warm", choices=["warm", "cold"])
    p.add_argument("--pairs", type=int, help="rounds (default: the rule's 24, or 6 for jobs over 30 s)")
    p.add_argument("--variant", action="append", help="what differs from the shipped configuration")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    j = sub.add_parser("job", help="one job in one call")
    j.add_argument("--out", required=True)
    j.add_argument("--no-ceilings", action="store_true")
    job_parser(j)
    s = sub.add_parser("smoke", help="the protocol end to end on a tiny table, the peers on the CPU")
    s.add_argument("--out", required=True)
    a = ap.parse_args()
    if a.cmd == "job":
        call(a, [a])
        return
    # smoke: a tiny table made here, every CPU peer, 2 rounds warm (a variant by
    # the rule: fewer pairs than 24) and 1 round cold with --variant.
    os.makedirs(a.out, exist_ok=True)
    table = os.path.join(a.out, "tiny.json")
    subprocess.run([os.path.join(ROOT, "bin", "divgpu"), "synth", "--n", "200", "--dim", "32", "--clusters", "8",
                    "--seed", "3", "--out", table], check=True, capture_output=True, cwd=ROOT)
    a.peer_device, a.no_ceilings = "cpu", False
    base = ["job", "--embeddings", table, "--starts", "0:4", "--length", "12", "--peer-device", "cpu"]
    warm_peers = "numpy_direct,numpy_filtered,torch_direct,torch_gram64,torch_gram,torch_tensor,torch_gram --no-certificate"
    jp = argparse.ArgumentParser()
    jp.add_argument("cmd")
    job_parser(jp)
    jobs = [jp.parse_args(base + ["--name", "tiny_warm", "--pairs", "2", "--peers", warm_peers]),
            jp.parse_args(base + ["--name", "tiny_cold", "--pairs", "1", "--state", "cold", "--variant", "smoke",
                                  "--peers", "numpy_filtered,torch_direct,torch_gram64"])]
    doc = call(a, jobs)
    for job in doc["jobs"]:
        assert not job["headline"], "a smoke job with fewer pairs than the rule must be a variant"
        for p, v in job["peers"].items():
            if v["contract_bytes_claimed"] and v["identical"] != v["sequences"]:
                sys.exit(f"error: {job['name']}: {p} claims the contract's bytes but differs from divgpu")
    print("smoke: ok")


if __name__ == "__main__":
    main()
