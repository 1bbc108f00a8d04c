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

/// The smallest approx, its index, and the second smallest (equal to the
/// smallest when two share it): the step's `a1`, `best` and `a2`.
#[derive(Clone, Copy)]
struct Least {
    a1: f64,
    best: usize,
    a2: f64,
}

/// approx_j += G'_wj for every j (a chosen j stays +inf) and the new `Least`,
/// in 8 lanes (each its own smallest, index and second smallest): AVX2
/// intrinsics where the CPU has them (`simd.rs`), else this loop.
#[inline(always)]
fn add_and_least(approx: &mut [f64], g: &[f32]) -> Least {
    #[cfg(target_arch = "x86_64")]
    if super::has_fma() {
        // SAFETY: the CPU has AVX2; the slices are both n long.
        let (m1, m2, i1) = unsafe { super::simd::add_and_lanes(approx, g) };
        return merge(&m1, &m2, &i1);
    }
    let (m1, m2, i1) = portable_lanes(approx, g);
    merge(&m1, &m2, &i1)
}

/// The portable add pass (and the intrinsics' reference in the tests).
#[inline(always)]
fn portable_lanes(approx: &mut [f64], g: &[f32]) -> super::simd::Lanes {
    let (mut m1, mut m2, mut i1) = ([f64::INFINITY; 8], [f64::INFINITY; 8], [0u64; 8]);
    let whole = approx.len() / 8 * 8;
    for (c, (a8, g8)) in approx[..whole].chunks_exact_mut(8).zip(g.chunks_exact(8)).enumerate() {
        for k in 0..8 {
            let x = a8[k] + g8[k] as f64;
            a8[k] = x;
            let lt = x < m1[k];
            let up = if lt { m1[k] } else { x };
            m2[k] = if up < m2[k] { up } else { m2[k] };
            i1[k] = if lt { (c * 8 + k) as u64 } else { i1[k] };
            m1[k] = if lt { x } else { m1[k] };
        }
    }
    let mut l = (m1, m2, i1);
    super::simd::tail(approx, g, whole, &mut l);
    l
}

/// The lanes' figures as one `Least`.
#[inline(always)]
fn merge(m1: &[f64; 8], m2: &[f64; 8], i1: &[u64; 8]) -> Least {
    let mut lane = 0;
    for k in 1..8 {
        if m1[k] < m1[lane] {
            lane = k;
        }
    }
    let mut a2 = f64::INFINITY;
    for k in 0..8 {
        let other = if k == lane { m2[k] } else { m1[k] };
        a2 = if other < a2 { other } else { a2 };
    }
    Least { a1: m1[lane], best: i1[lane] as usize, a2 }
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
    least: Least,
}

impl Seq {
    #[inline(always)]
    fn add(&mut self, gm: &Gram, w: usize) {
        let n = gm.t.n;
        self.approx[w] = f64::INFINITY;
        self.least = add_and_least(&mut self.approx, &gm.g[w * n..(w + 1) * n]);
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
    let mut s = Seq { approx: vec![0.0; gm.t.n], cen: Centroid::new(gm.t.dim), chosen_norms: 0.0, least: Least { a1: f64::INFINITY, best: 0, a2: f64::INFINITY } };
    for &w in &out[..from] {
        s.add(gm, w as usize);
    }
    let mut counts = Counts::default();
    let mut window = Vec::with_capacity(64);
    for slot in from..out.len() {
        let (wc2, cs2) = centroid_norms(s.cen.rounded(), s.cen.sum());
        let bound = gm.f.step_bound(wc2, cs2, s.chosen_norms, slot);
        let tau = s.least.a1 + 2.0 * bound;
        let w = if s.least.a2 > tau {
            // The window is {best}: no chain (gram.md, section 5).
            counts.singles += 1;
            s.least.best as u32
        } else {
            collect(&s.approx, tau, &mut window);
            if window.is_empty() {
                // Impossible while the bound holds (the minimum is in it); the
                // full exact scan keeps the output the contract's regardless.
                collect(&s.approx, f64::MAX, &mut window);
            }
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

#[cfg(test)]
mod tests {
    use super::{add_and_least, portable_lanes};

    #[test]
    fn least_is_the_smallest_its_index_and_the_second() {
        for n in [1usize, 7, 8, 9, 30, 67] {
            for seed in 0..20u64 {
                let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                let mut next = || {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x % 5) as f64 - 2.0
                };
                let mut approx: Vec<f64> = (0..n).map(|j| if j % 5 == 3 { f64::INFINITY } else { next() }).collect();
                let g: Vec<f32> = (0..n).map(|_| next() as f32).collect();
                let mut twin = approx.clone();
                let l = add_and_least(&mut approx, &g);
                let p = portable_lanes(&mut twin, &g);
                assert_eq!(twin, approx, "the two add passes' sums");
                assert_eq!((l.a1, l.best, l.a2), { let q = super::merge(&p.0, &p.1, &p.2); (q.a1, q.best, q.a2) });
                let mut sorted = approx.clone();
                sorted.sort_by(f64::total_cmp);
                assert_eq!(l.a1, sorted[0], "n={n} seed={seed}");
                assert_eq!(approx[l.best], l.a1);
                assert_eq!(l.a2, if n > 1 { sorted[1] } else { f64::INFINITY }, "n={n} seed={seed}");
            }
        }
    }
}
