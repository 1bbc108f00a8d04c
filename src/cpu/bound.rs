//! The Gram filter's step bound (`shaders/gram.md`, section 4), the host
//! twin of `step_bound` in `shaders/gram.comp`: the same terms in the same
//! order, so one proof covers both implementations. The per-job factors and
//! the no-overflow certificate are `contract::gram`'s own functions.

use super::deps::{gram, Table};

/// u = 2^-24, the f32 unit roundoff.
pub const U32: f64 = 1.0 / 16777216.0;
/// e = 2^-53, the f64 unit roundoff.
pub const E64: f64 = 1.0 / 9007199254740992.0;
/// 2^-52: gamma64(n) <= n * 2^-52 (n e <= 1/2, which N, D <= 2^24 give).
pub const EPS64: f64 = 1.0 / 4503599627370496.0;
/// eta = 2^-150, the absolute error of one f32 rounding under gradual underflow.
pub const TINY: f64 = f64::from_bits((1023 - 150) << 52);
/// 1 + 2^-20: covers the bound's own f64 evaluation (gram.md, section 4).
pub const SLACK: f64 = 1.0 + 1.0 / 1048576.0;
/// The absolute error of a stored G' entry: eta, since the host keeps
/// subnormals (Rust never sets flush-to-zero).
pub const G_ETA: f64 = TINY;

/// The job's constants of the bound: `P`, `Imax` (`gram::bound_factors`), D,
/// and the factor the tests shrink (1 in every real run).
#[derive(Clone, Copy, Debug)]
pub struct Factors {
    pub p: f64,
    pub imax: f64,
    pub dim: f64,
    pub scale: f64,
}

impl Factors {
    /// The factors of a table already admitted by `gram::check_admissible`.
    pub fn new(t: &Table, norms: &[f64], scale: f64) -> Self {
        let (p, imax) = gram::bound_factors(t, norms);
        Factors { p, imax, dim: t.dim as f64, scale }
    }

    /// B-hat for a step with `m` chosen items: `wc2 = |w o c|^2`, `cs2 =
    /// |csum|^2`, `chosen_norms = T`, the sum of the chosen rows' norm bounds.
    /// Line for line `step_bound` of gram.comp.
    pub fn step_bound(&self, wc2: f64, cs2: f64, chosen_norms: f64, m: usize) -> f64 {
        let (wc_norm, cs_norm) = (wc2.sqrt(), cs2.sqrt());
        let (d, m) = (self.dim, m as f64);
        let rho = U32 * (1.0 + 2.0 * d * U32);
        let g_dim = d * EPS64;
        let g_sum = (m - 1.0) * EPS64;
        let kappa_g = g_dim
            + E64 * (1.0 + g_dim)
            + U32 * (1.0 + E64) * (1.0 + g_dim)
            + g_sum * (1.0 + U32) * (1.0 + E64) * (1.0 + g_dim);
        let kappa = g_sum + kappa_g;
        let g_abs = m * G_ETA * (1.0 + g_sum);
        let chain = rho * wc_norm + U32 * cs_norm + TINY * d.sqrt();
        let err = self.p * (chain + kappa * chosen_norms) + self.imax * d * TINY * (1.0 + 2.0 * d * U32) + g_abs;
        let amax = self.p * (cs_norm + kappa * chosen_norms) + g_abs;
        self.scale * SLACK * ((1.0 + U32) * err + U32 * amax + TINY)
    }
}

/// `|w o c|^2` and `|csum|^2` (gram.md [wc], [cs]): `(D - d) c_d` is exact in
/// f64. Summed in 8 lanes (a vector loop): the proof's allowance for the
/// bound's own evaluation (section 4) holds for sums of non-negative terms in
/// any order.
#[inline(always)]
pub fn centroid_norms(c: &[f32], csum: &[f64]) -> (f64, f64) {
    let dim = c.len() as f64;
    let (mut wc2, mut cs2) = ([0.0f64; 8], [0.0f64; 8]);
    for (b, (c8, s8)) in c.chunks(8).zip(csum.chunks(8)).enumerate() {
        for (k, (&cd, &s)) in c8.iter().zip(s8).enumerate() {
            let wc = (dim - (b * 8 + k) as f64) * cd as f64;
            wc2[k] += wc * wc;
            cs2[k] += s * s;
        }
    }
    (wc2.iter().sum(), cs2.iter().sum())
}
