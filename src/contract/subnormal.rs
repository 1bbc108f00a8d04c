//! The certificate that lets a device without f32 denormals run the contract's
//! plain kernels (docs/contract.md#subnormals): if it holds, no f32 value the
//! contract's chain forms can be subnormal, so flushing them to zero changes
//! nothing. If it fails (`Err` names the first value at fault), such a device
//! runs the kernels with DIVGPU_EXACT_UNDERFLOW, which redoes every operation
//! near the underflow range exactly (shaders/include/underflow.glsl): real
//! embeddings often need that (all-MiniLM-L6-v2 has two near-zero dimensions,
//! values around 1e-33, whose spacing breaks the condition below).
//!
//! Why it is sound. Call the *spacing* of a nonzero f32 x the weight of its
//! last mantissa bit, 2^(e-23) (2^-149 when x is subnormal): x is an integer
//! multiple of it. Let 2^q be the finest spacing of any nonzero table value,
//! so every value is a multiple of 2^q.
//! - Centroid components: csum[d] is an f64 sum of table values. Sums of
//!   multiples of 2^q are multiples of 2^q, and rounding (to f64, then to f32
//!   for c[d]) keeps that: a result is either exact, or a multiple of its own
//!   spacing, which is then at least 2^q (both are powers of two). So every
//!   nonzero c[d] has |c[d]| >= 2^q, whatever cancellation happened: a
//!   centroid that cancels to a tiny value is still a nonzero multiple of 2^q.
//! - Chain partial sums: acc + c[d] * E[j][d] is exactly a multiple of
//!   2^(2q); the same rounding argument makes every partial sum 0 or at
//!   least 2^(2q) in magnitude.
//! - Scores: acc * inv_norm[j] is 0 or at least 2^(2q) * min inv_norm.
//! - fp16-exact's filter multiplies c by half-rounded values (spacing at
//!   least 2^-24), so its sums are multiples of 2^(q + min(q, -24)): 2^(2q)
//!   when q <= -24, else at least 2^-47, and its scores at least 2^-47 times
//!   inv_norm >= 2^-64 (the loader keeps D N max|E|^2 below f32's maximum,
//!   so no norm reaches 2^64): normal either way.
//! - The Gram method's f64 values (G's f64 dot products, approx) are multiples
//!   of 2^(2q) >= 2^-298, far above f64's subnormal range (2^-1022); G's f32
//!   entries are partial sums of the kind above.
//! So if 2^(2q) * min(1, min_j inv_norm[j]) >= 2^-126 (the smallest normal
//! f32), every nonzero value is normal: table values (spacing >= 2^q >= 2^-126
//! follows), centroids, partial sums, G entries and scores.

use crate::contract::table::Table;

/// The smallest normal f32 is 2^-126.
const MIN_NORMAL_EXP: i32 = -126;

/// log2 of the spacing of a nonzero f32's last mantissa bit.
fn spacing_exp(x: f32) -> i32 {
    let biased = ((x.to_bits() >> 23) & 0xff) as i32;
    if biased == 0 {
        -149 // subnormal: the spacing of the subnormal range
    } else {
        biased - 127 - 23
    }
}

/// `Ok` if no f32 value of the chain can be subnormal on this table; else the
/// first value (row-major) that could make one, in a line for the user.
pub fn check(t: &Table) -> std::result::Result<(), String> {
    use rayon::prelude::*;
    // The finest spacing, on every core (a minimum: any order gives it).
    let q = t.data.par_iter().filter(|&&x| x != 0.0).map(|&x| spacing_exp(x)).min().unwrap_or(0);
    let min_inv = t.inv_norm.iter().fold(f32::INFINITY, |m, &v| m.min(v)) as f64;
    let scale = min_inv.min(1.0);
    // Exact: a power of two times an f32 value, inside f64's range.
    let ok = |qx: i32| 2f64.powi(qx + q) * scale >= 2f64.powi(MIN_NORMAL_EXP);
    if ok(q) {
        return Ok(());
    }
    // The first value whose own spacing breaks the condition (the finest one does).
    let own = |qx: i32| 2f64.powi(2 * qx) * scale >= 2f64.powi(MIN_NORMAL_EXP);
    let at = t.data.iter().position(|&x| x != 0.0 && !own(spacing_exp(x))).unwrap_or(0);
    let (row, col) = (at / t.dim, at % t.dim);
    Err(format!(
        "row {row}, column {col}: value {:e} (last-bit weight 2^{}) could make a product, partial sum or score \
         of the chain subnormal (smallest inv_norm {min_inv:e})",
        t.data[at],
        spacing_exp(t.data[at])
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(rows: &[&[f32]]) -> Table {
        let dim = rows[0].len();
        let data = rows.iter().flat_map(|r| r.iter().copied()).collect();
        Table::from_rows("t", rows.len(), dim, data, None).expect("a valid table")
    }

    #[test]
    fn the_counterexample_is_refused_at_row_0() {
        // docs/contract.md#subnormals: [0,1,2] on the H200 (flushes), [0,2,1] in the mirror.
        let t = table(&[&[4.64458274e-39], &[4.83849653e-05], &[1.19138513e-05]]);
        let err = check(&t).expect_err("the counterexample passed");
        assert!(err.starts_with("row 0, column 0: value 4.64458"), "{err}");
        assert!(!err.contains('\n'));
    }

    #[test]
    fn ordinary_embeddings_pass() {
        let t = table(&[&[0.25, -0.5, 0.125], &[1e-9, 0.3, -0.7], &[0.0, 1.0, 2.0]]);
        check(&t).expect("ordinary values refused");
    }

    #[test]
    fn the_limit_is_exact() {
        // Spacing of 2^-40 is 2^-63; 2^-63 * 2^-63 = 2^-126: just normal. With
        // the unit rows (inv_norm 1) the scale is 1.
        let ok = table(&[&[1.0, 0.0], &[2f32.powi(-40), 1.0]]);
        check(&ok).expect("2^-40 is at the limit and must pass");
        let bad = table(&[&[1.0, 0.0], &[0.0, 1.0], &[1.0, 2f32.powi(-41)]]);
        let err = check(&bad).expect_err("2^-41 passed");
        assert!(err.starts_with("row 2, column 1:"), "{err}");
    }

    #[test]
    fn large_norms_tighten_it() {
        // inv_norm ~ 2^-20 scales the scores down: 2^-40 no longer passes.
        let t = table(&[&[2f32.powi(20), 0.0], &[2f32.powi(-40), 1.0]]);
        assert!(check(&t).is_err());
    }
}
