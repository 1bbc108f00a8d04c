//! One sequence by the certified Gram filter (`shaders/gram.md`): `approx_j`,
//! the f64 sum of the chosen items' rows of G', one bound B-hat a step
//! (`bound.rs`), the window `{ j : approx_j <= min approx + 2 B-hat }`
//! (section 5's theorem: the contract's winner and every candidate tied with
//! it are in it), and the contract's chain deciding inside the window.

use super::bound::{centroid_norms, Factors};
use super::deps::Table;
use super::exact::{best_of, score};
use super::state::Centroid;

/// What the filter needs of a job: the table, G' (N x N), the rows' norm
/// bounds and the bound's factors.
pub struct Gram<'a> {
    pub t: &'a Table,
    pub g: &'a [f32],
    pub norms: &'a [f64],
    pub f: Factors,
}

/// A sequence's filter figures: steps, steps decided with no chain, chains
/// computed in windows, and (instrumented runs only) the largest
/// `|score_j - approx_j| / B-hat` over every unmasked candidate and step.
#[derive(Clone, Copy, Debug, Default)]
pub struct Counts {
    pub steps: u64,
    pub singles: u64,
    pub rescored: u64,
    pub worst_ratio: f64,
}

impl Counts {
    pub fn merge(self, o: Counts) -> Counts {
        Counts {
            steps: self.steps + o.steps,
            singles: self.singles + o.singles,
            rescored: self.rescored + o.rescored,
            worst_ratio: self.worst_ratio.max(o.worst_ratio),
        }
    }
}

/// approx_j += G'_wj for every j (a chosen j stays +inf) and the new minimum,
/// in 8 lanes so that the loop is a vector loop.
#[inline(always)]
fn add_and_min(approx: &mut [f64], g: &[f32]) -> f64 {
    let mut lanes = [f64::INFINITY; 8];
    let mut a = approx.chunks_exact_mut(8);
    let mut r = g.chunks_exact(8);
    for (a8, g8) in (&mut a).zip(&mut r) {
        for k in 0..8 {
            a8[k] += g8[k] as f64;
            lanes[k] = if a8[k] < lanes[k] { a8[k] } else { lanes[k] };
        }
    }
    for (x, &y) in a.into_remainder().iter_mut().zip(r.remainder()) {
        *x += y as f64;
        lanes[0] = if *x < lanes[0] { *x } else { lanes[0] };
    }
    lanes.iter().fold(f64::INFINITY, |m, &x| if x < m { x } else { m })
}

/// The window's members, ascending: chunks of 8 tested as one before any
/// member is pushed.
#[inline(always)]
fn collect(approx: &[f64], tau: f64, out: &mut Vec<u32>) {
    out.clear();
    for (c, chunk) in approx.chunks(8).enumerate() {
        if chunk.iter().fold(false, |any, &x| any | (x <= tau)) {
            for (k, &x) in chunk.iter().enumerate() {
                if x <= tau {
                    out.push((c * 8 + k) as u32);
                }
            }
        }
    }
}

/// The state of one sequence.
struct Seq {
    approx: Vec<f64>,
    cen: Centroid,
    chosen_norms: f64,
    a1: f64,
}

impl Seq {
    #[inline(always)]
    fn add(&mut self, gm: &Gram, w: usize) {
        let n = gm.t.n;
        self.approx[w] = f64::INFINITY;
        self.a1 = add_and_min(&mut self.approx, &gm.g[w * n..(w + 1) * n]);
        self.cen.add(gm.t.row(w));
        self.chosen_norms += gm.norms[w];
    }
}

/// The instrumented check: every unmasked candidate's exact score against
/// its approx, as a share of the bound.
fn ratio(gm: &Gram, s: &Seq, bound: f64) -> f64 {
    let c = s.cen.rounded();
    let mut worst = 0.0f64;
    for (j, &a) in s.approx.iter().enumerate() {
        if a.is_finite() {
            let e = score(c, gm.t.row(j), gm.t.inv_norm[j]) as f64;
            worst = worst.max((e - a).abs() / bound);
        }
    }
    worst
}

/// One sequence: `out[..from]` holds the chosen prefix (from >= 1), the rest
/// is filled.
#[inline(always)]
pub fn sequence(gm: &Gram, out: &mut [u32], from: usize, instrument: bool) -> Counts {
    let mut s = Seq { approx: vec![0.0; gm.t.n], cen: Centroid::new(gm.t.dim), chosen_norms: 0.0, a1: f64::INFINITY };
    for &w in &out[..from] {
        s.add(gm, w as usize);
    }
    let mut counts = Counts::default();
    let mut window = Vec::with_capacity(64);
    for slot in from..out.len() {
        let (wc2, cs2) = centroid_norms(s.cen.rounded(), s.cen.sum());
        let bound = gm.f.step_bound(wc2, cs2, s.chosen_norms, slot);
        collect(&s.approx, s.a1 + 2.0 * bound, &mut window);
        if window.is_empty() {
            // Impossible while the bound holds (the minimum is in it); the
            // full exact scan keeps the output the contract's regardless.
            collect(&s.approx, f64::MAX, &mut window);
        }
        let w = if window.len() == 1 {
            counts.singles += 1;
            window[0]
        } else {
            counts.rescored += window.len() as u64;
            best_of(gm.t, s.cen.rounded(), &window)
        };
        if instrument {
            counts.worst_ratio = counts.worst_ratio.max(ratio(gm, &s, bound));
        }
        counts.steps += 1;
        out[slot] = w;
        s.add(gm, w as usize);
    }
    counts
}
