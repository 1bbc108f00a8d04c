"""The device's ceilings in the same campaign call as the kernels (docs/contract.md#measuring), with PyTorch:
copy bandwidth (read + write, one large copy), SGEMM (TF32 off), DGEMM (the
f64 FMA rate a GEMM reaches) and int8 products (torch._int_mm, int32 sums).
Prints one JSON line; the median of the timed repeats, each after a warm-up.
The Vulkan side's own peaks (f32/f64 FMA, int8 cooperative matrices) come
from bench/peaks.lua in the same call where the campaign runs it.

  python3 bench/peers/ceilings.py [--device cuda|cpu] [--copy-gib 4] [--repeats 20] [--size M] [--small]

--size: the products' side (default 8192; a 2-core CPU wants 2048, a few
tenths of a second a product). --small (the smoke test on a CPU): 64 MiB
copies, 512-square products, 3 repeats.
"""

import argparse
import json
import statistics
import time

import torch


def timed(fn, repeats, sync):
    fn()
    sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times), max(times)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--copy-gib", type=float, default=4)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--size", type=int, default=8192, help="the products' side M (M x M by M x M)")
    p.add_argument("--small", action="store_true")
    a = p.parse_args()
    if a.small:
        a.copy_gib, a.repeats, a.size = 1 / 16, 3, 512
    torch.backends.cuda.matmul.allow_tf32 = False
    dev = torch.device(a.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    n = int(a.copy_gib * 2**30) // 4
    x = torch.ones(n, dtype=torch.float32, device=dev)
    y = torch.empty_like(x)
    med, lo, hi = timed(lambda: y.copy_(x), a.repeats, sync)
    copy = 2 * x.numel() * 4 / med / 1e12  # bytes read + bytes written
    del x, y
    m = a.size
    out = {"device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
           "copy_tb_per_s": copy, "copy_seconds": [med, lo, hi], "torch": torch.__version__, "size": m}
    for name, dtype in (("sgemm", torch.float32), ("dgemm", torch.float64)):
        A = torch.randn(m, m, device=dev, dtype=dtype)
        B = torch.randn(m, m, device=dev, dtype=dtype)
        gmed, glo, ghi = timed(lambda: A @ B, a.repeats, sync)
        out[f"{name}_tflops"] = 2 * m**3 / gmed / 1e12
        out[f"{name}_seconds"] = [gmed, glo, ghi]
        del A, B
    if hasattr(torch, "_int_mm"):
        A = torch.randint(-127, 128, (m, m), dtype=torch.int8, device=dev)
        B = torch.randint(-127, 128, (m, m), dtype=torch.int8, device=dev).T
        imed, ilo, ihi = timed(lambda: torch._int_mm(A, B), a.repeats, sync)
        out["int8_tops"] = 2 * m**3 / imed / 1e12
        out["int8_seconds"] = [imed, ilo, ihi]
    else:
        out["int8_tops"] = None
    print(json.dumps(out))


if __name__ == "__main__":
    main()
