"""The peers' checks (run by tests/peers_test.sh in its virtual environment; make test-peers).

Each peer that claims the contract's bytes is run on three small tables and
its cache checked by `bin/divgpu verify` (the CPU mirror, every sequence):

- synth512: `divgpu synth --n 400 --dim 512 --clusters 16 --seed 7` (D = 512);
- near-tie: rows equal up to ~3e-7 relative noise (tests/peers_tables.py), where
  any reassociated dot product (SGEMM, an unfused chain) changes winners;
- duplicates: a third of the rows exact copies, where only the tie rule decides.

Every twin must FAIL the mirror's check: each filter with its bound scaled to
0 on the near-tie table, each with --tie last on the duplicates, the direct
chain unfused on the near-tie table. Every bound's instrumented ratio
(max |score - approx| / bound over every candidate of every step) must be at
most 1 on every table, and its twin (the bound times 1e-4) must exceed 1.
The timing-only variants must say so in their result and run. Then the
campaign protocol's smoke run and the renderer's check (bench/protocol.py,
bench/render_tables.py), on lavapipe.

  python tests/peers_test.py [--keep DIR] [--only SUBSTRING]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEERS = os.path.join(ROOT, "bench", "peers")
DIVGPU = os.path.join(ROOT, "bin", "divgpu")
PY = sys.executable

TABLES = {  # name -> (starts, length)
    "synth512": ("0:6", 20),
    "near-tie": ("0:6", 16),
    "duplicates": ("0:12", 40),
}

EXACT = [
    ("numpy_direct", []),
    ("numpy_filtered", []),
    ("torch_gram", ["--device", "cpu"]),
    ("torch_tensor", ["--device", "cpu"]),
    ("torch_tensor", ["--device", "cpu", "--int-mm", "f64"]),
]

TWINS = [  # (peer, args, table): each must fail the mirror's check
    ("numpy_direct", ["--chain", "unfused"], "near-tie"),
    ("numpy_direct", ["--tie", "last"], "duplicates"),
    ("numpy_filtered", ["--bound-scale", "0"], "near-tie"),
    ("numpy_filtered", ["--tie", "last"], "duplicates"),
    ("torch_gram", ["--device", "cpu", "--bound-scale", "0"], "near-tie"),
    ("torch_gram", ["--device", "cpu", "--tie", "last"], "duplicates"),
    ("torch_tensor", ["--device", "cpu", "--bound-scale", "0"], "near-tie"),
    ("torch_tensor", ["--device", "cpu", "--tie", "last"], "duplicates"),
]

BOUNDS = [("numpy_filtered", []), ("torch_gram", ["--device", "cpu"]), ("torch_tensor", ["--device", "cpu"])]

TIMING_ONLY = [
    ("numpy_direct", ["--chain", "sgemm"]),
    ("numpy_filtered", ["--no-certificate"]),
    ("torch_gram", ["--device", "cpu", "--no-certificate"]),
    ("torch_tensor", ["--device", "cpu", "--no-certificate"]),
    ("torch_direct", ["--device", "cpu"]),
    ("torch_gram64", ["--device", "cpu"]),
]


class Run:
    def __init__(self, work, only):
        self.work, self.only = work, only
        self.passed = self.failed = 0
        self.n = 0

    def check(self, name, ok, detail=""):
        if ok:
            self.passed += 1
            print(f"ok     {name}{' (' + detail + ')' if detail else ''}", flush=True)
        else:
            self.failed += 1
            print(f"FAILED {name}{': ' + detail if detail else ''}", flush=True)

    def peer(self, peer, args, table, extra=(), job=None, env=None):
        """Runs a peer; returns (rc, result dict or None, cache path, stderr tail)."""
        self.n += 1
        starts, length = job or TABLES[table]
        cache = os.path.join(self.work, f"{peer}_{self.n}.json")
        rj = os.path.join(self.work, f"{peer}_{self.n}_result.json")
        cmd = [PY, os.path.join(PEERS, peer + ".py"), "--embeddings", self.table(table), "--starts", starts,
               "--length", str(length), "--out", cache, "--json", rj, *args, *extra]
        p = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, **(env or {})))
        res = json.load(open(rj)) if p.returncode == 0 and os.path.exists(rj) else None
        return p.returncode, res, cache, (p.stderr or p.stdout).strip()[-300:]

    def table(self, name):
        return os.path.join(self.work, name + ".json")

    def verify(self, table, cache):
        p = subprocess.run([DIVGPU, "verify", "--embeddings", self.table(table), "--cache", cache, "--quiet"],
                           capture_output=True, text=True)
        return p.returncode == 0, (p.stdout + p.stderr).strip().splitlines()[-1:] or [""]

    def wanted(self, name):
        return self.only is None or self.only in name


def make_tables(work):
    subprocess.run([DIVGPU, "synth", "--n", "400", "--dim", "512", "--clusters", "16", "--seed", "7",
                    "--out", os.path.join(work, "synth512.json")], check=True, capture_output=True)
    for kind in ("near-tie", "duplicates"):
        subprocess.run([PY, os.path.join(ROOT, "tests", "peers_tables.py"), kind, os.path.join(work, kind + ".json")],
                       check=True, capture_output=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", help="work in this folder and keep it")
    ap.add_argument("--only", help="run only the checks whose name holds this")
    a = ap.parse_args()
    work = a.keep or tempfile.mkdtemp(prefix="divgpu-peers-")
    os.makedirs(work, exist_ok=True)
    t0 = time.time()
    make_tables(work)
    r = Run(work, a.only)

    for peer, args in EXACT:
        for table in TABLES:
            name = f"{peer} {' '.join(args)} on {table}: the mirror's bytes"
            if not r.wanted(name):
                continue
            rc, res, cache, err = r.peer(peer, args, table)
            if rc != 0:
                r.check(name, False, f"exit {rc}: {err}")
                continue
            ok, line = r.verify(table, cache)
            r.check(name, ok and res.get("contract_bytes") is True, line[0])

    for peer, args, table in TWINS:
        name = f"twin {peer} {' '.join(args)} on {table}: must differ from the mirror"
        if not r.wanted(name):
            continue
        rc, res, cache, err = r.peer(peer, args, table)
        if rc != 0:
            r.check(name, False, f"exit {rc}: {err}")
            continue
        ok, line = r.verify(table, cache)
        r.check(name, not ok and res.get("contract_bytes") is False, "the mirror's check failed, as it must"
                if not ok else "it passed the mirror's check")

    for peer, args in BOUNDS:
        for table in TABLES:
            name = f"{peer} bound ratio on {table}: <= 1"
            if r.wanted(name):
                rc, res, _, err = r.peer(peer, args + ["--check-bound"], table)
                ratio = res.get("bound_ratio_max") if res else None
                r.check(name, rc == 0 and ratio is not None and 0 <= ratio <= 1, f"ratio {ratio}" if rc == 0 else err)
        name = f"twin {peer} bound x 1e-4 on near-tie: ratio > 1"
        if r.wanted(name):
            rc, res, _, err = r.peer(peer, args + ["--check-bound", "--bound-scale", "1e-4"], "near-tie")
            ratio = res.get("bound_ratio_max") if res else None
            r.check(name, rc == 0 and ratio is not None and ratio > 1, f"ratio {ratio}" if rc == 0 else err)

    for peer, args in TIMING_ONLY:
        name = f"timing-only {peer} {' '.join(args)} runs and is labelled"
        if not r.wanted(name):
            continue
        rc, res, cache, err = r.peer(peer, args, "near-tie")
        if rc != 0:
            r.check(name, False, f"exit {rc}: {err}")
            continue
        labelled = peer in ("torch_direct", "torch_gram64") or (res.get("timing_only") is True
                                                               and res.get("contract_bytes") is False)
        ok, line = r.verify("near-tie", cache)
        r.check(name, labelled, f"{'matches' if ok else 'differs from'} the mirror on near-tie; not claimed")

    # triton_gram under Triton's interpreter (TRITON_INTERPRET=1, a true fma): the kernel's
    # logic on the CPU, not its compiled code; it claims no bytes until the H200 call.
    interp = {"TRITON_INTERPRET": "1"}
    for table, args, job, must in (("duplicates", [], ("0:4", 12), True), ("near-tie", [], ("0:2", 8), True),
                                   ("duplicates", ["--tie", "last"], ("0:4", 12), False),
                                   ("near-tie", ["--bound-scale", "0"], ("0:4", 12), False)):
        name = (f"triton_gram (interpreter) {' '.join(args)} on {table}: "
                f"{'the mirror' + chr(39) + 's bytes' if must else 'twin, must differ'}")
        if not r.wanted(name):
            continue
        rc, res, cache, err = r.peer("triton_gram", ["--device", "cpu", *args], table, job=job, env=interp)
        if rc != 0:
            r.check(name, False, f"exit {rc}: {err}")
            continue
        ok, line = r.verify(table, cache)
        r.check(name, ok == must and res.get("verified_on_cuda") is False, line[0] if must else "")

    name = "triton_gram imports without a GPU and says it is unverified"
    if r.wanted(name):
        p = subprocess.run([PY, "-c", "import sys; sys.path.insert(0, 'bench/peers'); import triton_gram as t; "
                            "print(t.VERIFIED_ON_CUDA)"], capture_output=True, text=True, cwd=ROOT)
        r.check(name, p.returncode == 0 and p.stdout.strip() == "False", (p.stderr or p.stdout).strip()[-200:])

    name = "protocol smoke: a campaign call on lavapipe, the peers on the CPU"
    if r.wanted(name):
        out = os.path.join(work, "campaign")
        p = subprocess.run([PY, os.path.join(ROOT, "bench", "protocol.py"), "smoke", "--out", out],
                           capture_output=True, text=True, cwd=ROOT)
        r.check(name, p.returncode == 0, (p.stdout + p.stderr).strip().splitlines()[-1] if (p.stdout + p.stderr).strip() else "")
        name = "renderer: the smoke call's results render, and a row without pairs does not"
        p = subprocess.run([PY, os.path.join(ROOT, "bench", "render_tables.py"), "--selftest", out],
                           capture_output=True, text=True, cwd=ROOT)
        r.check(name, p.returncode == 0, (p.stdout + p.stderr).strip()[-300:])

    name = "renderer --check: README's and RESULTS.md's tables equal the rendering"
    if r.wanted(name):
        p = subprocess.run([PY, os.path.join(ROOT, "bench", "render_tables.py"), "--check"],
                           capture_output=True, text=True, cwd=ROOT)
        r.check(name, p.returncode == 0, (p.stdout + p.stderr).strip()[-300:])

    print(f"peers: {time.time() - t0:.0f} s, work in {work}")
    print(f"{r.passed} passed, {r.failed} failed")
    sys.exit(1 if r.failed or not r.passed else 0)


if __name__ == "__main__":
    main()
