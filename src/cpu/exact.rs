//! The contract's own chain (docs/contract.md#fp32-chain) for the window's
//! members, and the direct path: every unchosen candidate's chain every step,
//! 32 candidates side by side over a transposed table, as the mirror does
//! (each candidate keeps its one accumulator, d ascending).

use super::deps::Table;
use super::state::Centroid;

/// `score_j = fl32(fma-chain(c, E_j) * inv_j)`, d ascending.
#[inline(always)]
pub fn score(c: &[f32], row: &[f32], inv: f32) -> f32 {
    let mut acc = 0.0f32;
    for (&cd, &x) in c.iter().zip(row) {
        acc = cd.mul_add(x, acc);
    }
    acc * inv
}

/// The contract's winner among `members` (ascending indices): the smallest
/// score, of equal scores (IEEE ==) the smallest index.
#[inline(always)]
pub fn best_of(t: &Table, c: &[f32], members: &[u32]) -> u32 {
    let mut best = (f32::INFINITY, u32::MAX);
    for &j in members {
        let s = score(c, t.row(j as usize), t.inv_norm[j as usize]);
        if best.1 == u32::MAX || s < best.0 {
            best = (s, j);
        }
    }
    best.1
}

const BLOCK: usize = 32;

/// The table transposed to `dim` rows of `n_pad` candidates, zero padded.
pub struct Transposed {
    n_pad: usize,
    et: Vec<f32>,
    inv: Vec<f32>,
}

pub fn transpose(t: &Table) -> Transposed {
    let n_pad = t.n.div_ceil(BLOCK) * BLOCK;
    let mut et = vec![0.0f32; n_pad * t.dim];
    for j in 0..t.n {
        for (d, &x) in t.row(j).iter().enumerate() {
            et[d * n_pad + j] = x;
        }
    }
    let mut inv = t.inv_norm.clone();
    inv.resize(n_pad, 0.0);
    Transposed { n_pad, et, inv }
}

/// Every candidate's score into `out` (n_pad long).
#[inline(always)]
fn all_scores(c: &[f32], tr: &Transposed, out: &mut [f32]) {
    for jb in (0..tr.n_pad).step_by(BLOCK) {
        let mut acc = [0.0f32; BLOCK];
        for (d, &cd) in c.iter().enumerate() {
            let row = &tr.et[d * tr.n_pad + jb..d * tr.n_pad + jb + BLOCK];
            for k in 0..BLOCK {
                acc[k] = cd.mul_add(row[k], acc[k]);
            }
        }
        for k in 0..BLOCK {
            out[jb + k] = acc[k] * tr.inv[jb + k];
        }
    }
}

/// One sequence by the direct path: `out[..from]` holds the chosen prefix.
#[inline(always)]
pub fn sequence(t: &Table, tr: &Transposed, out: &mut [u32], from: usize) {
    let mut cen = Centroid::new(t.dim);
    let mut masked = vec![false; t.n];
    for &w in &out[..from] {
        cen.add(t.row(w as usize));
        masked[w as usize] = true;
    }
    let mut scores = vec![0.0f32; tr.n_pad];
    for slot in from..out.len() {
        all_scores(cen.rounded(), tr, &mut scores);
        let mut best: Option<(f32, usize)> = None;
        for (j, &s) in scores[..t.n].iter().enumerate() {
            if !masked[j] && best.is_none_or(|(b, _)| s < b) {
                best = Some((s, j));
            }
        }
        let Some((_, w)) = best else { return };
        masked[w] = true;
        out[slot] = w as u32;
        cen.add(t.row(w));
    }
}
