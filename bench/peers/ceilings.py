"""The device's ceilings in the same campaign call as the kernels (docs/contract.md#measuring):
copy bandwidth (read + write, one large device-to-device copy) and SGEMM
(TF32 off), with PyTorch. Prints one JSON line; the median of the timed repeats.

  python3 bench/peers/ceilings.py [--copy-gib 4] [--repeats 20]
"""

import argparse
import json
import statistics
import time

import torch


def timed(fn, repeats):
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times), max(times)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--copy-gib", type=float, default=4)
    p.add_argument("--repeats", type=int, default=20)
    a = p.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    n = int(a.copy_gib * 2**30) // 4
    x = torch.ones(n, dtype=torch.float32, device="cuda")
    y = torch.empty_like(x)
    med, lo, hi = timed(lambda: y.copy_(x), a.repeats)
    copy = 2 * x.numel() * 4 / med / 1e12  # bytes read + bytes written
    del x, y
    m = 8192
    A = torch.randn(m, m, device="cuda")
    B = torch.randn(m, m, device="cuda")
    gmed, glo, ghi = timed(lambda: A @ B, a.repeats)
    print(json.dumps({"device": torch.cuda.get_device_name(), "copy_tb_per_s": copy,
                      "copy_seconds": [med, lo, hi], "sgemm_tflops": 2 * m**3 / gmed / 1e12,
                      "sgemm_seconds": [gmed, glo, ghi], "torch": torch.__version__}))


if __name__ == "__main__":
    main()
