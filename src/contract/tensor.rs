//! Host side of the tensor filter (`shaders/tensor.md`): the table's integer
//! slices, cut once per job, and the job's bound factors. The same cut runs on
//! the device for each step's centroid (`tensor.comp`'s `slice_centroid`): in
//! f64, where every operation of it is exact, so both sides get the same bits.

use crate::contract::table::Table;

/// Slices per vector (K in the proof): two int8 slices, three products a
/// pair. On the H200 (2026-12-03, 262,144 x 768 x 4,096 x 257) three slices'
/// six products took 10.65 s of GPU time for windows of mean 1.06, two slices
/// 7.49 s for windows of mean 2.01 (no fallback either way).
pub const SLICES: usize = 2;
/// The largest D whose int8 products sum exactly in int32 (tensor.md section 2).
pub const MAX_DIM: usize = 50_000;

/// The exponent s of the slice scale 2^s of a vector whose largest |value| is
/// `max_abs` > 0: the smallest s with `max_abs * 128 <= 127 * 2^s`, both sides
/// exact in f64 (tensor.comp's `slice_exponent` computes the same s).
pub fn slice_exponent(max_abs: f64) -> i32 {
    let (_, e) = frexp(max_abs); // max_abs = m 2^e, m in [0.5, 1)
    if max_abs * 128.0 <= 127.0 * 2f64.powi(e) {
        e
    } else {
        e + 1
    }
}

fn frexp(x: f64) -> (f64, i32) {
    if x == 0.0 {
        return (0.0, 0);
    }
    let bits = x.to_bits();
    let exp = ((bits >> 52) & 0x7ff) as i32;
    if exp == 0 {
        // Subnormal f64: scale into the normal range first (no table value is one).
        let (m, e) = frexp(x * 2f64.powi(64));
        return (m, e - 64);
    }
    let m = f64::from_bits((bits & !(0x7ffu64 << 52)) | (1022u64 << 52));
    (m, exp - 1022)
}

/// One vector's slices (`SLICES` x D int8 values), its scale's exponent and
/// the 2-norms the bound needs: of each slice, of the approximation x̂ and of
/// the remainder δx (exact values, norms rounded in f64).
pub struct Sliced {
    pub exponent: i32,
    pub slices: [Vec<i8>; SLICES],
    pub slice_norms: [f64; SLICES],
    pub approx_norm: f64,
    pub remainder_norm: f64,
}

/// A vector's slice exponent and norms, without the slices themselves.
pub struct SliceStats {
    pub exponent: i32,
    pub slice_norms: [f64; SLICES],
    pub approx_norm: f64,
    pub remainder_norm: f64,
}

/// 2^(-7 (k + 1)): slice k's weight in x / 2^s.
const SLICE_WEIGHT: [f64; SLICES] = [1.0 / 128.0, 1.0 / 16384.0];

/// `y.round_ties_even()` for |y| < 2^51: adding 1.5 * 2^52 rounds y to an
/// integer (the ulp there is 1, round to nearest even) and subtracting it is
/// exact. The same value (but for the sign of a zero, which no use here
/// sees), without the libm call that `round_ties_even` is on x86-64's SSE2
/// baseline: that call was most of the table's slicing time.
#[inline]
fn round_even_small(y: f64) -> f64 {
    const C: f64 = 6_755_399_441_055_744.0; // 1.5 * 2^52
    (y + C) - C
}

/// Cuts x into its slices (tensor.md section 1), in f64: r_0 = x / 2^s,
/// q_k = rnd(r_{k-1} 2^7) (ties to even), r_k = r_{k-1} 2^7 - q_k; each
/// element's slices go to `put(d, [q_0, q_1])`.
pub fn slice_with(x: &[f32], mut put: impl FnMut(usize, [i8; SLICES])) -> SliceStats {
    let max_abs = x.iter().fold(0f64, |m, &v| m.max((v as f64).abs()));
    let exponent = slice_exponent(max_abs);
    let scale = 2f64.powi(exponent);
    // x / 2^s, exactly (a power of two; f32 values stay far inside f64's range).
    let inv_scale = 2f64.powi(-exponent);
    let (mut approx2, mut rem2) = (0f64, 0f64);
    let mut norms2 = [0f64; SLICES];
    for (d, &v) in x.iter().enumerate() {
        let mut r = v as f64 * inv_scale;
        let mut approx = 0f64;
        let mut q = [0i8; SLICES];
        for k in 0..SLICES {
            let y = r * 128.0;
            let qk = round_even_small(y);
            r = y - qk;
            q[k] = qk as i8;
            norms2[k] += qk * qk;
            approx += qk * SLICE_WEIGHT[k];
        }
        put(d, q);
        let remainder = r * SLICE_WEIGHT[SLICES - 1];
        approx2 += (approx * scale) * (approx * scale);
        rem2 += (remainder * scale) * (remainder * scale);
    }
    SliceStats { exponent, slice_norms: norms2.map(f64::sqrt), approx_norm: approx2.sqrt(), remainder_norm: rem2.sqrt() }
}

/// `slice_with`, the slices collected.
pub fn slice(x: &[f32]) -> Sliced {
    let mut slices: [Vec<i8>; SLICES] = std::array::from_fn(|_| Vec::with_capacity(x.len()));
    let s = slice_with(x, |_, q| {
        for (slice, &qk) in slices.iter_mut().zip(&q) {
            slice.push(qk);
        }
    });
    Sliced {
        exponent: s.exponent,
        slices,
        slice_norms: s.slice_norms,
        approx_norm: s.approx_norm,
        remainder_norm: s.remainder_norm,
    }
}

/// The table's slices, packed four int8 to a u32 (little-endian, row-major,
/// each row padded to `words` u32 with zeros), slice after slice; the rows'
/// exponents; and the job's factors (tensor.md section 5):
/// `[P, Imax, Q2, Ehat, R]`, each rounded up by 1 + 2^-40.
pub struct TableSlices {
    /// u32 words a packed row holds: D rounded up to 32 bytes (a
    /// cooperative-matrix step), the padding zero.
    pub words: usize,
    /// Rows a slice plane holds: N rounded up to 16 (a cooperative-matrix
    /// tile), the extra rows zero.
    pub item_rows: usize,
    pub packed: Vec<u32>,
    pub exponents: Vec<i32>,
    /// Each row's 2^e_j / |E_j| (the f32 inverse norm times its slice scale,
    /// exact in f64): tensor_coopmat.comp's per-column factor.
    pub weights: Vec<f64>,
    pub factors: [f64; FACTORS],
}

/// The job's bound factors: P, Imax, Q2, Ehat, R (tensor.md section 5).
pub const FACTORS: usize = 5;
/// Rows a parallel task slices (every row is independent).
const ROWS_A_TASK: usize = 1024;

/// Slices rows first.. of `t` into `planes[k]` (each this task's rows of
/// plane k), their exponents into `exponents`; returns the rows' factors.
fn slice_rows(t: &Table, norms: &[f64], first: usize, planes: [&mut [u32]; SLICES], exponents: &mut [i32], words: usize) -> [f64; FACTORS] {
    let mut f = [0f64; FACTORS];
    let [plane0, plane1] = planes;
    for (i, exponent) in exponents.iter_mut().enumerate() {
        let j = first + i;
        let (row0, row1) = (&mut plane0[i * words..(i + 1) * words], &mut plane1[i * words..(i + 1) * words]);
        // Four int8 a word, gathered in registers and stored once a word.
        let (mut w0, mut w1) = (0u32, 0u32);
        let s = slice_with(t.row(j), |d, q| {
            w0 |= (q[0] as u8 as u32) << (8 * (d % 4));
            w1 |= (q[1] as u8 as u32) << (8 * (d % 4));
            if d % 4 == 3 {
                (row0[d / 4], row1[d / 4]) = (w0, w1);
                (w0, w1) = (0, 0);
            }
        });
        if t.dim % 4 != 0 {
            (row0[t.dim / 4], row1[t.dim / 4]) = (w0, w1);
        }
        let inv = t.inv_norm[j] as f64;
        let scale = 2f64.powi(s.exponent);
        f[0] = f[0].max(inv * norms[j]);
        f[1] = f[1].max(inv);
        f[2] = f[2].max(inv * scale * s.slice_norms[1]);
        f[3] = f[3].max(inv * s.approx_norm);
        f[4] = f[4].max(inv * s.remainder_norm);
        *exponent = s.exponent;
    }
    f
}

pub fn table_slices(t: &Table, norms: &[f64]) -> TableSlices {
    use rayon::prelude::*;
    let words = t.dim.div_ceil(32) * 8;
    let item_rows = t.n.div_ceil(16) * 16;
    let mut packed = vec![0u32; SLICES * item_rows * words];
    let mut exponents = vec![0i32; t.n];
    // Rows in parallel: each task its rows of both planes (the padding rows stay zero).
    let (plane0, plane1) = packed.split_at_mut(item_rows * words);
    let chunk = ROWS_A_TASK * words;
    let f = plane0[..t.n * words]
        .par_chunks_mut(chunk)
        .zip(plane1[..t.n * words].par_chunks_mut(chunk))
        .zip(exponents.par_chunks_mut(ROWS_A_TASK))
        .enumerate()
        .map(|(task, ((p0, p1), e))| slice_rows(t, norms, task * ROWS_A_TASK, [p0, p1], e, words))
        .reduce(|| [0f64; FACTORS], |a, b| std::array::from_fn(|k| a[k].max(b[k])));
    let up = 1.0 + 2f64.powi(-40);
    let weights = exponents.iter().zip(&t.inv_norm).map(|(&e, &inv)| inv as f64 * 2f64.powi(e)).collect();
    TableSlices { words, item_rows, packed, exponents, weights, factors: f.map(|x| x * up) }
}

/// Why the tensor filter cannot certify this table, if it cannot.
pub fn check_sliceable(t: &Table) -> std::result::Result<(), String> {
    if t.dim > MAX_DIM {
        return Err(format!(
            "the tensor filter's int32 sums are exact for D <= {MAX_DIM}; this table has D = {}",
            t.dim
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fast_rounding_is_round_ties_even_on_the_slices_range() {
        // Every quarter in [-130, 130] (the ties among them) and values a hair off them.
        let values = (-520..=520).flat_map(|i| {
            let y = i as f64 / 4.0;
            [y, y + 1e-9, y - 1e-9, y * (1.0 + f64::EPSILON)]
        });
        let mut ties = 0;
        for y in values {
            assert_eq!(round_even_small(y), y.round_ties_even(), "{y}");
            // Twin: rounding half away from zero differs on the ties, so the check sees them.
            if y.fract().abs() == 0.5 && y.round() != y.round_ties_even() {
                ties += 1;
            }
        }
        assert!(ties > 100, "only {ties} ties where away-from-zero rounding differs");
    }

    #[test]
    fn scales_cover_the_row_with_room_for_127() {
        for &m in &[1.0f64, 0.5, 0.75, 127.0 / 128.0, 3.0e-33, 1.0e30] {
            let e = slice_exponent(m);
            let s = 2f64.powi(e);
            assert!(m * 128.0 / 127.0 <= s, "{m}: 2^{e}");
            assert!(m * 128.0 / 127.0 > s / 2.0, "{m}: 2^{e} is not the smallest");
        }
    }

    #[test]
    fn slices_reconstruct_the_row_with_a_small_remainder() {
        let x = [0.5f32, -0.25, 1.0e-3, 0.3333333, -0.9999999, 0.0, 1.2e-30];
        let s = slice(&x);
        let scale = 2f64.powi(s.exponent);
        for (d, &v) in x.iter().enumerate() {
            let mut approx = 0f64;
            for k in 0..SLICES {
                let q = s.slices[k][d];
                assert!(if k == 0 { q.unsigned_abs() <= 127 } else { q.unsigned_abs() <= 64 }, "slice {k}: {q}");
                approx += q as f64 * SLICE_WEIGHT[k];
            }
            let rem = v as f64 - approx * scale;
            assert!(rem.abs() <= scale * 2f64.powi(-7 * SLICES as i32 - 1), "d {d}: remainder {rem}");
        }
        assert!(s.remainder_norm <= scale * 2f64.powi(-15) * (x.len() as f64).sqrt());
    }

    #[test]
    fn rows_cut_in_parallel_are_the_rows_cut_one_by_one() -> std::result::Result<(), String> {
        // 2,500 rows: three tasks of ROWS_A_TASK, the last one short.
        let (n, dim) = (2500usize, 37usize);
        let data: Vec<f32> = (0..n * dim).map(|i| ((i * 7919 % 1000) as f32 - 500.0) / 37.0).collect();
        let t = Table::from_rows("t", n, dim, data, None).map_err(|e| e.to_string())?;
        let norms = super::super::gram::row_norm_bounds(&t);
        let ts = table_slices(&t, &norms);
        let plane = ts.item_rows * ts.words;
        let differ = |packed: &[u32]| {
            let mut differ = 0;
            for j in 0..n {
                let s = slice(t.row(j));
                differ += usize::from(ts.exponents[j] != s.exponent);
                for (k, slice) in s.slices.iter().enumerate() {
                    for (d, &q) in slice.iter().enumerate() {
                        let word = packed[k * plane + j * ts.words + d / 4];
                        differ += usize::from((word >> (8 * (d % 4))) as u8 as i8 != q);
                    }
                }
            }
            differ
        };
        assert_eq!(differ(&ts.packed), 0, "values cut in parallel differ from the row's own cut");
        // Twin: one byte of a row in the second task changed is seen.
        let mut wrong = ts.packed.clone();
        wrong[plane + 1500 * ts.words] ^= 1;
        assert_eq!(differ(&wrong), 1);
        // The padding rows stay zero.
        assert!(ts.packed[n * ts.words..plane].iter().all(|&w| w == 0));
        // Each row's column weight is its f32 inverse norm times its slice scale, exactly.
        let weight_misses = |w: &[f64]| (0..n).filter(|&j| w[j] != t.inv_norm[j] as f64 * 2f64.powi(slice(t.row(j)).exponent)).count();
        assert_eq!(weight_misses(&ts.weights), 0);
        assert!(ts.exponents.iter().any(|&e| e != 0), "every scale is 1: the weights' check is vacuous");
        // Twin: the weights without the scale are seen wherever a scale is not 1.
        let unscaled: Vec<f64> = t.inv_norm.iter().map(|&v| v as f64).collect();
        assert!(weight_misses(&unscaled) > 0);
        // The factors are the maxima over every row, whichever task held it.
        let serial_imax = t.inv_norm.iter().fold(0f64, |m, &v| m.max(v as f64));
        assert_eq!(ts.factors[1], serial_imax * (1.0 + 2f64.powi(-40)));
        Ok(())
    }

    #[test]
    fn packed_slices_are_little_endian_bytes_of_each_row() -> std::result::Result<(), String> {
        let data = vec![0.5f32, -0.25, 0.125, 1.0, 0.0, 0.75];
        let t = Table::from_rows("t", 2, 3, data, None).map_err(|e| e.to_string())?;
        let norms = super::super::gram::row_norm_bounds(&t);
        let ts = table_slices(&t, &norms);
        assert_eq!((ts.words, ts.item_rows), (8, 16));
        let row0 = slice(t.row(0));
        let want = (row0.slices[0][0] as u8 as u32) | (row0.slices[0][1] as u8 as u32) << 8 | (row0.slices[0][2] as u8 as u32) << 16;
        assert_eq!(ts.packed[0], want);
        assert!(ts.factors[0] >= 1.0 && ts.factors[0] < 1.0 + 1e-6, "P = {}", ts.factors[0]);
        Ok(())
    }
}
