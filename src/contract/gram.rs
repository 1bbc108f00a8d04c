//! Host side of the certified Gram filter (docs/contract.md#gram): the per-row norm
//! bounds its error bound needs, and the certificate that no value of the
//! method can overflow. The proof is `shaders/gram.md`.

use crate::contract::table::Table;

/// Largest N and D the bound's simplifications are proven for (gamma_n <=
/// n * 2^-52 and (1+u)^D <= 1 + 2*D*u need n * 2^-53 <= 1/2 and D*u <= 1).
pub const MAX_ITEMS: usize = 1 << 24;
pub const MAX_DIM: usize = 1 << 24;

/// An upper bound on `|E_j|_2` for every row: the f64 sum of squares (d
/// ascending; each square of an f32 is exact in f64) has relative error at
/// most gamma_D, sqrt and the final multiply one rounding each, so the factor
/// 1 + (D + 4) * 2^-52 makes the result an upper bound.
pub fn row_norm_bounds(t: &Table) -> Vec<f64> {
    use rayon::prelude::*;
    let widen = 1.0 + (t.dim as f64 + 4.0) * f64::EPSILON;
    // Rows on every core (each row's sum in its own order, d ascending).
    (0..t.n)
        .into_par_iter()
        .map(|j| {
            let sum: f64 = t.row(j).iter().map(|&x| (x as f64) * (x as f64)).sum();
            sum.sqrt() * widen
        })
        .collect()
}

/// The Gram method's certificate that nothing overflows: every f32 value it
/// or the contract forms (G entries, centroid components, chain partial sums,
/// scores) is at most N * max|E_j|^2 or N * max|E_j| in magnitude, so
/// N * max(|E_j|, |E_j|^2) <= 2^120 keeps them all far below f32's 2^128.
/// `Err` names the first row at fault.
pub fn check_admissible(t: &Table, norms: &[f64]) -> std::result::Result<(), String> {
    if t.n > MAX_ITEMS || t.dim > MAX_DIM {
        return Err(format!(
            "the Gram method's bound is proven for at most {MAX_ITEMS} items and {MAX_DIM} dimensions; \
             this table has {} x {}",
            t.n, t.dim
        ));
    }
    let limit = 2f64.powi(120) / t.n as f64;
    for (j, &norm) in norms.iter().enumerate() {
        if norm.max(norm * norm) > limit {
            return Err(format!(
                "row {j} has norm {norm:e}: the Gram method needs N * max(|E_j|, |E_j|^2) <= 2^120 \
                 so that no sum can overflow f32 (use --method direct)"
            ));
        }
    }
    Ok(())
}

/// The job's two bound factors (gram.md, section 4): `P >= max_j inv_j |E_j|`
/// (from the norm bounds, the f64 product's rounding covered by the factor
/// 1 + 4 * 2^-52) and `Imax = max_j inv_j` (exact: an f32).
pub fn bound_factors(t: &Table, norms: &[f64]) -> (f64, f64) {
    let mut p = 0f64;
    let mut imax = 0f64;
    for (&inv, &norm) in t.inv_norm.iter().zip(norms) {
        p = p.max(inv as f64 * norm);
        imax = imax.max(inv as f64);
    }
    (p * (1.0 + 4.0 * f64::EPSILON), imax)
}

/// Rows `first .. first + count` of G' = G diag(inv_norm) exactly as
/// `gram_build.comp` computes them: each entry the f64 sum, d ascending, of
/// the exact products of two f32, times inv_j in f64, rounded once to f32
/// (gradual underflow). The tests compare the GPU's G' with it bit for bit.
pub fn scaled_gram_rows(t: &Table, first: usize, count: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(count * t.n);
    for i in first..first + count {
        let row_i = t.row(i);
        for j in 0..t.n {
            let dot = row_i.iter().zip(t.row(j)).fold(0f64, |acc, (&x, &y)| acc + x as f64 * y as f64);
            out.push((dot * t.inv_norm[j] as f64) as f32);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn norm_bounds_are_upper_bounds() -> std::result::Result<(), String> {
        let data = vec![3.0f32, 4.0, 1e-20, 1.0, 0.1, 0.2];
        let t = Table::from_rows("t", 3, 2, data, None).map_err(|e| e.to_string())?;
        let norms = row_norm_bounds(&t);
        assert!(norms[0] >= 5.0 && norms[0] < 5.0 * (1.0 + 1e-14));
        assert!(norms[1] >= 1.0);
        assert!(norms[2] * norms[2] >= 0.1f32 as f64 * 0.1f32 as f64 + 0.2f32 as f64 * 0.2f32 as f64);
        check_admissible(&t, &norms)
    }

    #[test]
    fn bound_factors_bound_every_row() -> std::result::Result<(), String> {
        let data = vec![3.0f32, 4.0, 1e-20, 1.0, 0.1, 0.2];
        let t = Table::from_rows("t", 3, 2, data, None).map_err(|e| e.to_string())?;
        let norms = row_norm_bounds(&t);
        let (p, imax) = bound_factors(&t, &norms);
        for j in 0..3 {
            assert!(p >= t.inv_norm[j] as f64 * norms[j]);
            assert!(imax >= t.inv_norm[j] as f64);
        }
        assert!(p < 1.0 + 1e-6, "inv_j |E_j| is 1 within f32 rounding: {p}");
        assert_eq!(imax, t.inv_norm[2] as f64, "the shortest row (0.1, 0.2) has the largest inv_norm");
        Ok(())
    }

    #[test]
    fn scaled_gram_is_g_times_inv_norm() -> std::result::Result<(), String> {
        let data = vec![3.0f32, 4.0, 1.0, 0.0, 0.5, -2.0];
        let t = Table::from_rows("t", 3, 2, data, None).map_err(|e| e.to_string())?;
        let g = scaled_gram_rows(&t, 1, 2);
        assert_eq!(g.len(), 6);
        // Row 1 = (1, 0): G[1][0] = 3, times inv_0 = 1/5.
        assert_eq!(g[0], (3.0f64 * t.inv_norm[0] as f64) as f32);
        assert_eq!(g[1], (1.0f64 * t.inv_norm[1] as f64) as f32);
        // Row 2 = (0.5, -2): G[2][0] = 1.5 - 8 = -6.5.
        assert_eq!(g[3], (-6.5f64 * t.inv_norm[0] as f64) as f32);
        Ok(())
    }

    #[test]
    fn huge_rows_are_refused_by_name() -> std::result::Result<(), String> {
        // Loads (D N max^2 < f32::MAX) but N |E_1|^2 = 1.5e36 > 2^120.
        let data = vec![1.0f32, 0.0, 5e17, 5e17, 0.0, 1.0];
        let t = Table::from_rows("t", 3, 2, data, None).map_err(|e| e.to_string())?;
        let err = check_admissible(&t, &row_norm_bounds(&t)).err().ok_or("accepted a table that overflows")?;
        assert!(err.starts_with("row 1 "), "{err}");
        Ok(())
    }
}
