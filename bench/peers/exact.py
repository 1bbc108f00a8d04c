"""The contract's arithmetic for the peers, exact on any IEEE device (docs/contract.md#fp32-chain).

Neither numpy nor PyTorch has a fused multiply-add whose rounding they
guarantee, so the chain's `fma(c_d, E_jd, acc)` is emulated exactly:

    p = (f64)c_d * (f64)E_jd       exact: two 24-bit significands make 48 bits,
                                   and f32 exponents stay far inside f64's range
    s = p + (f64)acc               one f64 rounding ...
    err = TwoSum's error           ... whose exact error is recovered (Knuth)
    s := round-to-odd(s)           if err != 0 and s's last bit is even, s moves
                                   one f64 ulp towards err (the odd neighbour)
    acc = (f32)s                   round-to-odd at 53 >= 24 + 2 bits, then to
                                   nearest at 24: the correctly rounded sum
                                   (Boldo and Melquiond), subnormals included

That is the fused fma's one rounding of the exact `c_d E_jd + acc`. The sign
of an exact zero is IEEE's: `-0 + +0 = +0` in round to nearest, as the fma.

Every function takes an array module: `numpy` or `torch` (tensors on any
device); nothing here decides which. The bound helpers are the terms of
shaders/gram.md and shaders/tensor.md, evaluated per sequence and step.
"""

U = 2.0 ** -24      # f32 unit roundoff
E64 = 2.0 ** -53    # f64 unit roundoff
ETA = 2.0 ** -150   # half the least f32 subnormal
EPS64 = 2.0 ** -52  # gamma(n) <= n * EPS64 for n e <= 1/2
SLACK = 1.0 + 2.0 ** -20  # the shaders' S: covers the bound's own f64 evaluation


def gamma(n):
    """gamma(n) = n e / (1 - n e) <= n 2^-52 (gram.md section 1)."""
    return n * EPS64


class Ops:
    """The few operations that differ between numpy and torch."""

    def __init__(self, xp):
        self.xp = xp
        self.torch = xp.__name__ == "torch"
        self.f32 = xp.float32
        self.f64 = xp.float64
        self.i64 = xp.int64

    def as64(self, x):
        return x.to(self.f64) if self.torch else x.astype(self.f64)

    def as32(self, x):
        return x.to(self.f32) if self.torch else x.astype(self.f32)

    def low_bit(self, s):
        """The last bit of each f64's significand (its bits as an int64)."""
        bits = s.view(self.i64)
        return (bits & 1) != 0

    def nextafter(self, s, towards):
        return self.xp.nextafter(s, towards)

    def where(self, c, a, b):
        return self.xp.where(c, a, b)


def fma_f32(ops, a, b, acc, fused=True, branchless=False):
    """fma(a, b, acc) in f32 with one rounding, elementwise; a, b, acc f32 arrays.

    fused=False is the twin: a f32 multiply, then a f32 add (two roundings).
    branchless=True never asks the host whether a fix is needed (for a CUDA
    graph's capture, where a host synchronisation is not allowed).
    """
    if not fused:
        return ops.as32(ops.as64(ops.as32(ops.as64(a) * ops.as64(b))) + ops.as64(acc))
    p = ops.as64(a) * ops.as64(b)
    q = ops.as64(acc)
    s = p + q
    bb = s - p
    err = (p - (s - bb)) + (q - bb)
    fix = (err != 0) & ~ops.low_bit(s)
    if branchless or bool(fix.any()):
        inf = float("inf")
        xp = ops.xp
        if ops.torch:
            towards = xp.where(err > 0, xp.full_like(s, inf), xp.full_like(s, -inf))
        else:
            towards = xp.where(err > 0, inf, -inf)
        s = ops.where(fix, ops.nextafter(s, towards), s)
    return ops.as32(s)


def chain(ops, c, rows, fused=True, branchless=False):
    """The contract's fma chain, d ascending, one accumulator a pair.

    c and rows are f32 [..., D] of one shape (row k of c is the centroid that
    scores row k of rows); returns acc f32 [...]."""
    xp = ops.xp
    dim = c.shape[-1]
    if ops.torch:
        acc = xp.zeros(c.shape[:-1], dtype=ops.f32, device=c.device)
    else:
        acc = xp.zeros(c.shape[:-1], dtype=ops.f32)
    for d in range(dim):
        acc = fma_f32(ops, c[..., d], rows[..., d], acc, fused, branchless)
    return acc


def scores(ops, c, rows, inv, fused=True, branchless=False):
    """score = fl32(acc * inv_norm): the contract's one f32 multiply."""
    return chain(ops, c, rows, fused, branchless) * inv


def row_norm_bounds(e64):
    """nu_j >= |E_j|: the f64 sum of exact squares, sqrt, times 1 + (D+4) 2^-52
    (src/contract/gram.rs, gram.md section 1). e64: numpy f64 [N, D]."""
    import numpy as np
    dim = e64.shape[1]
    return np.sqrt((e64 * e64).sum(axis=1)) * (1.0 + (dim + 4) * EPS64)


def norm_up(xp, x, dim):
    """The 2-norm of exact f64 values over the last axis, rounded up."""
    return xp.sqrt((x * x).sum(-1)) * (1.0 + (dim + 4) * EPS64)
